import Crypto
import Foundation
import NIOCore
import NIOFoundationCompat

/// A pack as it is stored in an object store: chunks one after the other, then a trailer that
/// lists them (so the bucket alone could rebuild the index), the trailer's length (4 bytes,
/// big-endian) and 8 bytes of magic naming the format (`UBQPACK1`). Never written twice: each
/// pack has a key of its own (`chunks/ACCOUNT/RANDOM`), written once with `If-None-Match: *`.
struct ChunkPack: Sendable {
    /// One chunk in a pack.
    struct Entry: Codable, Sendable, Equatable {
        /// Its name.
        var hash: String
        /// Where its bytes begin in the pack.
        var offset: Int
        /// How many bytes it has.
        var length: Int
        /// A sealed chunk's SHA-256 (its name is a keyed MAC the server cannot check), in hex.
        var digest: String?
    }

    /// The trailer: the format, whose chunks, and where each is.
    struct Trailer: Codable, Sendable {
        var format: Int
        var account: Int64
        var chunks: [Entry]
    }

    /// The format written.
    static let format = 1
    /// The last 8 bytes of every pack.
    static let magic = Array("UBQPACK1".utf8)

    /// The pack's bytes.
    var body: ByteBuffer
    /// Its chunks, in order.
    var entries: [Entry]

    /// A pack of `chunks` of `account` (each with the SHA-256 recorded for a sealed one).
    init(account: Int64, chunks: [(hash: String, bytes: ArraySlice<UInt8>, digest: [UInt8]?)]) throws {
        var body = ByteBuffer()
        body.reserveCapacity(chunks.reduce(0) { $0 + $1.bytes.count } + 64 * chunks.count + 64)
        var entries: [Entry] = []
        for chunk in chunks {
            entries.append(Entry(hash: chunk.hash, offset: body.writerIndex, length: chunk.bytes.count, digest: chunk.digest.map { Self.hex($0) }))
            body.writeBytes(chunk.bytes)
        }
        let trailer = try JSONEncoder().encode(Trailer(format: Self.format, account: account, chunks: entries))
        body.writeBytes(trailer)
        body.writeInteger(UInt32(trailer.count), endianness: .big)
        body.writeBytes(Self.magic)
        self.body = body
        self.entries = entries
    }

    /// Reads a whole pack's trailer (`ubiquity fsck` rebuilding from the bucket); a clear error
    /// for a pack that is not one, or of a format this build does not know.
    static func trailer(of pack: ByteBuffer) throws -> Trailer {
        let count = pack.readableBytes
        guard count >= 12, pack.getBytes(at: pack.readerIndex + count - 8, length: 8) == magic,
              let length = pack.getInteger(at: pack.readerIndex + count - 12, endianness: .big, as: UInt32.self),
              Int(length) <= count - 12, let json = pack.getData(at: pack.readerIndex + count - 12 - Int(length), length: Int(length)) else {
            throw ChunkPackError("not a pack (no trailer)")
        }
        let trailer = try JSONDecoder().decode(Trailer.self, from: json)
        guard trailer.format == format else { throw ChunkPackError("a pack of format \(trailer.format), which this build does not read") }
        return trailer
    }

    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
}

/// A pack that cannot be read.
struct ChunkPackError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
