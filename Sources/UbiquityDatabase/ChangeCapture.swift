import Foundation
import GRDB
import Synchronization

/// The clock and the current transaction of one store's writer, shared by its capture triggers
/// (through SQL functions), the capture's transaction observer and the import.
final class CaptureClock: Sendable {
    private struct State {
        var clock: HybridLogicalClock
        /// The current transaction's timestamp, once it changed a synced row.
        var current: HLCTimestamp?
        /// Whether writes are captured (not while importing other devices' changes).
        var capturing = true
    }

    private let state: Mutex<State>

    init(clock: HybridLogicalClock) {
        state = Mutex(State(clock: clock))
    }

    /// The current transaction's timestamp, ticked at its first captured change; nil while
    /// capture is off.
    func transactionTimestamp() -> HLCTimestamp? {
        state.withLock { state in
            guard state.capturing else { return nil }
            if let current = state.current { return current }
            let timestamp = state.clock.tick()
            state.current = timestamp
            return timestamp
        }
    }

    /// Ends the current transaction (committed or rolled back); whether it had captured changes.
    @discardableResult
    func endTransaction() -> Bool {
        state.withLock { state in
            defer { state.current = nil }
            return state.current != nil
        }
    }

    /// Runs `body` with capture off (writes made while importing are other devices' changes).
    func withoutCapture<T>(_ body: () throws -> T) rethrows -> T {
        try capturing(false, body)
    }

    /// Runs `body` with capture on or off, then puts it back as it was.
    func capturing<T>(_ on: Bool, _ body: () throws -> T) rethrows -> T {
        let before = state.withLock { state in
            defer { state.capturing = on }
            return state.capturing
        }
        defer { state.withLock { $0.capturing = before } }
        return try body()
    }

    /// A timestamp for a change this device makes outside the capture (a duplicate removed,
    /// rows adopted), after every other.
    func tick() -> HLCTimestamp {
        state.withLock { $0.clock.tick() }
    }

    /// Takes in another device's timestamp: later local transactions come after it.
    func receive(_ remote: HLCTimestamp) {
        state.withLock { _ = $0.clock.receive(remote) }
    }

    /// The latest timestamp made or seen.
    var latest: HLCTimestamp { state.withLock(\.clock.latest) }
}

extension HLCTimestamp {
    /// The timestamp as one integer: milliseconds in the high 48 bits, the counter in the low 16
    /// (ordered as the timestamps are).
    var packed: Int64 { milliseconds << 16 | Int64(counter) }

    /// A timestamp from ``packed``.
    init(packed: Int64) {
        self.init(milliseconds: packed >> 16, counter: UInt16(truncatingIfNeeded: packed & 0xFFFF))
    }
}

/// Captures the committed changes of a store's synced tables, as GRDB's writer makes them:
/// temporary triggers on the writer's connection record each inserted, updated (which columns)
/// and deleted row by primary key in `ubq_capture`, inside the app's own transaction — so a
/// change and its record commit or roll back together, and a crash loses neither — under one
/// hybrid-logical-clock timestamp per transaction. ``collect(_:)`` later turns the captured
/// rows into one ``ChangeLogRecord`` per transaction, reading the rows' values then.
///
/// The triggers are temporary (the connection's own): other programs opening the store are not
/// affected, and nothing of the engine is written into the app's schema but its `ubq_` tables.
final class ChangeCapture: Sendable {
    /// The synced tables.
    let schema: SyncedSchema
    /// The device that makes the records.
    let device: String
    /// The writer's clock.
    let clock: CaptureClock

    init(schema: SyncedSchema, device: String, clock: CaptureClock, changesPerRecord: Int = ChangeCapture.defaultChangesPerRecord) {
        self.schema = schema
        self.device = device
        self.clock = clock
        self.changesPerRecord = changesPerRecord
    }

    /// Creates the capture table.
    static func createTables(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE IF NOT EXISTS ubq_capture(
                seq INTEGER PRIMARY KEY,
                tx INTEGER NOT NULL,
                tbl TEXT NOT NULL,
                kind INTEGER NOT NULL,
                changed INTEGER NOT NULL,
                k1, k2, k3, k4)
            """)
    }

    /// Installs the SQL functions, the transaction observer and the triggers on the writer's
    /// connection (once per connection, after the app's migrations).
    /// - Parameters:
    ///   - db: The writer's connection.
    ///   - onCommit: Called after each commit of a transaction that changed synced rows (on the
    ///     writer's thread: hand the work elsewhere).
    func install(_ db: Database, onCommit: @escaping @Sendable () -> Void = {}) throws {
        let clock = self.clock
        // NULL while capture is off: the trigger's `INSERT OR IGNORE` then writes nothing (its
        // `tx` is NOT NULL), one function call a row either way.
        db.add(function: DatabaseFunction("ubq_transaction", argumentCount: 0, pure: false) { _ in
            clock.transactionTimestamp()?.packed
        })
        db.add(transactionObserver: TransactionEnd(clock: clock, onCommit: onCommit), extent: .databaseLifetime)
        // REPLACE deletes the rows it displaces; with recursive triggers on, it says so.
        try db.execute(sql: "PRAGMA recursive_triggers = ON")
        for table in schema.tables {
            for statement in Self.triggers(for: table) { try db.execute(sql: statement) }
        }
    }

    /// The triggers capturing `table`'s changes.
    static func triggers(for table: SyncedTable) -> [String] {
        let name = table.name.quotedDatabaseIdentifier
        let tableLiteral = "'" + table.name.replacingOccurrences(of: "'", with: "''") + "'"
        func keys(_ row: String) -> String {
            (0..<SyncedTable.maximumKeyColumns).map { $0 < table.primaryKey.count ? "\(row).\(table.primaryKey[$0].quotedDatabaseIdentifier)" : "NULL" }.joined(separator: ", ")
        }
        func capture(kind: Int, changed: String, row: String) -> String {
            "INSERT OR IGNORE INTO ubq_capture(tx, tbl, kind, changed, k1, k2, k3, k4) VALUES (ubq_transaction(), \(tableLiteral), \(kind), \(changed), \(keys(row)));"
        }
        let sameKey = table.primaryKey.map { "NEW.\($0.quotedDatabaseIdentifier) IS OLD.\($0.quotedDatabaseIdentifier)" }.joined(separator: " AND ")
        let differs = table.valueColumns.map { "OLD.\($0.quotedDatabaseIdentifier) IS NOT NEW.\($0.quotedDatabaseIdentifier)" }
        let mask = table.valueColumns.enumerated().map { index, column in
            "(CASE WHEN OLD.\(column.quotedDatabaseIdentifier) IS NOT NEW.\(column.quotedDatabaseIdentifier) THEN \(SyncedTable.bit(ofValueColumn: index)) ELSE 0 END)"
        }.joined(separator: " | ")
        func trigger(_ suffix: String, _ event: String, when: String, _ body: String) -> String {
            "CREATE TEMP TRIGGER IF NOT EXISTS \(("ubq_\(suffix)_" + table.name).quotedDatabaseIdentifier) AFTER \(event) ON main.\(name)\(when.isEmpty ? "" : " WHEN " + when) BEGIN \(body) END"
        }
        var statements = [
            trigger("insert", "INSERT", when: "", capture(kind: 0, changed: "-1", row: "NEW")),
            trigger("delete", "DELETE", when: "", capture(kind: 2, changed: "0", row: "OLD")),
            trigger("rekey", "UPDATE", when: "NOT (\(sameKey))", capture(kind: 2, changed: "0", row: "OLD") + " " + capture(kind: 0, changed: "-1", row: "NEW")),
        ]
        if !differs.isEmpty {
            statements.append(trigger("update", "UPDATE", when: "\(sameKey) AND (\(differs.joined(separator: " OR ")))", capture(kind: 1, changed: mask, row: "NEW")))
        }
        return statements
    }

    /// Drops the triggers (before the schema changes, and when a store closes).
    static func dropTriggers(_ db: Database) throws {
        let names = try String.fetchAll(db, sql: "SELECT name FROM sqlite_temp_master WHERE type = 'trigger' AND name LIKE 'ubq\\_%' ESCAPE '\\'")
        for name in names { try db.execute(sql: "DROP TRIGGER IF EXISTS temp.\(name.quotedDatabaseIdentifier)") }
    }

    /// Whether changes wait in the capture table.
    static func hasCaptured(_ db: Database) throws -> Bool {
        try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM ubq_capture)") ?? false
    }

    /// The most changes one record holds (about 9 MiB of log for rows of a few short columns):
    /// a larger transaction is split into records that follow each other, each under the
    /// transaction's timestamp and starting at its place in it.
    static let defaultChangesPerRecord = 50_000
    /// The most bytes (roughly, as JSON) one record holds.
    static let bytesPerRecord = 8 << 20
    /// The most changes one record holds here (``defaultChangesPerRecord``; tests make it small).
    let changesPerRecord: Int

    /// Turns the captured changes into records, one per transaction in commit order, and
    /// removes them from the capture table. Call inside a write transaction: the records must
    /// be kept (in the outbox) in the same transaction.
    ///
    /// Values are read from the rows as they are now: a column changed again by a later
    /// captured transaction carries that later value in both records, which merges the same
    /// (the later stamp wins everywhere); a row deleted since has no values to carry (its
    /// delete follows in the same batch).
    /// - Parameters:
    ///   - db: The writer's connection, in a write transaction.
    ///   - limit: The most captured changes taken (call again for the rest: memory stays bounded
    ///     by one batch whatever the size of a transaction).
    ///   - continuing: Where the previous batch's last record ended (its transaction and the
    ///     place after its last change), so that a transaction spanning batches goes on at its place.
    func collect(_ db: Database, limit: Int = .max, continuing: (timestamp: HLCTimestamp, next: Int)? = nil) throws -> [ChangeLogRecord] {
        var records: [ChangeLogRecord] = []
        var recordBytes = 0
        var lastSequence: Int64?
        let rows = try Row.fetchCursor(db, sql: "SELECT seq, tx, tbl, kind, changed, k1, k2, k3, k4 FROM ubq_capture ORDER BY seq LIMIT ?", arguments: [limit])
        while let row = try rows.next() {
            lastSequence = row[0]
            let timestamp = HLCTimestamp(packed: row[1])
            let tableName: String = row[2]
            guard let table = schema.table(tableName) else { continue } // dropped by a migration since
            let key = (0..<table.primaryKey.count).map { LogValue(row[5 + $0] as DatabaseValue) }
            let change: RowChange
            switch row[3] as Int {
            case 0:
                change = RowChange(table: tableName, primaryKey: key, kind: .insert, columns: try Self.values(of: table.valueColumns, in: table, key: key, db) ?? [:])
            case 1:
                let columns = table.valueColumns(in: row[4])
                guard let values = try Self.values(of: columns, in: table, key: key, db) else { continue } // deleted since: its delete follows
                change = RowChange(table: tableName, primaryKey: key, kind: .update, columns: values)
            default:
                change = RowChange(table: tableName, primaryKey: key, kind: .delete)
            }
            let size = change.estimatedBytes
            if let last = records.last, last.timestamp == timestamp, last.changes.count < changesPerRecord, recordBytes + size <= Self.bytesPerRecord {
                records[records.count - 1].changes.append(change)
                recordBytes += size
            } else if let last = records.last, last.timestamp == timestamp {
                recordBytes = size
                // A transaction too large for one record goes on in the next, at its place.
                records.append(ChangeLogRecord(timestamp: timestamp, device: device, schema: schema.hash, changes: [change],
                                               startIndex: (last.startIndex ?? 0) + last.changes.count))
            } else {
                recordBytes = size
                let start = records.isEmpty && continuing?.timestamp == timestamp ? continuing?.next : nil
                records.append(ChangeLogRecord(timestamp: timestamp, device: device, schema: schema.hash, changes: [change], startIndex: start))
            }
        }
        if let lastSequence { try db.execute(sql: "DELETE FROM ubq_capture WHERE seq <= ?", arguments: [lastSequence]) }
        return records
    }

    /// The values of `columns` of the row with `key`, or nil if it is gone.
    static func values(of columns: [String], in table: SyncedTable, key: [LogValue], _ db: Database) throws -> [String: LogValue]? {
        guard !columns.isEmpty else { return try rowExists(table, key: key, db) ? [:] : nil }
        let sql = "SELECT \(columns.map(\.quotedDatabaseIdentifier).joined(separator: ", ")) FROM main.\(table.name.quotedDatabaseIdentifier) WHERE \(keyCondition(table))"
        guard let row = try Row.fetchOne(db.cachedStatement(sql: sql), arguments: StatementArguments(key.map(\.databaseValue))) else { return nil }
        var values: [String: LogValue] = [:]
        for (index, column) in columns.enumerated() { values[column] = LogValue(row[index] as DatabaseValue) }
        return values
    }

    /// Whether the row with `key` exists.
    static func rowExists(_ table: SyncedTable, key: [LogValue], _ db: Database) throws -> Bool {
        let sql = "SELECT 1 FROM main.\(table.name.quotedDatabaseIdentifier) WHERE \(keyCondition(table))"
        return try Row.fetchOne(db.cachedStatement(sql: sql), arguments: StatementArguments(key.map(\.databaseValue))) != nil
    }

    /// `"k1" IS ? AND "k2" IS ?`.
    static func keyCondition(_ table: SyncedTable) -> String {
        table.primaryKey.map { "\($0.quotedDatabaseIdentifier) IS ?" }.joined(separator: " AND ")
    }

    /// Ends the clock's transaction when the writer's transaction ends.
    private final class TransactionEnd: TransactionObserver {
        let clock: CaptureClock
        let onCommit: @Sendable () -> Void
        init(clock: CaptureClock, onCommit: @escaping @Sendable () -> Void) {
            self.clock = clock
            self.onCommit = onCommit
        }
        func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
        func databaseDidChange(with event: DatabaseEvent) {}
        func databaseDidCommit(_ db: Database) { if clock.endTransaction() { onCommit() } }
        func databaseDidRollback(_ db: Database) { clock.endTransaction() }
    }
}

extension LogValue {
    /// A value read from SQLite.
    init(_ value: DatabaseValue) {
        switch value.storage {
        case .null: self = .null
        case .int64(let value): self = .integer(value)
        case .double(let value): self = .real(value)
        case .string(let value): self = .text(value)
        case .blob(let value): self = .blob(value)
        }
    }

    /// The value to give SQLite.
    var databaseValue: DatabaseValue {
        switch self {
        case .null: .null
        case .integer(let value): value.databaseValue
        case .real(let value): value.databaseValue
        case .text(let value): value.databaseValue
        case .blob(let value): value.databaseValue
        }
    }
}

extension RowChange {
    /// Roughly how many bytes the change takes in a segment's JSON.
    var estimatedBytes: Int {
        func size(_ value: LogValue) -> Int {
            switch value {
            case .null: 4
            case .integer, .real: 28
            case .text(let text): text.utf8.count + 12
            case .blob(let data): data.count * 4 / 3 + 12
            }
        }
        return 64 + table.utf8.count + primaryKey.reduce(0) { $0 + size($1) } + columns.reduce(0) { $0 + $1.key.utf8.count + 6 + size($1.value) }
    }
}
