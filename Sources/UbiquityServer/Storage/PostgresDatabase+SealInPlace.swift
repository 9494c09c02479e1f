import Foundation
import PostgresNIO
import UbiquityProtocol
import UbiquitySync

// PostgreSQL's half of sealing old revisions in place (``SealInPlace``), as the embedded database's.
extension PostgresDatabase {
    func accountsWithUnsealedRevisions() async throws -> [Int64] {
        try await read { db in
            try await db.rows("""
                SELECT DISTINCT container.account_id FROM (SELECT DISTINCT container_id FROM revision WHERE record IS NULL) AS unsealed
                JOIN container ON container.id = unsealed.container_id
                WHERE EXISTS (SELECT 1 FROM roster_entry WHERE roster_entry.account_id = container.account_id)
                ORDER BY container.account_id
                """).map { try $0.get("account_id", as: Int64.self) }
        }
    }

    func plaintextLeft(accountId: Int64) async throws -> (revisions: Int, values: Int) {
        try await read { db in
            let revisions = try await db.rows("""
                SELECT count(*) AS n FROM revision JOIN container ON container.id = revision.container_id
                WHERE container.account_id = \(accountId) AND revision.record IS NULL AND NOT revision.deleted
                """).first?.get("n", as: Int64.self) ?? 0
            let values = try await db.rows("""
                SELECT count(*) AS n FROM kv JOIN kv_store ON kv_store.id = kv.store_id
                WHERE kv_store.account_id = \(accountId) AND kv.sealed IS NULL AND kv.value IS NOT NULL
                """).first?.get("n", as: Int64.self) ?? 0
            return (Int(revisions), Int(values))
        }
    }

    func unsealedRevisions(accountId: Int64, container: String, below cursor: UnsealedCursor, limit: Int) async throws -> [UnsealedRevision] {
        try await read { db in
            guard let containerId = try await Self.containerId(db, accountId: accountId, identifier: container) else { return [] }
            return try await db.rows("""
                SELECT id, created, item_id, name, parent, kind, modification_date, type, deleted, manifest FROM revision
                WHERE container_id = \(containerId) AND record IS NULL AND complete
                    AND (created < \(cursor.created) OR (created = \(cursor.created) AND id > \(cursor.id)))
                ORDER BY created DESC, id LIMIT \(Int64(limit))
                """).map { row in
                try UnsealedRevision(id: row.get("id"), created: row.get("created"), item: row.get("item_id"), name: row.get("name"), parent: row.get("parent"),
                                     kind: ItemKind(rawValue: row.get("kind", as: String.self)) ?? .file, modificationDate: row.get("modification_date"),
                                     type: row.get("type"), deleted: row.get("deleted"),
                                     manifest: JSONDecoder().decode(Manifest.self, from: Data(row.get("manifest", as: ByteBuffer.self).readableBytesView)))
            }
        }
    }

    func sealInPlace(accountId: Int64, container: String, rewrites: [RevisionRewrite], chunks: [String: Int64], now: Date) async throws -> SealedInPlace {
        let done = try await rules { storage in
            try await ServerRules.sealInPlace(account: accountId, container: container, rewrites: rewrites, chunks: chunks, now: now, in: storage)
        }
        // (Other instances find the lists they kept out of date by their content tokens.)
        for rewrite in rewrites { ManifestCache.shared.forget(rewrite.id) }
        return done
    }

    func plaintextNamedItems(accountId: Int64, container: String) async throws -> [(id: String, name: String, parent: String?, key: String)] {
        try await read { db in
            guard let containerId = try await Self.containerId(db, accountId: accountId, identifier: container) else { return [] }
            return try await db.rows("""
                SELECT item.id, item.name_key, revision.name, revision.parent FROM item JOIN revision ON revision.id = item.current_revision
                WHERE item.container_id = \(containerId) AND item.name_key <> '' AND revision.record IS NULL
                """).map { (id: try $0.get("id", as: String.self), name: try $0.get("name", as: String.self), parent: try $0.get("parent", as: String?.self),
                             key: try $0.get("name_key", as: String.self)) }
        }
    }

    func reindex(accountId: Int64, container: String, keys: [(id: String, name: String, key: String)]) async throws {
        try await transaction { db in
            guard let containerId = try await Self.containerId(db, accountId: accountId, identifier: container) else { return }
            for entry in keys {
                try await db.rows("""
                    UPDATE item SET name_key = \(entry.key) WHERE container_id = \(containerId) AND id = \(entry.id) AND name_key <> ''
                        AND (SELECT name FROM revision WHERE revision.id = item.current_revision AND revision.record IS NULL) = \(entry.name)
                    """)
            }
        }
    }

    /// PostgreSQL keeps earlier row versions until they are vacuumed (and their space reused):
    /// the operator's `VACUUM FULL` rewrites the tables (docs/Encryption.md, "Sealing in place").
    func scrubLog() async throws {}
}

extension PostgresRuleStorage {
    func nameKey(container: Int64, item: String) async throws -> String? {
        try await db.rows("SELECT name_key FROM item WHERE container_id = \(container) AND id = \(item)").first?.get("name_key", as: String.self)
    }

    func rewrite(_ rewrite: RevisionRewrite, container: Int64) async throws -> (cost: Int64, hashes: [String])? {
        guard let cost = try await db.rows("""
            SELECT cost FROM revision WHERE id = \(rewrite.id) AND container_id = \(container) AND record IS NULL FOR UPDATE
            """).first?.get("cost", as: Int64.self) else { return nil }
        let hashes = try await db.rows("SELECT hash FROM revision_chunk WHERE revision_id = \(rewrite.id)").map { try $0.get("hash", as: String.self) }
        let commit = rewrite.commit, update = commit.update
        try await db.rows("""
            UPDATE revision SET name = \(update.name), type = NULL, modification_date = \(update.modificationDate), size = \(commit.size),
                record = \(update.record), digest = \(commit.digest), cost = \(rewrite.cost), manifest = \(commit.manifest), sealed_in_place = TRUE
            WHERE id = \(rewrite.id)
            """)
        try await db.rows("DELETE FROM revision_chunk WHERE revision_id = \(rewrite.id)")
        try await db.rows("""
            INSERT INTO revision_chunk (revision_id, account_id, hash) SELECT \(rewrite.id), \(rewrite.account), unnest(\(commit.hashes)::TEXT[])
            """)
        try await db.rows("""
            UPDATE item SET parent_key = \(rewrite.keys.parent), name_key = \(rewrite.keys.name)
            WHERE container_id = \(container) AND id = \(rewrite.item) AND current_revision = \(rewrite.id)
            """)
        try await db.rows("UPDATE public_link SET name = \(update.name) WHERE account_id = \(rewrite.account) AND revision = \(rewrite.id)")
        return (cost, hashes)
    }

    func isNamed(account: Int64, hash: String) async throws -> Bool {
        try await db.rows("""
            SELECT EXISTS (SELECT 1 FROM revision_chunk WHERE account_id = \(account) AND hash = \(hash))
                OR EXISTS (SELECT 1 FROM chunk WHERE account_id = \(account) AND base = \(hash)) AS named
            """).first?.get("named", as: Bool.self) ?? true
    }

    /// PostgreSQL finds a container's chunks from its revisions: nothing is kept apart.
    func forgetContainerChunks(container: Int64, hashes: [String]) async throws {}
}
