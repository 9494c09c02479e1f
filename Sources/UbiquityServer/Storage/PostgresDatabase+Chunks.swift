import Foundation
import PostgresNIO
import UbiquityProtocol

// PostgreSQL's record of each account's chunks: which it holds, which each container names, and
// what becomes of revisions when one arrives or is lost.
extension PostgresDatabase {
    // MARK: Chunks

    func missingChunks(accountId: Int64, hashes: [String]) async throws -> [String] {
        try await read { db in
            let present = try await Self.presentChunks(db, accountId: accountId, hashes: hashes)
            return Array(Set(hashes).subtracting(present)).sorted()
        }
    }

    func hasChunk(accountId: Int64, hash: String) async throws -> Bool {
        try await read { db in try await !db.rows("SELECT 1 AS one FROM chunk WHERE account_id = \(accountId) AND hash = \(hash)").isEmpty }
    }

    func chunksNamed(accountId: Int64, containers: [String], hashes: [String]) async throws -> Set<String> {
        guard !containers.isEmpty, !hashes.isEmpty else { return [] }
        return try await read { db in
            Set(try await db.rows("""
                SELECT DISTINCT revision_chunk.hash FROM revision_chunk
                JOIN revision ON revision.id = revision_chunk.revision_id JOIN container ON container.id = revision.container_id
                WHERE revision_chunk.account_id = \(accountId) AND revision_chunk.hash = ANY(\(hashes)::TEXT[]) AND container.identifier = ANY(\(containers)::TEXT[])
                """).map { try $0.get("hash", as: String.self) })
        }
    }

    func chunkBases(accountId: Int64, hashes: [String]) async throws -> [String: String] {
        guard !hashes.isEmpty else { return [:] }
        return try await read { db in
            var bases: [String: String] = [:]
            for row in try await db.rows("SELECT hash, base FROM chunk WHERE account_id = \(accountId) AND base IS NOT NULL AND hash = ANY(\(hashes)::TEXT[])") {
                bases[try row.get("hash")] = try row.get("base")
            }
            return bases
        }
    }

    func chunksPatching(accountId: Int64, bases: [String]) async throws -> [String: String] {
        guard !bases.isEmpty else { return [:] }
        return try await read { db in
            var patching: [String: String] = [:]
            for row in try await db.rows("SELECT hash, base FROM chunk WHERE account_id = \(accountId) AND base = ANY(\(bases)::TEXT[])") {
                patching[try row.get("hash")] = try row.get("base")
            }
            return patching
        }
    }

    func chunksStored(accountId: Int64, chunks: [StoredChunk], now: Date) async throws -> ChunksRecorded {
        try await rules { storage in try await ServerRules.chunksStored(account: accountId, chunks: chunks, now: now, in: storage) }
    }

    func chunkLost(accountId: Int64, hash: String) async throws -> [String: Int64] {
        try await rules { storage in try await ServerRules.chunkLost(account: accountId, hash: hash, in: storage) }
    }

    func listedChunks() async throws -> [ChunkEntry] {
        try await read { db in
            try await db.rows("SELECT account_id, hash, size, created FROM chunk ORDER BY account_id, hash").map {
                ChunkEntry(account: try $0.get("account_id"), hash: try $0.get("hash"), size: try $0.get("size"),
                           created: Date(timeIntervalSince1970: try $0.get("created")))
            }
        }
    }

    func unlistedReferences() async throws -> [UnlistedReference] {
        try await read { db in
            try await db.rows("""
                SELECT revision_chunk.account_id, revision_chunk.hash, MIN(container.identifier) AS container, MIN(revision.item_id) AS item, MIN(revision.name) AS name
                FROM revision_chunk JOIN revision ON revision.id = revision_chunk.revision_id JOIN container ON container.id = revision.container_id
                LEFT JOIN chunk ON chunk.account_id = revision_chunk.account_id AND chunk.hash = revision_chunk.hash
                WHERE revision.complete AND chunk.hash IS NULL
                GROUP BY revision_chunk.account_id, revision_chunk.hash ORDER BY revision_chunk.account_id, revision_chunk.hash
                """).map {
                UnlistedReference(account: try $0.get("account_id"), hash: try $0.get("hash"), container: try $0.get("container"),
                                  item: try $0.get("item"), name: try $0.get("name"))
            }
        }
    }
}
