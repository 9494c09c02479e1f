import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// The hybrid logical clock of one store's writer, shared by its capture, the import and the
/// engine's own changes.
final class CaptureClock: Sendable {
    private let clock: Mutex<HybridLogicalClock>

    init(clock: HybridLogicalClock) {
        self.clock = Mutex(clock)
    }

    /// A new timestamp, after every other made or seen.
    func tick() -> HLCTimestamp {
        clock.withLock { $0.tick() }
    }

    /// Takes in another device's timestamp: later local transactions come after it.
    func receive(_ remote: HLCTimestamp) {
        clock.withLock { _ = $0.receive(remote) }
    }

    /// The latest timestamp made or seen.
    var latest: HLCTimestamp { clock.withLock(\.latest) }
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
/// and deleted row by primary key in `ubq_captured`, inside the app's own transaction — so a
/// change and its record commit or roll back together (a savepoint rolled back takes its records
/// with it), and a crash loses neither. ``collect(_:limit:continuing:)`` later turns the captured
/// rows into one ``ChangeLogRecord`` per transaction, reading the rows' values then.
///
/// The triggers are temporary (the connection's own): other programs opening the store are not
/// affected, and nothing of the engine is written into the app's schema but its `ubq_` tables.
///
/// A trigger does as little as it can (it runs once for every row the app writes): one insert of
/// constants and the key, no function call. Where one transaction ends and the next begins is
/// learnt after each commit, by SQLite's write-ahead-log hook (no GRDB transaction observer: one
/// costs every statement the app runs): the highest sequence number then ends the transaction,
/// stamped with the clock at its commit. Those ends are kept in memory; rows whose end was lost
/// (the program stopped before collecting them) are collected as one transaction stamped when
/// they are collected. Sequence numbers never go back (a placeholder keeps the last one
/// collected), so a commit that captured nothing is told from one that did.
final class ChangeCapture: Sendable {
    /// The synced tables.
    let schema: SyncedSchema
    /// The device that makes the records.
    let device: String
    /// The writer's clock.
    let clock: CaptureClock

    /// What the capture learns as transactions commit.
    private struct Marks {
        /// Ends of committed transactions whose changes wait in the capture table, in commit
        /// order: each one's last sequence number and its timestamp.
        var ends: [(sequence: Int64, timestamp: HLCTimestamp)] = []
        /// The highest sequence number at the last commit.
        var committed: Int64 = 0
        /// Where capture is off, innermost last: what is captured after these sequence numbers
        /// is discarded (other devices' changes being applied).
        var suppressed: [Int64] = []
        /// Called after each commit that captured changes.
        var onCommit: @Sendable () -> Void = {}
        /// The write-ahead-log hook's context (this capture, retained while installed) and the
        /// automatic checkpoint threshold it keeps.
        var hook: (context: Unmanaged<ChangeCapture>, checkpointFrames: Int32)?
    }
    private let marks = Mutex(Marks())

    init(schema: SyncedSchema, device: String, clock: CaptureClock, changesPerRecord: Int = ChangeCapture.defaultChangesPerRecord) {
        self.schema = schema
        self.device = device
        self.clock = clock
        self.changesPerRecord = changesPerRecord
    }

    /// Kind of a placeholder row keeping the last collected sequence number.
    static let placeholderKind = -1

    /// Creates the capture table (moving changes captured by an older version of the engine,
    /// which kept them in `ubq_capture`, into it).
    static func createTables(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE IF NOT EXISTS ubq_captured(
                seq INTEGER PRIMARY KEY,
                tbl TEXT NOT NULL,
                kind INTEGER NOT NULL,
                changed INTEGER NOT NULL,
                k1, k2, k3, k4)
            """)
        if try db.tableExists("ubq_capture") {
            try db.execute(sql: """
                INSERT INTO ubq_captured(tbl, kind, changed, k1, k2, k3, k4)
                    SELECT tbl, kind, changed, k1, k2, k3, k4 FROM ubq_capture ORDER BY seq;
                DROP TABLE ubq_capture
                """)
        }
    }

    /// Installs the triggers and the commit hook on the writer's connection (once per
    /// connection, after the app's migrations); ``uninstall(_:)`` before the connection closes.
    /// - Parameters:
    ///   - db: The writer's connection, outside a transaction.
    ///   - onCommit: Called after each commit of a transaction that changed synced rows (on the
    ///     writer's thread: hand the work elsewhere).
    func install(_ db: Database, onCommit: @escaping @Sendable () -> Void = {}) throws {
        // REPLACE deletes the rows it displaces; with recursive triggers on, it says so.
        try db.execute(sql: "PRAGMA recursive_triggers = ON")
        for table in schema.tables {
            for statement in Self.triggers(for: table) { try db.execute(sql: statement) }
        }
        let last = try Self.lastSequence(db)
        let waiting = try Self.hasCaptured(db)
        let installHook = try marks.withLock { marks -> Bool in
            marks.onCommit = onCommit
            marks.committed = last
            // Changes captured before this connection opened: one transaction, stamped now.
            if waiting, marks.ends.isEmpty { marks.ends = [(last, clock.tick())] }
            guard marks.hook == nil else { return false }
            guard try String.fetchOne(db, sql: "PRAGMA journal_mode")?.lowercased() == "wal" else { return false }
            let frames = Int32(clamping: try Int.fetchOne(db, sql: "PRAGMA wal_autocheckpoint") ?? 1000)
            marks.hook = (Unmanaged.passRetained(self), frames)
            return true
        }
        if installHook, let context = marks.withLock({ $0.hook?.context }) {
            // Replaces SQLite's automatic checkpoint, which is itself a WAL hook: ours checkpoints
            // as it would.
            sqlite3_wal_hook(db.sqliteConnection, changeCaptureWALHook, context.toOpaque())
        } else if marks.withLock({ $0.hook == nil }) {
            // Not in WAL mode (a queue: tests): a transaction observer tells the commits.
            db.add(transactionObserver: CommitObserver(capture: self), extent: .databaseLifetime)
        }
    }

    /// Removes the commit hook (putting SQLite's automatic checkpoint back) and the triggers.
    func uninstall(_ db: Database) throws {
        if let hook = marks.withLock({ marks in defer { marks.hook = nil }; return marks.hook }) {
            sqlite3_wal_hook(db.sqliteConnection, nil, nil)
            sqlite3_wal_autocheckpoint(db.sqliteConnection, hook.checkpointFrames)
            hook.context.release()
        }
        try Self.dropTriggers(db)
    }

    /// After a commit on the writer's connection: the highest sequence number then.
    fileprivate func committed(lastSequence last: Int64) {
        let fire = marks.withLock { marks -> Bool in
            guard last > marks.committed else {
                marks.committed = last
                return false
            }
            marks.ends.append((last, clock.tick()))
            marks.committed = last
            return true
        }
        if fire { marks.withLock(\.onCommit)() }
    }

    /// The write-ahead-log hook's work, after each commit (SQLite allows reading there).
    fileprivate func walCommitted(_ connection: OpaquePointer, database: UnsafePointer<CChar>?, frames: Int32) {
        let threshold = marks.withLock { $0.hook?.checkpointFrames ?? 0 }
        if threshold > 0, frames >= threshold { sqlite3_wal_checkpoint(connection, database) }
        guard let database, strcmp(database, "main") == 0 else { return }
        var statement: OpaquePointer?
        defer { sqlite3_finalize(statement) }
        guard sqlite3_prepare_v2(connection, "SELECT coalesce(max(seq), 0) FROM main.ubq_captured", -1, &statement, nil) == SQLITE_OK,
              sqlite3_step(statement) == SQLITE_ROW else {
            // Unreadable: say a transaction committed (its changes get a stamp when collected).
            marks.withLock(\.onCommit)()
            return
        }
        committed(lastSequence: sqlite3_column_int64(statement, 0))
    }

    /// The highest sequence number in the capture table (0 when empty).
    static func lastSequence(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db, sql: "SELECT coalesce(max(seq), 0) FROM ubq_captured") ?? 0
    }

    /// Runs `body` with capture off: what it writes is other devices' changes (an import), so
    /// what the triggers captured meanwhile is discarded before the transaction commits.
    /// - Parameter db: The writer's connection, in a write transaction.
    func withoutCapture<T>(_ db: Database, _ body: () throws -> T) throws -> T {
        let start = try Self.lastSequence(db)
        marks.withLock { $0.suppressed.append(start) }
        defer { marks.withLock { _ = $0.suppressed.popLast() } }
        let result = try body()
        try db.execute(sql: "DELETE FROM ubq_captured WHERE seq > ?", arguments: [start])
        return result
    }

    /// Inside ``withoutCapture(_:_:)``: runs `body` with capture on (the app's hook, writing as
    /// this device); what the capture was off for until now is discarded first. Collect what
    /// `body` captured before the capture goes on being off.
    func capturing<T>(_ db: Database, _ body: () throws -> T) throws -> T {
        if let start = marks.withLock({ $0.suppressed.last }) {
            try db.execute(sql: "DELETE FROM ubq_captured WHERE seq > ?", arguments: [start])
        }
        return try body()
    }

    /// The triggers capturing `table`'s changes.
    static func triggers(for table: SyncedTable) -> [String] {
        let name = table.name.quotedDatabaseIdentifier
        let tableLiteral = "'" + table.name.replacingOccurrences(of: "'", with: "''") + "'"
        let keyColumns = (1...table.primaryKey.count).map { "k\($0)" }.joined(separator: ", ")
        func capture(kind: Int, changed: String, row: String) -> String {
            let keys = table.primaryKey.map { "\(row).\($0.quotedDatabaseIdentifier)" }.joined(separator: ", ")
            return "INSERT INTO ubq_captured(tbl, kind, changed, \(keyColumns)) VALUES (\(tableLiteral), \(kind), \(changed), \(keys));"
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
        try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM ubq_captured WHERE kind >= 0)") ?? false
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
        var ends = marks.withLock(\.ends)[...]
        let rows = try Row.fetchCursor(db, sql: "SELECT seq, tbl, kind, changed, k1, k2, k3, k4 FROM ubq_captured WHERE kind >= 0 ORDER BY seq LIMIT ?", arguments: [limit])
        while let row = try rows.next() {
            let sequence: Int64 = row[0]
            lastSequence = sequence
            while let end = ends.first, end.sequence < sequence { ends.removeFirst() }
            if ends.isEmpty {
                // Changes whose commit was not seen (captured before the store opened, or
                // written by the engine itself in this transaction): one transaction, stamped now.
                let end = (sequence: try Self.lastSequence(db), timestamp: clock.tick())
                marks.withLock { $0.ends.append(end) }
                ends.append(end)
            }
            let timestamp = ends.first!.timestamp
            let tableName: String = row[1]
            guard let table = schema.table(tableName) else { continue } // dropped by a migration since
            let key = (0..<table.primaryKey.count).map { LogValue(row[4 + $0] as DatabaseValue) }
            let change: RowChange
            switch row[2] as Int {
            case 0:
                change = RowChange(table: tableName, primaryKey: key, kind: .insert, columns: try Self.values(of: table.valueColumns, in: table, key: key, db) ?? [:])
            case 1:
                let columns = table.valueColumns(in: row[3])
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
        if let lastSequence {
            // The placeholder keeps the number: the next captured change comes after it.
            try db.execute(sql: "DELETE FROM ubq_captured WHERE seq <= ?", arguments: [lastSequence])
            try db.execute(sql: "INSERT INTO ubq_captured(seq, tbl, kind, changed) VALUES (?, '', ?, 0)", arguments: [lastSequence, Self.placeholderKind])
            marks.withLock { $0.ends.removeAll { $0.sequence <= lastSequence } }
        }
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

    /// Tells the capture of commits where there is no write-ahead log (a queue: tests).
    private final class CommitObserver: TransactionObserver {
        let capture: ChangeCapture
        init(capture: ChangeCapture) { self.capture = capture }
        func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
        func databaseDidChange(with event: DatabaseEvent) {}
        func databaseDidCommit(_ db: Database) {
            do { capture.committed(lastSequence: try ChangeCapture.lastSequence(db)) } catch {
                // Unreadable: say a transaction committed (its changes get a stamp when collected).
                capture.marks.withLock(\.onCommit)()
            }
        }
        func databaseDidRollback(_ db: Database) {}
    }
}

/// SQLite's write-ahead-log hook, called after each commit on the writer's connection, with the
/// ``ChangeCapture`` as its context.
private func changeCaptureWALHook(_ context: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ database: UnsafePointer<CChar>?, _ frames: Int32) -> Int32 {
    guard let context, let connection else { return SQLITE_OK }
    Unmanaged<ChangeCapture>.fromOpaque(context).takeUnretainedValue().walCommitted(connection, database: database, frames: frames)
    return SQLITE_OK
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
