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
    /// Of some chunks, those stored as sealed patches, with the chunk each changes.
    let bases: @Sendable ([String]) async throws -> [String: String]

    /// The opener of `container`'s chunks with `rootKeys`; `bases` tells which chunks are
    /// stored as sealed patches.
    init(rootKeys: [AccountRootKey], container: String, bases: @escaping @Sendable ([String]) async throws -> [String: String] = { _ in [:] }) {
        keys = rootKeys.sorted { $0.epoch > $1.epoch }.map { $0.chunkKeys(container: container) }
        self.bases = bases
    }

    /// The chunk `hash` made from its stored sealed patch `data` and the plaintext of the chunk
    /// it changes (`base`, named `baseName`), checked against its name.
    /// - Throws: ``SyncError`` 500 `chunkUnopenable` for a patch no held key opens, or one that
    ///   does not make the chunk named.
    func made(_ hash: String, patch data: Data, base: [UInt8], baseName: String) throws -> [UInt8] {
        guard let id = ChunkIdentifier(hex: hash), let from = ChunkIdentifier(hex: baseName) else { throw SyncError.noSuchChunk(hash) }
        for keys in keys {
            guard let opened = try? keys.openPatch(data, making: id, from: from) else { continue }
            guard let patch = PatchBody(decoding: opened), let made = base.withUnsafeBytes({ patch.applied(to: $0) }),
                  keys.identifier(of: made) == id else { break }
            return made
        }
        throw SyncError(.internalServerError, "chunkUnopenable", "a chunk of this file does not open with the account's keys")
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
        let database = database
        return SealedChunkOpener(rootKeys: rootKeys, container: container) { try await database.chunkBases(accountId: accountId, hashes: $0) }
    }
}
