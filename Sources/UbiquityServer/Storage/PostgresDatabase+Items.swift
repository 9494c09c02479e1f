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
            try await db.rows("SELECT id, name, identity_token, quota_bytes, admin FROM account ORDER BY name").map {
                Account(id: try $0.get("id"), name: try $0.get("name"), identityToken: try $0.get("identity_token"), quotaBytes: try $0.get("quota_bytes"),
                        admin: try $0.get("admin"))
            }
        }
    }

    func account(id: Int64) async throws -> Account? {
        try await read { db in
            try await db.rows("SELECT id, name, identity_token, quota_bytes, admin FROM account WHERE id = \(id)").first.map {
                Account(id: try $0.get("id"), name: try $0.get("name"), identityToken: try $0.get("identity_token"), quotaBytes: try $0.get("quota_bytes"),
                        admin: try $0.get("admin"))
            }
        }
    }

    func containers(ofAccount id: Int64) async throws -> [ContainerSummary] {
        try await read { db in
            try await db.rows("""
                SELECT container.identifier, container.sequence, COUNT(revision.id) AS items, COALESCE(SUM(revision.size), 0)::BIGINT AS bytes
                FROM container LEFT JOIN item ON item.container_id = container.id
                LEFT JOIN revision ON revision.id = item.current_revision AND NOT revision.deleted
                WHERE container.account_id = \(id) GROUP BY container.id ORDER BY container.identifier
                """).map {
                ContainerSummary(identifier: try $0.get("identifier"), sequence: try $0.get("sequence"), items: try $0.get("items"), bytes: try $0.get("bytes"))
            }
        }
    }

    func keyValueStores(ofAccount id: Int64) async throws -> [KeyValueStoreSummary] {
        try await read { db in
            try await db.rows("""
                SELECT kv_store.identifier, COUNT(kv.key) AS keys, COALESCE(SUM(kv.size), 0)::BIGINT AS bytes
                FROM kv_store LEFT JOIN kv ON kv.store_id = kv_store.id AND kv.value IS NOT NULL
                WHERE kv_store.account_id = \(id) GROUP BY kv_store.id ORDER BY kv_store.identifier
                """).map { KeyValueStoreSummary(identifier: try $0.get("identifier"), keys: try $0.get("keys"), bytes: try $0.get("bytes")) }
        }
    }

    func addLink(_ link: PublishedLink, accountId: Int64, tokenHash: String, manifest: Data?, manifestBudget: Int64) async throws {
        try await transaction { db in
            if let manifest {
                // (The account held: two links made at once are counted one after the other.)
                _ = try await db.rows("SELECT id FROM account WHERE id = \(accountId) FOR UPDATE")
                _ = try await db.rows("""
                    UPDATE public_link SET manifest = NULL
                    WHERE account_id = \(accountId) AND manifest IS NOT NULL AND (revoked OR expires <= \(link.created))
                    """)
                let held = try await db.rows("SELECT COALESCE(SUM(octet_length(manifest)), 0)::BIGINT AS held FROM public_link WHERE account_id = \(accountId)")
                    .first?.get("held", as: Int64.self) ?? 0
                guard held + Int64(manifest.count) <= manifestBudget else { throw SyncError.tooManyLinks(budget: manifestBudget) }
            }
            _ = try await db.rows("""
                INSERT INTO public_link (id, account_id, container, item, revision, name, token_hash, created, expires, manifest)
                VALUES (\(link.id), \(accountId), \(link.container), \(link.item), \(link.revision), \(link.name), \(tokenHash), \(link.created), \(link.expires),
                        \(manifest.map { ByteBuffer(data: $0) }))
                """)
        }
    }

    func link(tokenHash: String) async throws -> (accountId: Int64, link: PublishedLink)? {
        try await read { db in
            try await db.rows("""
                SELECT id, account_id, container, item, revision, name, created, expires, manifest IS NOT NULL AS sealed
                FROM public_link WHERE token_hash = \(tokenHash) AND NOT revoked
                """).first.map { (try $0.get("account_id", as: Int64.self), try Self.publishedLink($0)) }
        }
    }

    func linkManifest(tokenHash: String) async throws -> Data? {
        try await read { db in
            try await db.rows("SELECT manifest FROM public_link WHERE token_hash = \(tokenHash) AND NOT revoked").first
                .flatMap { try $0.get("manifest", as: ByteBuffer?.self) }.map { Data(buffer: $0) }
        }
    }

    func links(ofAccount id: Int64) async throws -> [PublishedLink] {
        try await read { db in
            try await db.rows("""
                SELECT id, account_id, container, item, revision, name, created, expires, manifest IS NOT NULL AS sealed
                FROM public_link WHERE account_id = \(id) AND NOT revoked ORDER BY created DESC, id
                """).map(Self.publishedLink)
        }
    }

    func revokeLink(id: String, accountId: Int64) async throws -> Bool {
        try await transaction { db in
            try await !db.rows("UPDATE public_link SET revoked = TRUE, manifest = NULL WHERE id = \(id) AND account_id = \(accountId) AND NOT revoked RETURNING id").isEmpty
        }
    }

    static func publishedLink(_ row: PostgresRandomAccessRow) throws -> PublishedLink {
        PublishedLink(id: try row.get("id"), path: nil, container: try row.get("container"), item: try row.get("item"), revision: try row.get("revision"),
                      name: try row.get("name"), created: try row.get("created"), expires: try row.get("expires"),
                      sealed: try row.get("sealed", as: Bool.self) ? true : nil)
    }

    func deleteAccount(named name: String) async throws -> Bool {
        try await transaction { db in
            // Waits for the account's commits and uploads in flight, then takes everything with it.
            try await !db.rows("DELETE FROM account WHERE name = \(name) RETURNING id").isEmpty
        }
    }

    func setQuota(ofAccount name: String, bytes: Int64) async throws -> Bool {
        try await transaction { db in try await !db.rows("UPDATE account SET quota_bytes = \(bytes) WHERE name = \(name) RETURNING id").isEmpty }
    }

    func setAdmin(ofAccount name: String, admin: Bool) async throws -> Bool {
        try await transaction { db in try await !db.rows("UPDATE account SET admin = \(admin) WHERE name = \(name) RETURNING id").isEmpty }
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

    func usage(ofAccount id: Int64) async throws -> AccountFigures {
        try await read { db in
            try await db.rows("""
                SELECT quota_bytes, used_bytes, key_value_bytes, metadata_bytes, pending_bytes, item_count FROM account WHERE id = \(id)
                """).first.map {
                AccountFigures(quota: try $0.get("quota_bytes"), chunkBytes: try $0.get("used_bytes"), keyValueBytes: try $0.get("key_value_bytes"),
                               metadataBytes: try $0.get("metadata_bytes"), pendingBytes: try $0.get("pending_bytes"), items: try $0.get("item_count"))
            } ?? AccountFigures()
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
            guard let row = try await db.rows(prepared: Prepared.Device(query: """
                SELECT device.id, device.name, device.account_id, device.containers, account.generation FROM device JOIN account ON account.id = device.account_id
                WHERE device.token_hash = \(tokenHash) AND NOT device.revoked
                """)).first else { return nil }
            let list: String? = try row.get("containers")
            return DeviceAuth(
                deviceId: try row.get("id"), deviceName: try row.get("name"), accountId: try row.get("account_id"),
                containers: try list.map { try JSONDecoder().decode([String].self, from: Data($0.utf8)) }, generation: try row.get("generation"))
        }
    }

    func deviceSeen(id: String, at date: Date) async throws {
        try await transaction { db in _ = try await db.rows("UPDATE device SET last_seen = \(date.timeIntervalSince1970) WHERE id = \(id)") }
    }

    func devices(ofAccount name: String) async throws -> [DeviceInfo] {
        try await read { db in
            try await db.rows("""
                SELECT device.id, device.name, device.revoked, device.created, device.last_seen FROM device JOIN account ON account.id = device.account_id
                WHERE account.name = \(name) ORDER BY device.created, device.id
                """).map {
                DeviceInfo(id: try $0.get("id"), name: try $0.get("name"), revoked: try $0.get("revoked"), created: try $0.get("created"),
                           lastSeen: try $0.get("last_seen", as: Double?.self))
            }
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

    func folderEntries(accountId: Int64, container: String, parent: String?) async throws -> [FolderEntry] {
        try await read { db in
            guard let containerId = try await Self.containerId(db, accountId: accountId, identifier: container) else { return [] }
            return try await db.rows("""
                SELECT item.id, revision.name, revision.kind, revision.size, revision.modification_date, revision.device_name, revision.complete,
                       (SELECT COUNT(*) FROM revision AS other WHERE other.container_id = item.container_id AND other.item_id = item.id
                                                               AND other.state = 'conflict') AS conflicts, revision.record
                FROM item JOIN revision ON revision.id = item.current_revision
                WHERE item.container_id = \(containerId) AND item.parent_key = \(parent ?? "") AND item.name_key != ''
                """).map {
                FolderEntry(id: try $0.get("id"), name: try $0.get("name"), kind: ItemKind(rawValue: try $0.get("kind", as: String.self)) ?? .file,
                            size: try $0.get("size"), modificationDate: try $0.get("modification_date"), deviceName: try $0.get("device_name"),
                            uploaded: try $0.get("complete"), conflicts: Int(try $0.get("conflicts", as: Int64.self)), record: try Self.record($0))
            }
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
                SELECT id, digest, manifest FROM revision
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
                    SELECT kind, digest, manifest FROM revision WHERE container_id = \(containerId) AND item_id = \(item) AND id = \(revision) AND NOT sealed_in_place
                    """).first,
                  let kind = ItemKind(rawValue: try row.get("kind", as: String.self)) else { return nil }
            return (kind, try Self.manifest(row, of: revision))
        }
    }

    func itemRevisions(accountId: Int64, container: String, item: String, since: Double, limit: Int) async throws -> [ItemRevision]? {
        try await transaction { db in
            try await db.rows("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            guard let containerId = try await Self.containerId(db, accountId: accountId, identifier: container),
                  try await db.rows("SELECT 1 FROM item WHERE container_id = \(containerId) AND id = \(item)").first != nil else { return nil }
            return try await db.rows("""
                SELECT id, name, kind, device_name, size, modification_date, created, complete, record, parent, editor FROM revision
                WHERE container_id = \(containerId) AND item_id = \(item) AND state IN ('replaced', 'resolved', 'superseded') AND NOT deleted
                    AND kind <> 'directory' AND created >= \(since)
                ORDER BY created DESC LIMIT \(limit)
                """).compactMap { row in
                guard let kind = ItemKind(rawValue: try row.get("kind", as: String.self)) else { return nil }
                var revision = ItemRevision(revision: try row.get("id"), name: try row.get("name"), kind: kind, deviceName: try row.get("device_name"),
                                            size: try row.get("size"), modificationDate: try row.get("modification_date"), created: try row.get("created"),
                                            uploaded: try row.get("complete"))
                revision.record = try Self.record(row)
                revision.parent = try row.get("parent")
                revision.editor = try row.get("editor")
                return revision
            }
        }
    }

    func revisionContents(accountId: Int64, container: String, item: String, revision: String) async throws -> RevisionContentsResponse? {
        try await transaction { db in
            try await db.rows("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            guard let containerId = try await Self.containerId(db, accountId: accountId, identifier: container),
                  let row = try await db.rows("""
                    SELECT name, device_name, size, modification_date, kind, deleted, complete, digest, manifest, record, parent, editor FROM revision WHERE container_id = \(containerId) AND item_id = \(item) AND id = \(revision)
                    """).first,
                  let kind = ItemKind(rawValue: try row.get("kind", as: String.self)), kind != .directory, !(try row.get("deleted", as: Bool.self)) else { return nil }
            var contents = RevisionContentsResponse(revision: revision, name: try row.get("name"), deviceName: try row.get("device_name"), size: try row.get("size"),
                                                    modificationDate: try row.get("modification_date"), kind: kind, manifest: try Self.manifest(row, of: revision),
                                                    uploaded: try row.get("complete"))
            contents.record = try Self.record(row)
            contents.parent = try row.get("parent")
            contents.editor = try row.get("editor")
            return contents
        }
    }

    func commit(accountId: Int64, container: String, commits: [ItemCommit], device: DeviceAuth, now: Date, brief: Bool,
                limits: AccountLimits, nameTags: [String: [String]]) async throws -> [Result<CommitOutcome, SyncError>] {
        let prepared = try commits.map { commit in
            var prepared = try PreparedCommit(commit)
            prepared.nameTags = nameTags[commit.item]
            return prepared
        }
        return try await rules { storage in
            try await ServerRules.commit(prepared, account: accountId, container: container, device: device, now: now, brief: brief, limits: limits, in: storage)
        }
    }

    func resolve(accountId: Int64, container: String, itemId: String, request: ResolveRequest) async throws -> ItemState {
        try await rules { storage in try await ServerRules.resolve(account: accountId, container: container, item: itemId, request: request, in: storage) }
    }

    // MARK: Key-value stores

    func applyKeyValues(accountId: Int64, store: String, changes: [KeyValueChange], device: DeviceAuth) async throws -> KeyValueResponse {
        try await rules { storage in try await ServerRules.applyKeyValues(account: accountId, store: store, changes: changes, device: device, in: storage) }
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
        try await db.rows("SELECT key, value, sealed, timestamp, device_name, sequence FROM kv WHERE store_id = \(storeId) AND sequence > \(since) ORDER BY sequence, key")
            .map(keyValueEntry)
    }

    /// A key-value entry from its row (key, value, sealed, timestamp, device_name, sequence).
    static func keyValueEntry(_ row: PostgresRandomAccessRow) throws -> KeyValueEntry {
        try KeyValueEntry(stored: try row.get("value", as: ByteBuffer?.self).map { Data($0.readableBytesView) },
                          sealed: try row.get("sealed", as: ByteBuffer?.self).map { Data($0.readableBytesView) },
                          key: try row.get("key"), timestamp: try row.get("timestamp"), deviceName: try row.get("device_name"), sequence: try row.get("sequence"))
    }

    // MARK: Helpers

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
            SELECT id, device_name, modification_date, size, complete, manifest, digest, record, parent, editor FROM revision
            WHERE container_id = \(containerId) AND item_id = \(id) AND state = 'conflict' ORDER BY modification_date, id
            """).map {
            let contents = try Self.contents($0, kind: kind, brief: brief)
            var version = ConflictVersion(revision: try $0.get("id"), deviceName: try $0.get("device_name"), modificationDate: try $0.get("modification_date"),
                                          size: try $0.get("size"), uploaded: try $0.get("complete"), manifest: contents.manifest)
            version.digest = contents.digest
            version.sealed(try Self.record($0), parent: try $0.get("parent"))
            version.editor = try $0.get("editor")
            return version
        }
        let contents = try Self.contents(row, kind: kind, brief: brief)
        var state = ItemState(
            id: id, revision: try row.get("id"), name: try row.get("name"), parent: try row.get("parent"),
            kind: kind, size: try row.get("size"), modificationDate: try row.get("modification_date"),
            type: try row.get("type"), deleted: try row.get("deleted"), uploaded: try row.get("complete"), deviceName: try row.get("device_name"),
            sequence: try row.get("item_sequence"), manifest: contents.manifest, conflicts: conflicts)
        state.digest = contents.digest
        state.record = try Self.record(row)
        state.editor = try row.get("editor")
        return state
    }

    /// A revision's sealed item record, if `row` has one.
    static func record(_ row: PostgresRandomAccessRow) throws -> Data? {
        try row.get("record", as: ByteBuffer?.self).map { Data($0.readableBytesView) }
    }

    /// A revision's manifest — or, `brief`, its content token (stored, or worked out from the
    /// manifest for revisions from before tokens were stored) and an empty manifest.
    static func contents(_ row: PostgresRandomAccessRow, kind: ItemKind, brief: Bool) throws -> (manifest: Manifest, digest: String?) {
        if brief, let digest = try row.get("digest", as: String?.self) { return (Manifest(), digest) }
        let manifest = try Self.manifest(row, of: try row.get("id"))
        return brief ? (Manifest(), ContentToken.of(manifest, kind: kind).description) : (manifest, nil)
    }

    /// The manifest of `revision` stored in `row` (decoded, or from ``ManifestCache``).
    static func manifest(_ row: PostgresRandomAccessRow, of revision: String) throws -> Manifest {
        try ManifestCache.shared.manifest(of: revision, digest: try row.get("digest", as: String?.self),
                                          stored: Data(try row.get("manifest", as: ByteBuffer.self).readableBytesView))
    }
}
