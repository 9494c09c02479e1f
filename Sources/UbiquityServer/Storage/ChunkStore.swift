import Crypto
import Hummingbird
import Foundation
import UbiquityProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Where chunk contents live: files in the data directory (``FileChunkStore``) or rows in
/// PostgreSQL (``PostgresChunkStore``), so instances on several machines share them.
protocol ChunkStorage: Sendable {
    /// Stores `bytes` as chunk `hash` of `account` (nothing if it is there already).
    /// - Throws: ``SyncError`` (`hashMismatch`) if the bytes do not hash to `hash`; storage errors.
    func store(_ bytes: [UInt8], hash: String, account: Int64) async throws
    func load(hash: String, account: Int64) async throws -> Data?
    /// Removes one chunk.
    func remove(hash: String, account: Int64) async
    func removeAccount(_ account: Int64) async
}

extension ChunkStorage {
    /// Throws `hashMismatch` unless `bytes` hash (SHA-256) to `hash`.
    static func verify(_ bytes: [UInt8], hash: String) throws {
        let digest = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
        guard digest == hash else {
            throw SyncError.badRequest("hashMismatch", "the chunk's bytes hash to \(digest), not \(hash)")
        }
    }
}

/// Chunk contents on disk, per account: `DIR/ACCOUNT/ab/abcdef…` (named by SHA-256). A chunk
/// is written to a temporary file, checked against its hash, `fsync`ed and renamed into place,
/// so a stored chunk is always whole and correct.
struct FileChunkStore: ChunkStorage {
    let directory: String

    init(directory: String) throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    func path(account: Int64, hash: String) -> String {
        "\(directory)/\(account)/\(hash.prefix(2))/\(hash)"
    }

    func store(_ bytes: [UInt8], hash: String, account: Int64) throws {
        try Self.verify(bytes, hash: hash)
        let final = path(account: account, hash: hash)
        if FileManager.default.fileExists(atPath: final) { return }
        let folder = (final as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let temporary = folder + "/.incoming-" + UUID().uuidString
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Self.ioError("create", temporary) }
        var ok = false
        defer {
            if !ok { unlink(temporary) }
        }
        do {
            defer { close(fd) }
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { throw Self.ioError("write", temporary) }
                offset += written
            }
            guard fsync(fd) == 0 else { throw Self.ioError("fsync", temporary) }
        }
        guard rename(temporary, final) == 0 else { throw Self.ioError("rename", final) }
        ok = true
    }

    func load(hash: String, account: Int64) -> Data? {
        FileManager.default.contents(atPath: path(account: account, hash: hash))
    }

    func remove(hash: String, account: Int64) {
        unlink(path(account: account, hash: hash))
    }

    func removeAccount(_ account: Int64) {
        try? FileManager.default.removeItem(atPath: "\(directory)/\(account)")
    }

    static func ioError(_ operation: String, _ path: String) -> SyncError {
        let reason = String(cString: strerror(errno))
        if errno == ENOSPC || errno == EDQUOT {
            return SyncError(HTTPResponse.Status(code: 507, reasonPhrase: "Insufficient Storage"), "noSpace", "the server is out of disk space")
        }
        return SyncError(.internalServerError, "storageFailure", "\(operation) failed: \(reason)")
    }
}
