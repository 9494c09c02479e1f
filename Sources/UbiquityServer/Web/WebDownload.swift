import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import UbiquityProtocol

/// Downloads from the web interface: a file as it is, a package as a zip archive of its
/// members — always as an attachment of type `application/octet-stream` (never shown in the
/// site's origin, so a shared HTML file cannot run script there).
enum WebDownload {
    /// The answer streaming `item`'s current contents (chunk by chunk: memory stays flat);
    /// sealed chunks opened by `opener` (Standard Data Protection).
    /// - Throws: ``SyncError`` 409 `notUploaded` when its contents have not all reached the
    ///   server; 413 `tooLargeForZip` for a package of 4 GiB or more; 409 `sealedOnDevices`
    ///   for sealed contents the server holds no key to (Advanced), said before anything is sent.
    static func response(for item: ItemState, chunks: any ChunkStorage, account: Int64, opener: SealedChunkOpener?) async throws -> Response {
        guard item.uploaded else {
            throw SyncError(.conflict, "notUploaded", "its contents have not reached the server yet (the device that made it is still sending them)")
        }
        switch item.kind {
        case .directory:
            throw SyncError.badRequest("notAFile", "a folder downloads item by item")
        case .file:
            let references = item.manifest.chunks ?? []
            let length = references.reduce(0) { $0 + Int($1.size) }
            // The first chunk before the answer begins: a file the server cannot open is
            // refused with a clear error, not cut off after its headers.
            var opened: [UInt8]?
            if let head = references.first { opened = try await load(head.hash, chunks: chunks, account: account, opener: opener) }
            let first = opened
            let body = ResponseBody(contentLength: length) { writer in
                for (index, reference) in references.enumerated() {
                    let bytes = try await index == 0 ? first ?? [] : load(reference.hash, chunks: chunks, account: account, opener: opener)
                    try await writer.write(ByteBuffer(bytes: bytes))
                }
                try await writer.finish(nil)
            }
            return Response(status: .ok, headers: headers(filename: item.name, length: length), body: body)
        case .package:
            let members = try (item.manifest.members ?? []).map { member -> (path: String, chunks: [ChunkReference]) in
                (try zipPath(package: item.name, member: member.path), member.chunks)
            }
            let total = members.reduce(Int64(0)) { $0 + $1.chunks.reduce(0) { $0 + $1.size } + Int64($1.path.utf8.count) * 2 + 100 }
            guard total < Int64(UInt32.max) else {
                throw SyncError(.contentTooLarge, "tooLargeForZip", "packages of 4 GiB or more download on a device, not as a zip")
            }
            let body = ResponseBody { writer in
                var zip = ZipStream()
                for member in members {
                    try await writer.write(ByteBuffer(bytes: zip.begin(member.path)))
                    for reference in member.chunks {
                        let bytes = try await load(reference.hash, chunks: chunks, account: account, opener: opener)
                        zip.add(bytes)
                        try await writer.write(ByteBuffer(bytes: bytes))
                    }
                    try await writer.write(ByteBuffer(bytes: zip.end()))
                }
                try await writer.write(ByteBuffer(bytes: zip.finish()))
                try await writer.finish(nil)
            }
            return Response(status: .ok, headers: headers(filename: item.name + ".zip", length: nil), body: body)
        }
    }

    /// The plaintext of chunk `hash`: stored in plaintext, sealed (opened by `opener`), or as a
    /// sealed patch of another chunk (made from that one, `depth` patches down so far).
    static func load(_ hash: String, chunks: any ChunkStorage, account: Int64, opener: SealedChunkOpener?, depth: Int = 0) async throws -> [UInt8] {
        guard let data = try await chunks.load(hash: hash, account: account) else { throw SyncError.noSuchChunk(hash) }
        if let opener, let base = try await opener.bases([hash])[hash] {
            guard depth < SyncServices.maximumPatchDepth else {
                throw SyncError(.internalServerError, "chunkUnopenable", "a chunk of this file is more sealed patches deep than the server makes")
            }
            let baseBytes = try await load(base, chunks: chunks, account: account, opener: opener, depth: depth + 1)
            return try opener.made(hash, patch: data, base: baseBytes, baseName: base)
        }
        return try SealedChunkOpener.plaintext(data, hash: hash, opener: opener)
    }

    /// An attachment's headers, its name said twice: as ASCII (anything else, quotes and
    /// backslashes made `_`) and as UTF-8 (RFC 6266, RFC 8187).
    static func headers(filename: String, length: Int?) -> HTTPFields {
        let ascii = String(filename.unicodeScalars.map { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F && $0 != "\"" && $0 != "\\" ? Character($0) : "_" })
        var allowed = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)..<Unicode.Scalar(0x80)))
        allowed.insert(charactersIn: "!#$&+-.^_`|~")
        let encoded = filename.addingPercentEncoding(withAllowedCharacters: allowed) ?? ascii
        var fields: HTTPFields = [
            .contentType: "application/octet-stream",
            .contentDisposition: "attachment; filename=\"\(ascii)\"; filename*=UTF-8''\(encoded)",
            .xContentTypeOptions: "nosniff",
        ]
        if let length { fields[.contentLength] = "\(length)" }
        return fields
    }

    /// A member's name in the archive: `Package.ext/path/in/it`, refused if any part of it
    /// could climb out of the folder it is unpacked into.
    static func zipPath(package: String, member: String) throws -> String {
        // An empty folder (`Data/`) goes in as a folder entry, its name ending in `/` as zip's do.
        let parts = (member.hasSuffix("/") ? String(member.dropLast()) : member).split(separator: "/", omittingEmptySubsequences: false)
        guard !parts.isEmpty, parts.allSatisfy({ !$0.isEmpty && $0 != "." && $0 != ".." && !$0.contains("\\") && !$0.contains("\u{0}") }),
              !package.contains("/"), !package.contains("\\"), package != "..", package != "." else {
            throw SyncError(.conflict, "invalidMember", "the package holds a member whose name cannot go into an archive")
        }
        return package + "/" + member
    }
}

/// A zip archive written as it goes (PKWARE APPNOTE 6.3: stored members, sizes and CRC-32
/// after each member's data, UTF-8 names; no ZIP64, so under 4 GiB).
struct ZipStream {
    private struct Entry {
        var name: [UInt8]
        var crc: UInt32
        var size: UInt32
        var offset: UInt32
    }
    private var entries: [Entry] = []
    private var offset: UInt32 = 0
    private var crc = CRC32()
    private var size: UInt32 = 0
    private var name: [UInt8] = []

    /// The local header of a member named `path`; its bytes follow through ``add(_:)``.
    mutating func begin(_ path: String) -> [UInt8] {
        name = Array(path.utf8)
        crc = CRC32()
        size = 0
        var header: [UInt8] = []
        header.le32(0x0403_4B50)
        header.le16(20)                 // version needed: 2.0
        header.le16(0x0808)             // sizes after the data; UTF-8 name
        header.le16(0)                  // stored
        header.le16(0); header.le16(0x21) // 1980-01-01 00:00
        header.le32(0); header.le32(0); header.le32(0)
        header.le16(UInt16(name.count)); header.le16(0)
        header += name
        return header
    }

    /// Counts `bytes` of the current member.
    mutating func add(_ bytes: [UInt8]) {
        crc.update(bytes)
        size &+= UInt32(truncatingIfNeeded: bytes.count)
    }

    /// The data descriptor that ends the current member.
    mutating func end() -> [UInt8] {
        var descriptor: [UInt8] = []
        descriptor.le32(0x0807_4B50)
        descriptor.le32(crc.value); descriptor.le32(size); descriptor.le32(size)
        entries.append(Entry(name: name, crc: crc.value, size: size, offset: offset))
        offset &+= UInt32(30 + name.count) &+ size &+ 16
        return descriptor
    }

    /// The central directory and its end record.
    func finish() -> [UInt8] {
        var directory: [UInt8] = []
        for entry in entries {
            directory.le32(0x0201_4B50)
            directory.le16(0x0314)      // made by: Unix, 2.0
            directory.le16(20); directory.le16(0x0808); directory.le16(0)
            directory.le16(0); directory.le16(0x21)
            directory.le32(entry.crc); directory.le32(entry.size); directory.le32(entry.size)
            directory.le16(UInt16(entry.name.count)); directory.le16(0); directory.le16(0)
            directory.le16(0); directory.le16(0)
            directory.le32(0o100644 << 16) // a regular file, rw-r--r--
            directory.le32(entry.offset)
            directory += entry.name
        }
        var end: [UInt8] = []
        end.le32(0x0605_4B50)
        end.le16(0); end.le16(0)
        end.le16(UInt16(entries.count)); end.le16(UInt16(entries.count))
        end.le32(UInt32(directory.count)); end.le32(offset)
        end.le16(0)
        return directory + end
    }
}

/// CRC-32 (ISO 3309, as zip uses it).
struct CRC32 {
    private static let table: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 { value = value & 1 == 1 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
        return value
    }
    private var state: UInt32 = 0xFFFF_FFFF

    /// Adds `bytes`.
    mutating func update(_ bytes: [UInt8]) {
        var state = self.state
        for byte in bytes { state = Self.table[Int((state ^ UInt32(byte)) & 0xFF)] ^ (state >> 8) }
        self.state = state
    }

    /// The checksum of what was added.
    var value: UInt32 { state ^ 0xFFFF_FFFF }
}

extension [UInt8] {
    mutating func le16(_ value: UInt16) { append(UInt8(value & 0xFF)); append(UInt8(value >> 8)) }
    mutating func le32(_ value: UInt32) { for shift in stride(from: 0, to: 32, by: 8) { append(UInt8((value >> UInt32(shift)) & 0xFF)) } }
}
