import Foundation
import UbiquityProtocol
import UbiquitySync
import GRDB

/// The embedded database: SQLite through GRDB, in WAL mode, so the server and the
/// administration commands (`ubiquity account …`) can use it at the same time.
final class SQLiteDatabase: SyncDatabase {
    let pool: DatabasePool

    init(path: String) throws {
        var configuration = Configuration()
        configuration.foreignKeysEnabled = true
        configuration.busyMode = .timeout(10)
        // What is deleted or replaced is overwritten, not left in free space: a name sealed in
        // place or a revision collected leaves no trace in the file (issue 45's leakage audit).
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA secure_delete = ON") }
        pool = try DatabasePool(path: path, configuration: configuration)
        try Self.migrator.migrate(pool)
    }

    // MARK: Accounts and devices

    func createAccount(name: String, passwordHash: String, quotaBytes: Int64) async throws -> Account {
        let identity = Self.randomToken()
        return try await pool.write { db in
            if try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM account WHERE name = ?"), arguments: [name]) == true {
                throw SyncError(.conflict, "accountExists", "an account named \(name) exists")
            }
            try db.execute(
                sql: "INSERT INTO account (name, passwordHash, identityToken, quotaBytes, created) VALUES (?, ?, ?, ?, ?)",
                arguments: [name, passwordHash, identity, quotaBytes, Date().timeIntervalSince1970])
            return Account(id: db.lastInsertedRowID, name: name, identityToken: identity, quotaBytes: quotaBytes)
        }
    }

    func accounts() async throws -> [Account] {
        try await pool.read { db in
            try Row.fetchAll(db.cachedStatement(sql: "SELECT id, name, identityToken, quotaBytes, admin FROM account ORDER BY name")).map {
                Account(id: $0["id"], name: $0["name"], identityToken: $0["identityToken"], quotaBytes: $0["quotaBytes"], admin: $0["admin"])
            }
        }
    }

    func account(id: Int64) async throws -> Account? {
        try await pool.read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT id, name, identityToken, quotaBytes, admin FROM account WHERE id = ?"), arguments: [id]).map {
                Account(id: $0["id"], name: $0["name"], identityToken: $0["identityToken"], quotaBytes: $0["quotaBytes"], admin: $0["admin"])
            }
        }
    }

    func containers(ofAccount id: Int64) async throws -> [ContainerSummary] {
        try await pool.read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT container.identifier, container.sequence, COUNT(revision.id) AS items, COALESCE(SUM(revision.size), 0) AS bytes
                FROM container LEFT JOIN item ON item.containerId = container.id
                LEFT JOIN revision ON revision.id = item.currentRevision AND revision.deleted = 0
                WHERE container.accountId = ? GROUP BY container.id ORDER BY container.identifier
                """), arguments: [id]).map {
                ContainerSummary(identifier: $0["identifier"], sequence: $0["sequence"], items: $0["items"], bytes: $0["bytes"])
            }
        }
    }

    func keyValueStores(ofAccount id: Int64) async throws -> [KeyValueStoreSummary] {
        try await pool.read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT kvStore.identifier, COUNT(kv.key) AS keys, COALESCE(SUM(kv.size), 0) AS bytes
                FROM kvStore LEFT JOIN kv ON kv.storeId = kvStore.id AND kv.value IS NOT NULL
                WHERE kvStore.accountId = ? GROUP BY kvStore.id ORDER BY kvStore.identifier
                """), arguments: [id]).map { KeyValueStoreSummary(identifier: $0["identifier"], keys: $0["keys"], bytes: $0["bytes"]) }
        }
    }

    func addLink(_ link: PublishedLink, accountId: Int64, tokenHash: String, manifest: Data?, manifestBudget: Int64) async throws {
        try await pool.write { db in
            if let manifest {
                try db.execute(sql: "UPDATE publicLink SET manifest = NULL WHERE accountId = ? AND manifest IS NOT NULL AND (revoked = 1 OR expires <= ?)",
                               arguments: [accountId, link.created])
                let held = try Int64.fetchOne(db, sql: "SELECT COALESCE(SUM(LENGTH(manifest)), 0) FROM publicLink WHERE accountId = ? AND manifest IS NOT NULL",
                                              arguments: [accountId]) ?? 0
                guard held + Int64(manifest.count) <= manifestBudget else { throw SyncError.tooManyLinks(budget: manifestBudget) }
            }
            try db.execute(sql: """
                INSERT INTO publicLink (id, accountId, container, item, revision, name, tokenHash, created, expires, manifest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [link.id, accountId, link.container, link.item, link.revision, link.name, tokenHash, link.created, link.expires, manifest])
        }
    }

    /// A link's columns (not its manifest, read only for its page: up to megabytes).
    private static let linkColumns = "id, accountId, container, item, revision, name, created, expires, manifest IS NOT NULL AS sealed"

    func link(tokenHash: String) async throws -> (accountId: Int64, link: PublishedLink)? {
        try await pool.read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT \(Self.linkColumns) FROM publicLink WHERE tokenHash = ? AND revoked = 0"), arguments: [tokenHash]).map {
                ($0["accountId"], Self.publishedLink($0))
            }
        }
    }

    func linkManifest(tokenHash: String) async throws -> Data? {
        try await pool.read { db in
            try Data.fetchOne(db.cachedStatement(sql: "SELECT manifest FROM publicLink WHERE tokenHash = ? AND revoked = 0"), arguments: [tokenHash])
        }
    }

    func links(ofAccount id: Int64) async throws -> [PublishedLink] {
        try await pool.read { db in
            try Row.fetchAll(db.cachedStatement(sql: "SELECT \(Self.linkColumns) FROM publicLink WHERE accountId = ? AND revoked = 0 ORDER BY created DESC, id"), arguments: [id])
                .map(Self.publishedLink)
        }
    }

    func revokeLink(id: String, accountId: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.cachedStatement(sql: "UPDATE publicLink SET revoked = 1, manifest = NULL WHERE id = ? AND accountId = ? AND revoked = 0").execute(arguments: [id, accountId])
            return db.changesCount > 0
        }
    }

    static func publishedLink(_ row: Row) -> PublishedLink {
        PublishedLink(id: row["id"], path: nil, container: row["container"], item: row["item"], revision: row["revision"], name: row["name"],
                      created: row["created"], expires: row["expires"], sealed: (row["sealed"] as Bool?) == true ? true : nil)
    }

    func deleteAccount(named name: String) async throws -> Bool {
        try await pool.write { db in
            try db.cachedStatement(sql: "DELETE FROM account WHERE name = ?").execute(arguments: [name])
            return db.changesCount > 0
        }
    }

    func setQuota(ofAccount name: String, bytes: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.cachedStatement(sql: "UPDATE account SET quotaBytes = ? WHERE name = ?").execute(arguments: [bytes, name])
            return db.changesCount > 0
        }
    }

    func setAdmin(ofAccount name: String, admin: Bool) async throws -> Bool {
        try await pool.write { db in
            try db.cachedStatement(sql: "UPDATE account SET admin = ? WHERE name = ?").execute(arguments: [admin, name])
            return db.changesCount > 0
        }
    }

    func credentials(of name: String) async throws -> (id: Int64, passwordHash: String, identityToken: String)? {
        try await pool.read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT id, passwordHash, identityToken FROM account WHERE name = ?"), arguments: [name])
                .map { ($0["id"], $0["passwordHash"], $0["identityToken"]) }
        }
    }

    func identityToken(ofAccount id: Int64) async throws -> String? {
        try await pool.read { db in try String.fetchOne(db.cachedStatement(sql: "SELECT identityToken FROM account WHERE id = ?"), arguments: [id]) }
    }

    func usage(ofAccount id: Int64) async throws -> AccountFigures {
        try await pool.read { db in try SQLiteRuleStorage(db: db).account(id) ?? AccountFigures() }
    }

    func addDevice(accountId: Int64, name: String, tokenHash: String, containers: [String]?) async throws -> String {
        let id = UUID().uuidString.lowercased()
        let list = try containers.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) }
        try await pool.write { db in
            try db.execute(
                sql: "INSERT INTO device (id, accountId, name, tokenHash, containers, created) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [id, accountId, name, tokenHash, list, Date().timeIntervalSince1970])
        }
        return id
    }

    func device(tokenHash: String) async throws -> DeviceAuth? {
        try await pool.read { db in
            guard let row = try Row.fetchOne(db.cachedStatement(sql: """
                SELECT device.id, device.name, device.accountId, device.containers, account.generation FROM device JOIN account ON account.id = device.accountId
                WHERE device.tokenHash = ? AND device.revoked = 0
                """), arguments: [tokenHash]) else { return nil }
            let list: String? = row["containers"]
            return DeviceAuth(
                deviceId: row["id"], deviceName: row["name"], accountId: row["accountId"],
                containers: try list.map { try JSONDecoder().decode([String].self, from: Data($0.utf8)) }, generation: row["generation"])
        }
    }

    func deviceSeen(id: String, at date: Date) async throws {
        try await pool.write { db in
            try db.cachedStatement(sql: "UPDATE device SET lastSeen = ? WHERE id = ?").execute(arguments: [date.timeIntervalSince1970, id])
        }
    }

    func devices(ofAccount name: String) async throws -> [DeviceInfo] {
        try await pool.read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT device.id, device.name, device.revoked, device.created, device.lastSeen FROM device JOIN account ON account.id = device.accountId
                WHERE account.name = ? ORDER BY device.created
                """), arguments: [name]).map {
                DeviceInfo(id: $0["id"], name: $0["name"], revoked: $0["revoked"], created: $0["created"], lastSeen: $0["lastSeen"])
            }
        }
    }

    func activeDevices(among ids: Set<String>) async throws -> Set<String> {
        try await pool.read { db in
            var active = Set<String>()
            let statement = try db.cachedStatement(sql: "SELECT 1 FROM device WHERE id = ? AND revoked = 0")
            for id in ids where try Bool.fetchOne(statement, arguments: [id]) != nil { active.insert(id) }
            return active
        }
    }

    func revokeDevice(id: String) async throws -> Bool {
        try await pool.write { db in
            try db.cachedStatement(sql: "UPDATE device SET revoked = 1 WHERE id = ? AND revoked = 0").execute(arguments: [id])
            return db.changesCount > 0
        }
    }

    // MARK: Items

    func changes(accountId: Int64, container: String, since: Int64, limit: Int, brief: Bool) async throws -> ChangesResponse {
        try await pool.read { db in
            guard let containerId = try Self.containerId(db, accountId: accountId, identifier: container) else {
                return ChangesResponse(sequence: 0, items: [], more: false)
            }
            let sequence = try Int64.fetchOne(db.cachedStatement(sql: "SELECT sequence FROM container WHERE id = ?"), arguments: [containerId]) ?? 0
            let ids = try String.fetchAll(db.cachedStatement(sql: "SELECT id FROM item WHERE containerId = ? AND sequence > ? ORDER BY sequence LIMIT ?"), arguments: [containerId, since, limit + 1])
            let items = try ids.prefix(limit).compactMap { try Self.itemState(db, containerId: containerId, id: $0, brief: brief) }
            return ChangesResponse(sequence: sequence, items: items, more: ids.count > limit)
        }
    }

    func folderEntries(accountId: Int64, container: String, parent: String?) async throws -> [FolderEntry] {
        try await pool.read { db in
            guard let containerId = try Self.containerId(db, accountId: accountId, identifier: container) else { return [] }
            // Read row by row from the statement (a folder may hold many thousands, each with a
            // sealed record: copying every row first, as fetching them all does, costs as much
            // again), each column by position (looking columns up by name costs too).
            let rows = try Row.fetchCursor(db.cachedStatement(sql: """
                SELECT item.id, revision.name, revision.kind, revision.size, revision.modificationDate, revision.deviceName, revision.complete,
                       (SELECT COUNT(*) FROM revision AS other WHERE other.containerId = item.containerId AND other.itemId = item.id
                                                               AND other.state = 'conflict') AS conflicts, revision.record
                FROM item JOIN revision ON revision.id = item.currentRevision
                WHERE item.containerId = ? AND item.parentKey = ? AND item.nameKey != ''
                """), arguments: [containerId, parent ?? ""])
            var entries: [FolderEntry] = []
            while let row = try rows.next() {
                entries.append(FolderEntry(id: row[0], name: row[1], kind: ItemKind(rawValue: row[2]) ?? .file, size: row[3],
                                           modificationDate: row[4], deviceName: row[5], uploaded: row[6], conflicts: row[7], record: row[8]))
            }
            return entries
        }
    }

    func item(accountId: Int64, container: String, id: String, brief: Bool) async throws -> ItemState? {
        try await pool.read { db in
            guard let containerId = try Self.containerId(db, accountId: accountId, identifier: container) else { return nil }
            return try Self.itemState(db, containerId: containerId, id: id, brief: brief)
        }
    }

    func items(accountId: Int64, container: String, ids: [String]) async throws -> [ItemState] {
        try await pool.read { db in
            guard let containerId = try Self.containerId(db, accountId: accountId, identifier: container) else { return [] }
            return try ids.compactMap { try Self.itemState(db, containerId: containerId, id: $0) }
        }
    }

    func chunkLists(accountId: Int64, container: String, revisions: [String], notMadeBy device: String) async throws -> [String: [ChunkReference]] {
        try await pool.read { db in
            guard let containerId = try Self.containerId(db, accountId: accountId, identifier: container) else { return [:] }
            var lists: [String: [ChunkReference]] = [:]
            for start in stride(from: 0, to: revisions.count, by: 500) {
                let batch = Array(revisions[start..<min(start + 500, revisions.count)])
                let marks = Array(repeating: "?", count: batch.count).joined(separator: ",")
                for id in try String.fetchAll(db, sql: "SELECT id FROM revision WHERE containerId = ? AND kind = 'file' AND deviceId != ? AND id IN (\(marks))",
                                              arguments: StatementArguments([containerId as any DatabaseValueConvertible, device] + batch.map { $0 as any DatabaseValueConvertible })) {
                    lists[id] = try Self.manifest(db, of: id).chunks ?? []
                }
            }
            return lists
        }
    }

    func revisionManifest(accountId: Int64, container: String, item: String, revision: String) async throws -> (kind: ItemKind, manifest: Manifest)? {
        try await pool.read { db in
            guard let containerId = try Self.containerId(db, accountId: accountId, identifier: container),
                  let stored = try String.fetchOne(db.cachedStatement(sql: "SELECT kind FROM revision WHERE containerId = ? AND itemId = ? AND id = ? AND NOT sealedInPlace"),
                                                   arguments: [containerId, item, revision]),
                  let kind = ItemKind(rawValue: stored) else { return nil }
            return (kind, try Self.manifest(db, of: revision))
        }
    }

    func itemRevisions(accountId: Int64, container: String, item: String, since: Double, limit: Int) async throws -> [ItemRevision]? {
        try await pool.read { db in
            guard let containerId = try Self.containerId(db, accountId: accountId, identifier: container),
                  try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM item WHERE containerId = ? AND id = ?"), arguments: [containerId, item]) != nil else { return nil }
            return try Row.fetchAll(db.cachedStatement(sql: """
                SELECT id, name, kind, deviceName, size, modificationDate, created, complete, record, parent, editor FROM revision
                WHERE containerId = ? AND itemId = ? AND state IN ('replaced', 'resolved', 'superseded') AND deleted = 0
                    AND kind != 'directory' AND created >= ?
                ORDER BY created DESC LIMIT ?
                """), arguments: [containerId, item, since, limit]).compactMap { row in
                guard let kind = ItemKind(rawValue: row["kind"]) else { return nil }
                var revision = ItemRevision(revision: row["id"], name: row["name"], kind: kind, deviceName: row["deviceName"], size: row["size"],
                                            modificationDate: row["modificationDate"], created: row["created"], uploaded: row["complete"])
                revision.record = row["record"]
                revision.parent = row["parent"]
                revision.editor = row["editor"]
                return revision
            }
        }
    }

    func revisionContents(accountId: Int64, container: String, item: String, revision: String) async throws -> RevisionContentsResponse? {
        try await pool.read { db in
            guard let containerId = try Self.containerId(db, accountId: accountId, identifier: container),
                  let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT name, deviceName, size, modificationDate, kind, deleted, complete, record, parent, editor FROM revision WHERE containerId = ? AND itemId = ? AND id = ?"),
                                             arguments: [containerId, item, revision]),
                  let kind = ItemKind(rawValue: row["kind"]), kind != .directory, !(row["deleted"] as Bool) else { return nil }
            var contents = RevisionContentsResponse(revision: revision, name: row["name"], deviceName: row["deviceName"], size: row["size"], modificationDate: row["modificationDate"],
                                                    kind: kind, manifest: try Self.manifest(db, of: revision), uploaded: row["complete"])
            contents.record = row["record"]
            contents.parent = row["parent"]
            contents.editor = row["editor"]
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
        try await pool.read { db in
            guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT id, sequence FROM kvStore WHERE accountId = ? AND identifier = ?"), arguments: [accountId, store]) else {
                return KeyValueResponse(sequence: 0, entries: [])
            }
            return KeyValueResponse(sequence: row["sequence"], entries: try Self.keyValueEntries(db, storeId: row["id"], since: since))
        }
    }

    static func keyValueEntries(_ db: Database, storeId: Int64, since: Int64) throws -> [KeyValueEntry] {
        try Row.fetchAll(db.cachedStatement(sql: "SELECT key, value, sealed, timestamp, deviceName, sequence FROM kv WHERE storeId = ? AND sequence > ? ORDER BY sequence, key"),
                         arguments: [storeId, since]).map(keyValueEntry)
    }

    /// A key-value entry from its row (key, value, sealed, timestamp, deviceName, sequence).
    static func keyValueEntry(_ row: Row) throws -> KeyValueEntry {
        try KeyValueEntry(stored: row["value"], sealed: row["sealed"], key: row["key"], timestamp: row["timestamp"], deviceName: row["deviceName"], sequence: row["sequence"])
    }

    // MARK: Recovery and garbage collection

    func recoverable(accountName: String, now: Date, retention: TimeInterval) async throws -> [RecoverableRevision] {
        try await pool.read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT revision.id, container.identifier, revision.itemId, revision.name, revision.deviceName, revision.size,
                    revision.modificationDate, revision.created, revision.state, revision.complete, revision.record, revision.parent,
                    (SELECT deleted FROM revision AS current JOIN item ON item.currentRevision = current.id
                     WHERE item.containerId = revision.containerId AND item.id = revision.itemId) AS itemDeleted
                FROM revision JOIN container ON container.id = revision.containerId JOIN account ON account.id = container.accountId
                WHERE account.name = ? AND revision.state IN ('replaced', 'resolved', 'superseded') AND revision.deleted = 0
                    AND revision.created >= ?
                ORDER BY revision.created DESC
                """), arguments: [accountName, now.timeIntervalSince1970 - retention]).map {
                RecoverableRevision(
                    revision: $0["id"], container: $0["identifier"], item: $0["itemId"], name: $0["name"], deviceName: $0["deviceName"],
                    size: $0["size"], modificationDate: $0["modificationDate"], replacedAt: $0["created"],
                    itemDeleted: ($0["itemDeleted"] as Bool?) ?? false, uploaded: $0["complete"], record: $0["record"], parent: $0["parent"])
            }
        }
    }

    func restore(accountName: String, revision: String, now: Date) async throws -> (container: String, sequence: Int64)? {
        try await rules { storage in try await ServerRules.restore(accountName: accountName, revision: revision, now: now, in: storage) }
    }

    func collectGarbage(now: Date, retention: TimeInterval, grace: TimeInterval) async throws -> (revisions: Int, chunks: [(Int64, String)], bytes: Int64) {
        try await pool.write { db in
            let cutoff = now.timeIntervalSince1970 - retention
            // What the revisions going cost their accounts.
            let freed = try Row.fetchAll(db, sql: """
                SELECT container.accountId, SUM(revision.cost) AS cost FROM revision JOIN container ON container.id = revision.containerId
                WHERE revision.state IN ('replaced', 'resolved', 'superseded') AND revision.created < ? GROUP BY container.accountId
                """, arguments: [cutoff])
            try db.cachedStatement(sql: "DELETE FROM revision WHERE state IN ('replaced', 'resolved', 'superseded') AND created < ?").execute(arguments: [cutoff])
            let revisions = db.changesCount
            for row in freed {
                try db.execute(sql: "UPDATE account SET metadataBytes = metadataBytes - ? WHERE id = ?", arguments: [row["cost"] as Int64, row["accountId"] as Int64])
            }
            // Chunks no revision waits for any more are no longer reserved.
            let unreserved = try Row.fetchAll(db, sql: """
                SELECT accountId, hash, size FROM pendingChunk WHERE NOT EXISTS
                    (SELECT 1 FROM revisionWaiting WHERE revisionWaiting.accountId = pendingChunk.accountId AND revisionWaiting.hash = pendingChunk.hash)
                """)
            for row in unreserved {
                try db.execute(sql: "DELETE FROM pendingChunk WHERE accountId = ? AND hash = ?", arguments: [row["accountId"] as Int64, row["hash"] as String])
                try db.execute(sql: "UPDATE account SET pendingBytes = pendingBytes - ? WHERE id = ?", arguments: [row["size"] as Int64, row["accountId"] as Int64])
            }
            // (A chunk a kept chunk's sealed patch changes is kept too, and so on down its bases.)
            let orphans = try Row.fetchAll(db.cachedStatement(sql: """
                WITH RECURSIVE kept(accountId, hash) AS (
                    SELECT DISTINCT accountId, hash FROM revisionChunk
                    UNION SELECT chunk.accountId, chunk.base FROM chunk JOIN kept ON kept.accountId = chunk.accountId AND kept.hash = chunk.hash
                    WHERE chunk.base IS NOT NULL)
                SELECT chunk.accountId, chunk.hash, chunk.size FROM chunk
                LEFT JOIN kept AS used ON used.accountId = chunk.accountId AND used.hash = chunk.hash
                WHERE chunk.created < ? AND used.hash IS NULL
                """), arguments: [now.timeIntervalSince1970 - grace])
            for orphan in orphans {
                try db.cachedStatement(sql: "DELETE FROM chunk WHERE accountId = ? AND hash = ?").execute(arguments: [orphan["accountId"] as Int64, orphan["hash"] as String])
            }
            return (revisions, orphans.map { ($0["accountId"], $0["hash"]) }, orphans.reduce(0) { $0 + ($1["size"] as Int64) })
        }
    }

    /// One process serves an SQLite database: nothing to relay.
    func relayChanges(to notifier: ChangeNotifier) async {}

    func relayShare(share: String?, sequence: Int64?, accounts: [Int64], container: String, except origin: String?) async throws {}

    func ping() async throws {
        _ = try await pool.read { db in try Int.fetchOne(db.cachedStatement(sql: "SELECT 1")) }
    }

    func close() async {
        try? pool.close() // GRDB refuses only while statements run; the process is ending anyway
    }

    // MARK: Helpers

    static func containerId(_ db: Database, accountId: Int64, identifier: String) throws -> Int64? {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT id FROM container WHERE accountId = ? AND identifier = ?"), arguments: [accountId, identifier])
    }

    static func ensureContainer(_ db: Database, accountId: Int64, identifier: String) throws -> Int64 {
        if let id = try containerId(db, accountId: accountId, identifier: identifier) { return id }
        try db.cachedStatement(sql: "INSERT INTO container (accountId, identifier) VALUES (?, ?)").execute(arguments: [accountId, identifier])
        return db.lastInsertedRowID
    }

    /// The container's next sequence number (one per change).
    static func bump(_ db: Database, containerId: Int64) throws -> Int64 {
        try db.cachedStatement(sql: "UPDATE container SET sequence = sequence + 1 WHERE id = ?").execute(arguments: [containerId])
        return try Int64.fetchOne(db.cachedStatement(sql: "SELECT sequence FROM container WHERE id = ?"), arguments: [containerId]) ?? 0
    }

    static func presentChunks(_ db: Database, accountId: Int64, hashes: [String]) throws -> Set<String> {
        var present = Set<String>()
        for batch in stride(from: 0, to: hashes.count, by: 500).map({ Array(hashes[$0..<min($0 + 500, hashes.count)]) }) {
            let marks = Array(repeating: "?", count: batch.count).joined(separator: ",")
            let found = try String.fetchAll(db, sql: "SELECT hash FROM chunk WHERE accountId = ? AND hash IN (\(marks))", arguments: StatementArguments([accountId] + batch))
            present.formUnion(found)
        }
        return present
    }

    /// An item's state; `brief`: with content tokens (``ItemState/digest``) instead of manifests.
    static func itemState(_ db: Database, containerId: Int64, id: String, brief: Bool = false) throws -> ItemState? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT item.sequence, revision.* FROM item JOIN revision ON revision.id = item.currentRevision
            WHERE item.containerId = ? AND item.id = ?
            """), arguments: [containerId, id]) else { return nil }
        let kind = ItemKind(rawValue: row["kind"]) ?? .file
        let conflicts = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT id, deviceName, modificationDate, size, complete, digest, record, parent, editor FROM revision
            WHERE containerId = ? AND itemId = ? AND state = 'conflict' ORDER BY modificationDate, id
            """), arguments: [containerId, id]).map {
            let contents = try Self.contents(db, $0, kind: kind, brief: brief)
            var version = ConflictVersion(revision: $0["id"], deviceName: $0["deviceName"], modificationDate: $0["modificationDate"], size: $0["size"],
                                          uploaded: $0["complete"], manifest: contents.manifest)
            version.digest = contents.digest
            version.sealed($0["record"], parent: $0["parent"])
            version.editor = $0["editor"]
            return version
        }
        let contents = try Self.contents(db, row, kind: kind, brief: brief)
        var state = ItemState(
            id: id, revision: row["id"], name: row["name"], parent: row["parent"], kind: kind,
            size: row["size"], modificationDate: row["modificationDate"], type: row["type"], deleted: row["deleted"],
            uploaded: row["complete"], deviceName: row["deviceName"], sequence: row["sequence"],
            manifest: contents.manifest, conflicts: conflicts)
        state.digest = contents.digest
        state.record = row["record"]
        state.editor = row["editor"]
        return state
    }

    /// A revision's manifest — or, `brief`, its content token (stored, or worked out from the
    /// manifest for revisions from before tokens were stored) and an empty manifest.
    static func contents(_ db: Database, _ row: Row, kind: ItemKind, brief: Bool) throws -> (manifest: Manifest, digest: String?) {
        if brief, let digest = row["digest"] as String? { return (Manifest(), digest) }
        let manifest = try manifest(db, of: row["id"])
        return brief ? (Manifest(), ContentToken.of(manifest, kind: kind).description) : (manifest, nil)
    }

    /// The manifest of `revision` (from ``ManifestCache`` while its content token is the same,
    /// or read and decoded).
    static func manifest(_ db: Database, of revision: String) throws -> Manifest {
        let digest = try String.fetchOne(db.cachedStatement(sql: "SELECT digest FROM revision WHERE id = ?"), arguments: [revision])
        return try ManifestCache.shared.manifest(of: revision, digest: digest, stored: try {
            guard let stored = try Data.fetchOne(db.cachedStatement(sql: "SELECT manifest FROM revisionManifest WHERE revisionId = ?"), arguments: [revision]) else {
                throw SyncError(.internalServerError, "internal", "revision \(revision) has no manifest")
            }
            return stored
        }())
    }

    /// 32 random bytes as lowercase hexadecimal.
    static func randomToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }
}
