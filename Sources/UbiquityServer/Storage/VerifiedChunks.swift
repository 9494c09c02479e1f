import Crypto
import Foundation
import Logging
import NIOCore
import UbiquityProtocol

/// Chunk contents checked against their hash on every read, wherever they are stored (a file
/// the disk damaged, a row changed by hand) — but for those the storage vouches for (a fetch of
/// chunks from a pack this server wrote minutes ago, unwritten since: ``FreshPacks``): a chunk
/// whose bytes no longer hash to its name is never served. It is put aside (``ChunkStorage/quarantine(hash:account:damaged:)``), the log
/// says so at `error`, the database forgets it (``SyncDatabase/chunkLost(accountId:hash:)``: its
/// revisions are not uploaded any more, devices are told) and the read answers it missing — so
/// a device that sends it again repairs it. A chunk the database lists whose bytes are gone
/// (removed under an upload that listed it again, a pack deleted by hand) is forgotten the same
/// way when it is read (``vanished(_:account:)``).
struct VerifiedChunks: ChunkStorage {
    let base: any ChunkStorage
    var folder: String? { base.folder }
    let database: any SyncDatabase
    let notifier: ChangeNotifier
    let logger: Logger

    func store(_ chunks: [ChunkBatch.Chunk], account: Int64, checked: Bool, sealed: Bool) async throws {
        try await base.store(chunks, account: account, checked: checked, sealed: sealed)
    }

    func sealedDigests(of hashes: [String], account: Int64) async throws -> [String: [UInt8]] {
        try await base.sealedDigests(of: hashes, account: account)
    }

    func load(hash: String, account: Int64) async throws -> Data? {
        var found = try await base.load(hash: hash, account: account)
        if found == nil, !(try await vanished(hash, account: account)) { found = try await base.load(hash: hash, account: account) }
        guard let data = found else { return nil }
        return try await checked(data, hash: hash, account: account, sealed: base.sealedDigests(of: [hash], account: account)) ? data : nil
    }

    func load(_ hashes: [String], account: Int64, upTo limit: Int) async throws -> [Data] {
        let loaded = try await base.load(hashes, account: account, upTo: limit)
        let sealed = try await base.sealedDigests(of: Array(hashes.prefix(loaded.count)), account: account)
        for (index, data) in loaded.enumerated() where !(try await checked(data, hash: hashes[index], account: account, sealed: sealed)) {
            return Array(loaded[..<index]) // what comes before the damaged one
        }
        return loaded
    }

    func loadBatch(_ hashes: [String], account: Int64, upTo limit: Int, into batch: inout ByteBuffer) async throws -> [Range<Int>] {
        let start = batch.writerIndex
        var (places, vouched) = try await base.loadVouchedBatch(hashes, account: account, upTo: limit, into: &batch)
        if places.isEmpty, let first = hashes.first, !(try await vanished(first, account: account)) {
            (places, vouched) = try await base.loadVouchedBatch(hashes, account: account, upTo: limit, into: &batch)
        }
        let unvouched = places.indices.filter { !vouched[$0] }.map { hashes[$0] }
        let sealed = unvouched.isEmpty ? [:] : try await base.sealedDigests(of: unvouched, account: account)
        for (index, place) in places.enumerated() where !vouched[index] {
            let digest = batch.withUnsafeReadableBytes { bytes in
                SHA256.hash(data: UnsafeRawBufferPointer(rebasing: bytes[(place.lowerBound - batch.readerIndex)..<(place.upperBound - batch.readerIndex)]))
            }
            guard !Self.matches(digest, hash: hashes[index], sealed: sealed) else { continue }
            // What comes before the damaged one.
            let damaged = Data(batch.readableBytesView[place])
            batch.moveWriterIndex(to: index == 0 ? start : places[index - 1].upperBound)
            _ = try await quarantined(damaged, digest: digest, hash: hashes[index], account: account)
            return Array(places[..<index])
        }
        return places
    }

    func remove(hash: String, account: Int64) async throws { try await base.remove(hash: hash, account: account) }
    func removeAccount(_ account: Int64) async throws { try await base.removeAccount(account) }
    func compact(orphanAge: TimeInterval) async throws -> Int64 { try await base.compact(orphanAge: orphanAge) }
    func quarantine(hash: String, account: Int64, damaged: Data) async throws -> String? {
        try await base.quarantine(hash: hash, account: account, damaged: damaged)
    }
    func storedChunks() async throws -> [ChunkEntry] { try await base.storedChunks() }

    /// Whether `data` is chunk `hash` (`sealed`: the digests recorded for sealed chunks); if
    /// not, it is put aside and forgotten.
    func checked(_ data: Data, hash: String, account: Int64, sealed: [String: [UInt8]]) async throws -> Bool {
        let digest = SHA256.hash(data: data)
        return Self.matches(digest, hash: hash, sealed: sealed) ? true : try await quarantined(data, digest: digest, hash: hash, account: account)
    }

    /// Whether bytes hashing to `digest` are chunk `hash`: its recorded digest if it is sealed, its name otherwise.
    static func matches(_ digest: SHA256.Digest, hash: String, sealed: [String: [UInt8]]) -> Bool {
        if let recorded = sealed[hash] { return Array(digest) == recorded }
        return digest.matches(lowercaseHex: hash)
    }

    /// Chunk `hash` of `account` was not found in storage: if the database lists it, its bytes
    /// are gone — the database forgets it (its revisions are asked of the devices again, as for a
    /// damaged one) and the log says so at `error`. True when it is absent (listed or not); false
    /// when its bytes are there after all (stored and listed meanwhile: read it again).
    func vanished(_ hash: String, account: Int64) async throws -> Bool {
        guard try await database.missingChunks(accountId: account, hashes: [hash]).isEmpty else { return true } // not listed: simply absent
        guard try await base.load(hash: hash, account: account) == nil else { return false }
        let changed = try await database.chunkLost(accountId: account, hash: hash)
        // (Not its name: a plaintext chunk's is the SHA-256 of its bytes.)
        logger.error("a chunk the database lists is not in storage: forgotten, and asked of the devices again", metadata: [
            "account": "\(account)", "containers": "\(changed.keys.sorted())",
        ])
        for (container, sequence) in changed { notifier.publish(account: account, container: container, sequence: sequence) }
        return true
    }

    /// Puts aside `data`, stored as chunk `hash` but hashing to `digest`, and has it asked of the
    /// devices again; false (it is not the chunk).
    func quarantined(_ data: Data, digest: SHA256.Digest, hash: String, account: Int64) async throws -> Bool {
        let kept = try await base.quarantine(hash: hash, account: account, damaged: data)
        let changed = try await database.chunkLost(accountId: account, hash: hash)
        logger.error("a stored chunk is damaged: put aside, and asked of the devices again", metadata: [
            "account": "\(account)", "hash": "\(hash)", "bytesHashTo": "\(digest.lowercaseHex)", "size": "\(data.count)",
            "keptAt": "\(kept ?? "not kept")", "containers": "\(changed.keys.sorted())",
        ])
        for (container, sequence) in changed { notifier.publish(account: account, container: container, sequence: sequence) }
        return false
    }
}
