import Foundation
import GRDB
import Synchronization
import Testing
import UbiquityTestSupport
import UbiquityClient
@testable import UbiquityDatabase

/// Two devices, each with its own container; the test moves log files between them as the sync
/// agent would (each file whole, appearing under its name at once).
struct TwoDevices {
    let root: TemporaryDirectory
    var a: URL { root.file("device-a") }
    var b: URL { root.file("device-b") }

    init() throws { root = try TemporaryDirectory("database") }

    static func migrator(upTo version: Int = 1) -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "recipe") { t in
                t.primaryKey("id", .text)
                t.column("title", .text).notNull()
                t.column("minutes", .integer)
            }
        }
        if version >= 2 {
            migrator.registerMigration("v2") { db in
                try db.alter(table: "recipe") { t in t.add(column: "rating", .integer) }
            }
        }
        return migrator
    }

    func open(_ container: URL, version: Int = 1, automatically: Bool = false) throws -> UbiquitousDatabase {
        try UbiquitousDatabase(container: container, name: "Recipes", migrator: Self.migrator(upTo: version), automaticallySynchronizes: automatically)
    }

    /// Copies the log files one container has and the other lacks (what the agents do).
    func exchange() throws {
        try Self.copyLogs(from: a, to: b)
        try Self.copyLogs(from: b, to: a)
    }

    static func copyLogs(from source: URL, to destination: URL) throws {
        try copyDatabaseLogs(from: source, to: destination)
    }

    static func recipes(_ database: UbiquitousDatabase) throws -> [String: String] {
        try database.writer.read { db in
            Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT * FROM recipe").map { row in
                (row["id"] as String, "\(row["title"] as String)|\(row["minutes"] as Int?, default: "-")")
            })
        }
    }
}

@Suite struct UbiquitousDatabaseTests {
    @Test func aRowWrittenOnOneDeviceAppearsOnTheOtherWithANotification() throws {
        let devices = try TwoDevices(); defer { devices.root.remove() }
        let a = try devices.open(devices.a)
        let b = try devices.open(devices.b)
        #expect(a.deviceIdentifier != b.deviceIdentifier)
        try a.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r1', 'Bread', 90)") }
        try a.synchronize()
        try devices.exchange()

        let notified = Mutex<[ImportedChanges]>([])
        let observer = NotificationCenter.default.addObserver(forName: .NSPersistentStoreDidImportUbiquitousContentChanges, object: b, queue: nil) { note in
            let changes = note.userInfo?[UbiquitousDatabase.importedChangesKey] as? ImportedChanges
            let inserted = note.userInfo?[NSInsertedObjectsKey] as? Set<RowKey>
            if let changes, inserted == changes.inserted { notified.withLock { $0.append(changes) } }
        }
        defer { NotificationCenter.default.removeObserver(observer) }
        let report = try b.synchronize()
        let row = RowKey(table: "recipe", primaryKey: [.text("r1")])
        #expect(report.segments == 1 && report.changes.inserted == [row])
        #expect(notified.withLock { $0 } .map(\.inserted) == [[row]])
        #expect(notified.withLock { $0 }.first?.devices == [a.deviceIdentifier])
        #expect(try TwoDevices.recipes(b) == ["r1": "Bread|90"])
        // Nothing is imported twice.
        #expect(try b.synchronize().segments == 0)
        try a.close(); try b.close()
    }

    @Test func offlineEditsOnBothDevicesMergePerColumn() throws {
        let devices = try TwoDevices(); defer { devices.root.remove() }
        let a = try devices.open(devices.a)
        let b = try devices.open(devices.b)
        try a.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r1', 'Bread', 90), ('r2', 'Soup', 30)") }
        try a.synchronize(); try devices.exchange(); try b.synchronize()
        // Offline: A renames r1; B changes r1's time and deletes r2; A edits r2.
        try a.writer.write { db in
            try db.execute(sql: "UPDATE recipe SET title = 'Sourdough' WHERE id = 'r1'")
            try db.execute(sql: "UPDATE recipe SET minutes = 35 WHERE id = 'r2'")
        }
        try b.writer.write { db in
            try db.execute(sql: "UPDATE recipe SET minutes = 120 WHERE id = 'r1'")
            try db.execute(sql: "DELETE FROM recipe WHERE id = 'r2'")
        }
        try a.synchronize(); try b.synchronize()
        try devices.exchange()
        let fromB = try a.synchronize()
        try b.synchronize()
        #expect(fromB.changes.updated[RowKey(table: "recipe", primaryKey: [.text("r1")])] == ["minutes"])
        #expect(fromB.changes.deleted == [RowKey(table: "recipe", primaryKey: [.text("r2")])])
        #expect(try TwoDevices.recipes(a) == ["r1": "Sourdough|120"], "both columns' edits stand; the delete beats the concurrent edit")
        #expect(try TwoDevices.recipes(b) == TwoDevices.recipes(a))
        try a.close(); try b.close()
    }

    @Test func aDeletedStoreIsRebuiltFromTheLogs() async throws {
        let devices = try TwoDevices(); defer { devices.root.remove() }
        let a = try devices.open(devices.a)
        var b = try devices.open(devices.b)
        try await a.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r1', 'Bread', 90)") }
        try await b.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r2', 'Soup', 30)") }
        try await a.synchronize(); try await b.synchronize(); try devices.exchange(); try await b.synchronize()
        let before = try TwoDevices.recipes(b)
        #expect(before.count == 2)
        let oldIdentifier = b.deviceIdentifier
        try b.close()
        try FileManager.default.removeItem(at: devices.b.appendingPathComponent("Recipes.nosync"))
        b = try devices.open(devices.b)
        #expect(b.deviceIdentifier != oldIdentifier, "a rebuilt store is a new device in the logs")
        let progress = b.importProgress()
        let report = try await b.synchronize()
        #expect(report.segments == 2)
        #expect(try TwoDevices.recipes(b) == before, "its own earlier rows come back from its earlier log too")
        var reports = progress.makeAsyncIterator()
        let last = await reports.next()
        #expect(last == ImportProgress(segments: 2, totalSegments: 2, transactions: 2) && last?.fractionCompleted == 1, "progress, segment by segment")
        try a.close(); try b.close()
    }

    @Test func recordsOfANewerSchemaWaitUntilTheAppIsUpgraded() throws {
        let devices = try TwoDevices(); defer { devices.root.remove() }
        let a = try devices.open(devices.a, version: 2)
        var b = try devices.open(devices.b, version: 1)
        try a.writer.write { db in try db.execute(sql: "INSERT INTO recipe(id, title, minutes, rating) VALUES ('r1', 'Bread', 90, 5)") }
        try a.synchronize(); try devices.exchange()
        let report = try b.synchronize()
        #expect(report.segments == 0)
        #expect(report.waiting[a.deviceIdentifier]?.contains("kept until it is upgraded") == true)
        #expect(try TwoDevices.recipes(b).isEmpty, "nothing half-applied")
        try b.close()
        b = try devices.open(devices.b, version: 2)
        #expect(try b.synchronize().segments == 1)
        #expect(try b.writer.read { db in try Int.fetchOne(db, sql: "SELECT rating FROM recipe WHERE id = 'r1'") } == 5)
        // And records of the older schema apply to the newer one.
        let c = try devices.open(devices.root.file("device-c"), version: 1)
        try c.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r9', 'Jam', 20)") }
        try c.synchronize()
        try TwoDevices.copyLogs(from: devices.root.file("device-c"), to: devices.b)
        #expect(try b.synchronize().changes.inserted == [RowKey(table: "recipe", primaryKey: [.text("r9")])])
        try a.close(); try b.close(); try c.close()
    }

    @Test func aSegmentPublishedJustBeforeACrashIsNotPublishedTwice() throws {
        let devices = try TwoDevices(); defer { devices.root.remove() }
        let a = try devices.open(devices.a)
        try a.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r1', 'Bread', 90)") }
        // The steps of a synchronization up to the crash: collected, published, not yet noted.
        let records = try a.writer.write { db in
            try a.engineForTests.flush(db)
            return try Data.fetchAll(db, sql: "SELECT record FROM ubq_outbox ORDER BY tx").map { try JSONDecoder().decode(ChangeLogRecord.self, from: $0) }
        }
        try LogFolder(url: a.logsURL).publish(LogSegment(device: a.deviceIdentifier, number: 1, previous: nil, frontier: [:], records: records))
        try a.close()

        let reopened = try devices.open(devices.a)
        #expect(try reopened.writer.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM ubq_outbox") } == 0)
        try reopened.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r2', 'Soup', 30)") }
        try reopened.synchronize()
        let own = try FileManager.default.contentsOfDirectory(atPath: reopened.logsURL.appendingPathComponent(reopened.deviceIdentifier).path).sorted()
        #expect(own == ["000000000001.ubqlog", "000000000002.ubqlog"])
        let b = try devices.open(devices.b)
        try devices.exchange()
        #expect(try b.synchronize().changes.inserted.count == 2)
        try reopened.close(); try b.close()
    }

    @Test func itSynchronizesByItselfWhenLogsArrive() async throws {
        let devices = try TwoDevices(); defer { devices.root.remove() }
        let a = try devices.open(devices.a, automatically: true)
        let b = try devices.open(devices.b, automatically: true)
        let changes = b.importedChanges()
        try await a.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r1', 'Bread', 90)") }
        // A publishes by itself after its commit; the "agent" carries the file over; B imports by itself.
        let ownFolder = a.logsURL.appendingPathComponent(a.deviceIdentifier)
        let deadline = ContinuousClock.now + .seconds(10)
        while ((try? FileManager.default.contentsOfDirectory(atPath: ownFolder.path)) ?? []).filter({ $0.hasSuffix(".ubqlog") }).isEmpty {
            #expect(ContinuousClock.now < deadline, "A did not publish by itself"); if ContinuousClock.now >= deadline { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        try TwoDevices.copyLogs(from: devices.a, to: devices.b)
        let first = try await withThrowingTaskGroup(of: ImportedChanges?.self) { group in
            group.addTask { for await change in changes { return change }; return nil }
            group.addTask { try await Task.sleep(for: .seconds(10)); return nil }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
        #expect(first?.inserted == [RowKey(table: "recipe", primaryKey: [.text("r1")])])
        try a.close(); try b.close()
    }
}

@Suite struct DuplicateRowsTests {
    /// Lists and tasks; every device's first launch makes its own "Inbox" (a new UUID each).
    static func migrator() -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE list(id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE);
                CREATE TABLE task(id TEXT PRIMARY KEY, list TEXT NOT NULL REFERENCES list(id), title TEXT NOT NULL);
                """)
            try db.execute(sql: "INSERT INTO list VALUES (?, 'Inbox')", arguments: [UUID().uuidString])
        }
        return migrator
    }

    /// The duplicates a device's hook was told of.
    final class Removed: Sendable {
        let rows = Mutex<[DuplicateRows]>([])
        var all: [DuplicateRows] { rows.withLock { $0 } }
    }

    static func open(_ container: URL, removed: Removed) throws -> UbiquitousDatabase {
        try UbiquitousDatabase(container: container, name: "Tasks", migrator: migrator(), automaticallySynchronizes: false,
                               willRemoveDuplicate: { db, rows in
                                   removed.rows.withLock { $0.append(rows) }
                                   // Move the removed list's tasks to the list kept.
                                   try db.execute(sql: "UPDATE task SET list = ? WHERE list = ?", arguments: [rows.kept.primaryKey[0].databaseValue, rows.removed.primaryKey[0].databaseValue])
                               })
    }

    static func copy(_ from: URL, _ to: URL) throws {
        let manager = FileManager.default
        let logs = "Databases/Tasks/logs"
        for device in (try? manager.contentsOfDirectory(atPath: from.appendingPathComponent(logs).path)) ?? [] {
            let target = to.appendingPathComponent(logs).appendingPathComponent(device)
            try manager.createDirectory(at: target, withIntermediateDirectories: true)
            for file in try manager.contentsOfDirectory(atPath: from.appendingPathComponent(logs).appendingPathComponent(device).path)
            where file.hasSuffix(".ubqlog") && !manager.fileExists(atPath: target.appendingPathComponent(file).path) {
                try manager.copyItem(at: from.appendingPathComponent(logs).appendingPathComponent(device).appendingPathComponent(file), to: target.appendingPathComponent(file))
            }
        }
    }

    @Test func theDefaultRowEveryDeviceMadeIsKeptOnceTheSameEverywhere() throws {
        let root = try TemporaryDirectory("duplicates"); defer { root.remove() }
        let removedOnA = Removed(), removedOnB = Removed()
        let a = try Self.open(root.file("a"), removed: removedOnA)
        let b = try Self.open(root.file("b"), removed: removedOnB)
        for (database, task) in [(a, "milk"), (b, "bread")] {
            try database.writer.write { db in
                let inbox = try String.fetchOne(db, sql: "SELECT id FROM list WHERE name = 'Inbox'")
                try db.execute(sql: "INSERT INTO task VALUES (?, ?, ?)", arguments: [UUID().uuidString, inbox, task])
            }
        }
        for _ in 0..<3 {
            try a.synchronize(); try b.synchronize()
            try Self.copy(root.file("a"), root.file("b")); try Self.copy(root.file("b"), root.file("a"))
            try a.synchronize(); try b.synchronize()
        }
        func state(_ database: UbiquitousDatabase) throws -> [String] {
            try database.writer.read { db in
                try String.fetchAll(db, sql: "SELECT list.id || ' ' || list.name || ': ' || coalesce(group_concat(task.title, ','), '') FROM list LEFT JOIN (SELECT * FROM task ORDER BY title) task ON task.list = list.id GROUP BY list.id")
            }
        }
        let onA = try state(a)
        #expect(onA.count == 1 && onA[0].hasSuffix("Inbox: bread,milk"), "one Inbox, with both devices' tasks: \(onA)")
        #expect(try state(b) == onA)
        let kept = removedOnA.all + removedOnB.all
        #expect(!kept.isEmpty)
        #expect(Set(kept.map(\.kept)).count == 1, "every device kept the same row")
        try a.close(); try b.close()
    }

    @Test func rowsWrittenBeforeTheStoreSyncedAreAdopted() throws {
        let root = try TemporaryDirectory("adopt"); defer { root.remove() }
        let a = root.file("a"), b = root.file("b")
        // An app that used plain GRDB, now moving its store into the container.
        try FileManager.default.createDirectory(at: a.appendingPathComponent("Recipes.nosync"), withIntermediateDirectories: true)
        let plain = try DatabaseQueue(path: a.appendingPathComponent("Recipes.nosync/store.sqlite").path)
        try TwoDevices.migrator().migrate(plain)
        try plain.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r1', 'Bread', 90), ('r2', 'Soup', 30)") }
        try plain.close()

        let first = try UbiquitousDatabase(container: a, name: "Recipes", migrator: TwoDevices.migrator(), automaticallySynchronizes: false)
        try first.synchronize()
        let second = try UbiquitousDatabase(container: b, name: "Recipes", migrator: TwoDevices.migrator(), automaticallySynchronizes: false)
        try TwoDevices.copyLogs(from: a, to: b)
        #expect(try second.synchronize().changes.inserted.count == 2)
        #expect(try TwoDevices.recipes(second) == ["r1": "Bread|90", "r2": "Soup|30"])
        try first.close(); try second.close()
    }
}

@Suite struct VerifyTests {
    @Test func verifyFindsWhereTheStoreAndItsLogsDisagree() throws {
        let devices = try TwoDevices(); defer { devices.root.remove() }
        let a = try devices.open(devices.a)
        let b = try devices.open(devices.b)
        try a.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r1', 'Bread', 90), ('r2', 'Soup', 30)") }
        try b.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r3', 'Jam', 20)") }
        try a.synchronize(); try b.synchronize(); try devices.exchange(); try a.synchronize(); try b.synchronize()
        try b.writer.write { db in try db.execute(sql: "UPDATE recipe SET minutes = 25 WHERE id = 'r3'") } // not yet published
        #expect(try a.verify().isEmpty)
        #expect(try b.verify().isEmpty)
        // Another program changes the store behind the engine's back (its connection captures nothing).
        let intruder = try DatabaseQueue(path: b.storeURL.path)
        try intruder.write { db in
            try db.execute(sql: "UPDATE recipe SET title = 'Rye' WHERE id = 'r1'")
            try db.execute(sql: "DELETE FROM recipe WHERE id = 'r2'")
        }
        try intruder.close()
        let differences = try b.verify()
        #expect(differences.map(\.row.primaryKey) == [[.text("r1")], [.text("r2")]])
        #expect(differences.first?.inLogs?["title"] == .text("Bread") && differences.first?.inStore?["title"] == .text("Rye"))
        #expect(differences.last?.inStore == nil)
        try a.close(); try b.close()
    }
}

@Suite struct LargeTransactionTests {
    /// A transaction larger than a record goes as several records under its one timestamp, each
    /// at its place in it, collected a batch at a time; another device applies them all.
    @Test func aTransactionLargerThanARecordIsSplitAndArrivesWhole() throws {
        let root = try TemporaryDirectory("large-tx"); defer { root.remove() }
        func engine(_ name: String) throws -> (DatabaseQueue, DatabaseSyncEngine) {
            let queue = try DatabaseQueue(path: root.file("\(name).sqlite").path)
            try TwoDevices.migrator().migrate(queue)
            return (queue, try DatabaseSyncEngine(writer: queue, logs: LogFolder(url: root.file("logs")), localTables: [], logger: .init(label: "test"), changesPerRecord: 100))
        }
        let (a, sender) = try engine("a")
        let (b, receiver) = try engine("b")
        try a.write { db in
            for index in 0..<250 { try db.execute(sql: "INSERT INTO recipe VALUES (?, ?, ?)", arguments: ["r\(index)", "Recipe \(index)", index]) }
            try db.execute(sql: "UPDATE recipe SET minutes = -1 WHERE id = 'r0'") // the transaction's last change, at place 250
        }
        try a.write { db in _ = try sender.flush(db) }
        let parts = try a.read { db in try Row.fetchAll(db, sql: "SELECT tx, part FROM ubq_outbox ORDER BY tx, part") }
        #expect(parts.map { $0["part"] as Int } == [0, 100, 200, 300].filter { $0 <= 250 })
        #expect(Set(parts.map { $0["tx"] as Int64 }).count == 1, "one transaction, one timestamp")
        #expect(try sender.publish() == 1)
        let report = try receiver.importLogs()
        #expect(report.transactions == 3 && report.changes.inserted.count == 250)
        #expect(try b.read { db in try Int.fetchOne(db, sql: "SELECT minutes FROM recipe WHERE id = 'r0'") } == -1, "the update after the insert wins: places go on across parts")
        #expect(try receiver.verify().isEmpty && sender.verify().isEmpty)
    }
}

/// Devices sharing one logs folder (as if their agents synced it at once), driven step by step.
@Suite struct CompactionTests {
    static func engine(_ root: TemporaryDirectory, _ name: String) throws -> (queue: DatabaseQueue, engine: DatabaseSyncEngine) {
        let queue = try DatabaseQueue(path: root.file("\(name).sqlite").path)
        try TwoDevices.migrator().migrate(queue)
        return (queue, try DatabaseSyncEngine(writer: queue, logs: LogFolder(url: root.file("Recipes/logs")), localTables: [], logger: .init(label: name)))
    }

    static func write(_ device: (queue: DatabaseQueue, engine: DatabaseSyncEngine), _ sql: String) throws {
        try device.queue.write { db in try db.execute(sql: sql) }
        try device.queue.write { db in _ = try device.engine.flush(db) }
        try device.engine.publish()
    }

    static func recipes(_ queue: DatabaseQueue) throws -> [String] {
        try queue.read { db in try String.fetchAll(db, sql: "SELECT id || ':' || title FROM recipe ORDER BY id") }
    }

    static func segments(_ root: TemporaryDirectory, _ device: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: root.file("Recipes/logs/\(device)").path)) ?? []).filter { $0.hasSuffix(".ubqlog") }.sorted()
    }

    @Test func aNewDeviceStartsFromABaselineAndWhatEveryoneAppliedIsDeleted() throws {
        let root = try TemporaryDirectory("compaction"); defer { root.remove() }
        let a = try Self.engine(root, "a"), b = try Self.engine(root, "b")
        for index in 1...3 { try Self.write(a, "INSERT INTO recipe VALUES ('r\(index)', 'Recipe \(index)', \(index))") }
        try Self.write(a, "DELETE FROM recipe WHERE id = 'r2'")
        #expect(Self.segments(root, a.engine.device).count == 4)
        _ = try b.engine.importLogs()
        // B only imports: an empty segment tells the others how far it has come.
        #expect(try b.engine.publish(heartbeat: true) == 1)
        #expect(try b.engine.publish(heartbeat: false) == 0)

        let compaction = try a.engine.compact(registration: 3600)
        #expect(compaction.baseline == 1 && compaction.rows == 3 && compaction.deletedSegments == 3, "\(compaction)")
        #expect(Self.segments(root, a.engine.device) == ["000000000004.ubqlog"], "A's segments the baseline holds and B applied are deleted, but the newest (its frontier)")
        try Self.write(a, "INSERT INTO recipe VALUES ('r4', 'Recipe 4', 4)")

        // A new device: the baseline, then what came after it.
        let c = try Self.engine(root, "c")
        let report = try c.engine.importLogs()
        #expect(report.baselines == 1 && report.segments == 2, "\(report)") // A's segment 5, B's heartbeat
        #expect(try Self.recipes(c.queue) == ["r1:Recipe 1", "r3:Recipe 3", "r4:Recipe 4"])
        #expect(try Self.recipes(b.queue) != Self.recipes(c.queue), "B has not imported r4 yet")
        _ = try b.engine.importLogs()
        #expect(try Self.recipes(b.queue) == Self.recipes(c.queue))
        // The deleted r2 stays deleted on the new device: its tombstone came with the baseline.
        try c.queue.write { db in _ = try c.engine.flush(db) }
        #expect(try a.engine.verify().isEmpty && b.engine.verify().isEmpty && c.engine.verify().isEmpty)
    }

    @Test func tombstonesAreCollectedOnceEveryRegisteredDeviceHasSeenTheDelete() throws {
        let root = try TemporaryDirectory("tombstones"); defer { root.remove() }
        let a = try Self.engine(root, "a"), b = try Self.engine(root, "b")
        func tombstones(_ queue: DatabaseQueue) throws -> Int {
            try queue.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM ubq_row WHERE pk = ?", arguments: [Data(RowMeta.encodedKey([.text("r2")]))]) } ?? 0
        }
        try Self.write(a, "INSERT INTO recipe VALUES ('r1', 'Bread', 90), ('r2', 'Soup', 30)")
        _ = try b.engine.importLogs()
        try b.engine.publish(heartbeat: true) // B is registered: it has applied A's segment 1
        try Self.write(a, "DELETE FROM recipe WHERE id = 'r2'")
        _ = try a.engine.importLogs()
        #expect(try a.engine.collectTombstones(registration: 3600, minimumAge: 0) == 0, "B has not seen the delete yet")
        #expect(try tombstones(a.queue) == 1)
        _ = try b.engine.importLogs()
        try b.engine.publish(heartbeat: true)
        _ = try a.engine.importLogs()
        #expect(try a.engine.collectTombstones(registration: 3600) == 0, "the delete is younger than the registration")
        #expect(try a.engine.collectTombstones(registration: 3600, minimumAge: 0) == 1)
        #expect(try b.engine.collectTombstones(registration: 3600, minimumAge: 0) == 1)
        #expect(try tombstones(a.queue) == 0 && tombstones(b.queue) == 0)
        // A late update of the deleted row changes nothing anywhere.
        try Self.write(b, "INSERT INTO recipe VALUES ('r3', 'Jam', 20)")
        _ = try a.engine.importLogs()
        #expect(try Self.recipes(a.queue) == ["r1:Bread", "r3:Jam"] && Self.recipes(b.queue) == ["r1:Bread", "r3:Jam"])
        #expect(try a.engine.verify().isEmpty && b.engine.verify().isEmpty)
    }

    @Test func aDeviceAwayLongerThanTheLogsAreKeptCatchesUpFromABaselineKeepingWhatItDid() throws {
        let root = try TemporaryDirectory("compaction-away"); defer { root.remove() }
        let a = try Self.engine(root, "a"), b = try Self.engine(root, "b")
        try Self.write(a, "INSERT INTO recipe VALUES ('r1', 'Bread', 90)")
        _ = try b.engine.importLogs()
        try Self.write(b, "INSERT INTO recipe VALUES ('r0', 'Tea', 5)") // B's frontier: A's segment 1
        // B goes away; it edits offline, unpublished.
        try b.queue.write { db in
            try db.execute(sql: "INSERT INTO recipe VALUES ('r2', 'Soup', 30)")
            try db.execute(sql: "UPDATE recipe SET minutes = 100 WHERE id = 'r1'")
        }
        try Self.write(a, "INSERT INTO recipe VALUES ('r3', 'Jam', 20)")
        try Self.write(a, "UPDATE recipe SET title = 'Sourdough' WHERE id = 'r1'")
        // B has not been heard of for longer than the registration: it no longer holds A's segments back.
        _ = try a.engine.importLogs()
        let compaction = try a.engine.compact(registration: -1)
        #expect(compaction.expiredDevices == [b.engine.device] && compaction.deletedSegments == 2, "\(compaction)")
        #expect(Self.segments(root, a.engine.device) == ["000000000003.ubqlog"])

        // B is back: A's segments it needs are gone; it catches up from the baseline, keeping its own edits.
        let report = try b.engine.importLogs()
        #expect(report.baselines == 1, "\(report)")
        try b.engine.publish()
        _ = try a.engine.importLogs()
        let expected = ["r0:Tea", "r1:Sourdough", "r2:Soup", "r3:Jam"]
        #expect(try Self.recipes(a.queue) == expected && Self.recipes(b.queue) == expected)
        #expect(try b.queue.read { db in try Int.fetchOne(db, sql: "SELECT minutes FROM recipe WHERE id = 'r1'") } == 100, "B's offline edit of another column stands")
        #expect(try a.engine.verify().isEmpty && b.engine.verify().isEmpty)
    }
}

@Suite struct AccountChangeTests {
    /// Transitions a database announced.
    final class Transitions: @unchecked Sendable {
        private let lock = NSLock()
        private var values: [UInt] = []
        private var token: (any NSObjectProtocol)?
        var seen: [UInt] { lock.withLock { values } }

        init(_ database: UbiquitousDatabase) {
            token = NotificationCenter.default.addObserver(forName: .NSPersistentStoreCoordinatorStoresWillChange, object: database, queue: nil) { [weak self] note in
                guard let self, let type = note.userInfo?[NSPersistentStoreUbiquitousTransitionTypeKey] as? NSNumber else { return }
                lock.withLock { values.append(type.uintValue) }
            }
        }
        deinit { token.map(NotificationCenter.default.removeObserver) }
    }

    static func signedIn(_ root: TemporaryDirectory, account: String) throws -> UbiquityContainers {
        let paths = UbiquityPaths(configuration: root.file("config"), data: root.file("data"), runtime: root.file("run"))
        try UbiquityCredentials(server: URL(string: "http://127.0.0.1:9")!, account: account, deviceId: "d1", deviceName: "laptop",
                                token: "t", identityToken: "\(account)-identity").save(to: paths)
        return UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: ["ABCDE12345.com.example.recipes"]))
    }

    static func eventually(_ condition: () -> Bool) async -> Bool {
        for _ in 0..<500 {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return condition()
    }

    @Test func signingOutClosesTheOldAccountsStoreKeepingItsData() async throws {
        let root = try TemporaryDirectory("account"); defer { root.remove() }
        let containers = try Self.signedIn(root, account: "ada")
        let database = try UbiquitousDatabase(container: root.file("container"), name: "Recipes", migrator: TwoDevices.migrator(), containers: containers)
        let transitions = Transitions(database)
        try await database.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r1', 'Bread', 90)") }
        #expect(try UbiquityCredentials.remove(from: containers.paths))
        #expect(await Self.eventually { database.isClosed }, "signing out closes the store")
        #expect(transitions.seen == [NSPersistentStoreUbiquitousTransitionType.accountRemoved.rawValue])
        // The old account's data stays, for when it signs in again.
        let again = try UbiquitousDatabase(container: root.file("container"), name: "Recipes", migrator: TwoDevices.migrator(), automaticallySynchronizes: false)
        #expect(try TwoDevices.recipes(again) == ["r1": "Bread|90"])
        try again.close()
    }

    @Test func anotherAccountSigningInIsAnnounced() async throws {
        let root = try TemporaryDirectory("account-switch"); defer { root.remove() }
        let containers = try Self.signedIn(root, account: "ada")
        let database = try UbiquitousDatabase(container: root.file("container"), name: "Recipes", migrator: TwoDevices.migrator(), containers: containers)
        let transitions = Transitions(database)
        _ = try Self.signedIn(root, account: "grace")
        #expect(await Self.eventually { database.isClosed })
        #expect(transitions.seen == [NSPersistentStoreUbiquitousTransitionType.accountAdded.rawValue])
    }

    @Test func deletedContentTakesTheStoreWithIt() async throws {
        let root = try TemporaryDirectory("content-removed"); defer { root.remove() }
        let database = try UbiquitousDatabase(container: root.file("container"), name: "Recipes", migrator: TwoDevices.migrator(), containers: Self.signedIn(root, account: "ada"))
        let transitions = Transitions(database)
        try await database.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r1', 'Bread', 90)") }
        // "Delete All" on another device: the agent removes the content's folder here — found
        // by the folder's watcher and by however many synchronizations run meanwhile, one
        // transition all the same.
        try FileManager.default.removeItem(at: root.file("container/Databases/Recipes"))
        for _ in 0..<8 { Thread { _ = try? database.synchronize() }.start() }
        #expect(await Self.eventually { database.isClosed && !FileManager.default.fileExists(atPath: root.file("container/Recipes.nosync").path) })
        try await Task.sleep(for: .milliseconds(200))
        #expect(transitions.seen == [NSPersistentStoreUbiquitousTransitionType.contentRemoved.rawValue])
    }

    @Test func dataMadeSignedOutCanBeMergedIn() throws {
        let root = try TemporaryDirectory("merge-local"); defer { root.remove() }
        let local = try DatabaseQueue(path: root.file("local.sqlite").path)
        try TwoDevices.migrator().migrate(local)
        try local.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r1', 'Local bread', 10), ('r2', 'Soup', 30)") }
        try local.close()
        let devices = try TwoDevices(); defer { devices.root.remove() }
        let a = try devices.open(devices.a), b = try devices.open(devices.b)
        try a.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r1', 'Bread', 90)") }
        #expect(try a.mergeLocalStore(at: root.file("local.sqlite")) == 1, "rows already here are kept")
        try a.synchronize(); try devices.exchange(); try b.synchronize()
        #expect(try TwoDevices.recipes(b) == ["r1": "Bread|90", "r2": "Soup|30"], "merged rows sync as this device's changes")
        try a.close(); try b.close()
    }
}
