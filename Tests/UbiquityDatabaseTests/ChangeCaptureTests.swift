import Foundation
import GRDB
import Synchronization
import Testing
import UbiquityTestSupport
@testable import UbiquityDatabase

/// A store with capture installed, as a device's writer has it.
struct CapturedStore {
    let queue: DatabaseQueue
    let schema: SyncedSchema
    let clock: CaptureClock
    let capture: ChangeCapture
    let merger: StoreMerger

    static let sampleSchema = """
        CREATE TABLE item(id TEXT PRIMARY KEY, name TEXT, qty INTEGER, note BLOB);
        CREATE TABLE tag(item TEXT NOT NULL, label TEXT NOT NULL, weight REAL, PRIMARY KEY (item, label)) WITHOUT ROWID;
        """

    init(device: String, schemaSQL: String = sampleSchema, wallClock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }) throws {
        queue = try DatabaseQueue()
        try queue.write { db in try db.execute(sql: schemaSQL) }
        schema = try queue.read { db in try SyncedSchema.read(db) }
        clock = CaptureClock(clock: HybridLogicalClock(wallClock: wallClock))
        capture = ChangeCapture(schema: schema, device: device, clock: clock)
        merger = StoreMerger(schema: schema)
        try queue.writeWithoutTransaction { db in
            try ChangeCapture.createTables(db)
            try StoreMerger.createTables(db)
            try capture.install(db)
        }
    }

    /// Collects what was captured and records its stamps (as a flush does).
    func flush() throws -> [ChangeLogRecord] {
        try queue.write { db in
            let records = try capture.collect(db)
            for record in records { try merger.apply(record, local: true, db) }
            return records
        }
    }

    /// Imports other devices' records (after flushing this device's own).
    func importRecords(_ records: [ChangeLogRecord]) throws -> (flushed: [ChangeLogRecord], applied: [AppliedChange]) {
        try queue.write { db in
            let flushed = try capture.collect(db)
            for record in flushed { try merger.apply(record, local: true, db) }
            var applied: [AppliedChange] = []
            try capture.withoutCapture(db) {
                try db.execute(sql: "PRAGMA defer_foreign_keys = ON")
                for record in records {
                    clock.receive(record.timestamp)
                    applied += try merger.apply(record, local: false, db)
                }
            }
            return (flushed, applied)
        }
    }

    /// A table's rows by primary key.
    func contents(of table: String) throws -> [[LogValue]: [String: LogValue]] {
        let shape = schema.table(table)!
        return try queue.read { db in
            var result: [[LogValue]: [String: LogValue]] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT * FROM \(table.quotedDatabaseIdentifier)") {
                let key = shape.primaryKey.map { LogValue(row[$0] as DatabaseValue) }
                var values: [String: LogValue] = [:]
                for column in shape.valueColumns { values[column] = LogValue(row[column] as DatabaseValue) }
                result[key] = values
            }
            return result
        }
    }
}

@Suite struct ChangeCaptureTests {
    @Test func aTransactionBecomesOneRecordUnderOneTimestamp() throws {
        let store = try CapturedStore(device: "laptop")
        try store.queue.write { db in
            try db.execute(sql: "INSERT INTO item VALUES ('a', 'Apples', 3, NULL), ('b', 'Bread', 1, x'00ff')")
            try db.execute(sql: "UPDATE item SET qty = 4 WHERE id = 'a'")
            try db.execute(sql: "UPDATE item SET qty = 4 WHERE id = 'a'") // changes nothing: not captured
            try db.execute(sql: "INSERT INTO tag VALUES ('a', 'fruit', 0.5)")
            try db.execute(sql: "DELETE FROM item WHERE id = 'b'")
        }
        try store.queue.write { db in try db.execute(sql: "UPDATE item SET name = 'Green apples' WHERE id = 'a'") }
        let records = try store.flush()
        #expect(records.count == 2)
        let first = try #require(records.first)
        #expect(first.device == "laptop" && first.schema == store.schema.hash)
        #expect(first.changes == [
            RowChange(table: "item", primaryKey: [.text("a")], kind: .insert, columns: ["name": .text("Green apples"), "qty": .integer(4), "note": .null]),
            RowChange(table: "item", primaryKey: [.text("b")], kind: .insert, columns: [:]), // deleted before it was collected
            RowChange(table: "item", primaryKey: [.text("a")], kind: .update, columns: ["qty": .integer(4)]),
            RowChange(table: "tag", primaryKey: [.text("a"), .text("fruit")], kind: .insert, columns: ["weight": .real(0.5)]),
            RowChange(table: "item", primaryKey: [.text("b")], kind: .delete),
        ])
        #expect(records[1].changes == [RowChange(table: "item", primaryKey: [.text("a")], kind: .update, columns: ["name": .text("Green apples")])])
        #expect(records[0].timestamp < records[1].timestamp)
        #expect(try store.flush().isEmpty, "collected changes leave the capture table")
    }

    @Test func rolledBackChangesAreNotCaptured() throws {
        let store = try CapturedStore(device: "laptop")
        struct Abort: Error {}
        #expect(throws: Abort.self) {
            try store.queue.write { db in
                try db.execute(sql: "INSERT INTO item VALUES ('a', 'Apples', 3, NULL)")
                throw Abort()
            }
        }
        try store.queue.write { db in
            try db.execute(sql: "INSERT INTO item VALUES ('b', 'Bread', 1, NULL)")
            try? db.inSavepoint {
                try db.execute(sql: "INSERT INTO item VALUES ('c', 'Cheese', 1, NULL)")
                return .rollback
            }
        }
        let records = try store.flush()
        #expect(records.map(\.changes) == [[RowChange(table: "item", primaryKey: [.text("b")], kind: .insert, columns: ["name": .text("Bread"), "qty": .integer(1), "note": .null])]])
    }

    @Test func aChangedKeyIsADeleteAndAnInsertAndReplaceSaysWhatItDisplaced() throws {
        let store = try CapturedStore(device: "laptop", schemaSQL: "CREATE TABLE person(id TEXT PRIMARY KEY, email TEXT UNIQUE, name TEXT)")
        try store.queue.write { db in
            try db.execute(sql: "INSERT INTO person VALUES ('p1', 'ann@example.com', 'Ann'), ('p2', 'bob@example.com', 'Bob')")
        }
        _ = try store.flush()
        try store.queue.write { db in try db.execute(sql: "UPDATE person SET id = 'p9' WHERE id = 'p1'") }
        #expect(try store.flush().flatMap(\.changes) == [
            RowChange(table: "person", primaryKey: [.text("p1")], kind: .delete),
            RowChange(table: "person", primaryKey: [.text("p9")], kind: .insert, columns: ["email": .text("ann@example.com"), "name": .text("Ann")]),
        ])
        // Replacing by another unique column deletes a row of another key: that delete is captured.
        try store.queue.write { db in try db.execute(sql: "INSERT OR REPLACE INTO person VALUES ('p3', 'bob@example.com', 'Robert')") }
        #expect(try store.flush().flatMap(\.changes) == [
            RowChange(table: "person", primaryKey: [.text("p2")], kind: .delete),
            RowChange(table: "person", primaryKey: [.text("p3")], kind: .insert, columns: ["email": .text("bob@example.com"), "name": .text("Robert")]),
        ])
    }

    @Test func importsAreNotCapturedAsThisDevicesChanges() throws {
        let store = try CapturedStore(device: "laptop")
        let remote = ChangeLogRecord(timestamp: HLCTimestamp(milliseconds: 5), device: "phone", schema: store.schema.hash,
                                     changes: [RowChange(table: "item", primaryKey: [.text("x")], kind: .insert, columns: ["name": .text("Xylophone"), "qty": .integer(1), "note": .null])])
        let result = try store.importRecords([remote])
        #expect(result.applied == [AppliedChange(table: "item", primaryKey: [.text("x")], kind: .inserted, device: "phone")])
        #expect(try store.flush().isEmpty)
        #expect(try store.contents(of: "item")[[.text("x")]]?["name"] == .text("Xylophone"))
    }

    @Test func tablesWhoseKeysEachDeviceNumbersAreRefused() throws {
        for sql in ["CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT)", "CREATE TABLE note(body TEXT)"] {
            let queue = try DatabaseQueue()
            try queue.write { db in try db.execute(sql: sql) }
            #expect(throws: SyncedSchemaError.self) { try queue.read { db in try SyncedSchema.read(db) } }
            // Kept local, it is allowed.
            #expect(try queue.read { db in try SyncedSchema.read(db, localTables: ["note"]) }.tables.isEmpty)
        }
    }

    @Test func theSchemaHashFollowsTheShapeOfTheTables() throws {
        func hash(_ sql: String) throws -> String {
            let queue = try DatabaseQueue()
            try queue.write { db in try db.execute(sql: sql) }
            return try queue.read { db in try SyncedSchema.read(db) }.hash
        }
        let base = try hash("CREATE TABLE t(id TEXT PRIMARY KEY, a TEXT)")
        #expect(try hash("CREATE  TABLE t (id TEXT PRIMARY KEY,   a TEXT)") == base, "spacing does not matter")
        #expect(try hash("CREATE TABLE t(id TEXT PRIMARY KEY, a TEXT, b INTEGER)") != base)
        #expect(try hash("CREATE TABLE t(id TEXT PRIMARY KEY, a TEXT NOT NULL)") != base)
    }

    @Test func rowMetadataRoundTripsAndRefusesDamage() throws {
        var meta = RowMeta()
        meta.inserted = ChangeStamp(timestamp: HLCTimestamp(milliseconds: 1_700_000_000_000, counter: 3), device: "laptop", index: 2)
        meta.deleted = ChangeStamp(timestamp: HLCTimestamp(milliseconds: 1_700_000_000_500), device: "phone", index: 0)
        meta.stamps = ["a": meta.inserted!, "b": ChangeStamp(timestamp: HLCTimestamp(milliseconds: 1_700_000_000_900), device: "phone", index: 7)]
        meta.ghost = ["b": .blob(Data([0, 1, 2])), "c": .real(-0.25), "d": .text("ü"), "e": .null, "f": .integer(.min)]
        let bytes = meta.encoded()
        #expect(try RowMeta(encoded: bytes) == meta)
        for length in 0..<bytes.count {
            #expect(throws: (any Error).self) { try RowMeta(encoded: Array(bytes.prefix(length))) }
        }
    }
}

/// The capture on a store in WAL mode, as apps have it: transactions' ends come from SQLite's
/// write-ahead-log hook, which also does the automatic checkpoints.
@Suite struct WALCaptureTests {
    static func open(_ path: URL, checkpointFrames: Int? = nil, before: (Database) throws -> Void = { _ in }) throws -> (DatabasePool, ChangeCapture) {
        let pool = try DatabasePool(path: path.path)
        try pool.write { db in
            try db.execute(sql: "CREATE TABLE IF NOT EXISTS item(id TEXT PRIMARY KEY, name TEXT, qty INTEGER, note BLOB)")
            try before(db)
            try ChangeCapture.createTables(db)
            try StoreMerger.createTables(db)
        }
        let schema = try pool.read { db in try SyncedSchema.read(db) }
        let capture = ChangeCapture(schema: schema, device: "laptop", clock: CaptureClock(clock: HybridLogicalClock()))
        try pool.writeWithoutTransaction { db in
            if let checkpointFrames { try db.execute(sql: "PRAGMA wal_autocheckpoint = \(checkpointFrames)") }
            try capture.install(db)
        }
        return (pool, capture)
    }

    @Test func eachCommittedTransactionIsOneRecordStampedInCommitOrder() throws {
        let folder = try TemporaryDirectory("wal-capture")
        let commits = Mutex(0)
        let pool = try DatabasePool(path: folder.file("store.sqlite").path)
        try pool.write { db in
            try db.execute(sql: "CREATE TABLE item(id TEXT PRIMARY KEY, name TEXT, qty INTEGER, note BLOB)")
            try ChangeCapture.createTables(db)
        }
        let capture = ChangeCapture(schema: try pool.read { db in try SyncedSchema.read(db) }, device: "laptop", clock: CaptureClock(clock: HybridLogicalClock()))
        try pool.writeWithoutTransaction { db in try capture.install(db) { commits.withLock { $0 += 1 } } }

        try pool.write { db in try db.execute(sql: "INSERT INTO item VALUES ('a', 'Apples', 3, NULL)") }
        let first = try pool.write { db in try capture.collect(db) }
        #expect(first.count == 1)
        try pool.write { db in try db.execute(sql: "UPDATE item SET qty = 4 WHERE id = 'a'") }
        try pool.write { db in try db.execute(sql: "CREATE TABLE local(x)") } // captures nothing
        try pool.write { db in try db.execute(sql: "INSERT INTO item VALUES ('b', 'Bread', 1, NULL)") }
        let next = try pool.write { db in try capture.collect(db) }
        #expect(next.map(\.changes.count) == [1, 1], "two transactions, two records")
        #expect(next.map { $0.changes[0].primaryKey } == [[.text("a")], [.text("b")]])
        #expect(first[0].timestamp < next[0].timestamp && next[0].timestamp < next[1].timestamp)
        #expect(commits.withLock { $0 } == 3, "only the commits that captured changes are told (not the collections)")
        // The sequence never goes back: what is captured after a collection follows it.
        try pool.write { db in try db.execute(sql: "DELETE FROM item WHERE id = 'b'") }
        let last = try pool.write { db in try capture.collect(db) }
        #expect(last.map { $0.changes.map(\.kind) } == [[.delete]])
        #expect(commits.withLock { $0 } == 4)
        try pool.writeWithoutTransaction { db in try capture.uninstall(db) }
        try pool.close()
    }

    @Test func theHookKeepsCheckpointingTheLog() throws {
        let folder = try TemporaryDirectory("wal-checkpoint")
        let (pool, capture) = try Self.open(folder.file("store.sqlite"), checkpointFrames: 8)
        for index in 0..<300 {
            try pool.write { db in try db.execute(sql: "INSERT INTO item VALUES (?, 'x', 1, NULL)", arguments: ["k\(index)"]) }
        }
        let walBytes = try FileManager.default.attributesOfItem(atPath: folder.file("store.sqlite-wal").path)[.size] as? Int ?? 0
        // Without checkpoints the log holds every transaction's pages (300 × 3 pages and more).
        #expect(walBytes < 64 * 4_096, "the log was checkpointed: \(walBytes) bytes")
        let records = try pool.write { db in try capture.collect(db) }
        #expect(records.map { $0.changes.count }.reduce(0, +) == 300)
        try pool.writeWithoutTransaction { db in try capture.uninstall(db) }
        try pool.close()
    }

    @Test func changesCapturedBeforeTheStoreOpenedAreOneTransactionAndAnOlderCaptureTableMovesIn() throws {
        let folder = try TemporaryDirectory("wal-reopen")
        // An older engine kept its captured changes in `ubq_capture`, with a timestamp each.
        let (pool, capture) = try Self.open(folder.file("store.sqlite")) { db in
            try db.execute(sql: """
                CREATE TABLE ubq_capture(seq INTEGER PRIMARY KEY, tx INTEGER NOT NULL, tbl TEXT NOT NULL, kind INTEGER NOT NULL, changed INTEGER NOT NULL, k1, k2, k3, k4);
                INSERT INTO item VALUES ('old', 'Old', 1, NULL);
                INSERT INTO ubq_capture(tx, tbl, kind, changed, k1) VALUES (42, 'item', 0, -1, 'old');
                """)
        }
        #expect(try pool.read { db in try db.tableExists("ubq_capture") } == false)
        try pool.write { db in try db.execute(sql: "INSERT INTO item VALUES ('new', 'New', 2, NULL)") }
        try pool.writeWithoutTransaction { db in try capture.uninstall(db) }
        try pool.close()
        // Closed without collecting: the ends were in memory only.
        let (reopened, again) = try Self.open(folder.file("store.sqlite"))
        let records = try reopened.write { db in try again.collect(db) }
        #expect(records.count == 1)
        #expect(records.first?.changes.map(\.primaryKey) == [[.text("old")], [.text("new")]])
        try reopened.writeWithoutTransaction { db in try again.uninstall(db) }
        try reopened.close()
    }
}
