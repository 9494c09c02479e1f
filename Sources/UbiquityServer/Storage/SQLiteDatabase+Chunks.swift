import Foundation
import GRDB
import UbiquityProtocol

// The embedded database's record of each account's chunks: which it holds, which revisions wait
// for them, which each container names, and what becomes of revisions when one arrives or is lost.
extension SQLiteDatabase {
    // MARK: Chunks

    func missingChunks(accountId: Int64, hashes: [String]) async throws -> [String] {
        try await pool.read { db in
            let present = try Self.presentChunks(db, accountId: accountId, hashes: hashes)
            return Array(Set(hashes).subtracting(present)).sorted()
        }
    }

    func hasChunk(accountId: Int64, hash: String) async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM chunk WHERE accountId = ? AND hash = ?"), arguments: [accountId, hash]) ?? false
        }
    }

    func chunksNamed(accountId: Int64, containers: [String], hashes: [String]) async throws -> Set<String> {
        guard !containers.isEmpty, !hashes.isEmpty else { return [] }
        return try await pool.read { db in
            var named = Set<String>()
            let places = Array(repeating: "?", count: containers.count).joined(separator: ",")
            for start in stride(from: 0, to: hashes.count, by: 500) {
                let batch = Array(hashes[start..<min(start + 500, hashes.count)])
                let marks = Array(repeating: "?", count: batch.count).joined(separator: ",")
                named.formUnion(try String.fetchAll(db, sql: """
                    SELECT DISTINCT containerChunk.hash FROM containerChunk JOIN container ON container.id = containerChunk.containerId
                    WHERE container.accountId = ? AND container.identifier IN (\(places)) AND containerChunk.hash IN (\(marks))
                    """, arguments: StatementArguments([accountId as any DatabaseValueConvertible] + containers + batch)))
            }
            return named
        }
    }

    func chunksStored(accountId: Int64, chunks: [StoredChunk], now: Date) async throws -> [String: Int64] {
        try await pool.write { db in
            let hashes = chunks.map(\.hash)
            let present = try Self.presentChunks(db, accountId: accountId, hashes: hashes)
            var fresh: [String: Int64] = [:]
            for chunk in chunks where !present.contains(chunk.hash) { fresh[chunk.hash] = chunk.size }
            if !fresh.isEmpty {
                // One quota check for the whole batch.
                let adding = fresh.values.reduce(0, +)
                let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT usedBytes, quotaBytes FROM account WHERE id = ?"), arguments: [accountId])
                let used: Int64 = row?["usedBytes"] ?? 0, quota: Int64 = row?["quotaBytes"] ?? 0
                guard used + adding <= quota else { throw SyncError.quotaExceeded(used: used, quota: quota, adding: adding) }
            }
            for (hash, size) in fresh.sorted(by: { $0.key < $1.key }) {
                try db.cachedStatement(sql: "INSERT OR IGNORE INTO chunk (accountId, hash, size, created) VALUES (?, ?, ?, ?)").execute(arguments: [accountId, hash, size, now.timeIntervalSince1970])
            }
            // Revisions waiting for these chunks that now have every chunk become downloadable.
            var waiting: [String: Row] = [:]
            for batch in stride(from: 0, to: hashes.count, by: 500).map({ Array(hashes[$0..<min($0 + 500, hashes.count)]) }) {
                let marks = Array(repeating: "?", count: batch.count).joined(separator: ",")
                for row in try Row.fetchAll(db, sql: """
                    SELECT DISTINCT revision.id, revision.containerId, revision.itemId, revision.state FROM revisionWaiting
                    JOIN revision ON revision.id = revisionWaiting.revisionId
                    WHERE revisionWaiting.accountId = ? AND revisionWaiting.hash IN (\(marks))
                    """, arguments: StatementArguments([accountId] + batch)) {
                    waiting[row["id"]] = row
                }
                try db.execute(sql: "DELETE FROM revisionWaiting WHERE accountId = ? AND hash IN (\(marks))", arguments: StatementArguments([accountId] + batch))
            }
            var changed: [String: Int64] = [:]
            for (revision, row) in waiting.sorted(by: { $0.key < $1.key }) {
                // Is any chunk still missing? (Stops at the first: a large file's upload must not
                // count all its chunks once per batch.)
                let stillMissing = try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM revisionWaiting WHERE revisionId = ? LIMIT 1"), arguments: [revision]) == true
                guard !stillMissing else { continue }
                try db.cachedStatement(sql: "UPDATE revision SET complete = 1 WHERE id = ?").execute(arguments: [revision])
                let state: String = row["state"]
                guard state == "current" || state == "conflict" else { continue }
                let containerId: Int64 = row["containerId"]
                let sequence = try Self.advance(db, containerId: containerId, itemId: row["itemId"])
                if let identifier = try String.fetchOne(db.cachedStatement(sql: "SELECT identifier FROM container WHERE id = ?"), arguments: [containerId]) { changed[identifier] = sequence }
            }
            return changed
        }
    }

    func chunkLost(accountId: Int64, hash: String) async throws -> [String: Int64] {
        try await pool.write { db in
            try db.cachedStatement(sql: "DELETE FROM chunk WHERE accountId = ? AND hash = ?").execute(arguments: [accountId, hash])
            // (No index by hash — see migration v9: a rare event scans the references once.)
            let naming = try Row.fetchAll(db.cachedStatement(sql: """
                SELECT revision.id, revision.containerId, revision.itemId, revision.state, container.identifier FROM revisionChunk
                JOIN revision ON revision.id = revisionChunk.revisionId JOIN container ON container.id = revision.containerId
                WHERE revisionChunk.accountId = ? AND revisionChunk.hash = ?
                """), arguments: [accountId, hash])
            var changed: [String: Int64] = [:]
            for row in naming {
                let revision: String = row["id"]
                try db.cachedStatement(sql: "INSERT OR IGNORE INTO revisionWaiting (accountId, hash, revisionId) VALUES (?, ?, ?)").execute(arguments: [accountId, hash, revision])
                try db.cachedStatement(sql: "UPDATE revision SET complete = 0 WHERE id = ?").execute(arguments: [revision])
                let state: String = row["state"]
                guard state == "current" || state == "conflict" else { continue }
                changed[row["identifier"]] = try Self.advance(db, containerId: row["containerId"], itemId: row["itemId"])
            }
            return changed
        }
    }

    func listedChunks() async throws -> [ChunkEntry] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT accountId, hash, size, created FROM chunk ORDER BY accountId, hash").map {
                ChunkEntry(account: $0["accountId"], hash: $0["hash"], size: $0["size"], created: Date(timeIntervalSince1970: $0["created"]))
            }
        }
    }

    func unlistedReferences() async throws -> [UnlistedReference] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT revisionChunk.accountId, revisionChunk.hash, MIN(container.identifier) AS container, MIN(revision.itemId) AS item, MIN(revision.name) AS name
                FROM revisionChunk JOIN revision ON revision.id = revisionChunk.revisionId JOIN container ON container.id = revision.containerId
                LEFT JOIN chunk ON chunk.accountId = revisionChunk.accountId AND chunk.hash = revisionChunk.hash
                WHERE revision.complete = 1 AND chunk.hash IS NULL
                GROUP BY revisionChunk.accountId, revisionChunk.hash ORDER BY revisionChunk.accountId, revisionChunk.hash
                """).map { UnlistedReference(account: $0["accountId"], hash: $0["hash"], container: $0["container"], item: $0["item"], name: $0["name"]) }
        }
    }
}
