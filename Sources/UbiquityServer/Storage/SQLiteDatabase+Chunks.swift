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

    func chunkBases(accountId: Int64, hashes: [String]) async throws -> [String: String] {
        guard !hashes.isEmpty else { return [:] }
        return try await pool.read { db in try Self.bases(db, account: accountId, hashes: hashes) }
    }

    func chunksPatching(accountId: Int64, bases: [String]) async throws -> [String: String] {
        guard !bases.isEmpty else { return [:] }
        return try await pool.read { db in
            var patching: [String: String] = [:]
            try Self.forEachRow(db, account: accountId, among: bases, sql: { "SELECT hash, base FROM chunk WHERE accountId = ? AND base IN (\($0))" }) { patching[$0["hash"]] = $0["base"] }
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

    /// The chunks among `hashes` stored as sealed patches, and their bases.
    static func bases(_ db: Database, account: Int64, hashes: [String]) throws -> [String: String] {
        var bases: [String: String] = [:]
        try forEachRow(db, account: account, among: hashes, sql: { "SELECT hash, base FROM chunk WHERE accountId = ? AND base IS NOT NULL AND hash IN (\($0))" }) {
            bases[$0["hash"]] = $0["base"]
        }
        return bases
    }

    /// Runs `sql` — its arguments the account, then `values`, whose `?` marks it places where its
    /// argument says — 500 values a statement, handing each row to `each`.
    static func forEachRow(_ db: Database, account: Int64, among values: [String], sql: (String) -> String, _ each: (Row) throws -> Void) throws {
        for start in stride(from: 0, to: values.count, by: 500) {
            let batch = Array(values[start..<min(start + 500, values.count)])
            let marks = Array(repeating: "?", count: batch.count).joined(separator: ",")
            for row in try Row.fetchAll(db, sql: sql(marks), arguments: StatementArguments([account] + batch)) { try each(row) }
        }
    }
}
