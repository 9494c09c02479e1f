import Foundation
import Logging
import PostgresNIO
import Synchronization

/// The database for more than one server instance: PostgreSQL through postgres-nio.
///
/// It answers exactly as ``SQLiteDatabase`` does. Where SQLite runs one writer at a time,
/// PostgreSQL runs transactions side by side, so each one locks what it decides on, always in
/// the same order (account, then container): a commit holds its account shared and its
/// container exclusively (one sequence at a time per container), a chunk upload holds its
/// account exclusively (quota, and revisions becoming complete), garbage collection holds every
/// account. Every change is announced with `pg_notify` inside its transaction, so other
/// instances hear of it exactly when it is visible (``relayChanges(to:)``).
final class PostgresDatabase: SyncDatabase {
    let location: PostgresLocation
    let client: PostgresClient
    let logger: Logger
    /// Tells this instance's announcements apart from other instances'.
    let instance = UUID().uuidString.lowercased()
    /// The notification channel: one per schema, so deployments sharing a database stay apart.
    let channel: String
    private let runner: Task<Void, Never>

    /// Connects, creates or upgrades the schema, and starts the connection pool.
    /// - Throws: ``SyncError`` (`databaseUnavailable`) when PostgreSQL cannot be reached or refuses.
    init(location: PostgresLocation, logger: Logger) async throws {
        self.location = location
        self.logger = logger
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: try location.connectionConfiguration(), id: 0, logger: logger)
        } catch {
            throw SyncError(.serviceUnavailable, "databaseUnavailable", "cannot connect to PostgreSQL at \(location.redacted): \(Self.describe(error))")
        }
        do {
            let schema = try await Self.migrate(connection, location: location)
            channel = String("ubiquity_\(schema)".prefix(63))
            try? await connection.close()
        } catch {
            try? await connection.close()
            throw SyncError(.serviceUnavailable, "databaseUnavailable", "cannot prepare the schema in \(location.redacted): \(Self.describe(error))")
        }
        let client = PostgresClient(configuration: location.clientConfiguration(), backgroundLogger: logger)
        self.client = client
        runner = Task { await client.run() }
    }

    func ping() async throws {
        try await read { db in _ = try await db.rows("SELECT 1 AS one") }
    }

    func close() async {
        runner.cancel()
        await runner.value
    }

    /// The error's message from the server when there is one.
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            if let underlying = error.underlying { return "\(underlying)" }
            return "\(error.code)"
        }
        return "\(error)"
    }

    // MARK: Schema

    static let migrations: [(String, [String])] = [
        ("v1", [
            """
            CREATE TABLE account (
                id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL UNIQUE, password_hash TEXT NOT NULL,
                identity_token TEXT NOT NULL UNIQUE, quota_bytes BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL)
            """,
            """
            CREATE TABLE device (
                id TEXT PRIMARY KEY, account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                name TEXT NOT NULL, token_hash TEXT NOT NULL UNIQUE, containers TEXT,
                created DOUBLE PRECISION NOT NULL, revoked BOOLEAN NOT NULL DEFAULT FALSE)
            """,
            "CREATE INDEX device_account ON device(account_id)",
            """
            CREATE TABLE container (
                id BIGSERIAL PRIMARY KEY, account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                identifier TEXT NOT NULL, sequence BIGINT NOT NULL DEFAULT 0, UNIQUE(account_id, identifier))
            """,
            """
            CREATE TABLE item (
                container_id BIGINT NOT NULL REFERENCES container(id) ON DELETE CASCADE, id TEXT NOT NULL,
                current_revision TEXT NOT NULL, sequence BIGINT NOT NULL, PRIMARY KEY(container_id, id))
            """,
            "CREATE INDEX item_sequence ON item(container_id, sequence)",
            """
            CREATE TABLE revision (
                id TEXT PRIMARY KEY, container_id BIGINT NOT NULL REFERENCES container(id) ON DELETE CASCADE,
                item_id TEXT NOT NULL, base_revision TEXT, device_id TEXT NOT NULL, device_name TEXT NOT NULL,
                name TEXT NOT NULL, parent TEXT, kind TEXT NOT NULL, size BIGINT NOT NULL,
                modification_date DOUBLE PRECISION NOT NULL, type TEXT, manifest BYTEA NOT NULL, deleted BOOLEAN NOT NULL,
                complete BOOLEAN NOT NULL, state TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)
            """,
            "CREATE INDEX revision_item ON revision(container_id, item_id, state)",
            "CREATE INDEX revision_state ON revision(state, created)",
            """
            CREATE TABLE revision_chunk (
                revision_id TEXT NOT NULL REFERENCES revision(id) ON DELETE CASCADE, account_id BIGINT NOT NULL,
                hash TEXT NOT NULL, PRIMARY KEY(revision_id, hash))
            """,
            "CREATE INDEX revision_chunk_hash ON revision_chunk(account_id, hash)",
            """
            CREATE TABLE chunk (
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, hash TEXT NOT NULL,
                size BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL, PRIMARY KEY(account_id, hash))
            """,
            // Chunk bytes, shared by every instance. Mostly compressed already: stored as they are.
            """
            CREATE TABLE chunk_content (
                account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE, hash TEXT NOT NULL,
                data BYTEA NOT NULL, created DOUBLE PRECISION NOT NULL, PRIMARY KEY(account_id, hash))
            """,
            "ALTER TABLE chunk_content ALTER COLUMN data SET STORAGE EXTERNAL",
            """
            CREATE TABLE kv_store (
                id BIGSERIAL PRIMARY KEY, account_id BIGINT NOT NULL REFERENCES account(id) ON DELETE CASCADE,
                identifier TEXT NOT NULL, sequence BIGINT NOT NULL DEFAULT 0, UNIQUE(account_id, identifier))
            """,
            """
            CREATE TABLE kv (
                store_id BIGINT NOT NULL REFERENCES kv_store(id) ON DELETE CASCADE, key TEXT NOT NULL,
                value BYTEA, size BIGINT NOT NULL, timestamp DOUBLE PRECISION NOT NULL, device_id TEXT NOT NULL,
                device_name TEXT NOT NULL, sequence BIGINT NOT NULL, PRIMARY KEY(store_id, key))
            """,
            "CREATE INDEX kv_sequence ON kv(store_id, sequence)",
        ]),
    ]

    /// Applies the migrations not yet applied (one instance at a time: an advisory lock).
    /// Returns the schema the tables are in.
    static func migrate(_ connection: PostgresConnection, location: PostgresLocation) async throws -> String {
        let logger = Logger(label: "ubiquity.server.migrate")
        if let schema = location.schema {
            try await connection.query(PostgresQuery(unsafeSQL: "CREATE SCHEMA IF NOT EXISTS \(schema)"), logger: logger)
        }
        try await connection.query("BEGIN", logger: logger)
        do {
            try await connection.query("SELECT pg_advisory_xact_lock(7237457415)", logger: logger)
            try await connection.query("CREATE TABLE IF NOT EXISTS ubiquity_migration (version TEXT PRIMARY KEY, applied DOUBLE PRECISION NOT NULL)", logger: logger)
            var applied = Set<String>()
            for try await version in try await connection.query("SELECT version FROM ubiquity_migration", logger: logger).decode(String.self) {
                applied.insert(version)
            }
            for (version, statements) in migrations where !applied.contains(version) {
                for statement in statements { try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger) }
                try await connection.query("INSERT INTO ubiquity_migration (version, applied) VALUES (\(version), \(Date().timeIntervalSince1970))", logger: logger)
            }
            var schema = "public"
            for try await name in try await connection.query("SELECT current_schema()", logger: logger).decode(String.self) { schema = name }
            try await connection.query("COMMIT", logger: logger)
            return schema
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }

    // MARK: Running queries

    /// Runs `body` in a transaction, retrying (up to 5 times) when PostgreSQL found a deadlock or
    /// a serialization failure; ``SyncError``s pass through and roll back.
    @discardableResult
    func transaction<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await pooled { [logger] connection in
                    try await connection.query("BEGIN", logger: logger)
                    do {
                        let result = try await body(connection)
                        try await connection.query("COMMIT", logger: logger)
                        return result
                    } catch {
                        _ = try? await connection.query("ROLLBACK", logger: logger)
                        throw error
                    }
                }
            } catch let error as PSQLError where attempt < 5 && ["40001", "40P01"].contains(error.serverInfo?[.sqlState] ?? "") {
                logger.debug("retrying a transaction", metadata: ["reason": "\(Self.describe(error))"])
                try await Task.sleep(for: .milliseconds(Int.random(in: 1...20) * attempt))
            }
        }
    }

    /// Runs `body` on a pooled connection (one statement at a time, each seeing the latest commits).
    func read<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await pooled(body)
    }

    /// How long a request waits for a connection before it is answered 503 `databaseUnavailable`.
    static let leaseTimeout: Duration = .seconds(5)

    /// Runs `body` on a connection from the pool. When PostgreSQL is down, the pool keeps trying
    /// to connect and requests would wait for ever: after ``leaseTimeout`` without a connection
    /// the request gives up with 503 `databaseUnavailable`, as does one whose connection fails.
    func pooled<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let leased = LeaseFlag()
        do {
            return try await withThrowingTaskGroup(of: T?.self) { group in
                group.addTask { [client] in
                    try await client.withConnection { connection in
                        leased.value.withLock { $0 = true }
                        return try await body(connection)
                    }
                }
                group.addTask {
                    try await Task.sleep(for: Self.leaseTimeout)
                    guard leased.value.withLock({ $0 }) else { throw Self.unavailable("no connection within \(Self.leaseTimeout)") }
                    return nil // connected in time: the work may take as long as it takes
                }
                while let result = try await group.next() {
                    if let result {
                        group.cancelAll()
                        return result
                    }
                }
                throw Self.unavailable("the request was cancelled")
            }
        } catch let error as PSQLError where error.serverInfo == nil {
            // Not an answer from PostgreSQL but a failure to reach it.
            throw Self.unavailable(Self.describe(error))
        }
    }

    static func unavailable(_ why: String) -> SyncError {
        SyncError(.serviceUnavailable, "databaseUnavailable", "the database is not available: \(why)")
    }

    /// Announces a change to every instance (delivered when the transaction commits).
    func announce(_ db: PostgresConnection, account: Int64, container: String, sequence: Int64, keyValue: Bool = false) async throws {
        let change = RelayedChange(instance: instance, account: account, container: container, sequence: sequence, keyValue: keyValue)
        let payload = String(decoding: try JSONEncoder().encode(change), as: UTF8.self)
        try await db.rows("SELECT pg_notify(\(channel), \(payload))")
    }

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
                SELECT (SELECT COALESCE(SUM(size), 0)::BIGINT FROM chunk WHERE account_id = \(id)) AS used,
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

    func revokeDevice(id: String) async throws -> Bool {
        try await transaction { db in
            try await !db.rows("UPDATE device SET revoked = TRUE WHERE id = \(id) AND NOT revoked RETURNING id").isEmpty
        }
    }

    // MARK: Items

    func changes(accountId: Int64, container: String, since: Int64, limit: Int) async throws -> ChangesResponse {
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
                if let item = try await Self.itemState(db, containerId: containerId, id: id) { items.append(item) }
            }
            return ChangesResponse(sequence: try row.get("sequence"), items: items, more: ids.count > limit)
        }
    }

    func item(accountId: Int64, container: String, id: String) async throws -> ItemState? {
        try await transaction { db in
            try await db.rows("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            guard let containerId = try await Self.containerId(db, accountId: accountId, identifier: container) else { return nil }
            return try await Self.itemState(db, containerId: containerId, id: id)
        }
    }

    func commit(accountId: Int64, container: String, itemId: String, update: ItemUpdate, device: DeviceAuth, now: Date) async throws -> CommitOutcome {
        let manifest = try JSONEncoder().encode(update.manifest)
        let chunks = update.manifest.allChunks
        let hashes = Array(Set(chunks.map(\.hash))).sorted()
        let size = chunks.reduce(Int64(0)) { $0 + $1.size }
        let revision = UUID().uuidString.lowercased()
        let deleted = update.deleted ?? false
        let created = now.timeIntervalSince1970
        return try await transaction { [self] db in
            guard try await !db.rows("SELECT 1 AS one FROM account WHERE id = \(accountId) FOR SHARE").isEmpty else { throw SyncError.unauthorized }
            let containerId = try await Self.lockContainer(db, accountId: accountId, identifier: container)
            let present = try await Self.presentChunks(db, accountId: accountId, hashes: hashes)
            let missing = hashes.filter { !present.contains($0) }

            // Where the new revision goes: current, or kept as a conflict version.
            var state = "current"
            var demoted: (id: String, state: String)?
            if let current = try await db.rows("""
                SELECT revision.id, revision.modification_date, revision.device_id, revision.deleted
                FROM item JOIN revision ON revision.id = item.current_revision WHERE item.container_id = \(containerId) AND item.id = \(itemId)
                """).first {
                let currentId: String = try current.get("id")
                let currentDeleted: Bool = try current.get("deleted")
                if update.baseRevision == currentId {
                    demoted = (currentId, "replaced")
                } else if currentDeleted && !deleted {
                    demoted = (currentId, "replaced") // an edit concurrent with a delete wins over it
                } else if deleted && !currentDeleted {
                    state = "superseded" // a delete concurrent with an edit loses
                } else if ConflictRule.winner((update.modificationDate, device.deviceId), over: (try current.get("modification_date"), try current.get("device_id"))) {
                    demoted = (currentId, "conflict")
                } else {
                    state = "conflict"
                }
            }
            // Names differing only by case or normalisation: the greater id is renamed.
            var name = update.name
            var renameOther: (id: String, name: String)?
            if state == "current" && !deleted {
                let siblings = try await db.rows("""
                    SELECT item.id, revision.name FROM item JOIN revision ON revision.id = item.current_revision
                    WHERE item.container_id = \(containerId) AND revision.parent IS NOT DISTINCT FROM \(update.parent)
                        AND NOT revision.deleted AND item.id <> \(itemId)
                    """).map { (id: try $0.get("id", as: String.self), name: try $0.get("name", as: String.self)) }
                let taken = Set(siblings.map { NameCollision.key($0.name) })
                if let clash = siblings.first(where: { NameCollision.key($0.name) == NameCollision.key(name) }) {
                    if itemId > clash.id {
                        name = NameCollision.freeName(for: name, taken: taken)
                    } else {
                        renameOther = (clash.id, NameCollision.freeName(for: clash.name, taken: taken.union([NameCollision.key(name)])))
                    }
                }
            }
            try await db.rows("""
                INSERT INTO revision (id, container_id, item_id, base_revision, device_id, device_name, name, parent, kind, size,
                    modification_date, type, manifest, deleted, complete, state, created)
                VALUES (\(revision), \(containerId), \(itemId), \(update.baseRevision), \(device.deviceId), \(device.deviceName), \(name),
                    \(update.parent), \(update.kind.rawValue), \(size), \(update.modificationDate), \(update.type), \(manifest),
                    \(deleted), \(missing.isEmpty), \(state), \(created))
                """)
            if !hashes.isEmpty {
                try await db.rows("INSERT INTO revision_chunk (revision_id, account_id, hash) SELECT \(revision), \(accountId), unnest(\(hashes)::TEXT[])")
            }
            if let demoted {
                try await db.rows("UPDATE revision SET state = \(demoted.state) WHERE id = \(demoted.id)")
            }
            let sequence = try await Self.bump(db, containerId: containerId)
            if state == "current" {
                try await db.rows("""
                    INSERT INTO item (container_id, id, current_revision, sequence) VALUES (\(containerId), \(itemId), \(revision), \(sequence))
                    ON CONFLICT (container_id, id) DO UPDATE SET current_revision = excluded.current_revision, sequence = excluded.sequence
                    """)
            } else {
                try await db.rows("UPDATE item SET sequence = \(sequence) WHERE container_id = \(containerId) AND id = \(itemId)")
            }
            if let renameOther { try await Self.serverRename(db, containerId: containerId, itemId: renameOther.id, to: renameOther.name, now: now) }
            guard let item = try await Self.itemState(db, containerId: containerId, id: itemId) else {
                throw SyncError(.internalServerError, "internal", "the item vanished during its commit")
            }
            try await announce(db, account: accountId, container: container, sequence: item.sequence)
            return CommitOutcome(revision: revision, isCurrent: state == "current", item: item, missingChunks: missing)
        }
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
            guard let item = try await Self.itemState(db, containerId: containerId, id: itemId) else { throw SyncError.notFound }
            try await announce(db, account: accountId, container: container, sequence: sequence)
            return item
        }
    }

    // MARK: Key-value stores

    func applyKeyValues(accountId: Int64, store: String, changes: [KeyValueChange], device: DeviceAuth) async throws -> KeyValueResponse {
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
            guard keys <= KeyValueLimits.maximumKeys else {
                throw SyncError(.contentTooLarge, "keyValueQuotaViolation", "a key-value store holds at most \(KeyValueLimits.maximumKeys) keys; this would make \(keys)")
            }
            guard bytes <= KeyValueLimits.maximumTotalBytes else {
                throw SyncError(.contentTooLarge, "keyValueQuotaViolation", "a key-value store holds at most \(KeyValueLimits.maximumTotalBytes) bytes; this would make \(bytes)")
            }
            let named = Set(changes.map(\.key))
            let entries = try await Self.keyValueEntries(db, storeId: storeId, since: 0).filter { named.contains($0.key) }
            try await announce(db, account: accountId, container: store, sequence: sequence, keyValue: true)
            return KeyValueResponse(sequence: sequence, entries: entries)
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

    func chunkStored(accountId: Int64, hash: String, size: Int64, now: Date) async throws -> [String: Int64] {
        try await transaction { [self] db in
            guard let account = try await db.rows("SELECT quota_bytes FROM account WHERE id = \(accountId) FOR UPDATE").first else { throw SyncError.unauthorized }
            if try await db.rows("SELECT 1 AS one FROM chunk WHERE account_id = \(accountId) AND hash = \(hash)").isEmpty {
                let used = try await db.rows("SELECT COALESCE(SUM(size), 0)::BIGINT AS used FROM chunk WHERE account_id = \(accountId)").first?.get("used", as: Int64.self) ?? 0
                let quota: Int64 = try account.get("quota_bytes")
                guard used + size <= quota else { throw SyncError.quotaExceeded(used: used, quota: quota, adding: size) }
            }
            try await db.rows("INSERT INTO chunk (account_id, hash, size, created) VALUES (\(accountId), \(hash), \(size), \(now.timeIntervalSince1970)) ON CONFLICT DO NOTHING")
            // Revisions waiting for this chunk that now have every chunk become downloadable.
            let waiting = try await db.rows("""
                SELECT revision.id, revision.container_id, revision.item_id, revision.state FROM revision_chunk
                JOIN revision ON revision.id = revision_chunk.revision_id
                WHERE revision_chunk.account_id = \(accountId) AND revision_chunk.hash = \(hash) AND NOT revision.complete
                ORDER BY revision.container_id, revision.id
                """)
            var changed: [String: Int64] = [:]
            for row in waiting {
                let revision: String = try row.get("id")
                let stillMissing = try await db.rows("""
                    SELECT COUNT(*) AS missing FROM revision_chunk LEFT JOIN chunk ON chunk.account_id = revision_chunk.account_id AND chunk.hash = revision_chunk.hash
                    WHERE revision_chunk.revision_id = \(revision) AND chunk.hash IS NULL
                    """).first?.get("missing", as: Int64.self) ?? 0
                guard stillMissing == 0 else { continue }
                try await db.rows("UPDATE revision SET complete = TRUE WHERE id = \(revision)")
                let state: String = try row.get("state")
                guard state == "current" || state == "conflict" else { continue }
                let containerId: Int64 = try row.get("container_id")
                let sequence = try await Self.bump(db, containerId: containerId)
                try await db.rows("UPDATE item SET sequence = \(sequence) WHERE container_id = \(containerId) AND id = \(try row.get("item_id", as: String.self))")
                if let identifier = try await db.rows("SELECT identifier FROM container WHERE id = \(containerId)").first?.get("identifier", as: String.self) {
                    changed[identifier] = sequence
                }
            }
            for (container, sequence) in changed { try await announce(db, account: accountId, container: container, sequence: sequence) }
            return changed
        }
    }

    // MARK: Recovery and garbage collection

    func recoverable(accountName: String, now: Date, retention: TimeInterval) async throws -> [RecoverableRevision] {
        try await read { db in
            try await db.rows("""
                SELECT revision.id, container.identifier, revision.item_id, revision.name, revision.device_name, revision.size,
                    revision.modification_date, revision.created, revision.complete,
                    (SELECT current.deleted FROM revision AS current JOIN item ON item.current_revision = current.id
                     WHERE item.container_id = revision.container_id AND item.id = revision.item_id) AS item_deleted
                FROM revision JOIN container ON container.id = revision.container_id JOIN account ON account.id = container.account_id
                WHERE account.name = \(accountName) AND revision.state IN ('replaced', 'resolved', 'superseded') AND NOT revision.deleted
                    AND revision.created >= \(now.timeIntervalSince1970 - retention)
                ORDER BY revision.created DESC
                """).map {
                RecoverableRevision(
                    revision: try $0.get("id"), container: try $0.get("identifier"), item: try $0.get("item_id"), name: try $0.get("name"),
                    deviceName: try $0.get("device_name"), size: try $0.get("size"), modificationDate: try $0.get("modification_date"),
                    replacedAt: try $0.get("created"), itemDeleted: try $0.get("item_deleted", as: Bool?.self) ?? false, uploaded: try $0.get("complete"))
            }
        }
    }

    func restore(accountName: String, revision: String, now: Date) async throws -> (container: String, sequence: Int64)? {
        try await transaction { [self] db in
            guard let row = try await db.rows("""
                SELECT revision.container_id, revision.item_id, container.identifier, container.account_id FROM revision
                JOIN container ON container.id = revision.container_id JOIN account ON account.id = container.account_id
                WHERE account.name = \(accountName) AND revision.id = \(revision) AND revision.state IN ('replaced', 'resolved', 'superseded') AND NOT revision.deleted
                """).first else { return nil }
            let containerId: Int64 = try row.get("container_id")
            let itemId: String = try row.get("item_id")
            try await db.rows("SELECT 1 AS one FROM account WHERE id = \(try row.get("account_id", as: Int64.self)) FOR SHARE")
            try await db.rows("SELECT id FROM container WHERE id = \(containerId) FOR UPDATE")
            let restored = UUID().uuidString.lowercased()
            try await db.rows("""
                INSERT INTO revision (id, container_id, item_id, base_revision, device_id, device_name, name, parent, kind, size,
                    modification_date, type, manifest, deleted, complete, state, created)
                SELECT \(restored), container_id, item_id, (SELECT current_revision FROM item WHERE container_id = \(containerId) AND id = \(itemId)),
                    'server', 'server', name, parent, kind, size, modification_date, type, manifest, FALSE, complete, 'current', \(now.timeIntervalSince1970)
                FROM revision WHERE id = \(revision)
                """)
            try await db.rows("INSERT INTO revision_chunk (revision_id, account_id, hash) SELECT \(restored), account_id, hash FROM revision_chunk WHERE revision_id = \(revision)")
            try await db.rows("UPDATE revision SET state = 'replaced' WHERE id = (SELECT current_revision FROM item WHERE container_id = \(containerId) AND id = \(itemId))")
            let sequence = try await Self.bump(db, containerId: containerId)
            try await db.rows("UPDATE item SET current_revision = \(restored), sequence = \(sequence) WHERE container_id = \(containerId) AND id = \(itemId)")
            let identifier: String = try row.get("identifier")
            try await announce(db, account: try row.get("account_id"), container: identifier, sequence: sequence)
            return (identifier, sequence)
        }
    }

    func collectGarbage(now: Date, retention: TimeInterval, grace: TimeInterval) async throws -> (revisions: Int, chunks: [(Int64, String)], bytes: Int64) {
        let collected = try await transaction { db in
            // No commit or upload may name a chunk while it is judged unreferenced.
            try await db.rows("SELECT id FROM account ORDER BY id FOR UPDATE")
            let revisions = try await db.rows("DELETE FROM revision WHERE state IN ('replaced', 'resolved', 'superseded') AND created < \(now.timeIntervalSince1970 - retention) RETURNING id").count
            let orphans = try await db.rows("""
                DELETE FROM chunk WHERE created < \(now.timeIntervalSince1970 - grace) AND NOT EXISTS
                    (SELECT 1 FROM revision_chunk WHERE revision_chunk.account_id = chunk.account_id AND revision_chunk.hash = chunk.hash)
                RETURNING account_id, hash, size
                """).map { (account: try $0.get("account_id", as: Int64.self), hash: try $0.get("hash", as: String.self), size: try $0.get("size", as: Int64.self)) }
            // Contents whose upload never got recorded (a crash between storing and recording).
            try await db.rows("""
                DELETE FROM chunk_content WHERE created < \(now.timeIntervalSince1970 - grace) AND NOT EXISTS
                    (SELECT 1 FROM chunk WHERE chunk.account_id = chunk_content.account_id AND chunk.hash = chunk_content.hash)
                """)
            return GarbageCollected(revisions: revisions, chunks: orphans.map { .init(account: $0.account, hash: $0.hash) }, bytes: orphans.reduce(0) { $0 + $1.size })
        }
        return (collected.revisions, collected.chunks.map { ($0.account, $0.hash) }, collected.bytes)
    }

    // MARK: Other instances' changes

    func relayChanges(to notifier: ChangeNotifier) async {
        var connectedBefore = false
        var failures = 0
        while !Task.isCancelled {
            var connection: PostgresConnection?
            do {
                let listener = try await PostgresConnection.connect(configuration: try location.connectionConfiguration(), id: 1, logger: logger)
                connection = listener
                try await listener.listen(on: channel) { notifications in
                    if failures > 0 { logger.notice("hearing other instances' changes again") }
                    failures = 0
                    // Changes made while this instance was not listening reach its devices as a catch-up.
                    if connectedBefore { notifier.catchUpAll() }
                    connectedBefore = true
                    notifier.isRelaying = true
                    defer { notifier.isRelaying = false }
                    for try await notification in notifications {
                        guard let change = try? JSONDecoder().decode(RelayedChange.self, from: Data(notification.payload.utf8)),
                              change.instance != instance else { continue }
                        notifier.publish(account: change.account, container: change.container, sequence: change.sequence, keyValue: change.keyValue)
                    }
                }
            } catch {
                failures += 1
                if !Task.isCancelled {
                    // Once per outage as a warning; the retries (1 s, 2 s, … up to 30 s apart) at debug.
                    logger.log(level: failures == 1 ? .warning : .debug, "not hearing other instances' changes; retrying",
                               metadata: ["error": "\(Self.describe(error))", "attempt": "\(failures)"])
                }
            }
            try? await connection?.close()
            try? await Task.sleep(for: .seconds(min(30, 1 << min(failures, 5))))
        }
    }

    // MARK: Helpers

    /// A new current revision of an item, made by the server: the same contents under another name.
    static func serverRename(_ db: PostgresConnection, containerId: Int64, itemId: String, to name: String, now: Date) async throws {
        guard let current = try await db.rows("SELECT current_revision FROM item WHERE container_id = \(containerId) AND id = \(itemId)").first?.get("current_revision", as: String.self) else { return }
        let revision = UUID().uuidString.lowercased()
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

    static func itemState(_ db: PostgresConnection, containerId: Int64, id: String) async throws -> ItemState? {
        guard let row = try await db.rows("""
            SELECT item.sequence AS item_sequence, revision.* FROM item JOIN revision ON revision.id = item.current_revision
            WHERE item.container_id = \(containerId) AND item.id = \(id)
            """).first else { return nil }
        let conflicts = try await db.rows("""
            SELECT id, device_name, modification_date, size, complete, manifest FROM revision
            WHERE container_id = \(containerId) AND item_id = \(id) AND state = 'conflict' ORDER BY modification_date, id
            """).map {
            ConflictVersion(revision: try $0.get("id"), deviceName: try $0.get("device_name"), modificationDate: try $0.get("modification_date"),
                            size: try $0.get("size"), uploaded: try $0.get("complete"), manifest: try manifest($0))
        }
        return ItemState(
            id: id, revision: try row.get("id"), name: try row.get("name"), parent: try row.get("parent"),
            kind: ItemKind(rawValue: try row.get("kind")) ?? .file, size: try row.get("size"), modificationDate: try row.get("modification_date"),
            type: try row.get("type"), deleted: try row.get("deleted"), uploaded: try row.get("complete"), deviceName: try row.get("device_name"),
            sequence: try row.get("item_sequence"), manifest: try manifest(row), conflicts: conflicts)
    }

    static func manifest(_ row: PostgresRandomAccessRow) throws -> Manifest {
        try JSONDecoder().decode(Manifest.self, from: Data(try row.get("manifest", as: ByteBuffer.self).readableBytesView))
    }
}

/// Whether a request got its pooled connection (see ``PostgresDatabase/pooled(_:)``).
private final class LeaseFlag: Sendable {
    let value = Mutex(false)
}

/// What garbage collection removed (the transaction's result).
private struct GarbageCollected: Sendable {
    struct Chunk: Sendable {
        var account: Int64
        var hash: String
    }

    var revisions: Int
    var chunks: [Chunk]
    var bytes: Int64
}

/// A change announced to every instance: `pg_notify`'s payload.
struct RelayedChange: Codable, Sendable {
    var instance: String
    var account: Int64
    var container: String
    var sequence: Int64
    var keyValue: Bool
}

/// Chunk contents in PostgreSQL (`chunk_content`), so every instance serves every chunk.
struct PostgresChunkStore: ChunkStorage {
    let database: PostgresDatabase

    func store(_ bytes: [UInt8], hash: String, account: Int64) async throws {
        try Self.verify(bytes, hash: hash)
        let now = Date().timeIntervalSince1970
        let data = Data(bytes)
        try await database.transaction { db in
            try await db.rows("""
                INSERT INTO chunk_content (account_id, hash, data, created) VALUES (\(account), \(hash), \(data), \(now))
                ON CONFLICT DO NOTHING
                """)
        }
    }

    func load(hash: String, account: Int64) async throws -> Data? {
        try await database.read { db in
            try await db.rows("SELECT data FROM chunk_content WHERE account_id = \(account) AND hash = \(hash)").first
                .map { Data(try $0.get("data", as: ByteBuffer.self).readableBytesView) }
        }
    }

    func remove(hash: String, account: Int64) async {
        _ = try? await database.transaction { db in
            try await db.rows("DELETE FROM chunk_content WHERE account_id = \(account) AND hash = \(hash)")
        }
    }

    /// Nothing to do: the account's rows went with it.
    func removeAccount(_ account: Int64) async {}
}

extension PostgresConnection {
    /// Runs `query` and returns every row (for statements without rows: none).
    @discardableResult
    func rows(_ query: PostgresQuery) async throws -> [PostgresRandomAccessRow] {
        try await self.query(query, logger: PostgresDatabase.quiet).collect().map { $0.makeRandomAccess() }
    }
}

extension PostgresRandomAccessRow {
    /// The value of the column named `name`.
    func get<T: PostgresDecodable>(_ name: String, as type: T.Type = T.self) throws -> T {
        try self[name].decode(T.self)
    }
}

extension PostgresDatabase {
    /// Queries log nothing of their own (errors reach the request's log as responses).
    static let quiet = Logger(label: "ubiquity.server.postgres", factory: { _ in SwiftLogNoOpLogHandler() })
}
