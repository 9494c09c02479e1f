import Foundation
import GRDB
import Testing
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
            try clock.withoutCapture {
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
