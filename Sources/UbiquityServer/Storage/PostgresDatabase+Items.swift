import Foundation
import UbiquityProtocol
import UbiquitySync
import Logging
import PostgresNIO

/// Accounts, devices, items, key-value stores and chunks on PostgreSQL (see ``PostgresDatabase``).
extension PostgresDatabase {
    // MARK: Accounts and devices

    func createAccount(name: String, passwordHash: String, quotaBytes: Int64) async throws -> Account {
        let identity = SQLiteDatabase.randomToken()
        let now = Date().timeIntervalSince1970
        return try await transaction { db in
            guard let row = try await db.rows("""
                INSERT INTO account (name, password_hash, identity_token, quota_bytes, created) VALUES (\(name), \(passwordHash), \(identity), \(quotaBytes), \(now))
                ON CONFLICT (name) DO NOTHING RETURNING id
                """).first else {
                throw SyncError(.conflict, "accountExists", "an account named \(name) exists")
            }
            return Account(id: try row.get("id"), name: name, identityToken: identity, quotaBytes: quotaBytes)
        }
    }

    func accounts() async throws -> [Account] {
        try await read { db in
            try await db.rows("SELECT id, name, identity_token, quota_bytes FROM account ORDER BY name").map {
                Account(id: try $0.get("id"), name: try $0.get("name"), identityToken: try $0.get("identity_token"), quotaBytes: try $0.get("quota_bytes"))
            }
        }
    }

    func deleteAccount(named name: String) async throws -> Bool {
        try await transaction { db in
            // Waits for the account's commits and uploads in flight, then takes everything with it.
            try await !db.rows("DELETE FROM account WHERE name = \(name) RETURNING id").isEmpty
        }
    }

    func credentials(of name: String) async throws -> (id: Int64, passwordHash: String, identityToken: String)? {
        try await read { db in
            try await db.rows("SELECT id, password_hash, identity_token FROM account WHERE name = \(name)").first.map {
                (try $0.get("id"), try $0.get("password_hash"), try $0.get("identity_token"))
            }
        }
    }

    func identityToken(ofAccount id: Int64) async throws -> String? {
        try await read { db in try await db.rows("SELECT identity_token FROM account WHERE id = \(id)").first?.get("identity_token") }
    }

    func usage(ofAccount id: Int64) async throws -> (used: Int64, quota: Int64) {
        try await read { db in
            let row = try await db.rows("""
                SELECT ((SELECT COALESCE(SUM(size), 0) FROM chunk WHERE account_id = \(id))
                        + (SELECT COALESCE(SUM(kv.size), 0) FROM kv JOIN kv_store ON kv_store.id = kv.store_id WHERE kv_store.account_id = \(id)))::BIGINT AS used,
                       (SELECT quota_bytes FROM account WHERE id = \(id)) AS quota
                """).first
            return (try row?.get("used") ?? 0, try row?.get("quota", as: Int64?.self) ?? 0)
        }
    }

    func addDevice(accountId: Int64, name: String, tokenHash: String, containers: [String]?) async throws -> String {
        let id = UUID().uuidString.lowercased()
        let list = try containers.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) }
        let now = Date().timeIntervalSince1970
        try await transaction { db in
            try await db.rows("""
                INSERT INTO device (id, account_id, name, token_hash, containers, created) VALUES (\(id), \(accountId), \(name), \(tokenHash), \(list), \(now))
                """)
        }
        return id
    }

    func device(tokenHash: String) async throws -> DeviceAuth? {
        try await read { db in
            guard let row = try await db.rows("SELECT id, name, account_id, containers FROM device WHERE token_hash = \(tokenHash) AND NOT revoked").first else { return nil }
            let list: String? = try row.get("containers")
            return DeviceAuth(
                deviceId: try row.get("id"), deviceName: try row.get("name"), accountId: try row.get("account_id"),
                containers: try list.map { try JSONDecoder().decode([String].self, from: Data($0.utf8)) })
        }
    }

    func devices(ofAccount name: String) async throws -> [DeviceInfo] {
        try await read { db in
            try await db.rows("""
                SELECT device.id, device.name, device.revoked FROM device JOIN account ON account.id = device.account_id
                WHERE account.name = \(name) ORDER BY device.created, device.id
                """).map { DeviceInfo(id: try $0.get("id"), name: try $0.get("name"), revoked: try $0.get("revoked")) }
        }
    }

    func activeDevices(among ids: Set<String>) async throws -> Set<String> {
        let list = Array(ids)
        return try await read { db in
            Set(try await db.rows("SELECT id FROM device WHERE id = ANY(\(list)) AND NOT revoked").map { try $0.get("id", as: String.self) })
        }
    }

    func revokeDevice(id: String) async throws -> Bool {
        try await transaction { db in
            try await !db.rows("UPDATE device SET revoked = TRUE WHERE id = \(id) AND NOT revoked RETURNING id").isEmpty
        }
    }

    // MARK: Items

    func changes(accountId: Int64, container: String, since: Int64, limit: Int, brief: Bool) async throws -> ChangesResponse {
        // One snapshot for the sequence and the items, so the cursor never skips a change.
        try await transaction { db in
            try await db.rows("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            guard let row = try await db.rows("SELECT id, sequence FROM container WHERE account_id = \(accountId) AND identifier = \(container)").first else {
                return ChangesResponse(sequence: 0, items: [], more: false)
            }
            let containerId: Int64 = try row.get("id")
            let ids = try await db.rows("SELECT id FROM item WHERE container_id = \(containerId) AND sequence > \(since) ORDER BY sequence LIMIT \(Int64(limit + 1))")
                .map { try $0.get("id", as: String.self) }
            var items: [ItemState] = []
            for id in ids.prefix(limit) {
                if let item = try await Self.itemState(db, containerId: containerId, id: id, brief: brief) { items.append(item) }
            }
            return ChangesResponse(sequence: try row.get("sequence"), items: items, more: ids.count > limit)
        }
    }

    func item(accountId: Int64, container: String, id: String, brief: Bool) async throws -> ItemState? {
        try await transaction { db in
            try await db.rows("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            guard let containerId = try await Self.containerId(db, accountId: accountId, identifier: container) else { return nil }
            return try await Self.itemState(db, containerId: containerId, id: id, brief: brief)
        }
    }

    func items(accountId: Int64, container: String, ids: [String]) async throws -> [ItemState] {
        try await transaction { db in
            try await db.rows("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            guard let containerId = try await Self.containerId(db, accountId: accountId, identifier: container) else { return [] }
            var found: [ItemState] = []
            for id in ids {
                if let item = try await Self.itemState(db, containerId: containerId, id: id, brief: false) { found.append(item) }
            }
            return found
        }
    }

    func chunkLists(accountId: Int64, container: String, revisions: [String], notMadeBy device: String) async throws -> [String: [ChunkReference]] {
        try await read { db in
            guard let containerId = try await Self.containerId(db, accountId: accountId, identifier: container) else { return [:] }
            var lists: [String: [ChunkReference]] = [:]
            for row in try await db.rows("""
                SELECT id, manifest FROM revision
                WHERE container_id = \(containerId) AND kind = 'file' AND device_id <> \(device) AND id = ANY(\(revisions)::TEXT[])
                """) {
                lists[try row.get("id")] = try Self.manifest(row, of: try row.get("id")).chunks ?? []
            }
            return lists
        }
    }

    func revisionManifest(accountId: Int64, container: String, item: String, revision: String) async throws -> (kind: ItemKind, manifest: Manifest)? {
        try await transaction { db in
            try await db.rows("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            guard let containerId = try await Self.containerId(db, accountId: accountId, identifier: container),
                  let row = try await db.rows("""
                    SELECT kind, manifest FROM revision WHERE container_id = \(containerId) AND item_id = \(item) AND id = \(revision)
                    """).first,
                  let kind = ItemKind(rawValue: try row.get("kind", as: String.self)) else { return nil }
            return (kind, try Self.manifest(row, of: revision))
        }
    }

    func commit(accountId: Int64, container: String, commits: [ItemCommit], device: DeviceAuth, now: Date, brief: Bool) async throws -> [CommitOutcome] {
        let prepared = try commits.map { try PreparedCommit($0) }
        return try await transaction { [self] db in
            guard try await !db.rows("SELECT 1 AS one FROM account WHERE id = \(accountId) FOR SHARE").isEmpty else { throw SyncError.unauthorized }
            let containerId = try await Self.lockContainer(db, accountId: accountId, identifier: container)
            var outcomes: [CommitOutcome] = []
            for commit in prepared {
                outcomes.append(try await Self.commit(db, commit, accountId: accountId, containerId: containerId, device: device, now: now, brief: brief))
            }
            if let last = outcomes.filter({ !$0.repeated }).map(\.item.sequence).max() {
                try await announce(db, account: accountId, container: container, sequence: last, device: device.deviceId)
            }
            return outcomes
        }
    }

    /// One commit inside a batch's transaction (what commits before it in the batch wrote is
    /// what its lookups see).
    private static func commit(_ db: PostgresConnection, _ commit: PreparedCommit, accountId: Int64, containerId: Int64, device: DeviceAuth, now: Date,
                               brief: Bool) async throws -> CommitOutcome {
        let itemId = commit.item, update = commit.update, hashes = commit.hashes
        // The same change again (its answer was lost): the first answer, nothing committed twice.
        if let change = update.changeId, let earlier = try await db.rows("""
            SELECT id, state FROM revision WHERE container_id = \(containerId) AND item_id = \(itemId) AND device_id = \(device.deviceId) AND change_id = \(change)
            """).first {
            let revision: String = try earlier.get("id")
            let chunks = try await db.rows("SELECT hash FROM revision_chunk WHERE revision_id = \(revision)").map { try $0.get("hash", as: String.self) }
            let present = try await presentChunks(db, accountId: accountId, hashes: chunks)
            guard let item = try await itemState(db, containerId: containerId, id: itemId, brief: brief) else { throw SyncError.notFound }
            return CommitOutcome(revision: revision, isCurrent: try earlier.get("state", as: String.self) == "current", item: item,
                                 missingChunks: chunks.filter { !present.contains($0) }.sorted(), repeated: true)
        }
        // An edit of a large file from a complete revision: only its new chunks are looked up.
        var looked = hashes
        if let stored = ManifestCache.shared.chunks(ofBase: update.baseRevision, forEditOf: hashes.count),
           try await db.rows("""
               SELECT complete FROM revision WHERE id = \(update.baseRevision) AND container_id = \(containerId) AND item_id = \(itemId)
               """).first?.get("complete", as: Bool.self) == true {
            looked = hashes.filter { !stored.contains($0) }
        }
        let present = try await presentChunks(db, accountId: accountId, hashes: looked)
        let missing = looked.filter { !present.contains($0) }

        // Where the new revision goes: current, or kept as a conflict version.
        let current = try await db.rows("""
            SELECT revision.id, revision.modification_date, revision.device_id, revision.deleted
            FROM item JOIN revision ON revision.id = item.current_revision WHERE item.container_id = \(containerId) AND item.id = \(itemId)
            """).first.map { (id: try $0.get("id", as: String.self), date: try $0.get("modification_date", as: Double.self),
                              device: try $0.get("device_id", as: String.self), deleted: try $0.get("deleted", as: Bool.self)) }
        let placement = CommitPlacement(current: current, base: update.baseRevision, deleted: commit.deleted, date: update.modificationDate, device: device.deviceId)
        let state = placement.state
        var name = update.name
        var renameOther: (id: String, name: String)?
        if state == "current" && !commit.deleted {
            (name, renameOther) = try await siblings(db, containerId: containerId, parent: update.parent, settling: name).settle(name: name, id: itemId)
        }
        let revision = RandomIdentifier.make()
        try await db.rows("""
            INSERT INTO revision (id, container_id, item_id, base_revision, device_id, device_name, name, parent, kind, size,
                modification_date, type, manifest, deleted, complete, state, created, change_id, digest)
            VALUES (\(revision), \(containerId), \(itemId), \(update.baseRevision), \(device.deviceId), \(device.deviceName), \(name),
                \(update.parent), \(update.kind.rawValue), \(commit.size), \(update.modificationDate), \(update.type), \(commit.manifest),
                \(commit.deleted), \(missing.isEmpty), \(state), \(now.timeIntervalSince1970), \(update.changeId), \(commit.digest))
            """)
        if !hashes.isEmpty {
            try await db.rows("INSERT INTO revision_chunk (revision_id, account_id, hash) SELECT \(revision), \(accountId), unnest(\(hashes)::TEXT[])")
        }
        if let demoted = placement.demoted {
            try await db.rows("UPDATE revision SET state = \(demoted.state) WHERE id = \(demoted.id)")
        }
        let sequence = try await bump(db, containerId: containerId)
        if state == "current" {
            let keys = NameCollision.indexKeys(name: name, parent: update.parent, deleted: commit.deleted)
            try await db.rows("""
                INSERT INTO item (container_id, id, current_revision, sequence, parent_key, name_key)
                VALUES (\(containerId), \(itemId), \(revision), \(sequence), \(keys.parent), \(keys.name))
                ON CONFLICT (container_id, id) DO UPDATE SET current_revision = excluded.current_revision, sequence = excluded.sequence,
                    parent_key = excluded.parent_key, name_key = excluded.name_key
                """)
        } else {
            try await db.rows("UPDATE item SET sequence = \(sequence) WHERE container_id = \(containerId) AND id = \(itemId)")
        }
        if let renameOther {
            try await serverRename(db, containerId: containerId, itemId: renameOther.id, to: renameOther.name, now: now)
        }
        guard let item = try await itemState(db, containerId: containerId, id: itemId, brief: brief) else {
            throw SyncError(.internalServerError, "internal", "the item vanished during its commit")
        }
        ManifestCache.shared.remember(commit.update.manifest, of: revision) // the base of the next edit's difference
        return CommitOutcome(revision: revision, isCurrent: state == "current", item: item, missingChunks: missing)
    }

    func resolve(accountId: Int64, container: String, itemId: String, request: ResolveRequest) async throws -> ItemState {
        try await transaction { [self] db in
            guard let containerId = try await Self.containerId(db, accountId: accountId, identifier: container, lock: true),
                  let current = try await db.rows("SELECT current_revision FROM item WHERE container_id = \(containerId) AND id = \(itemId)").first?.get("current_revision", as: String.self)
            else { throw SyncError.notFound }
            let conflicts = Set(try await db.rows("SELECT id FROM revision WHERE container_id = \(containerId) AND item_id = \(itemId) AND state = 'conflict'").map { try $0.get("id", as: String.self) })
            guard request.keep == current || conflicts.contains(request.keep) else {
                throw SyncError(.conflict, "notAVersion", "\(request.keep) is neither the current revision nor a conflict version of the item")
            }
            for removed in request.remove where !conflicts.contains(removed) && removed != current {
                throw SyncError(.conflict, "notAVersion", "\(removed) is not a conflict version of the item")
            }
            let sequence = try await Self.bump(db, containerId: containerId)
            if request.keep != current {
                try await db.rows("UPDATE revision SET state = 'conflict' WHERE id = \(current)")
                try await db.rows("UPDATE revision SET state = 'current' WHERE id = \(request.keep)")
            }
            for removed in request.remove where removed != request.keep {
                try await db.rows("UPDATE revision SET state = 'resolved' WHERE id = \(removed)")
            }
            try await db.rows("UPDATE item SET current_revision = \(request.keep), sequence = \(sequence) WHERE container_id = \(containerId) AND id = \(itemId)")
            try await Self.refreshIndexKeys(db, containerId: containerId, itemId: itemId)
            guard let item = try await Self.itemState(db, containerId: containerId, id: itemId) else { throw SyncError.notFound }
            try await announce(db, account: accountId, container: container, sequence: sequence)
            return item
        }
    }

    // MARK: Key-value stores

    func applyKeyValues(accountId: Int64, store: String, changes: [KeyValueChange], device: DeviceAuth, room: Int64) async throws -> KeyValueResponse {
        let encoded = try changes.map { change in (change, try change.value.map { try JSONEncoder().encode($0) }) }
        return try await transaction { [self] db in
            try await db.rows("INSERT INTO kv_store (account_id, identifier) VALUES (\(accountId), \(store)) ON CONFLICT (account_id, identifier) DO NOTHING")
            guard let row = try await db.rows("UPDATE kv_store SET sequence = sequence + 1 WHERE account_id = \(accountId) AND identifier = \(store) RETURNING id, sequence").first else {
                throw SyncError.unauthorized
            }
            let storeId: Int64 = try row.get("id")
            let sequence: Int64 = try row.get("sequence")
            for (change, value) in encoded {
                if let existing = try await db.rows("SELECT timestamp, device_id FROM kv WHERE store_id = \(storeId) AND key = \(change.key)").first {
                    guard ConflictRule.winner((change.timestamp, device.deviceId), over: (try existing.get("timestamp"), try existing.get("device_id"))) else { continue }
                }
                let size = Int64(value.map { change.key.utf8.count + $0.count } ?? 0)
                try await db.rows("""
                    INSERT INTO kv (store_id, key, value, size, timestamp, device_id, device_name, sequence)
                    VALUES (\(storeId), \(change.key), \(value), \(size), \(change.timestamp), \(device.deviceId), \(device.deviceName), \(sequence))
                    ON CONFLICT (store_id, key) DO UPDATE SET value = excluded.value, size = excluded.size, timestamp = excluded.timestamp,
                        device_id = excluded.device_id, device_name = excluded.device_name, sequence = excluded.sequence
                    """)
            }
            // Apple's limits, over the store as it would be: violating them changes nothing.
            let totals = try await db.rows("SELECT COUNT(value) AS keys, COALESCE(SUM(size), 0)::BIGINT AS bytes FROM kv WHERE store_id = \(storeId)").first
            let keys = Int(try totals?.get("keys", as: Int64.self) ?? 0)
            let bytes = Int(try totals?.get("bytes", as: Int64.self) ?? 0)
            try KeyValueLimits.checkStore(keys: keys, bytes: bytes, room: room)
            let named = Set(changes.map(\.key))
            let entries = try await Self.keyValueEntries(db, storeId: storeId, since: 0).filter { named.contains($0.key) }
            try await announce(db, account: accountId, container: store, sequence: sequence, keyValue: true)
            return KeyValueResponse(sequence: sequence, entries: entries)
        }
    }

    func keyValueUsage(accountId: Int64, store: String) async throws -> KeyValueUsage {
        try await read { db in
            let row = try await db.rows("""
                SELECT (SELECT COUNT(*) FROM kv_store WHERE account_id = \(accountId))::BIGINT AS stores,
                    (SELECT COALESCE(SUM(kv.size), 0) FROM kv JOIN kv_store ON kv_store.id = kv.store_id WHERE kv_store.account_id = \(accountId))::BIGINT AS bytes,
                    (SELECT COALESCE(SUM(kv.size), 0) FROM kv JOIN kv_store ON kv_store.id = kv.store_id
                        WHERE kv_store.account_id = \(accountId) AND kv_store.identifier = \(store))::BIGINT AS store_bytes,
                    EXISTS (SELECT 1 FROM kv_store WHERE account_id = \(accountId) AND identifier = \(store)) AS store_exists
                """).first
            return KeyValueUsage(stores: Int(try row?.get("stores", as: Int64.self) ?? 0), bytes: try row?.get("bytes") ?? 0,
                                 storeBytes: try row?.get("store_bytes") ?? 0, storeExists: try row?.get("store_exists") ?? false)
        }
    }

    func keyValueChanges(accountId: Int64, store: String, since: Int64) async throws -> KeyValueResponse {
        try await transaction { db in
            try await db.rows("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            guard let row = try await db.rows("SELECT id, sequence FROM kv_store WHERE account_id = \(accountId) AND identifier = \(store)").first else {
                return KeyValueResponse(sequence: 0, entries: [])
            }
            return KeyValueResponse(sequence: try row.get("sequence"), entries: try await Self.keyValueEntries(db, storeId: try row.get("id"), since: since))
        }
    }

    static func keyValueEntries(_ db: PostgresConnection, storeId: Int64, since: Int64) async throws -> [KeyValueEntry] {
        try await db.rows("SELECT key, value, timestamp, device_name, sequence FROM kv WHERE store_id = \(storeId) AND sequence > \(since) ORDER BY sequence, key").map {
            let value = try $0.get("value", as: ByteBuffer?.self)
            return KeyValueEntry(key: try $0.get("key"), value: try value.map { try JSONDecoder().decode(PropertyListValue.self, from: Data($0.readableBytesView)) },
                                 timestamp: try $0.get("timestamp"), deviceName: try $0.get("device_name"), sequence: try $0.get("sequence"))
        }
    }

    // MARK: Helpers

    /// A new current revision of an item, made by the server: the same contents under another name.
    static func serverRename(_ db: PostgresConnection, containerId: Int64, itemId: String, to name: String, now: Date) async throws {
        guard let current = try await db.rows("SELECT current_revision FROM item WHERE container_id = \(containerId) AND id = \(itemId)").first?.get("current_revision", as: String.self) else { return }
        let revision = RandomIdentifier.make()
        try await db.rows("""
            INSERT INTO revision (id, container_id, item_id, base_revision, device_id, device_name, name, parent, kind, size,
                modification_date, type, manifest, deleted, complete, state, created)
            SELECT \(revision), container_id, item_id, id, 'server', 'server', \(name), parent, kind, size, modification_date, type, manifest,
                deleted, complete, 'current', \(now.timeIntervalSince1970)
            FROM revision WHERE id = \(current)
            """)
        try await db.rows("INSERT INTO revision_chunk (revision_id, account_id, hash) SELECT \(revision), account_id, hash FROM revision_chunk WHERE revision_id = \(current)")
        try await db.rows("UPDATE revision SET state = 'replaced' WHERE id = \(current)")
        let sequence = try await bump(db, containerId: containerId)
        try await db.rows("UPDATE item SET current_revision = \(revision), sequence = \(sequence) WHERE container_id = \(containerId) AND id = \(itemId)")
        try await refreshIndexKeys(db, containerId: containerId, itemId: itemId)
    }

    /// The live items a settlement of `name` in `parent` may clash with, found with the
    /// folder-and-name index; the whole folder when every candidate name is taken.
    static func siblings(_ db: PostgresConnection, containerId: Int64, parent: String?, settling name: String) async throws -> SiblingNames {
        let keys = NameCollision.candidateKeys(for: name)
        let found = try await db.rows("""
            SELECT item.id, revision.name FROM item JOIN revision ON revision.id = item.current_revision
            WHERE item.container_id = \(containerId) AND item.parent_key = \(parent ?? "") AND item.name_key = ANY(\(keys)::TEXT[])
            """).map { (id: try $0.get("id", as: String.self), name: try $0.get("name", as: String.self)) }
        guard found.count >= keys.count else { return SiblingNames(found) }
        return SiblingNames(try await db.rows("""
            SELECT item.id, revision.name FROM item JOIN revision ON revision.id = item.current_revision
            WHERE item.container_id = \(containerId) AND item.parent_key = \(parent ?? "") AND item.name_key != ''
            """).map { (id: try $0.get("id", as: String.self), name: try $0.get("name", as: String.self)) })
    }

    /// Sets the item's folder and name keys from its current revision (after it changed).
    static func refreshIndexKeys(_ db: PostgresConnection, containerId: Int64, itemId: String) async throws {
        guard let row = try await db.rows("""
            SELECT revision.name, revision.parent, revision.deleted FROM item JOIN revision ON revision.id = item.current_revision
            WHERE item.container_id = \(containerId) AND item.id = \(itemId)
            """).first else { return }
        let keys = NameCollision.indexKeys(name: try row.get("name"), parent: try row.get("parent", as: String?.self), deleted: try row.get("deleted"))
        try await db.rows("UPDATE item SET parent_key = \(keys.parent), name_key = \(keys.name) WHERE container_id = \(containerId) AND id = \(itemId)")
    }

    static func containerId(_ db: PostgresConnection, accountId: Int64, identifier: String, lock: Bool = false) async throws -> Int64? {
        let rows = lock
            ? try await db.rows("SELECT id FROM container WHERE account_id = \(accountId) AND identifier = \(identifier) FOR UPDATE")
            : try await db.rows("SELECT id FROM container WHERE account_id = \(accountId) AND identifier = \(identifier)")
        return try rows.first?.get("id")
    }

    /// The container's id, creating it if needed, locked until the transaction ends.
    static func lockContainer(_ db: PostgresConnection, accountId: Int64, identifier: String) async throws -> Int64 {
        if let id = try await containerId(db, accountId: accountId, identifier: identifier, lock: true) { return id }
        try await db.rows("INSERT INTO container (account_id, identifier) VALUES (\(accountId), \(identifier)) ON CONFLICT (account_id, identifier) DO NOTHING")
        guard let id = try await containerId(db, accountId: accountId, identifier: identifier, lock: true) else {
            throw SyncError(.internalServerError, "internal", "the container could not be created")
        }
        return id
    }

    /// The container's next sequence number (one per change).
    static func bump(_ db: PostgresConnection, containerId: Int64) async throws -> Int64 {
        try await db.rows("UPDATE container SET sequence = sequence + 1 WHERE id = \(containerId) RETURNING sequence").first?.get("sequence") ?? 0
    }

    /// The item changed without a new revision (its revision completed, or lost a chunk): the
    /// container's next sequence, now the item's too.
    static func advance(_ db: PostgresConnection, containerId: Int64, itemId: String) async throws -> Int64 {
        let sequence = try await bump(db, containerId: containerId)
        try await db.rows("UPDATE item SET sequence = \(sequence) WHERE container_id = \(containerId) AND id = \(itemId)")
        return sequence
    }

    static func presentChunks(_ db: PostgresConnection, accountId: Int64, hashes: [String]) async throws -> Set<String> {
        guard !hashes.isEmpty else { return [] }
        var present = Set<String>()
        for start in stride(from: 0, to: hashes.count, by: 5_000) {
            let batch = Array(hashes[start..<min(start + 5_000, hashes.count)])
            for row in try await db.rows("SELECT hash FROM chunk WHERE account_id = \(accountId) AND hash = ANY(\(batch)::TEXT[])") {
                present.insert(try row.get("hash"))
            }
        }
        return present
    }

    /// An item's state; `brief`: with content tokens (``ItemState/digest``) instead of manifests.
    static func itemState(_ db: PostgresConnection, containerId: Int64, id: String, brief: Bool = false) async throws -> ItemState? {
        guard let row = try await db.rows("""
            SELECT item.sequence AS item_sequence, revision.* FROM item JOIN revision ON revision.id = item.current_revision
            WHERE item.container_id = \(containerId) AND item.id = \(id)
            """).first else { return nil }
        let kind = ItemKind(rawValue: try row.get("kind")) ?? .file
        let conflicts = try await db.rows("""
            SELECT id, device_name, modification_date, size, complete, manifest, digest FROM revision
            WHERE container_id = \(containerId) AND item_id = \(id) AND state = 'conflict' ORDER BY modification_date, id
            """).map {
            let contents = try Self.contents($0, kind: kind, brief: brief)
            var version = ConflictVersion(revision: try $0.get("id"), deviceName: try $0.get("device_name"), modificationDate: try $0.get("modification_date"),
                                          size: try $0.get("size"), uploaded: try $0.get("complete"), manifest: contents.manifest)
            version.digest = contents.digest
            return version
        }
        let contents = try Self.contents(row, kind: kind, brief: brief)
        var state = ItemState(
            id: id, revision: try row.get("id"), name: try row.get("name"), parent: try row.get("parent"),
            kind: kind, size: try row.get("size"), modificationDate: try row.get("modification_date"),
            type: try row.get("type"), deleted: try row.get("deleted"), uploaded: try row.get("complete"), deviceName: try row.get("device_name"),
            sequence: try row.get("item_sequence"), manifest: contents.manifest, conflicts: conflicts)
        state.digest = contents.digest
        return state
    }

    /// A revision's manifest — or, `brief`, its content token (stored, or worked out from the
    /// manifest for revisions from before tokens were stored) and an empty manifest.
    static func contents(_ row: PostgresRandomAccessRow, kind: ItemKind, brief: Bool) throws -> (manifest: Manifest, digest: String?) {
        if brief, let digest = try row.get("digest", as: String?.self) { return (Manifest(), digest) }
        let manifest = try Self.manifest(row, of: try row.get("id"))
        return brief ? (Manifest(), ContentToken.of(manifest, kind: kind)) : (manifest, nil)
    }

    /// The manifest of `revision` stored in `row` (decoded, or from ``ManifestCache``).
    static func manifest(_ row: PostgresRandomAccessRow, of revision: String) throws -> Manifest {
        try ManifestCache.shared.manifest(of: revision, stored: Data(try row.get("manifest", as: ByteBuffer.self).readableBytesView))
    }
}
