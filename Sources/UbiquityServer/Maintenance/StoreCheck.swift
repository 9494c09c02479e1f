import Crypto
import Foundation
import UbiquityProtocol

/// A chunk `ubiquity fsck` found wrong.
package struct ChunkProblem: Sendable, Equatable {
    /// The account.
    package var account: Int64
    /// The chunk's hash.
    package var hash: String
    /// Its size in bytes (as stored, or as the database lists it).
    package var size: Int64
}

/// What `ubiquity fsck` found — and, when it repairs, what it mended.
package struct StoreCheckReport: Sendable {
    /// Chunks read and hashed, and their bytes.
    package var chunksChecked = 0, bytesChecked: Int64 = 0
    /// Chunks whose bytes no longer hash to their name (put aside when repairing).
    package var damaged: [ChunkProblem] = []
    /// Chunks the database lists whose bytes are not stored (forgotten when repairing).
    package var missing: [ChunkProblem] = []
    /// Chunks stored that nothing lists, older than an hour (not an upload in progress; removed
    /// when repairing, as `ubiquity gc` would).
    package var unreferenced: [ChunkProblem] = []
    /// Chunks revisions marked uploaded name that the database does not list: recorded again
    /// when their bytes are stored and sound, else their revisions wait for them again.
    package var unlisted: [UnlistedReference] = []
    /// With an object store: the objects its bucket lists under `chunks/`.
    package var objectsListed: Int?
    /// Live packs whose object is not in the bucket (their chunks are counted missing too).
    package var missingPacks: [String] = []
    /// Objects no pack names, older than a day (removed when repairing).
    package var unnamedObjects: [String] = []
    /// Whether the problems were mended.
    package var repaired = false

    /// Whether nothing was wrong.
    package var isClean: Bool {
        damaged.isEmpty && missing.isEmpty && unreferenced.isEmpty && unlisted.isEmpty && missingPacks.isEmpty && unnamedObjects.isEmpty
    }
}

extension ServerAdministration {
    /// Checks the chunk store against the database: every chunk the database lists is read and
    /// hashed; stored chunks nothing lists, and chunks uploaded revisions name that the database
    /// does not list, are found. With `repair`, what can be mended is: a damaged chunk is put
    /// aside and forgotten (its revisions wait for it again, so a device's next upload repairs
    /// it), a missing one forgotten, an unreferenced one removed, an unlisted reference recorded
    /// again when its bytes are there and sound. Safe while the server runs.
    /// - Parameters:
    ///   - repair: Mend what was found (default: only report).
    ///   - now: The time to judge "older than an hour" by.
    package func checkStore(repair: Bool, now: Date = Date()) async throws -> StoreCheckReport {
        struct Key: Hashable { var account: Int64, hash: String }
        var report = StoreCheckReport()
        if let objects = storage.chunks as? ObjectChunkStore {
            let sweep = try await objects.sweep(now: now, removing: repair)
            report.objectsListed = sweep.listed
            report.missingPacks = sweep.missing
            report.unnamedObjects = sweep.unnamed
        }
        let unlisted = try await database.unlistedReferences()
        let listed = try await database.listedChunks()
        let stored = try await storage.chunks.storedChunks()
        let storedKeys = Set(stored.map { Key(account: $0.account, hash: $0.hash) })
        let listedKeys = Set(listed.map { Key(account: $0.account, hash: $0.hash) })
        let named = Set(unlisted.map { Key(account: $0.account, hash: $0.hash) })

        /// Whether the stored bytes of chunk `hash` are sound; damaged ones are noted (and put aside).
        func sound(_ account: Int64, _ hash: String) async throws -> Bool? {
            guard let data = try await storage.chunks.load(hash: hash, account: account) else { return nil }
            report.chunksChecked += 1
            report.bytesChecked += Int64(data.count)
            guard !(try await storage.chunks.isSound(data, hash: hash, account: account)) else { return true }
            report.damaged.append(ChunkProblem(account: account, hash: hash, size: Int64(data.count)))
            if repair { _ = try await storage.chunks.quarantine(hash: hash, account: account, damaged: data) }
            return false
        }

        for entry in listed {
            let isSound = storedKeys.contains(Key(account: entry.account, hash: entry.hash)) ? try await sound(entry.account, entry.hash) : nil
            if isSound == nil { report.missing.append(ChunkProblem(account: entry.account, hash: entry.hash, size: entry.size)) }
            if isSound != true, repair { _ = try await database.chunkLost(accountId: entry.account, hash: entry.hash) }
        }
        for entry in stored where !listedKeys.contains(Key(account: entry.account, hash: entry.hash)) {
            if named.contains(Key(account: entry.account, hash: entry.hash)) { continue } // recorded again below
            guard now.timeIntervalSince(entry.created) > 3_600 else { continue }
            report.unreferenced.append(ChunkProblem(account: entry.account, hash: entry.hash, size: entry.size))
            if repair { try await storage.chunks.remove(hash: entry.hash, account: entry.account) }
        }
        for reference in unlisted {
            report.unlisted.append(reference)
            guard repair else { continue }
            let key = Key(account: reference.account, hash: reference.hash)
            // Listed again if sound and the database takes it (a refusal — over quota — lists it lost below).
            if storedKeys.contains(key), try await sound(reference.account, reference.hash) == true,
               let size = stored.first(where: { $0.account == key.account && $0.hash == key.hash })?.size,
               (try? await database.chunksStored(accountId: reference.account, chunks: [StoredChunk(hash: reference.hash, size: size)], now: now)) != nil {
                continue
            }
            _ = try await database.chunkLost(accountId: reference.account, hash: reference.hash)
        }
        report.repaired = repair
        return report
    }
}
