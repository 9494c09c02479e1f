import Foundation
import UbiquityKeys
import UbiquitySync

/// Opens a container's sealed chunks for the server's own pages — web downloads and public
/// links — under Standard Data Protection, with the root keys the escrow holds (opened for one
/// request and forgotten with it). Under Advanced there is none: those pages answer that only
/// the account's devices open the file.
struct SealedChunkOpener: Sendable {
    /// The container's chunk keys of every epoch the escrow holds, newest first.
    private let keys: [ChunkKeys]

    /// The opener of `container`'s chunks with `rootKeys`.
    init(rootKeys: [AccountRootKey], container: String) {
        keys = rootKeys.sorted { $0.epoch > $1.epoch }.map { $0.chunkKeys(container: container) }
    }

    /// The plaintext of the stored chunk `hash`: as it is when it was stored in plaintext (it
    /// hashes to its name), else opened and checked against its name.
    /// - Throws: ``SyncError`` 409 `sealedOnDevices` without keys (Advanced), 500 `chunkUnopenable`
    ///   for one no held key opens (the storage checked its bytes: a device sealed it wrongly).
    static func plaintext(_ data: Data, hash: String, opener: SealedChunkOpener?) throws -> [UInt8] {
        if data.withUnsafeBytes({ ContentChunker.hash($0) }) == hash { return [UInt8](data) }
        guard let opener else {
            throw SyncError(.conflict, "sealedOnDevices", "this file is end-to-end encrypted (Advanced Data Protection): only the account's devices open it")
        }
        guard let id = ChunkIdentifier(hex: hash) else { throw SyncError.noSuchChunk(hash) }
        for keys in opener.keys {
            if let plaintext = try? keys.open(data, as: id) { return [UInt8](plaintext) }
        }
        throw SyncError(.internalServerError, "chunkUnopenable", "a chunk of this file does not open with the account's keys")
    }
}

extension SyncServices {
    /// The opener of `container`'s sealed chunks for the server's pages: nil under Advanced, for
    /// an account without keys, or a server without an escrow.
    func sealedChunkOpener(ofAccount accountId: Int64, container: String) async throws -> SealedChunkOpener? {
        guard let rootKeys = try await escrow?.rootKeys(ofAccount: accountId, database: database) else { return nil }
        return SealedChunkOpener(rootKeys: rootKeys, container: container)
    }
}
