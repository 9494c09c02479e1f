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

    func chunksStored(accountId: Int64, chunks: [StoredChunk], now: Date) async throws -> [String: Int64] {
        try await transaction { [self] db in
            guard let account = try await db.rows("SELECT quota_bytes FROM account WHERE id = \(accountId) FOR UPDATE").first else { throw SyncError.unauthorized }
            let hashes = chunks.map(\.hash)
            let present = try await Self.presentChunks(db, accountId: accountId, hashes: hashes)
            var fresh: [String: Int64] = [:]
            for chunk in chunks where !present.contains(chunk.hash) { fresh[chunk.hash] = chunk.size }
            if !fresh.isEmpty {
                // One quota check for the whole batch.
                let adding = fresh.values.reduce(0, +)
                let used = try await db.rows("SELECT COALESCE(SUM(size), 0)::BIGINT AS used FROM chunk WHERE account_id = \(accountId)").first?.get("used", as: Int64.self) ?? 0
                let quota: Int64 = try account.get("quota_bytes")
                guard used + adding <= quota else { throw SyncError.quotaExceeded(used: used, quota: quota, adding: adding) }
            }
            let ordered = fresh.sorted { $0.key < $1.key }
            if !ordered.isEmpty {
                let freshHashes = ordered.map(\.key), sizes = ordered.map(\.value)
                try await db.rows("""
                    INSERT INTO chunk (account_id, hash, size, created)
                    SELECT \(accountId), hash, size, \(now.timeIntervalSince1970) FROM UNNEST(\(freshHashes)::TEXT[], \(sizes)::BIGINT[]) AS fresh(hash, size)
                    ON CONFLICT DO NOTHING
                    """)
            }
            // Revisions waiting for these chunks that now have every chunk become downloadable.
            let waiting = try await db.rows("""
                SELECT DISTINCT revision.id, revision.container_id, revision.item_id, revision.state FROM revision_chunk
                JOIN revision ON revision.id = revision_chunk.revision_id
                WHERE revision_chunk.account_id = \(accountId) AND revision_chunk.hash = ANY(\(hashes)::TEXT[]) AND NOT revision.complete
                ORDER BY revision.container_id, revision.id
                """)
            var changed: [String: Int64] = [:]
            for row in waiting {
                let revision: String = try row.get("id")
                // Is any chunk still missing? (Stops at the first: a large file's upload must not
                // count all its chunks once per batch.)
                let stillMissing = try await !db.rows("""
                    SELECT 1 AS missing FROM revision_chunk LEFT JOIN chunk ON chunk.account_id = revision_chunk.account_id AND chunk.hash = revision_chunk.hash
                    WHERE revision_chunk.revision_id = \(revision) AND chunk.hash IS NULL LIMIT 1
                    """).isEmpty
                guard !stillMissing else { continue }
                try await db.rows("UPDATE revision SET complete = TRUE WHERE id = \(revision)")
                let state: String = try row.get("state")
                guard state == "current" || state == "conflict" else { continue }
                let containerId: Int64 = try row.get("container_id")
                let sequence = try await Self.advance(db, containerId: containerId, itemId: try row.get("item_id"))
                if let identifier = try await db.rows("SELECT identifier FROM container WHERE id = \(containerId)").first?.get("identifier", as: String.self) {
                    changed[identifier] = sequence
                }
            }
            for (container, sequence) in changed { try await announce(db, account: accountId, container: container, sequence: sequence) }
            return changed
        }
    }

    func chunkLost(accountId: Int64, hash: String) async throws -> [String: Int64] {
        try await transaction { [self] db in
            try await db.rows("DELETE FROM chunk WHERE account_id = \(accountId) AND hash = \(hash)")
            let naming = try await db.rows("""
                SELECT revision.id, revision.container_id, revision.item_id, revision.state, container.identifier FROM revision_chunk
                JOIN revision ON revision.id = revision_chunk.revision_id JOIN container ON container.id = revision.container_id
                WHERE revision_chunk.account_id = \(accountId) AND revision_chunk.hash = \(hash)
                ORDER BY revision.container_id, revision.id
                """)
            var changed: [String: Int64] = [:]
            for row in naming {
                try await db.rows("UPDATE revision SET complete = FALSE WHERE id = \(try row.get("id", as: String.self))")
                let state: String = try row.get("state")
                guard state == "current" || state == "conflict" else { continue }
                changed[try row.get("identifier")] = try await Self.advance(db, containerId: try row.get("container_id"), itemId: try row.get("item_id"))
            }
            for (container, sequence) in changed { try await announce(db, account: accountId, container: container, sequence: sequence) }
            return changed
        }
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
