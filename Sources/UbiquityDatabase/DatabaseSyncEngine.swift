import Foundation
import GRDB
import Logging

/// What one round of importing other devices' logs did.
public struct ImportReport: Equatable, Sendable {
    /// Segments applied.
    public var segments = 0
    /// Transactions applied.
    public var transactions = 0
    /// What changed in the app's tables.
    public var changes = ImportedChanges()
    /// Devices whose next segments wait, and why (a segment still on its way; records made
    /// with a newer schema, kept until this app's migrator has it).
    public var waiting: [String: String] = [:]
    /// Devices whose logs cannot be read, and the error (a damaged or broken segment): the
    /// rest of that device's log waits until it is mended.
    public var problems: [String: LogSegmentError] = [:]

    /// Nothing imported.
    public init() {}
}

/// The engine of a synced store: captures this device's transactions, publishes them as its log
/// segments, imports the other devices' segments by the merge rules. It keeps its state in the
/// store's `ubq_` tables, changed in the same transactions as the data they describe, so a
/// crash at any point loses nothing and applies nothing twice:
///
/// - `ubq_capture`: changes captured with the app's transactions, not yet collected;
/// - `ubq_outbox`: collected records (JSON), not yet in a published segment;
/// - `ubq_row`: each synced row's stamps (``RowMeta``);
/// - `ubq_imported`: each other device's last applied segment (number and hash);
/// - `ubq_state`: this store's device id, its last published segment, its clock.
///
/// Not synchronized: its owner runs one step at a time (``UbiquitousDatabase`` on its queue).
final class DatabaseSyncEngine: Sendable {
    let writer: any DatabaseWriter
    let schema: SyncedSchema
    let device: String
    let clock: CaptureClock
    let capture: ChangeCapture
    let merger: StoreMerger
    let logs: LogFolder
    let logger: Logger
    /// Called inside each import transaction, after the changes and before the commit.
    let importHook: (@Sendable (Database, ImportedChanges) throws -> Void)?

    /// The most bytes of records one published segment holds (well under the 64 MiB limit; a
    /// single larger transaction makes a segment of its own).
    static let segmentBytes = 8 << 20

    /// Opens the engine on a migrated store.
    /// - Parameters:
    ///   - writer: The store's writer (its connection gets the capture triggers).
    ///   - logs: The database's log folder in the container.
    ///   - localTables: Tables that do not sync.
    ///   - importHook: Runs inside each import transaction.
    ///   - onCommit: Called after each app transaction that changed synced rows.
    init(writer: any DatabaseWriter, logs: LogFolder, localTables: Set<String>, logger: Logger,
         importHook: (@Sendable (Database, ImportedChanges) throws -> Void)? = nil,
         onCommit: @escaping @Sendable () -> Void = {}) throws {
        self.writer = writer
        self.logs = logs
        self.logger = logger
        self.importHook = importHook
        let (schema, device, latest) = try writer.write { db -> (SyncedSchema, String, HLCTimestamp) in
            try Self.createTables(db)
            let schema = try SyncedSchema.read(db, localTables: localTables)
            var device = try String.fetchOne(db, sql: "SELECT value FROM ubq_state WHERE key = 'device'")
            if device == nil {
                device = UUID().uuidString.lowercased()
                try db.execute(sql: "INSERT INTO ubq_state(key, value) VALUES ('device', ?)", arguments: [device])
            }
            // The clock never goes back: past every timestamp this store made or saw.
            let latest = try Int64.fetchOne(db, sql: """
                SELECT max(coalesce((SELECT value FROM ubq_state WHERE key = 'clock'), 0),
                           coalesce((SELECT max(tx) FROM ubq_outbox), 0),
                           coalesce((SELECT max(tx) FROM ubq_capture), 0))
                """) ?? 0
            return (schema, device!, HLCTimestamp(packed: latest))
        }
        self.schema = schema
        self.device = device
        clock = CaptureClock(clock: HybridLogicalClock(latest: latest))
        capture = ChangeCapture(schema: schema, device: device, clock: clock)
        merger = StoreMerger(schema: schema)
        try writer.writeWithoutTransaction { db in try capture.install(db, onCommit: onCommit) }
        try recoverPublished()
    }

    static func createTables(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE IF NOT EXISTS ubq_state(key TEXT PRIMARY KEY, value) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS ubq_outbox(tx INTEGER PRIMARY KEY, record BLOB NOT NULL);
            CREATE TABLE IF NOT EXISTS ubq_imported(device TEXT PRIMARY KEY, number INTEGER NOT NULL, hash TEXT NOT NULL) WITHOUT ROWID;
            """)
        try ChangeCapture.createTables(db)
        try StoreMerger.createTables(db)
    }

    // MARK: - This device's changes

    /// Collects captured transactions into the outbox and records their stamps (inside the
    /// caller's write transaction). Returns how many.
    @discardableResult
    func flush(_ db: Database) throws -> Int {
        let records = try capture.collect(db)
        guard !records.isEmpty else { return 0 }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        for record in records {
            try merger.apply(record, local: true, db)
            try db.execute(sql: "INSERT OR REPLACE INTO ubq_outbox(tx, record) VALUES (?, ?)", arguments: [record.timestamp.packed, try encoder.encode(record)])
        }
        try saveClock(db)
        return records.count
    }

    /// Publishes the outbox as this device's next segments. Returns how many were published.
    @discardableResult
    func publish() throws -> Int {
        var published = 0
        while true {
            let (rows, last, frontier) = try writer.read { db in
                var rows: [(tx: Int64, record: Data)] = []
                var bytes = 0
                let cursor = try Row.fetchCursor(db, sql: "SELECT tx, record FROM ubq_outbox ORDER BY tx")
                while bytes < Self.segmentBytes, let row = try cursor.next() {
                    let record: Data = row[1]
                    rows.append((row[0], record))
                    bytes += record.count
                }
                return (rows, try Self.published(db), try Self.imported(db).mapValues(\.number))
            }
            guard let lastTransaction = rows.last?.tx else { return published }
            let decoder = JSONDecoder()
            let records = try rows.map { try decoder.decode(ChangeLogRecord.self, from: $0.record) }
            let segment = LogSegment(device: device, number: (last?.number ?? 0) + 1, previous: last?.hash, frontier: frontier, records: records)
            let hash = try logs.publish(segment)
            try writer.write { db in
                try db.execute(sql: "DELETE FROM ubq_outbox WHERE tx <= ?", arguments: [lastTransaction])
                try Self.setPublished(LogPosition(number: segment.number, hash: hash), db)
            }
            published += 1
            logger.debug("published segment", metadata: ["segment": "\(segment.number)", "transactions": "\(records.count)"])
        }
    }

    /// After a crash between publishing a segment and noting it: the segments already in this
    /// device's folder past the noted one are taken as published (their transactions leave the
    /// outbox), so none is published twice.
    func recoverPublished() throws {
        let last = try writer.read { db in try Self.published(db) }
        _ = try logs.read(device, after: last) { segment, position in
            try writer.write { db in
                if let newest = segment.records.last?.timestamp.packed {
                    try db.execute(sql: "DELETE FROM ubq_outbox WHERE tx <= ?", arguments: [newest])
                }
                try Self.setPublished(position, db)
            }
            logger.notice("found segment \(segment.number) published before a stop; noted")
        }
    }

    // MARK: - Other devices' changes

    /// Why a device's next segment waits.
    private struct Hold: Error { var reason: String }

    /// Imports every other device's segments not yet applied, each in one transaction (this
    /// device's captured changes are collected first, so their stamps are known), calling
    /// `onImported` after each commit.
    func importLogs(onImported: (ImportedChanges) -> Void = { _ in }) throws -> ImportReport {
        var report = ImportReport()
        let positions = try writer.read { db in try Self.imported(db) }
        for other in try logs.devices() where other != device {
            do {
                let result = try logs.read(other, after: positions[other]) { segment, position in
                    if let reason = unknownSchema(segment) { throw Hold(reason: reason) }
                    let applied = try writer.write { db -> [AppliedChange] in
                        try flush(db)
                        var applied: [AppliedChange] = []
                        try clock.withoutCapture {
                            try db.execute(sql: "PRAGMA defer_foreign_keys = ON")
                            for record in segment.records {
                                clock.receive(record.timestamp)
                                applied += try merger.apply(record, local: false, db)
                            }
                        }
                        try importHook?(db, summary(of: applied))
                        try db.execute(sql: "INSERT OR REPLACE INTO ubq_imported(device, number, hash) VALUES (?, ?, ?)", arguments: [other, position.number, position.hash])
                        try saveClock(db)
                        return applied
                    }
                    report.segments += 1
                    report.transactions += segment.records.count
                    for change in applied { report.changes.add(change, allColumns: schema.table(change.table)?.valueColumns ?? []) }
                    let changes = summary(of: applied)
                    if !changes.isEmpty { onImported(changes) }
                }
                if let missing = result.missing { report.waiting[other] = "segments \(missing.lowerBound)…\(missing.upperBound) have not arrived" }
            } catch let hold as Hold {
                report.waiting[other] = hold.reason
            } catch let error as LogSegmentError {
                report.problems[other] = error
                logger.error("cannot read a device's log", metadata: ["device": "\(other)", "error": "\(error)"])
            }
        }
        return report
    }

    /// The changes of one import, folded per row.
    func summary(of applied: [AppliedChange]) -> ImportedChanges {
        var changes = ImportedChanges()
        for change in applied { changes.add(change, allColumns: schema.table(change.table)?.valueColumns ?? []) }
        return changes
    }

    /// Why `segment` cannot be applied with this store's schema (a table or column it does
    /// not have: made by a newer version of the app), or nil.
    func unknownSchema(_ segment: LogSegment) -> String? {
        for record in segment.records where record.schema != schema.hash {
            for change in record.changes {
                guard let table = schema.table(change.table) else {
                    return "segment \(segment.number) changes table \(change.table), which this version of the app does not have: kept until it is upgraded"
                }
                let known = Set(table.valueColumns)
                if change.primaryKey.count != table.primaryKey.count || change.columns.keys.contains(where: { !known.contains($0) }) {
                    return "segment \(segment.number) changes columns of \(change.table) that this version of the app does not have: kept until it is upgraded"
                }
            }
        }
        return nil
    }

    // MARK: - State

    func saveClock(_ db: Database) throws {
        try db.execute(sql: "INSERT OR REPLACE INTO ubq_state(key, value) VALUES ('clock', ?)", arguments: [clock.latest.packed])
    }

    static func published(_ db: Database) throws -> LogPosition? {
        guard let number = try Int64.fetchOne(db, sql: "SELECT value FROM ubq_state WHERE key = 'published'"),
              let hash = try String.fetchOne(db, sql: "SELECT value FROM ubq_state WHERE key = 'publishedHash'") else { return nil }
        return LogPosition(number: number, hash: hash)
    }

    static func setPublished(_ position: LogPosition, _ db: Database) throws {
        try db.execute(sql: "INSERT OR REPLACE INTO ubq_state(key, value) VALUES ('published', ?), ('publishedHash', ?)", arguments: [position.number, position.hash])
    }

    static func imported(_ db: Database) throws -> [String: LogPosition] {
        var positions: [String: LogPosition] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT device, number, hash FROM ubq_imported") {
            positions[row[0]] = LogPosition(number: row[1], hash: row[2])
        }
        return positions
    }
}
