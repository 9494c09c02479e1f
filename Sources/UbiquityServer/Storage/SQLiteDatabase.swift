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
            try Row.fetchAll(db.cachedStatement(sql: "SELECT id, name, identityToken, quotaBytes FROM account ORDER BY name")).map {
                Account(id: $0["id"], name: $0["name"], identityToken: $0["identityToken"], quotaBytes: $0["quotaBytes"])
            }
        }
    }

    func deleteAccount(named name: String) async throws -> Bool {
        try await pool.write { db in
            try db.cachedStatement(sql: "DELETE FROM account WHERE name = ?").execute(arguments: [name])
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

    func usage(ofAccount id: Int64) async throws -> (used: Int64, quota: Int64) {
        try await pool.read { db in
            // Chunks (kept up to date by triggers) and key-value stores.
            guard let row = try Row.fetchOne(db.cachedStatement(sql: """
                SELECT usedBytes + (SELECT COALESCE(SUM(kv.size), 0) FROM kv JOIN kvStore ON kvStore.id = kv.storeId WHERE kvStore.accountId = account.id) AS used,
                    quotaBytes FROM account WHERE id = ?
                """), arguments: [id]) else { return (0, 0) }
            return (row["used"], row["quotaBytes"])
        }
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
            guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT id, name, accountId, containers FROM device WHERE tokenHash = ? AND revoked = 0"), arguments: [tokenHash]) else { return nil }
            let list: String? = row["containers"]
            return DeviceAuth(
                deviceId: row["id"], deviceName: row["name"], accountId: row["accountId"],
                containers: try list.map { try JSONDecoder().decode([String].self, from: Data($0.utf8)) })
        }
    }

    func devices(ofAccount name: String) async throws -> [DeviceInfo] {
        try await pool.read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT device.id, device.name, device.revoked FROM device JOIN account ON account.id = device.accountId
                WHERE account.name = ? ORDER BY device.created
                """), arguments: [name]).map { DeviceInfo(id: $0["id"], name: $0["name"], revoked: $0["revoked"]) }
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
                  let stored = try String.fetchOne(db.cachedStatement(sql: "SELECT kind FROM revision WHERE containerId = ? AND itemId = ? AND id = ?"),
                                                   arguments: [containerId, item, revision]),
                  let kind = ItemKind(rawValue: stored) else { return nil }
            return (kind, try Self.manifest(db, of: revision))
        }
    }

    func commit(accountId: Int64, container: String, commits: [ItemCommit], device: DeviceAuth, now: Date, brief: Bool) async throws -> [CommitOutcome] {
        let prepared = try commits.map { try PreparedCommit($0) }
        return try await pool.write { db in
            let containerId = try Self.ensureContainer(db, accountId: accountId, identifier: container)
            return try prepared.map { commit in
                try Self.commit(db, commit, accountId: accountId, containerId: containerId, device: device, now: now, brief: brief)
            }
        }
    }

    /// One commit inside a batch's transaction (what commits before it in the batch wrote is
    /// what its lookups see).
    private static func commit(_ db: Database, _ commit: PreparedCommit, accountId: Int64, containerId: Int64, device: DeviceAuth, now: Date, brief: Bool) throws -> CommitOutcome {
        let itemId = commit.item, update = commit.update, hashes = commit.hashes
        // The same change again (its answer was lost): the first answer, nothing committed twice.
        if let change = update.changeId, let earlier = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT id, state FROM revision WHERE containerId = ? AND itemId = ? AND deviceId = ? AND changeId = ?
            """), arguments: [containerId, itemId, device.deviceId, change]) {
            let revision: String = earlier["id"]
            let chunks = try String.fetchAll(db.cachedStatement(sql: "SELECT hash FROM revisionChunk WHERE revisionId = ?"), arguments: [revision])
            let present = try presentChunks(db, accountId: accountId, hashes: chunks)
            guard let item = try itemState(db, containerId: containerId, id: itemId, brief: brief) else { throw SyncError.notFound }
            return CommitOutcome(revision: revision, isCurrent: earlier["state"] == "current", item: item,
                                 missingChunks: chunks.filter { !present.contains($0) }.sorted(), repeated: true)
        }
        // An edit of a large file from a complete revision: only its new chunks are looked up.
        var looked = hashes
        if let stored = ManifestCache.shared.chunks(ofBase: update.baseRevision, forEditOf: hashes.count),
           try Bool.fetchOne(db.cachedStatement(sql: "SELECT complete FROM revision WHERE id = ? AND containerId = ? AND itemId = ?"),
                             arguments: [update.baseRevision, containerId, itemId]) == true {
            looked = hashes.filter { !stored.contains($0) }
        }
        let present = try presentChunks(db, accountId: accountId, hashes: looked)
        let missing = looked.filter { !present.contains($0) }

        // Where the new revision goes: current, or kept as a conflict version.
        let current = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT revision.id, revision.modificationDate, revision.deviceId, revision.deleted
            FROM item JOIN revision ON revision.id = item.currentRevision WHERE item.containerId = ? AND item.id = ?
            """), arguments: [containerId, itemId]).map { (id: $0["id"] as String, date: $0["modificationDate"] as Double, device: $0["deviceId"] as String, deleted: $0["deleted"] as Bool) }
        let placement = CommitPlacement(current: current, base: update.baseRevision, deleted: commit.deleted, date: update.modificationDate, device: device.deviceId)
        let state = placement.state
        var name = update.name
        var renameOther: (id: String, name: String)?
        if state == "current" && !commit.deleted {
            (name, renameOther) = try siblings(db, containerId: containerId, parent: update.parent, settling: name).settle(name: name, id: itemId)
        }
        let revision = RandomIdentifier.make()
        try db.cachedStatement(sql: """
            INSERT INTO revision (id, containerId, itemId, baseRevision, deviceId, deviceName, name, parent, kind, size,
                modificationDate, type, deleted, complete, state, created, changeId, digest)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [revision, containerId, itemId, update.baseRevision, device.deviceId, device.deviceName, name,
                             update.parent, update.kind.rawValue, commit.size, update.modificationDate, update.type,
                             commit.deleted, missing.isEmpty, state, now.timeIntervalSince1970, update.changeId, commit.digest])
        try db.cachedStatement(sql: "INSERT INTO revisionManifest (revisionId, manifest) VALUES (?, ?)").execute(arguments: [revision, commit.manifest])
        // Many rows a statement (a 64 MiB file lists about 4,000 chunks).
        for start in stride(from: 0, to: hashes.count, by: 250) {
            let batch = hashes[start..<min(start + 250, hashes.count)]
            let rows = Array(repeating: "(?, ?, ?)", count: batch.count).joined(separator: ", ")
            var values: [any DatabaseValueConvertible] = []
            values.reserveCapacity(batch.count * 3)
            for hash in batch { values += [revision, accountId, hash] as [any DatabaseValueConvertible] }
            try db.cachedStatement(sql: "INSERT INTO revisionChunk (revisionId, accountId, hash) VALUES \(rows)").execute(arguments: StatementArguments(values))
        }
        for hash in missing {
            try db.cachedStatement(sql: "INSERT INTO revisionWaiting (accountId, hash, revisionId) VALUES (?, ?, ?)").execute(arguments: [accountId, hash, revision])
        }
        // The container's chunks (what a device limited to it may read): those of the base are
        // there already.
        for hash in looked {
            try db.cachedStatement(sql: "INSERT OR IGNORE INTO containerChunk (containerId, hash) VALUES (?, ?)").execute(arguments: [containerId, hash])
        }
        if let demoted = placement.demoted {
            try db.cachedStatement(sql: "UPDATE revision SET state = ? WHERE id = ?").execute(arguments: [demoted.state, demoted.id])
        }
        let sequence = try bump(db, containerId: containerId)
        if state == "current" {
            let keys = NameCollision.indexKeys(name: name, parent: update.parent, deleted: commit.deleted)
            try db.cachedStatement(sql: """
                INSERT INTO item (containerId, id, currentRevision, sequence, parentKey, nameKey) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT(containerId, id) DO UPDATE SET currentRevision = excluded.currentRevision, sequence = excluded.sequence,
                    parentKey = excluded.parentKey, nameKey = excluded.nameKey
                """).execute(arguments: [containerId, itemId, revision, sequence, keys.parent, keys.name])
        } else {
            try db.cachedStatement(sql: "UPDATE item SET sequence = ? WHERE containerId = ? AND id = ?").execute(arguments: [sequence, containerId, itemId])
        }
        if let renameOther {
            try serverRename(db, containerId: containerId, itemId: renameOther.id, to: renameOther.name, now: now)
        }
        guard let item = try itemState(db, containerId: containerId, id: itemId, brief: brief) else {
            throw SyncError(.internalServerError, "internal", "the item vanished during its commit")
        }
        ManifestCache.shared.remember(commit.update.manifest, of: revision) // the base of the next edit's difference
        return CommitOutcome(revision: revision, isCurrent: state == "current", item: item, missingChunks: missing)
    }

    func resolve(accountId: Int64, container: String, itemId: String, request: ResolveRequest) async throws -> ItemState {
        try await pool.write { db in
            guard let containerId = try Self.containerId(db, accountId: accountId, identifier: container),
                  let current = try String.fetchOne(db.cachedStatement(sql: "SELECT currentRevision FROM item WHERE containerId = ? AND id = ?"), arguments: [containerId, itemId])
            else { throw SyncError.notFound }
            let conflicts = Set(try String.fetchAll(db.cachedStatement(sql: "SELECT id FROM revision WHERE containerId = ? AND itemId = ? AND state = 'conflict'"), arguments: [containerId, itemId]))
            guard request.keep == current || conflicts.contains(request.keep) else {
                throw SyncError(.conflict, "notAVersion", "\(request.keep) is neither the current revision nor a conflict version of the item")
            }
            for removed in request.remove where !conflicts.contains(removed) && removed != current {
                throw SyncError(.conflict, "notAVersion", "\(removed) is not a conflict version of the item")
            }
            let sequence = try Self.bump(db, containerId: containerId)
            if request.keep != current {
                try db.cachedStatement(sql: "UPDATE revision SET state = 'conflict' WHERE id = ?").execute(arguments: [current])
                try db.cachedStatement(sql: "UPDATE revision SET state = 'current' WHERE id = ?").execute(arguments: [request.keep])
            }
            for removed in request.remove where removed != request.keep {
                try db.cachedStatement(sql: "UPDATE revision SET state = 'resolved' WHERE id = ?").execute(arguments: [removed])
            }
            try db.cachedStatement(sql: "UPDATE item SET currentRevision = ?, sequence = ? WHERE containerId = ? AND id = ?").execute(arguments: [request.keep, sequence, containerId, itemId])
            try Self.refreshIndexKeys(db, containerId: containerId, itemId: itemId)
            guard let item = try Self.itemState(db, containerId: containerId, id: itemId) else { throw SyncError.notFound }
            return item
        }
    }

    // MARK: Key-value stores

    func applyKeyValues(accountId: Int64, store: String, changes: [KeyValueChange], device: DeviceAuth, room: Int64) async throws -> KeyValueResponse {
        let encoded = try changes.map { change in (change, try change.value.map { try JSONEncoder().encode($0) }) }
        return try await pool.write { db in
            let storeId: Int64
            if let id = try Int64.fetchOne(db.cachedStatement(sql: "SELECT id FROM kvStore WHERE accountId = ? AND identifier = ?"), arguments: [accountId, store]) {
                storeId = id
            } else {
                try db.cachedStatement(sql: "INSERT INTO kvStore (accountId, identifier) VALUES (?, ?)").execute(arguments: [accountId, store])
                storeId = db.lastInsertedRowID
            }
            try db.cachedStatement(sql: "UPDATE kvStore SET sequence = sequence + 1 WHERE id = ?").execute(arguments: [storeId])
            let sequence = try Int64.fetchOne(db.cachedStatement(sql: "SELECT sequence FROM kvStore WHERE id = ?"), arguments: [storeId]) ?? 0
            for (change, value) in encoded {
                if let existing = try Row.fetchOne(db.cachedStatement(sql: "SELECT timestamp, deviceId FROM kv WHERE storeId = ? AND key = ?"), arguments: [storeId, change.key]) {
                    guard ConflictRule.winner((change.timestamp, device.deviceId), over: (existing["timestamp"], existing["deviceId"])) else { continue }
                }
                try db.cachedStatement(sql: """
                    INSERT INTO kv (storeId, key, value, size, timestamp, deviceId, deviceName, sequence) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT(storeId, key) DO UPDATE SET value = excluded.value, size = excluded.size, timestamp = excluded.timestamp,
                        deviceId = excluded.deviceId, deviceName = excluded.deviceName, sequence = excluded.sequence
                    """).execute(arguments: [storeId, change.key, value, value.map { change.key.utf8.count + $0.count } ?? 0,
                                     change.timestamp, device.deviceId, device.deviceName, sequence])
            }
            // Apple's limits, over the store as it would be: violating them changes nothing.
            let keys = try Int.fetchOne(db.cachedStatement(sql: "SELECT COUNT(*) FROM kv WHERE storeId = ? AND value IS NOT NULL"), arguments: [storeId]) ?? 0
            let bytes = try Int.fetchOne(db.cachedStatement(sql: "SELECT COALESCE(SUM(size), 0) FROM kv WHERE storeId = ?"), arguments: [storeId]) ?? 0
            try KeyValueLimits.checkStore(keys: keys, bytes: bytes, room: room)
            let named = Set(changes.map(\.key))
            let entries = try Self.keyValueEntries(db, storeId: storeId, since: 0).filter { named.contains($0.key) }
            return KeyValueResponse(sequence: sequence, entries: entries)
        }
    }

    func keyValueUsage(accountId: Int64, store: String) async throws -> KeyValueUsage {
        try await pool.read { db in
            let row = try Row.fetchOne(db.cachedStatement(sql: """
                SELECT (SELECT COUNT(*) FROM kvStore WHERE accountId = ?) AS stores,
                    (SELECT COALESCE(SUM(kv.size), 0) FROM kv JOIN kvStore ON kvStore.id = kv.storeId WHERE kvStore.accountId = ?) AS bytes,
                    (SELECT COALESCE(SUM(kv.size), 0) FROM kv JOIN kvStore ON kvStore.id = kv.storeId WHERE kvStore.accountId = ? AND kvStore.identifier = ?) AS storeBytes,
                    EXISTS (SELECT 1 FROM kvStore WHERE accountId = ? AND identifier = ?) AS storeExists
                """), arguments: [accountId, accountId, accountId, store, accountId, store])
            return KeyValueUsage(stores: row?["stores"] ?? 0, bytes: row?["bytes"] ?? 0, storeBytes: row?["storeBytes"] ?? 0, storeExists: row?["storeExists"] ?? false)
        }
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
        try Row.fetchAll(db.cachedStatement(sql: "SELECT key, value, timestamp, deviceName, sequence FROM kv WHERE storeId = ? AND sequence > ? ORDER BY sequence, key"), arguments: [storeId, since]).map {
            let value: Data? = $0["value"]
            return KeyValueEntry(key: $0["key"], value: try value.map { try JSONDecoder().decode(PropertyListValue.self, from: $0) },
                                 timestamp: $0["timestamp"], deviceName: $0["deviceName"], sequence: $0["sequence"])
        }
    }

    // MARK: Recovery and garbage collection

    func recoverable(accountName: String, now: Date, retention: TimeInterval) async throws -> [RecoverableRevision] {
        try await pool.read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT revision.id, container.identifier, revision.itemId, revision.name, revision.deviceName, revision.size,
                    revision.modificationDate, revision.created, revision.state, revision.complete,
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
                    itemDeleted: ($0["itemDeleted"] as Bool?) ?? false, uploaded: $0["complete"])
            }
        }
    }

    func restore(accountName: String, revision: String, now: Date) async throws -> (container: String, sequence: Int64)? {
        try await pool.write { db in
            guard let row = try Row.fetchOne(db.cachedStatement(sql: """
                SELECT revision.containerId, revision.itemId, container.identifier FROM revision
                JOIN container ON container.id = revision.containerId JOIN account ON account.id = container.accountId
                WHERE account.name = ? AND revision.id = ? AND revision.state IN ('replaced', 'resolved', 'superseded') AND revision.deleted = 0
                """), arguments: [accountName, revision]) else { return nil }
            let containerId: Int64 = row["containerId"]
            let itemId: String = row["itemId"]
            let restored = RandomIdentifier.make()
            try db.cachedStatement(sql: """
                INSERT INTO revision (id, containerId, itemId, baseRevision, deviceId, deviceName, name, parent, kind, size,
                    modificationDate, type, deleted, complete, state, created, digest)
                SELECT ?, containerId, itemId, (SELECT currentRevision FROM item WHERE containerId = ? AND id = ?), 'server', 'server',
                    name, parent, kind, size, modificationDate, type, 0, complete, 'current', ?, digest
                FROM revision WHERE id = ?
                """).execute(arguments: [restored, containerId, itemId, now.timeIntervalSince1970, revision])
            try Self.copyManifest(db, of: revision, to: restored)
            try Self.copyWaiting(db, of: revision, to: restored)
            try db.cachedStatement(sql: "INSERT INTO revisionChunk (revisionId, accountId, hash) SELECT ?, accountId, hash FROM revisionChunk WHERE revisionId = ?").execute(arguments: [restored, revision])
            try db.cachedStatement(sql: "UPDATE revision SET state = 'replaced' WHERE id = (SELECT currentRevision FROM item WHERE containerId = ? AND id = ?)").execute(arguments: [containerId, itemId])
            let sequence = try Self.bump(db, containerId: containerId)
            try db.cachedStatement(sql: "UPDATE item SET currentRevision = ?, sequence = ? WHERE containerId = ? AND id = ?").execute(arguments: [restored, sequence, containerId, itemId])
            try Self.refreshIndexKeys(db, containerId: containerId, itemId: itemId)
            return (row["identifier"], sequence)
        }
    }

    func collectGarbage(now: Date, retention: TimeInterval, grace: TimeInterval) async throws -> (revisions: Int, chunks: [(Int64, String)], bytes: Int64) {
        try await pool.write { db in
            try db.cachedStatement(sql: "DELETE FROM revision WHERE state IN ('replaced', 'resolved', 'superseded') AND created < ?").execute(arguments: [now.timeIntervalSince1970 - retention])
            let revisions = db.changesCount
            let orphans = try Row.fetchAll(db.cachedStatement(sql: """
                SELECT chunk.accountId, chunk.hash, chunk.size FROM chunk
                LEFT JOIN (SELECT DISTINCT accountId, hash FROM revisionChunk) AS used ON used.accountId = chunk.accountId AND used.hash = chunk.hash
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

    func ping() async throws {
        _ = try await pool.read { db in try Int.fetchOne(db.cachedStatement(sql: "SELECT 1")) }
    }

    func close() async {
        try? pool.close() // GRDB refuses only while statements run; the process is ending anyway
    }

    // MARK: Helpers

    /// A new current revision of an item, made by the server: the same contents under another name.
    static func serverRename(_ db: Database, containerId: Int64, itemId: String, to name: String, now: Date) throws {
        guard let current = try String.fetchOne(db.cachedStatement(sql: "SELECT currentRevision FROM item WHERE containerId = ? AND id = ?"), arguments: [containerId, itemId]) else { return }
        let revision = RandomIdentifier.make()
        try db.cachedStatement(sql: """
            INSERT INTO revision (id, containerId, itemId, baseRevision, deviceId, deviceName, name, parent, kind, size,
                modificationDate, type, deleted, complete, state, created, digest)
            SELECT ?, containerId, itemId, id, 'server', 'server', ?, parent, kind, size, modificationDate, type, deleted, complete, 'current', ?, digest
            FROM revision WHERE id = ?
            """).execute(arguments: [revision, name, now.timeIntervalSince1970, current])
        try copyManifest(db, of: current, to: revision)
        try copyWaiting(db, of: current, to: revision)
        try db.cachedStatement(sql: "INSERT INTO revisionChunk (revisionId, accountId, hash) SELECT ?, accountId, hash FROM revisionChunk WHERE revisionId = ?").execute(arguments: [revision, current])
        try db.cachedStatement(sql: "UPDATE revision SET state = 'replaced' WHERE id = ?").execute(arguments: [current])
        let sequence = try bump(db, containerId: containerId)
        try db.cachedStatement(sql: "UPDATE item SET currentRevision = ?, sequence = ? WHERE containerId = ? AND id = ?").execute(arguments: [revision, sequence, containerId, itemId])
        try refreshIndexKeys(db, containerId: containerId, itemId: itemId)
    }

    /// The live items a settlement of `name` in `parent` may clash with, found with the
    /// folder-and-name index; the whole folder when every candidate name is taken.
    static func siblings(_ db: Database, containerId: Int64, parent: String?, settling name: String) throws -> SiblingNames {
        let keys = NameCollision.candidateKeys(for: name)
        let marks = Array(repeating: "?", count: keys.count).joined(separator: ",")
        let found = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT item.id, revision.name FROM item JOIN revision ON revision.id = item.currentRevision
            WHERE item.containerId = ? AND item.parentKey = ? AND item.nameKey IN (\(marks))
            """), arguments: StatementArguments([containerId, parent ?? ""] + keys)).map { (id: $0["id"] as String, name: $0["name"] as String) }
        guard found.count >= keys.count else { return SiblingNames(found) }
        return SiblingNames(try Row.fetchAll(db.cachedStatement(sql: """
            SELECT item.id, revision.name FROM item JOIN revision ON revision.id = item.currentRevision
            WHERE item.containerId = ? AND item.parentKey = ? AND item.nameKey != ''
            """), arguments: [containerId, parent ?? ""]).map { (id: $0["id"] as String, name: $0["name"] as String) })
    }

    /// Sets the item's folder and name keys from its current revision (after it changed).
    static func refreshIndexKeys(_ db: Database, containerId: Int64, itemId: String) throws {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT revision.name, revision.parent, revision.deleted FROM item JOIN revision ON revision.id = item.currentRevision
            WHERE item.containerId = ? AND item.id = ?
            """), arguments: [containerId, itemId]) else { return }
        let keys = NameCollision.indexKeys(name: row["name"], parent: row["parent"], deleted: row["deleted"])
        try db.cachedStatement(sql: "UPDATE item SET parentKey = ?, nameKey = ? WHERE containerId = ? AND id = ?").execute(arguments: [keys.parent, keys.name, containerId, itemId])
    }

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

    /// The item changed without a new revision (its revision completed, or lost a chunk): the
    /// container's next sequence, now the item's too.
    static func advance(_ db: Database, containerId: Int64, itemId: String) throws -> Int64 {
        let sequence = try bump(db, containerId: containerId)
        try db.cachedStatement(sql: "UPDATE item SET sequence = ? WHERE containerId = ? AND id = ?").execute(arguments: [sequence, containerId, itemId])
        return sequence
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
            SELECT id, deviceName, modificationDate, size, complete, digest FROM revision
            WHERE containerId = ? AND itemId = ? AND state = 'conflict' ORDER BY modificationDate, id
            """), arguments: [containerId, id]).map {
            let contents = try Self.contents(db, $0, kind: kind, brief: brief)
            var version = ConflictVersion(revision: $0["id"], deviceName: $0["deviceName"], modificationDate: $0["modificationDate"], size: $0["size"],
                                          uploaded: $0["complete"], manifest: contents.manifest)
            version.digest = contents.digest
            return version
        }
        let contents = try Self.contents(db, row, kind: kind, brief: brief)
        var state = ItemState(
            id: id, revision: row["id"], name: row["name"], parent: row["parent"], kind: kind,
            size: row["size"], modificationDate: row["modificationDate"], type: row["type"], deleted: row["deleted"],
            uploaded: row["complete"], deviceName: row["deviceName"], sequence: row["sequence"],
            manifest: contents.manifest, conflicts: conflicts)
        state.digest = contents.digest
        return state
    }

    /// A revision's manifest — or, `brief`, its content token (stored, or worked out from the
    /// manifest for revisions from before tokens were stored) and an empty manifest.
    static func contents(_ db: Database, _ row: Row, kind: ItemKind, brief: Bool) throws -> (manifest: Manifest, digest: String?) {
        if brief, let digest = row["digest"] as String? { return (Manifest(), digest) }
        let manifest = try manifest(db, of: row["id"])
        return brief ? (Manifest(), ContentToken.of(manifest, kind: kind)) : (manifest, nil)
    }

    /// The manifest of `revision` (from ``ManifestCache``, or read and decoded).
    static func manifest(_ db: Database, of revision: String) throws -> Manifest {
        try ManifestCache.shared.manifest(of: revision, stored: try {
            guard let stored = try Data.fetchOne(db.cachedStatement(sql: "SELECT manifest FROM revisionManifest WHERE revisionId = ?"), arguments: [revision]) else {
                throw SyncError(.internalServerError, "internal", "revision \(revision) has no manifest")
            }
            return stored
        }())
    }

    /// Makes revision `copy` wait for the chunks revision `revision` waits for (a server-made
    /// revision of the same contents).
    static func copyWaiting(_ db: Database, of revision: String, to copy: String) throws {
        try db.cachedStatement(sql: "INSERT INTO revisionWaiting (accountId, hash, revisionId) SELECT accountId, hash, ? FROM revisionWaiting WHERE revisionId = ?")
            .execute(arguments: [copy, revision])
    }

    /// Gives revision `copy` the manifest of revision `revision` (a server-made revision of the same contents).
    static func copyManifest(_ db: Database, of revision: String, to copy: String) throws {
        try db.cachedStatement(sql: "INSERT INTO revisionManifest (revisionId, manifest) SELECT ?, manifest FROM revisionManifest WHERE revisionId = ?")
            .execute(arguments: [copy, revision])
    }

    /// 32 random bytes as lowercase hexadecimal.
    static func randomToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }
}
