import Foundation
import GRDB
import UbiquityProtocol
import UbiquitySync

extension SQLiteDatabase {
    /// Runs `body` — the rules, written once as async code for both databases — inside one
    /// SQLite write transaction, on the thread that holds it: GRDB lets a `Database` be used only
    /// there, inside its synchronous closure, so the rules run as a task whose executor is that
    /// thread (``WriterThreadExecutor``) until they end. Commits when `body` returns, rolls back
    /// when it throws.
    func rules<T: Sendable>(_ body: @escaping @Sendable (SQLiteRuleStorage) async throws -> T) async throws -> T {
        try await pool.write { db in
            let executor = WriterThreadExecutor()
            let storage = SQLiteRuleStorage(db: db)
            let outcome = Outcome<T>()
            Task(executorPreference: executor) {
                defer { executor.finish() }
                do { outcome.result = .success(try await body(storage)) } catch { outcome.result = .failure(error) }
            }
            executor.runUntilFinished()
            guard let result = outcome.result else { throw SyncError(.internalServerError, "internal", "the rules ended without an outcome") }
            return try result.get()
        }
    }
}

/// Where a task running on a ``WriterThreadExecutor`` leaves its outcome (written by that
/// task on the writer's thread, read there after it ends).
private final class Outcome<T>: @unchecked Sendable {
    var result: Result<T, any Error>?
}

/// A task executor that runs its jobs on the thread that calls ``runUntilFinished()``: GRDB's
/// writer thread, blocked in `pool.write` while the rules run (it is one of GRDB's dispatch
/// threads, not one of Swift's cooperative threads, so waiting there starves nothing).
final class WriterThreadExecutor: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var finished = false

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Lets ``runUntilFinished()`` return once the jobs given so far have run.
    func finish() {
        condition.lock()
        finished = true
        condition.signal()
        condition.unlock()
    }

    /// Runs jobs on the calling thread until ``finish()``.
    func runUntilFinished() {
        while true {
            condition.lock()
            while jobs.isEmpty && !finished { condition.wait() }
            if jobs.isEmpty {
                condition.unlock()
                return
            }
            let ready = jobs
            jobs.removeAll()
            condition.unlock()
            for job in ready { job.runSynchronously(on: asUnownedTaskExecutor()) }
        }
    }
}

/// The embedded database's storage primitives for ``ServerRules``, inside one write
/// transaction. Used only on the writer's thread (``SQLiteDatabase/rules(_:)``), hence
/// `@unchecked Sendable`.
struct SQLiteRuleStorage: RuleStorage, @unchecked Sendable {
    let db: Database

    // MARK: Accounts

    func account(_ account: Int64) throws -> AccountFigures? {
        try Row.fetchOne(db.cachedStatement(sql: """
            SELECT quotaBytes, usedBytes, keyValueBytes, metadataBytes, pendingBytes, itemCount FROM account WHERE id = ?
            """), arguments: [account]).map {
            AccountFigures(quota: $0["quotaBytes"], chunkBytes: $0["usedBytes"], keyValueBytes: $0["keyValueBytes"], metadataBytes: $0["metadataBytes"],
                           pendingBytes: $0["pendingBytes"], items: $0["itemCount"])
        }
    }

    func adjust(_ account: Int64, by change: AccountChange) throws {
        try db.cachedStatement(sql: """
            UPDATE account SET keyValueBytes = keyValueBytes + ?, metadataBytes = metadataBytes + ?, pendingBytes = pendingBytes + ?,
                itemCount = itemCount + ? WHERE id = ?
            """).execute(arguments: [change.keyValueBytes, change.metadataBytes, change.pendingBytes, change.items, account])
    }

    func accountId(named name: String) throws -> Int64? {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT id FROM account WHERE name = ?"), arguments: [name])
    }

    // MARK: Containers

    func container(account: Int64, identifier: String, create: Bool) throws -> Int64? {
        create ? try SQLiteDatabase.ensureContainer(db, accountId: account, identifier: identifier)
            : try SQLiteDatabase.containerId(db, accountId: account, identifier: identifier)
    }

    func containerIdentifier(_ container: Int64) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT identifier FROM container WHERE id = ?"), arguments: [container])
    }

    func nextSequence(of container: Int64) throws -> Int64 {
        try SQLiteDatabase.bump(db, containerId: container)
    }

    /// One process serves an SQLite database: nobody else to tell.
    func announce(account: Int64, container identifier: String, sequence: Int64, keyValue: Bool, device: String?) {}

    // MARK: Commits

    func commitFacts(_ question: CommitQuestion) throws -> CommitFacts {
        var facts = CommitFacts(figures: try account(question.account))
        guard facts.figures != nil,
              let container = try SQLiteDatabase.containerId(db, accountId: question.account, identifier: question.container) else { return facts }
        facts.container = container
        if let change = question.change { facts.earlier = try revision(container: container, item: question.item, device: question.device, account: question.account, change: change) }
        if let base = question.base { facts.baseComplete = try isComplete(base, container: container, item: question.item) }
        facts.stored = try storedSizes(account: question.account, hashes: question.hashes)
        let columns = "revision.id, revision.name, revision.parent, revision.kind, revision.size, revision.modificationDate, revision.type, revision.deleted, revision.complete, revision.deviceId, revision.deviceName, revision.digest, revision.baseRevision, revision.record, revision.editor"
        facts.current = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT \(columns) FROM item JOIN revision ON revision.id = item.currentRevision WHERE item.containerId = ? AND item.id = ?
            """), arguments: [container, question.item]).map { try revisionRow($0, manifest: question.manifests) }
        facts.conflicts = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT \(columns) FROM revision WHERE containerId = ? AND itemId = ? AND state = 'conflict' ORDER BY modificationDate, id
            """), arguments: [container, question.item]).map { try revisionRow($0, manifest: question.manifests) }
        facts.siblings = try siblings(container: container, parent: question.parent, keys: question.nameKeys)
        return facts
    }

    /// A revision's row; with its stored manifest when `manifest` (unless it is kept decoded).
    private func revisionRow(_ row: Row, manifest: Bool) throws -> RevisionRow {
        let id: String = row["id"]
        let stored = manifest && ManifestCache.shared.cached(id, digest: row["digest"]) == nil
            ? try Data.fetchOne(db.cachedStatement(sql: "SELECT manifest FROM revisionManifest WHERE revisionId = ?"), arguments: [id]) : nil
        return RevisionRow(id: id, name: row["name"], parent: row["parent"], kind: row["kind"], size: row["size"], modificationDate: row["modificationDate"],
                           type: row["type"], deleted: row["deleted"], complete: row["complete"], deviceId: row["deviceId"], deviceName: row["deviceName"],
                           digest: row["digest"], manifest: stored, baseRevision: row["baseRevision"], record: row["record"], editor: row["editor"])
    }

    func record(_ record: CommitRecord) throws -> Int64 {
        let revision = record.revision
        try insert(revision)
        if let demoted = record.demoted { try setState(demoted.state, of: [demoted.id]) }
        let sequence = try nextSequence(of: revision.container)
        if let keys = record.currentKeys {
            try setCurrent(container: revision.container, item: revision.item, revision: revision.id, sequence: sequence, keys: keys)
        } else {
            try setSequence(container: revision.container, item: revision.item, sequence: sequence)
        }
        if !record.change.isEmpty { try adjust(revision.account, by: record.change) }
        return sequence
    }

    // MARK: Items and revisions

    /// The revision committed earlier with `change` as its change id by `device` — or by any
    /// device of the account when the id starts with the id of a device of the account (the
    /// agent's ids, `DEVICE.N`, keep the device they were first made on: signed in again, the
    /// agent is a new device, and a change it sends again must be answered as before — found by
    /// `ubiquity-chaos`: it was committed a second time, in conflict with itself).
    private func revision(container: Int64, item: String, device: String, account: Int64, change: String) throws -> (id: String, state: String)? {
        try Row.fetchOne(db.cachedStatement(sql: """
            SELECT id, state FROM revision WHERE containerId = ? AND itemId = ? AND changeId = ?
                AND (deviceId = ? OR EXISTS (SELECT 1 FROM device WHERE device.id = ? AND device.accountId = ?))
            """), arguments: [container, item, change, device, ChangeIdentity.madeOn(change), account]).map { ($0["id"], $0["state"]) }
    }

    func chunkHashes(of revision: String) throws -> [String] {
        try String.fetchAll(db.cachedStatement(sql: "SELECT hash FROM revisionChunk WHERE revisionId = ?"), arguments: [revision])
    }

    /// Whether the revision is complete (it is `item`'s, in `container`).
    /// Whether an edit's base is complete and its manifest the one devices were given (not
    /// rewritten in place since: a list kept of it may be the old one).
    private func isComplete(_ revision: String, container: Int64, item: String) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: "SELECT complete AND NOT sealedInPlace FROM revision WHERE id = ? AND containerId = ? AND itemId = ?"),
                          arguments: [revision, container, item]) ?? false
    }

    func currentRevision(container: Int64, item: String) throws -> CurrentRevision? {
        try Row.fetchOne(db.cachedStatement(sql: """
            SELECT revision.id, revision.modificationDate, revision.deviceId, revision.deleted
            FROM item JOIN revision ON revision.id = item.currentRevision WHERE item.containerId = ? AND item.id = ?
            """), arguments: [container, item]).map { CurrentRevision(id: $0["id"], date: $0["modificationDate"], device: $0["deviceId"], deleted: $0["deleted"]) }
    }

    func siblings(container: Int64, parent: String?, keys: [String]?) throws -> [(id: String, name: String)] {
        let rows: [Row]
        if let keys {
            let marks = Array(repeating: "?", count: keys.count).joined(separator: ",")
            rows = try Row.fetchAll(db.cachedStatement(sql: """
                SELECT item.id, revision.name FROM item JOIN revision ON revision.id = item.currentRevision
                WHERE item.containerId = ? AND item.parentKey = ? AND item.nameKey IN (\(marks))
                """), arguments: StatementArguments([container, parent ?? ""] + keys))
        } else {
            rows = try Row.fetchAll(db.cachedStatement(sql: """
                SELECT item.id, revision.name FROM item JOIN revision ON revision.id = item.currentRevision
                WHERE item.containerId = ? AND item.parentKey = ? AND item.nameKey != ''
                """), arguments: [container, parent ?? ""])
        }
        return rows.map { (id: $0["id"] as String, name: $0["name"] as String) }
    }

    func revisions(container: Int64, item: String, state: String) throws -> Set<String> {
        Set(try String.fetchAll(db.cachedStatement(sql: "SELECT id FROM revision WHERE containerId = ? AND itemId = ? AND state = ?"),
                                arguments: [container, item, state]))
    }

    /// Records a new revision (complete: the account holds every chunk it names): its row,
    /// manifest, chunk references, and its chunks as its container's.
    private func insert(_ revision: NewRevision) throws {
        let commit = revision.commit, update = commit.update
        try db.cachedStatement(sql: """
            INSERT INTO revision (id, containerId, itemId, baseRevision, deviceId, deviceName, name, parent, kind, size,
                modificationDate, type, deleted, complete, state, created, changeId, digest, cost, record, editor)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [revision.id, revision.container, revision.item, update.baseRevision, revision.device.deviceId,
                             revision.device.deviceName, revision.name, update.parent, update.kind.rawValue, commit.size, update.modificationDate,
                             update.type, commit.deleted, true, revision.state, revision.created.timeIntervalSince1970,
                             update.changeId, commit.digest, revision.cost, update.record, revision.device.editor])
        try db.cachedStatement(sql: "INSERT INTO revisionManifest (revisionId, manifest) VALUES (?, ?)").execute(arguments: [revision.id, commit.manifest])
        try insertReferences(revision: revision.id, account: revision.account, container: revision.container, hashes: commit.hashes,
                             containerChunks: revision.containerChunks)
    }

    /// A revision's chunk references (`hashes`), and `containerChunks` as its container's
    /// chunks (what a device limited to it may read).
    func insertReferences(revision: String, account: Int64, container: Int64, hashes: [String], containerChunks: [String]) throws {
        // Many rows a statement (a 64 MiB file lists about 4,000 chunks).
        for start in stride(from: 0, to: hashes.count, by: 250) {
            let batch = hashes[start..<min(start + 250, hashes.count)]
            let rows = Array(repeating: "(?, ?, ?)", count: batch.count).joined(separator: ", ")
            var values: [any DatabaseValueConvertible] = []
            values.reserveCapacity(batch.count * 3)
            for hash in batch { values += [revision, account, hash] as [any DatabaseValueConvertible] }
            try db.cachedStatement(sql: "INSERT INTO revisionChunk (revisionId, accountId, hash) VALUES \(rows)").execute(arguments: StatementArguments(values))
        }
        let naming = try db.cachedStatement(sql: "INSERT OR IGNORE INTO containerChunk (containerId, hash) VALUES (?, ?)")
        for hash in containerChunks { try naming.execute(arguments: [container, hash]) }
    }

    func copy(_ source: String, as copy: CopiedRevision) throws -> Int64 {
        try db.cachedStatement(sql: """
            INSERT INTO revision (id, containerId, itemId, baseRevision, deviceId, deviceName, name, parent, kind, size,
                modificationDate, type, deleted, complete, state, created, digest, cost, record)
            SELECT ?, containerId, itemId, ?, 'server', 'server', COALESCE(?, name), parent, kind, size, modificationDate, type, deleted, complete,
                'current', ?, digest, cost, record
            FROM revision WHERE id = ?
            """).execute(arguments: [copy.id, copy.base, copy.name, copy.created.timeIntervalSince1970, source])
        try db.cachedStatement(sql: "INSERT INTO revisionManifest (revisionId, manifest) SELECT ?, manifest FROM revisionManifest WHERE revisionId = ?")
            .execute(arguments: [copy.id, source])
        try db.cachedStatement(sql: "INSERT INTO revisionWaiting (accountId, hash, revisionId) SELECT accountId, hash, ? FROM revisionWaiting WHERE revisionId = ?")
            .execute(arguments: [copy.id, source])
        try db.cachedStatement(sql: "INSERT INTO revisionChunk (revisionId, accountId, hash) SELECT ?, accountId, hash FROM revisionChunk WHERE revisionId = ?")
            .execute(arguments: [copy.id, source])
        return try Int64.fetchOne(db.cachedStatement(sql: "SELECT cost FROM revision WHERE id = ?"), arguments: [copy.id]) ?? 0
    }

    func setState(_ state: String, of revisions: [String]) throws {
        for revision in revisions {
            try db.cachedStatement(sql: "UPDATE revision SET state = ? WHERE id = ?").execute(arguments: [state, revision])
        }
    }

    func setCurrent(container: Int64, item: String, revision: String, sequence: Int64, keys: (parent: String, name: String)) throws {
        try db.cachedStatement(sql: """
            INSERT INTO item (containerId, id, currentRevision, sequence, parentKey, nameKey) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT(containerId, id) DO UPDATE SET currentRevision = excluded.currentRevision, sequence = excluded.sequence,
                parentKey = excluded.parentKey, nameKey = excluded.nameKey
            """).execute(arguments: [container, item, revision, sequence, keys.parent, keys.name])
    }

    func setSequence(container: Int64, item: String, sequence: Int64) throws {
        try db.cachedStatement(sql: "UPDATE item SET sequence = ? WHERE containerId = ? AND id = ?").execute(arguments: [sequence, container, item])
    }

    func naming(of revision: String) throws -> (name: String, parent: String?, deleted: Bool)? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT name, parent, deleted FROM revision WHERE id = ?"), arguments: [revision])
            .map { ($0["name"], $0["parent"], $0["deleted"]) }
    }

    func itemState(container: Int64, item: String, brief: Bool) throws -> ItemState? {
        try SQLiteDatabase.itemState(db, containerId: container, id: item, brief: brief)
    }

    func restorable(account: Int64, revision: String) throws -> (container: Int64, identifier: String, item: String)? {
        try Row.fetchOne(db.cachedStatement(sql: """
            SELECT revision.containerId, revision.itemId, container.identifier FROM revision JOIN container ON container.id = revision.containerId
            WHERE container.accountId = ? AND revision.id = ? AND revision.state IN ('replaced', 'resolved', 'superseded') AND revision.deleted = 0
            """), arguments: [account, revision]).map { ($0["containerId"], $0["identifier"], $0["itemId"]) }
    }

    // MARK: Chunks

    func storedSizes(account: Int64, hashes: [String]) throws -> [String: Int64] {
        try sizes(in: "chunk", of: "CASE WHEN base IS NULL THEN size ELSE \(StoredChunk.patchSize) END", account: account, hashes: hashes)
    }


    /// The sizes the chunks among `hashes` the account waits for are counted at.
    private func pendingSizes(account: Int64, hashes: [String]) throws -> [String: Int64] {
        try sizes(in: "pendingChunk", account: account, hashes: hashes)
    }

    /// The sizes of the rows of `table` (`chunk` or `pendingChunk`) among `hashes`, 500 a statement.
    private func sizes(in table: String, of size: String = "size", account: Int64, hashes: [String]) throws -> [String: Int64] {
        var sizes: [String: Int64] = [:]
        try SQLiteDatabase.forEachRow(db, account: account, among: hashes, sql: { "SELECT hash, \(size) AS size FROM \(table) WHERE accountId = ? AND hash IN (\($0))" }) {
            sizes[$0["hash"]] = $0["size"]
        }
        return sizes
    }

    func addPending(account: Int64, chunks: [String: Int64]) throws {
        let insert = try db.cachedStatement(sql: "INSERT OR IGNORE INTO pendingChunk (accountId, hash, size) VALUES (?, ?, ?)")
        for (hash, size) in chunks.sorted(by: { $0.key < $1.key }) { try insert.execute(arguments: [account, hash, size]) }
    }

    func removePending(account: Int64, hashes: [String]) throws -> [String: Int64] {
        let pending = try pendingSizes(account: account, hashes: hashes)
        let delete = try db.cachedStatement(sql: "DELETE FROM pendingChunk WHERE accountId = ? AND hash = ?")
        for hash in pending.keys.sorted() { try delete.execute(arguments: [account, hash]) }
        return pending
    }

    func addChunks(account: Int64, chunks: [String: Int64], bases: [String: String], now: Date) throws {
        let insert = try db.cachedStatement(sql: "INSERT OR IGNORE INTO chunk (accountId, hash, size, created, base) VALUES (?, ?, ?, ?, ?)")
        for (hash, size) in chunks.sorted(by: { $0.key < $1.key }) { try insert.execute(arguments: [account, hash, size, now.timeIntervalSince1970, bases[hash]]) }
    }

    func removeChunk(account: Int64, hash: String) throws -> Int64? {
        let size = try Int64.fetchOne(db.cachedStatement(sql: "SELECT size FROM chunk WHERE accountId = ? AND hash = ?"), arguments: [account, hash])
        try db.cachedStatement(sql: "DELETE FROM chunk WHERE accountId = ? AND hash = ?").execute(arguments: [account, hash])
        return size
    }

    func revisionsWaiting(account: Int64, for hashes: [String]) throws -> [RevisionPlace] {
        var waiting: [String: RevisionPlace] = [:]
        for start in stride(from: 0, to: hashes.count, by: 500) {
            let batch = Array(hashes[start..<min(start + 500, hashes.count)])
            let marks = Array(repeating: "?", count: batch.count).joined(separator: ",")
            for row in try Row.fetchAll(db, sql: """
                SELECT DISTINCT revision.id, revision.containerId, revision.itemId, revision.state FROM revisionWaiting
                JOIN revision ON revision.id = revisionWaiting.revisionId
                WHERE revisionWaiting.accountId = ? AND revisionWaiting.hash IN (\(marks))
                """, arguments: StatementArguments([account] + batch)) {
                waiting[row["id"]] = RevisionPlace(revision: row["id"], container: row["containerId"], item: row["itemId"], state: row["state"])
            }
            try db.execute(sql: "DELETE FROM revisionWaiting WHERE accountId = ? AND hash IN (\(marks))", arguments: StatementArguments([account] + batch))
        }
        return Array(waiting.values)
    }

    func isWaiting(_ revision: String) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM revisionWaiting WHERE revisionId = ? LIMIT 1"), arguments: [revision]) == true
    }

    func setComplete(_ revision: String, _ complete: Bool) throws {
        try db.cachedStatement(sql: "UPDATE revision SET complete = ? WHERE id = ?").execute(arguments: [complete, revision])
    }

    func revisionsNaming(account: Int64, hash: String) throws -> [RevisionPlace] {
        // (No index by hash — see migration v9: a rare event scans the references once.)
        let naming = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT revision.id, revision.containerId, revision.itemId, revision.state FROM revisionChunk
            JOIN revision ON revision.id = revisionChunk.revisionId
            WHERE revisionChunk.accountId = ? AND revisionChunk.hash = ?
            """), arguments: [account, hash]).map { RevisionPlace(revision: $0["id"], container: $0["containerId"], item: $0["itemId"], state: $0["state"]) }
        for place in naming {
            try db.cachedStatement(sql: "INSERT OR IGNORE INTO revisionWaiting (accountId, hash, revisionId) VALUES (?, ?, ?)")
                .execute(arguments: [account, hash, place.revision])
        }
        return naming
    }

    // MARK: Key-value stores

    func keyValueStore(account: Int64, identifier: String) throws -> (id: Int64, created: Bool, stores: Int) {
        if let id = try Int64.fetchOne(db.cachedStatement(sql: "SELECT id FROM kvStore WHERE accountId = ? AND identifier = ?"), arguments: [account, identifier]) {
            return (id, false, 0)
        }
        let stores = try Int.fetchOne(db.cachedStatement(sql: "SELECT COUNT(*) FROM kvStore WHERE accountId = ?"), arguments: [account]) ?? 0
        try db.cachedStatement(sql: "INSERT INTO kvStore (accountId, identifier) VALUES (?, ?)").execute(arguments: [account, identifier])
        return (db.lastInsertedRowID, true, stores)
    }

    func nextKeyValueSequence(of store: Int64) throws -> Int64 {
        try db.cachedStatement(sql: "UPDATE kvStore SET sequence = sequence + 1 WHERE id = ?").execute(arguments: [store])
        return try Int64.fetchOne(db.cachedStatement(sql: "SELECT sequence FROM kvStore WHERE id = ?"), arguments: [store]) ?? 0
    }

    func keyValueEntry(store: Int64, key: String) throws -> (timestamp: Double, device: String, size: Int64)? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT timestamp, deviceId, size FROM kv WHERE storeId = ? AND key = ?"), arguments: [store, key])
            .map { ($0["timestamp"], $0["deviceId"], $0["size"]) }
    }

    func setKeyValue(store: Int64, key: String, value: Data?, sealed: Data?, size: Int64, timestamp: Double, device: DeviceAuth, sequence: Int64) throws {
        try db.cachedStatement(sql: """
            INSERT INTO kv (storeId, key, value, sealed, size, timestamp, deviceId, deviceName, sequence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(storeId, key) DO UPDATE SET value = excluded.value, sealed = excluded.sealed, size = excluded.size, timestamp = excluded.timestamp,
                deviceId = excluded.deviceId, deviceName = excluded.deviceName, sequence = excluded.sequence
            """).execute(arguments: [store, key, value, sealed, size, timestamp, device.deviceId, device.deviceName, sequence])
    }

    func purgePlaintextRemovals(store: Int64) throws {
        try db.cachedStatement(sql: "DELETE FROM kv WHERE storeId = ? AND value IS NULL AND sealed IS NULL").execute(arguments: [store])
    }

    func keyValueTotals(store: Int64) throws -> (keys: Int, bytes: Int64) {
        let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT COUNT(value) AS keys, COALESCE(SUM(size), 0) AS bytes FROM kv WHERE storeId = ?"), arguments: [store])
        return (row?["keys"] ?? 0, row?["bytes"] ?? 0)
    }

    func keyValueEntries(store: Int64, keys: Set<String>) throws -> [KeyValueEntry] {
        try keys.sorted().compactMap { key in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT key, value, sealed, timestamp, deviceName, sequence FROM kv WHERE storeId = ? AND key = ?"),
                             arguments: [store, key])
        }.sorted { ($0["sequence"] as Int64, $0["key"] as String) < ($1["sequence"] as Int64, $1["key"] as String) }.map(SQLiteDatabase.keyValueEntry)
    }
}
