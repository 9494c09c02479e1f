import Foundation
import PostgresNIO
import UbiquityProtocol
import UbiquitySync

extension PostgresDatabase {
    /// Runs `body` — the rules (``ServerRules``) — in one transaction (retried on a deadlock or
    /// serialization failure; rolled back when it throws).
    func rules<T: Sendable>(_ body: @escaping @Sendable (PostgresRuleStorage) async throws -> T) async throws -> T {
        try await transaction { [self] db in try await body(PostgresRuleStorage(db: db, database: self)) }
    }
}

/// PostgreSQL's storage primitives for ``ServerRules``, inside one transaction. What a rule
/// decides on is locked, always in the same order: the account (``account(_:)``, exclusively:
/// its counters), then the container (``container(account:identifier:create:)``: one sequence
/// at a time).
struct PostgresRuleStorage: RuleStorage, Sendable {
    let db: PostgresConnection
    let database: PostgresDatabase

    // MARK: Accounts

    func account(_ account: Int64) async throws -> AccountFigures? {
        try await db.rows("""
            SELECT quota_bytes, used_bytes, key_value_bytes, metadata_bytes, pending_bytes, item_count FROM account WHERE id = \(account) FOR UPDATE
            """).first.map {
            AccountFigures(quota: try $0.get("quota_bytes"), chunkBytes: try $0.get("used_bytes"), keyValueBytes: try $0.get("key_value_bytes"),
                           metadataBytes: try $0.get("metadata_bytes"), pendingBytes: try $0.get("pending_bytes"), items: try $0.get("item_count"))
        }
    }

    func adjust(_ account: Int64, by change: AccountChange) async throws {
        try await db.rows("""
            UPDATE account SET key_value_bytes = key_value_bytes + \(change.keyValueBytes), metadata_bytes = metadata_bytes + \(change.metadataBytes),
                pending_bytes = pending_bytes + \(change.pendingBytes), item_count = item_count + \(change.items) WHERE id = \(account)
            """)
    }

    func accountId(named name: String) async throws -> Int64? {
        try await db.rows("SELECT id FROM account WHERE name = \(name)").first?.get("id")
    }

    // MARK: Containers

    func container(account: Int64, identifier: String, create: Bool) async throws -> Int64? {
        create ? try await PostgresDatabase.lockContainer(db, accountId: account, identifier: identifier)
            : try await PostgresDatabase.containerId(db, accountId: account, identifier: identifier, lock: true)
    }

    func containerIdentifier(_ container: Int64) async throws -> String? {
        try await db.rows("SELECT identifier FROM container WHERE id = \(container)").first?.get("identifier")
    }

    func nextSequence(of container: Int64) async throws -> Int64 {
        try await PostgresDatabase.bump(db, containerId: container)
    }

    func announce(account: Int64, container identifier: String, sequence: Int64, keyValue: Bool, device: String?) async throws {
        try await database.announce(db, account: account, container: identifier, sequence: sequence, keyValue: keyValue, device: device)
    }

    // MARK: Commits

    /// A revision's row as JSON (``RevisionRow``), from `r`; with its manifest (base64) when asked.
    private static func rowJSON(manifests: Bool) -> String {
        """
        json_build_object('id', r.id, 'name', r.name, 'parent', r.parent, 'kind', r.kind, 'size', r.size, 'modificationDate', r.modification_date,
            'type', r.type, 'deleted', r.deleted, 'complete', r.complete, 'deviceId', r.device_id, 'deviceName', r.device_name, 'digest', r.digest,
            'baseRevision', r.base_revision, 'record', translate(encode(r.record, 'base64'), E'\\n', ''), 'editor', r.editor,
            'manifest', \(manifests ? "translate(encode(r.manifest, 'base64'), E'\\n', '')" : "NULL"))
        """
    }

    /// One statement: the account and the container locked, and every fact read as JSON.
    func commitFacts(_ question: CommitQuestion) async throws -> CommitFacts {
        let (a, item, keys) = (question.account, question.item, question.nameKeys)
        let row = Self.rowJSON(manifests: question.manifests)
        let statement: PostgresQuery = """
            WITH acc AS (SELECT * FROM account WHERE id = \(a) FOR UPDATE),
                con AS (SELECT id FROM container WHERE account_id = \(a) AND identifier = \(question.container) FOR UPDATE)
            SELECT
                (SELECT json_build_object('quota', quota_bytes, 'chunkBytes', used_bytes, 'keyValueBytes', key_value_bytes, 'metadataBytes', metadata_bytes,
                    'pendingBytes', pending_bytes, 'items', item_count)::TEXT FROM acc) AS account,
                (SELECT id FROM con) AS container,
                (SELECT json_build_object('id', r.id, 'state', r.state)::TEXT FROM revision r JOIN con ON r.container_id = con.id
                    WHERE r.item_id = \(item) AND r.change_id = \(question.change)
                    AND (r.device_id = \(question.device) OR EXISTS (SELECT 1 FROM device d WHERE d.id = \(ChangeIdentity.madeOn(question.change ?? "")) AND d.account_id = \(a)))) AS earlier,
                (SELECT r.complete AND NOT r.sealed_in_place FROM revision r JOIN con ON r.container_id = con.id WHERE r.id = \(question.base) AND r.item_id = \(item)) AS base_complete,
                (SELECT json_object_agg(hash, CASE WHEN base IS NULL THEN size ELSE \(StoredChunk.patchSize) END)::TEXT FROM chunk
                    WHERE account_id = \(a) AND hash = ANY(\(question.hashes)::TEXT[])) AS stored,
                (SELECT (\(unescaped: row))::TEXT FROM item i JOIN con ON i.container_id = con.id JOIN revision r ON r.id = i.current_revision
                    WHERE i.id = \(item)) AS current,
                (SELECT json_agg(\(unescaped: row) ORDER BY r.modification_date, r.id)::TEXT FROM revision r JOIN con ON r.container_id = con.id
                    WHERE r.item_id = \(item) AND r.state = 'conflict') AS conflicts,
                (SELECT json_agg(json_build_array(i.id, r.name))::TEXT FROM item i JOIN con ON i.container_id = con.id JOIN revision r ON r.id = i.current_revision
                    WHERE i.parent_key = \(question.parent ?? "") AND i.name_key = ANY(\(keys)::TEXT[])) AS siblings
            """
        let rows = question.manifests ? try await db.rows(prepared: Prepared.CommitFactsWithManifests(query: statement))
            : try await db.rows(prepared: Prepared.CommitFacts(query: statement))
        guard let answer = rows.first else { return CommitFacts() }
        let decoder = JSONDecoder()
        func decoded<T: Decodable>(_ column: String, as type: T.Type) throws -> T? {
            try answer.get(column, as: String?.self).map { try decoder.decode(T.self, from: Data($0.utf8)) }
        }
        struct Earlier: Decodable { var id: String, state: String }
        var facts = CommitFacts(figures: try decoded("account", as: AccountFigures.self), container: try answer.get("container", as: Int64?.self))
        facts.earlier = try decoded("earlier", as: Earlier.self).map { ($0.id, $0.state) }
        facts.baseComplete = try answer.get("base_complete", as: Bool?.self) ?? false
        facts.stored = try decoded("stored", as: [String: Int64].self) ?? [:]
        facts.current = try decoded("current", as: RevisionRow.self)
        facts.conflicts = try decoded("conflicts", as: [RevisionRow].self) ?? []
        facts.siblings = (try decoded("siblings", as: [[String]].self) ?? []).compactMap { $0.count == 2 ? ($0[0], $0[1]) : nil }
        return facts
    }

    /// One statement: every write as a common table expression, the announcement with them.
    func record(_ record: CommitRecord) async throws -> Int64 {
        let revision = record.revision, commit = revision.commit, update = commit.update
        let (a, c, id, change) = (revision.account, revision.container, revision.id, record.change)
        let keys = record.currentKeys ?? ("", "")
        let announce = record.announce
        guard let answer = try await db.rows(prepared: Prepared.CommitRecord(query: """
            WITH rev AS (
                    INSERT INTO revision (id, container_id, item_id, base_revision, device_id, device_name, name, parent, kind, size,
                        modification_date, type, manifest, deleted, complete, state, created, change_id, digest, cost, record, editor)
                    VALUES (\(id), \(c), \(revision.item), \(update.baseRevision), \(revision.device.deviceId), \(revision.device.deviceName),
                        \(revision.name), \(update.parent), \(update.kind.rawValue), \(commit.size), \(update.modificationDate), \(update.type), \(commit.manifest),
                        \(commit.deleted), TRUE, \(revision.state), \(revision.created.timeIntervalSince1970), \(update.changeId),
                        \(commit.digest), \(revision.cost), \(update.record), \(revision.device.editor))),
                refs AS (INSERT INTO revision_chunk (revision_id, account_id, hash) SELECT \(id), \(a), unnest(\(commit.hashes)::TEXT[])),
                demote AS (UPDATE revision SET state = \(record.demoted?.state) WHERE id = \(record.demoted?.id)),
                seq AS (UPDATE container SET sequence = sequence + 1 WHERE id = \(c) RETURNING sequence),
                cur AS (INSERT INTO item (container_id, id, current_revision, sequence, parent_key, name_key)
                    SELECT \(c), \(revision.item), \(id), seq.sequence, \(keys.parent), \(keys.name) FROM seq WHERE \(record.currentKeys != nil)
                    ON CONFLICT (container_id, id) DO UPDATE SET current_revision = excluded.current_revision, sequence = excluded.sequence,
                        parent_key = excluded.parent_key, name_key = excluded.name_key),
                touch AS (UPDATE item SET sequence = seq.sequence FROM seq
                    WHERE NOT \(record.currentKeys != nil) AND item.container_id = \(c) AND item.id = \(revision.item)),
                acc AS (UPDATE account SET key_value_bytes = key_value_bytes + \(change.keyValueBytes), metadata_bytes = metadata_bytes + \(change.metadataBytes),
                    pending_bytes = pending_bytes + \(change.pendingBytes), item_count = item_count + \(change.items) WHERE id = \(a))
            SELECT seq.sequence,
                (SELECT count(*) FROM (SELECT pg_notify(\(database.channel), json_build_object('instance', \(database.instance)::TEXT, 'account', \(a)::BIGINT,
                    'container', \(announce?.container ?? "")::TEXT, 'sequence', seq.sequence, 'keyValue', FALSE, 'device', \(announce?.device)::TEXT)::TEXT)
                    WHERE \(announce != nil)) AS notices) AS announced
            FROM seq
            """)).first else { throw SyncError(.internalServerError, "internal", "the container vanished during a commit") }
        return try answer.get("sequence", as: Int64.self)
    }

    // MARK: Items and revisions

    func chunkHashes(of revision: String) async throws -> [String] {
        try await db.rows("SELECT hash FROM revision_chunk WHERE revision_id = \(revision)").map { try $0.get("hash", as: String.self) }
    }

    func currentRevision(container: Int64, item: String) async throws -> CurrentRevision? {
        try await db.rows("""
            SELECT revision.id, revision.modification_date, revision.device_id, revision.deleted
            FROM item JOIN revision ON revision.id = item.current_revision WHERE item.container_id = \(container) AND item.id = \(item)
            """).first.map {
            CurrentRevision(id: try $0.get("id"), date: try $0.get("modification_date"), device: try $0.get("device_id"), deleted: try $0.get("deleted"))
        }
    }

    func siblings(container: Int64, parent: String?, keys: [String]?) async throws -> [(id: String, name: String)] {
        let rows: [PostgresRandomAccessRow]
        if let keys {
            rows = try await db.rows("""
                SELECT item.id, revision.name FROM item JOIN revision ON revision.id = item.current_revision
                WHERE item.container_id = \(container) AND item.parent_key = \(parent ?? "") AND item.name_key = ANY(\(keys)::TEXT[])
                """)
        } else {
            rows = try await db.rows("""
                SELECT item.id, revision.name FROM item JOIN revision ON revision.id = item.current_revision
                WHERE item.container_id = \(container) AND item.parent_key = \(parent ?? "") AND item.name_key != ''
                """)
        }
        return try rows.map { (id: try $0.get("id", as: String.self), name: try $0.get("name", as: String.self)) }
    }

    func revisions(container: Int64, item: String, state: String) async throws -> Set<String> {
        Set(try await db.rows("SELECT id FROM revision WHERE container_id = \(container) AND item_id = \(item) AND state = \(state)")
            .map { try $0.get("id", as: String.self) })
    }

    func copy(_ source: String, as copy: CopiedRevision) async throws -> Int64 {
        try await db.rows("""
            INSERT INTO revision (id, container_id, item_id, base_revision, device_id, device_name, name, parent, kind, size,
                modification_date, type, manifest, deleted, complete, state, created, digest, cost, record)
            SELECT \(copy.id), container_id, item_id, \(copy.base), 'server', 'server', COALESCE(\(copy.name), name), parent, kind, size,
                modification_date, type, manifest, deleted, complete, 'current', \(copy.created.timeIntervalSince1970), digest, cost, record
            FROM revision WHERE id = \(source)
            """)
        try await db.rows("INSERT INTO revision_chunk (revision_id, account_id, hash) SELECT \(copy.id), account_id, hash FROM revision_chunk WHERE revision_id = \(source)")
        return try await db.rows("SELECT cost FROM revision WHERE id = \(copy.id)").first?.get("cost", as: Int64.self) ?? 0
    }

    func setState(_ state: String, of revisions: [String]) async throws {
        try await db.rows("UPDATE revision SET state = \(state) WHERE id = ANY(\(revisions)::TEXT[])")
    }

    func setCurrent(container: Int64, item: String, revision: String, sequence: Int64, keys: (parent: String, name: String)) async throws {
        try await db.rows("""
            INSERT INTO item (container_id, id, current_revision, sequence, parent_key, name_key)
            VALUES (\(container), \(item), \(revision), \(sequence), \(keys.parent), \(keys.name))
            ON CONFLICT (container_id, id) DO UPDATE SET current_revision = excluded.current_revision, sequence = excluded.sequence,
                parent_key = excluded.parent_key, name_key = excluded.name_key
            """)
    }

    func setSequence(container: Int64, item: String, sequence: Int64) async throws {
        try await db.rows("UPDATE item SET sequence = \(sequence) WHERE container_id = \(container) AND id = \(item)")
    }

    func naming(of revision: String) async throws -> (name: String, parent: String?, deleted: Bool)? {
        try await db.rows("SELECT name, parent, deleted FROM revision WHERE id = \(revision)").first
            .map { (try $0.get("name"), try $0.get("parent", as: String?.self), try $0.get("deleted")) }
    }

    func itemState(container: Int64, item: String, brief: Bool) async throws -> ItemState? {
        try await PostgresDatabase.itemState(db, containerId: container, id: item, brief: brief)
    }

    func restorable(account: Int64, revision: String) async throws -> (container: Int64, identifier: String, item: String)? {
        try await db.rows("""
            SELECT revision.container_id, revision.item_id, container.identifier FROM revision JOIN container ON container.id = revision.container_id
            WHERE container.account_id = \(account) AND revision.id = \(revision) AND revision.state IN ('replaced', 'resolved', 'superseded')
                AND NOT revision.deleted
            """).first.map { (try $0.get("container_id"), try $0.get("identifier"), try $0.get("item_id")) }
    }

    // MARK: Chunks

    /// The sizes of the chunks among `hashes` the account holds, 5,000 a statement.
    func storedSizes(account: Int64, hashes: [String]) async throws -> [String: Int64] {
        var sizes: [String: Int64] = [:]
        for start in stride(from: 0, to: hashes.count, by: 5_000) {
            let batch = Array(hashes[start..<min(start + 5_000, hashes.count)])
            for row in try await db.rows("SELECT hash, CASE WHEN base IS NULL THEN size ELSE \(StoredChunk.patchSize) END AS size FROM chunk WHERE account_id = \(account) AND hash = ANY(\(batch)::TEXT[])") {
                sizes[try row.get("hash")] = try row.get("size")
            }
        }
        return sizes
    }

    func addPending(account: Int64, chunks: [String: Int64]) async throws {
        let ordered = chunks.sorted { $0.key < $1.key }
        try await db.rows("""
            INSERT INTO pending_chunk (account_id, hash, size)
            SELECT \(account), hash, size FROM UNNEST(\(ordered.map(\.key))::TEXT[], \(ordered.map(\.value))::BIGINT[]) AS pending(hash, size)
            ON CONFLICT DO NOTHING
            """)
    }

    func removePending(account: Int64, hashes: [String]) async throws -> [String: Int64] {
        var removed: [String: Int64] = [:]
        for row in try await db.rows("DELETE FROM pending_chunk WHERE account_id = \(account) AND hash = ANY(\(hashes)::TEXT[]) RETURNING hash, size") {
            removed[try row.get("hash")] = try row.get("size")
        }
        return removed
    }

    func addChunks(account: Int64, chunks: [String: Int64], bases: [String: String], now: Date) async throws {
        let ordered = chunks.sorted { $0.key < $1.key }
        try await db.rows("""
            INSERT INTO chunk (account_id, hash, size, created, base)
            SELECT \(account), hash, size, \(now.timeIntervalSince1970), NULLIF(base, '')
            FROM UNNEST(\(ordered.map(\.key))::TEXT[], \(ordered.map(\.value))::BIGINT[], \(ordered.map { bases[$0.key] ?? "" })::TEXT[]) AS fresh(hash, size, base)
            ON CONFLICT DO NOTHING
            """)
    }

    func removeChunk(account: Int64, hash: String) async throws -> Int64? {
        try await db.rows("DELETE FROM chunk WHERE account_id = \(account) AND hash = \(hash) RETURNING size").first?.get("size")
    }

    func revisionsWaiting(account: Int64, for hashes: [String]) async throws -> [RevisionPlace] {
        try await db.rows("""
            SELECT DISTINCT revision.id, revision.container_id, revision.item_id, revision.state FROM revision_chunk
            JOIN revision ON revision.id = revision_chunk.revision_id
            WHERE revision_chunk.account_id = \(account) AND revision_chunk.hash = ANY(\(hashes)::TEXT[]) AND NOT revision.complete
            """).map { RevisionPlace(revision: try $0.get("id"), container: try $0.get("container_id"), item: try $0.get("item_id"), state: try $0.get("state")) }
    }

    func isWaiting(_ revision: String) async throws -> Bool {
        try await !db.rows("""
            SELECT 1 AS missing FROM revision_chunk LEFT JOIN chunk ON chunk.account_id = revision_chunk.account_id AND chunk.hash = revision_chunk.hash
            WHERE revision_chunk.revision_id = \(revision) AND chunk.hash IS NULL LIMIT 1
            """).isEmpty
    }

    func setComplete(_ revision: String, _ complete: Bool) async throws {
        try await db.rows("UPDATE revision SET complete = \(complete) WHERE id = \(revision)")
    }

    func revisionsNaming(account: Int64, hash: String) async throws -> [RevisionPlace] {
        try await db.rows("""
            SELECT revision.id, revision.container_id, revision.item_id, revision.state FROM revision_chunk
            JOIN revision ON revision.id = revision_chunk.revision_id
            WHERE revision_chunk.account_id = \(account) AND revision_chunk.hash = \(hash)
            """).map { RevisionPlace(revision: try $0.get("id"), container: try $0.get("container_id"), item: try $0.get("item_id"), state: try $0.get("state")) }
    }

    // MARK: Key-value stores

    func keyValueStore(account: Int64, identifier: String) async throws -> (id: Int64, created: Bool, stores: Int) {
        if let id = try await db.rows("SELECT id FROM kv_store WHERE account_id = \(account) AND identifier = \(identifier)").first?.get("id", as: Int64.self) {
            return (id, false, 0)
        }
        let stores = try await db.rows("SELECT COUNT(*) AS stores FROM kv_store WHERE account_id = \(account)").first?.get("stores", as: Int64.self) ?? 0
        guard let id = try await db.rows("INSERT INTO kv_store (account_id, identifier) VALUES (\(account), \(identifier)) RETURNING id").first?.get("id", as: Int64.self) else {
            throw SyncError(.internalServerError, "internal", "the key-value store could not be created")
        }
        return (id, true, Int(stores))
    }

    func nextKeyValueSequence(of store: Int64) async throws -> Int64 {
        try await db.rows("UPDATE kv_store SET sequence = sequence + 1 WHERE id = \(store) RETURNING sequence").first?.get("sequence") ?? 0
    }

    func keyValueEntry(store: Int64, key: String) async throws -> (timestamp: Double, device: String, size: Int64)? {
        try await db.rows("SELECT timestamp, device_id, size FROM kv WHERE store_id = \(store) AND key = \(key)").first
            .map { (try $0.get("timestamp"), try $0.get("device_id"), try $0.get("size")) }
    }

    func setKeyValue(store: Int64, key: String, value: Data?, sealed: Data?, size: Int64, timestamp: Double, device: DeviceAuth, sequence: Int64) async throws {
        try await db.rows("""
            INSERT INTO kv (store_id, key, value, sealed, size, timestamp, device_id, device_name, sequence)
            VALUES (\(store), \(key), \(value), \(sealed), \(size), \(timestamp), \(device.deviceId), \(device.deviceName), \(sequence))
            ON CONFLICT (store_id, key) DO UPDATE SET value = excluded.value, sealed = excluded.sealed, size = excluded.size, timestamp = excluded.timestamp,
                device_id = excluded.device_id, device_name = excluded.device_name, sequence = excluded.sequence
            """)
    }

    func purgePlaintextRemovals(store: Int64) async throws {
        try await db.rows("DELETE FROM kv WHERE store_id = \(store) AND value IS NULL AND sealed IS NULL")
    }

    func keyValueTotals(store: Int64) async throws -> (keys: Int, bytes: Int64) {
        let totals = try await db.rows("SELECT COUNT(value) AS keys, COALESCE(SUM(size), 0)::BIGINT AS bytes FROM kv WHERE store_id = \(store)").first
        return (Int(try totals?.get("keys", as: Int64.self) ?? 0), try totals?.get("bytes", as: Int64.self) ?? 0)
    }

    func keyValueEntries(store: Int64, keys: Set<String>) async throws -> [KeyValueEntry] {
        try await db.rows("""
            SELECT key, value, sealed, timestamp, device_name, sequence FROM kv WHERE store_id = \(store) AND key = ANY(\(keys.sorted())::TEXT[]) ORDER BY sequence, key
            """).map(PostgresDatabase.keyValueEntry)
    }
}
