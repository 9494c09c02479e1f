import Foundation
import GRDB
import UbiquityProtocol
import UbiquitySync

// The embedded database's half of sealing old revisions in place (``SealInPlace``).
extension SQLiteDatabase {
    func unsealedRevisions(accountId: Int64, container: String, below cursor: UnsealedCursor, limit: Int) async throws -> [UnsealedRevision] {
        try await pool.read { db in
            guard let containerId = try Self.containerId(db, accountId: accountId, identifier: container) else { return [] }
            return try Row.fetchAll(db.cachedStatement(sql: """
                SELECT revision.id, revision.created, revision.itemId, revision.name, revision.parent, revision.kind, revision.modificationDate, revision.type,
                    revision.deleted, revisionManifest.manifest
                FROM revision JOIN revisionManifest ON revisionManifest.revisionId = revision.id
                WHERE revision.containerId = ? AND revision.record IS NULL AND revision.complete = 1
                    AND (revision.created < ? OR (revision.created = ? AND revision.id > ?))
                ORDER BY revision.created DESC, revision.id LIMIT ?
                """), arguments: [containerId, cursor.created, cursor.created, cursor.id, limit]).map { row in
                try UnsealedRevision(id: row["id"], created: row["created"], item: row["itemId"], name: row["name"], parent: row["parent"],
                                     kind: ItemKind(rawValue: row["kind"]) ?? .file, modificationDate: row["modificationDate"], type: row["type"],
                                     deleted: row["deleted"], manifest: JSONDecoder().decode(Manifest.self, from: row["manifest"] as Data))
            }
        }
    }

    func accountsWithUnsealedRevisions() async throws -> [Int64] {
        try await pool.read { db in
            try Int64.fetchAll(db, sql: """
                SELECT DISTINCT container.accountId FROM (SELECT DISTINCT containerId FROM revision WHERE record IS NULL) AS unsealed
                JOIN container ON container.id = unsealed.containerId
                WHERE EXISTS (SELECT 1 FROM rosterEntry WHERE rosterEntry.accountId = container.accountId)
                ORDER BY container.accountId
                """)
        }
    }

    func plaintextLeft(accountId: Int64) async throws -> (revisions: Int, values: Int) {
        try await pool.read { db in
            let revisions = try Int.fetchOne(db, sql: """
                SELECT count(*) FROM revision JOIN container ON container.id = revision.containerId
                WHERE container.accountId = ? AND revision.record IS NULL AND revision.deleted = 0
                """, arguments: [accountId]) ?? 0
            let values = try Int.fetchOne(db, sql: """
                SELECT count(*) FROM kv JOIN kvStore ON kvStore.id = kv.storeId
                WHERE kvStore.accountId = ? AND kv.sealed IS NULL AND kv.value IS NOT NULL
                """, arguments: [accountId]) ?? 0
            return (revisions, values)
        }
    }

    func sealInPlace(accountId: Int64, container: String, rewrites: [RevisionRewrite], chunks: [String: Int64], now: Date) async throws -> SealedInPlace {
        let done = try await rules { storage in
            try await ServerRules.sealInPlace(account: accountId, container: container, rewrites: rewrites, chunks: chunks, now: now, in: storage)
        }
        for rewrite in rewrites { ManifestCache.shared.forget(rewrite.id) } // (another process finds it out of date by its content token)
        return done
    }

    func plaintextNamedItems(accountId: Int64, container: String) async throws -> [(id: String, name: String, parent: String?, key: String)] {
        try await pool.read { db in
            guard let containerId = try Self.containerId(db, accountId: accountId, identifier: container) else { return [] }
            return try Row.fetchAll(db.cachedStatement(sql: """
                SELECT item.id, item.nameKey, revision.name, revision.parent FROM item JOIN revision ON revision.id = item.currentRevision
                WHERE item.containerId = ? AND item.nameKey != '' AND revision.record IS NULL
                """), arguments: [containerId]).map { (id: $0["id"], name: $0["name"], parent: $0["parent"], key: $0["nameKey"]) }
        }
    }

    func reindex(accountId: Int64, container: String, keys: [(id: String, name: String, key: String)]) async throws {
        try await pool.write { db in
            guard let containerId = try Self.containerId(db, accountId: accountId, identifier: container) else { return }
            let update = try db.cachedStatement(sql: """
                UPDATE item SET nameKey = ? WHERE containerId = ? AND id = ? AND nameKey != ''
                    AND (SELECT name FROM revision WHERE revision.id = item.currentRevision AND revision.record IS NULL) = ?
                """)
            for entry in keys { try update.execute(arguments: [entry.key, containerId, entry.id, entry.name]) }
        }
    }

    func scrubLog() async throws {
        try await pool.writeWithoutTransaction { db in _ = try db.checkpoint(.truncate) }
    }
}

extension SQLiteRuleStorage {
    func nameKey(container: Int64, item: String) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT nameKey FROM item WHERE containerId = ? AND id = ?"), arguments: [container, item])
    }

    func rewrite(_ rewrite: RevisionRewrite, container: Int64) throws -> (cost: Int64, hashes: [String])? {
        guard let cost = try Int64.fetchOne(db.cachedStatement(sql: "SELECT cost FROM revision WHERE id = ? AND containerId = ? AND record IS NULL"),
                                            arguments: [rewrite.id, container]) else { return nil }
        let hashes = try String.fetchAll(db.cachedStatement(sql: "SELECT hash FROM revisionChunk WHERE revisionId = ?"), arguments: [rewrite.id])
        let commit = rewrite.commit, update = commit.update
        try db.cachedStatement(sql: """
            UPDATE revision SET name = ?, type = NULL, modificationDate = ?, size = ?, record = ?, digest = ?, cost = ?, sealedInPlace = 1 WHERE id = ?
            """).execute(arguments: [update.name, update.modificationDate, commit.size, update.record, commit.digest, rewrite.cost, rewrite.id])
        try db.cachedStatement(sql: "UPDATE revisionManifest SET manifest = ? WHERE revisionId = ?").execute(arguments: [commit.manifest, rewrite.id])
        try db.cachedStatement(sql: "DELETE FROM revisionChunk WHERE revisionId = ?").execute(arguments: [rewrite.id])
        try insertReferences(revision: rewrite.id, account: rewrite.account, container: container, hashes: commit.hashes, containerChunks: commit.hashes)
        try db.cachedStatement(sql: "UPDATE item SET parentKey = ?, nameKey = ? WHERE containerId = ? AND id = ? AND currentRevision = ?")
            .execute(arguments: [rewrite.keys.parent, rewrite.keys.name, container, rewrite.item, rewrite.id])
        try db.cachedStatement(sql: "UPDATE publicLink SET name = ? WHERE accountId = ? AND revision = ?").execute(arguments: [update.name, rewrite.account, rewrite.id])
        return (cost, hashes)
    }

    func isNamed(account: Int64, hash: String) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: """
            SELECT EXISTS (SELECT 1 FROM revisionChunk WHERE accountId = ? AND hash = ?) OR EXISTS (SELECT 1 FROM chunk WHERE accountId = ? AND base = ?)
            """), arguments: [account, hash, account, hash]) ?? true
    }

    func forgetContainerChunks(container: Int64, hashes: [String]) throws {
        let forget = try db.cachedStatement(sql: """
            DELETE FROM containerChunk WHERE containerId = ?1 AND hash = ?2 AND NOT EXISTS
                (SELECT 1 FROM revisionChunk JOIN revision ON revision.id = revisionChunk.revisionId
                 WHERE revisionChunk.accountId = (SELECT accountId FROM container WHERE id = ?1) AND revisionChunk.hash = ?2 AND revision.containerId = ?1)
            """)
        for hash in hashes { try forget.execute(arguments: [container, hash]) }
    }
}
