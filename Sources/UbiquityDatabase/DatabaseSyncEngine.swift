import Foundation
import GRDB
import Logging

/// What one round of importing other devices' logs did.
public struct ImportReport: Equatable, Sendable {
    /// Baselines merged (a new store, or one back from longer away than the logs are kept).
    public var baselines = 0
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

/// How far an import has come: segments applied of those there were when it began, and the
/// transactions in them.
public struct ImportProgress: Equatable, Sendable {
    /// Segments applied so far.
    public var segments: Int
    /// Segments to apply, counted when the import began (a segment waiting for another makes
    /// the import end before it).
    public var totalSegments: Int
    /// Transactions applied so far.
    public var transactions: Int

    /// The fraction done, from 0 to 1.
    public var fractionCompleted: Double { totalSegments == 0 ? 1 : min(1, Double(segments) / Double(totalSegments)) }
}

/// The engine of a synced store: captures this device's transactions, publishes them as its log
/// segments, imports the other devices' segments by the merge rules. It keeps its state in the
/// store's `ubq_` tables, changed in the same transactions as the data they describe, so a
/// crash at any point loses nothing and applies nothing twice:
///
/// - `ubq_captured`: changes captured with the app's transactions, not yet collected;
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
    /// Called before a duplicate row is removed (inside the import transaction).
    let duplicateHook: (@Sendable (Database, DuplicateRows) throws -> Void)?
    /// Asks for a segment that is in the container but not on this device (its placeholder is).
    let requestDownload: @Sendable (URL) throws -> Void

    /// The most bytes of records one published segment holds (well under the 64 MiB limit; a
    /// single larger transaction makes a segment of its own).
    static let segmentBytes = 8 << 20

    /// Opens the engine on a migrated store.
    /// - Parameters:
    ///   - writer: The store's writer (its connection gets the capture triggers).
    ///   - logs: The database's log folder in the container.
    ///   - localTables: Tables that do not sync.
    ///   - importHook: Runs inside each import transaction.
    ///   - duplicateHook: Runs before a duplicate row is removed.
    ///   - requestDownload: Asks the sync agent for a segment not yet downloaded.
    ///   - changesPerRecord: The most changes one record holds (a larger transaction is split).
    ///   - newDeviceIdentifier: The id a new store takes (random; a simulation gives its own).
    ///   - wallClock: Milliseconds since 1970 (a simulation gives its own).
    ///   - onCommit: Called after each app transaction that changed synced rows.
    init(writer: any DatabaseWriter, logs: LogFolder, localTables: Set<String>, logger: Logger,
         importHook: (@Sendable (Database, ImportedChanges) throws -> Void)? = nil,
         duplicateHook: (@Sendable (Database, DuplicateRows) throws -> Void)? = nil,
         requestDownload: @escaping @Sendable (URL) throws -> Void = { _ in },
         changesPerRecord: Int = ChangeCapture.defaultChangesPerRecord,
         newDeviceIdentifier: @autoclosure () -> String = UUID().uuidString.lowercased(),
         wallClock: @escaping @Sendable () -> Int64 = { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) },
         onCommit: @escaping @Sendable () -> Void = {}) throws {
        self.requestDownload = requestDownload
        self.writer = writer
        self.logs = logs
        self.logger = logger
        self.importHook = importHook
        self.duplicateHook = duplicateHook
        let (schema, device, latest) = try writer.write { db -> (SyncedSchema, String, HLCTimestamp) in
            try Self.createTables(db)
            let schema = try SyncedSchema.read(db, localTables: localTables)
            var device = try String.fetchOne(db, sql: "SELECT value FROM ubq_state WHERE key = 'device'")
            if device == nil {
                device = newDeviceIdentifier()
                try db.execute(sql: "INSERT INTO ubq_state(key, value) VALUES ('device', ?)", arguments: [device])
            }
            // The clock never goes back: past every timestamp this store made or saw.
            let latest = try Int64.fetchOne(db, sql: """
                SELECT max(coalesce((SELECT value FROM ubq_state WHERE key = 'clock'), 0),
                           coalesce((SELECT max(tx) FROM ubq_outbox), 0))
                """) ?? 0
            return (schema, device!, HLCTimestamp(packed: latest))
        }
        self.schema = schema
        self.device = device
        clock = CaptureClock(clock: HybridLogicalClock(latest: latest, wallClock: wallClock))
        capture = ChangeCapture(schema: schema, device: device, clock: clock, changesPerRecord: changesPerRecord)
        merger = StoreMerger(schema: schema)
        try writer.writeWithoutTransaction { db in try capture.install(db, onCommit: onCommit) }
        try recoverPublished()
        try adoptUnloggedRows()
    }

    static func createTables(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE IF NOT EXISTS ubq_state(key TEXT PRIMARY KEY, value) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS ubq_outbox(tx INTEGER NOT NULL, part INTEGER NOT NULL, record BLOB NOT NULL, PRIMARY KEY (tx, part));
            CREATE TABLE IF NOT EXISTS ubq_imported(device TEXT PRIMARY KEY, number INTEGER NOT NULL, hash TEXT NOT NULL) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS ubq_segment(device TEXT NOT NULL, number INTEGER NOT NULL, newest INTEGER NOT NULL, PRIMARY KEY (device, number)) WITHOUT ROWID;
            """)
        try ChangeCapture.createTables(db)
        try StoreMerger.createTables(db)
    }

    // MARK: - This device's changes

    /// Collects captured transactions into the outbox and records their stamps (inside the
    /// caller's write transaction). Returns how many.
    @discardableResult
    func flush(_ db: Database) throws -> Int {
        var count = 0
        var continuing: (timestamp: HLCTimestamp, next: Int)?
        while true {
            let records = try capture.collect(db, limit: capture.changesPerRecord, continuing: continuing)
            guard let last = records.last else { break }
            for record in records { try keep(record, db) }
            count += records.count
            continuing = (last.timestamp, (last.startIndex ?? 0) + last.changes.count)
        }
        if count > 0 { try saveClock(db) }
        return count
    }

    /// Records the stamps of this device's `record` and puts it in the outbox.
    func keep(_ record: ChangeLogRecord, _ db: Database) throws {
        try merger.apply(record, local: true, db)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        try db.execute(sql: "INSERT OR REPLACE INTO ubq_outbox(tx, part, record) VALUES (?, ?, ?)", arguments: [record.timestamp.packed, record.startIndex ?? 0, try encoder.encode(record)])
    }

    /// Rows in synced tables that were never logged — written before the store synced (an app
    /// coming from plain GRDB) or by a migration (default rows) — become this device's inserts,
    /// once per schema. Default rows that every device made are then duplicates, resolved as
    /// such on import.
    func adoptUnloggedRows() throws {
        try writer.write { db in
            guard try String.fetchOne(db, sql: "SELECT value FROM ubq_state WHERE key = 'adopted'") != schema.hash else { return }
            var adopted = 0
            for table in schema.tables {
                var changes: [RowChange] = []
                let columns = (table.primaryKey + table.valueColumns).map(\.quotedDatabaseIdentifier).joined(separator: ", ")
                let rows = try Row.fetchCursor(db, sql: "SELECT \(columns) FROM main.\(table.name.quotedDatabaseIdentifier)")
                while let row = try rows.next() {
                    let key = (0..<table.primaryKey.count).map { LogValue(row[$0] as DatabaseValue) }
                    guard try StoreMerger.meta(table: table.name, key: RowMeta.encodedKey(key), db) == nil else { continue }
                    var values: [String: LogValue] = [:]
                    for (index, column) in table.valueColumns.enumerated() { values[column] = LogValue(row[table.primaryKey.count + index] as DatabaseValue) }
                    changes.append(RowChange(table: table.name, primaryKey: key, kind: .insert, columns: values))
                }
                // Stamps are written only after the table's rows were read (not while a cursor is open on it).
                for batch in stride(from: 0, to: changes.count, by: 5_000) {
                    try keep(ChangeLogRecord(timestamp: clock.tick(), device: device, schema: schema.hash, changes: Array(changes[batch..<min(batch + 5_000, changes.count)])), db)
                }
                adopted += changes.count
            }
            try db.execute(sql: "INSERT OR REPLACE INTO ubq_state(key, value) VALUES ('adopted', ?)", arguments: [schema.hash])
            try saveClock(db)
            if adopted > 0 { logger.notice("adopted rows written before they synced", metadata: ["rows": "\(adopted)"]) }
        }
    }

    /// Publishes the outbox as this device's next segments. Returns how many were published.
    /// - Parameter heartbeat: With nothing to publish, publish an empty segment anyway: it tells
    ///   the other devices how far this one has applied their logs (what compaction waits for).
    @discardableResult
    func publish(heartbeat: Bool = false) throws -> Int {
        var published = 0
        while true {
            let (rows, last, frontier) = try writer.read { db in
                var rows: [(tx: Int64, part: Int64, record: Data)] = []
                var bytes = 0
                let cursor = try Row.fetchCursor(db, sql: "SELECT tx, part, record FROM ubq_outbox ORDER BY tx, part")
                while bytes < Self.segmentBytes, let row = try cursor.next() {
                    let record: Data = row[2]
                    rows.append((row[0], row[1], record))
                    bytes += record.count
                }
                return (rows, try Self.published(db), try Self.imported(db).mapValues(\.number))
            }
            guard heartbeat && published == 0 || !rows.isEmpty else { return published }
            let lastRow = rows.last
            let decoder = JSONDecoder()
            let records = try rows.map { try decoder.decode(ChangeLogRecord.self, from: $0.record) }
            let segment = LogSegment(device: device, number: (last?.number ?? 0) + 1, previous: last?.hash, frontier: frontier, records: records,
                                     written: Int64(Date().timeIntervalSince1970 * 1000))
            let hash = try logs.publish(segment)
            try writer.write { db in
                if let lastRow {
                    try db.execute(sql: "DELETE FROM ubq_outbox WHERE (tx, part) <= (?, ?)", arguments: [lastRow.tx, lastRow.part])
                }
                try Self.setPublished(LogPosition(number: segment.number, hash: hash), db)
                try Self.noteSegment(segment, db)
                try db.execute(sql: "INSERT OR REPLACE INTO ubq_state(key, value) VALUES ('publishedAt', ?)", arguments: [segment.written])
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
                if let newest = segment.records.last {
                    try db.execute(sql: "DELETE FROM ubq_outbox WHERE (tx, part) <= (?, ?)", arguments: [newest.timestamp.packed, newest.startIndex ?? 0])
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
    func importLogs(onImported: (ImportedChanges) -> Void = { _ in }, onProgress: (ImportProgress) -> Void = { _ in }) throws -> ImportReport {
        var report = ImportReport()
        do {
            // A new store, or one whose needed segments were deleted while it was away: from a baseline.
            if let baseline = try baselineToLoad() {
                let applied = try load(baseline.header, from: baseline.url)
                report.baselines += 1
                for change in applied { report.changes.add(change, allColumns: schema.table(change.table)?.valueColumns ?? []) }
                let changes = summary(of: applied)
                if !changes.isEmpty { onImported(changes) }
            }
        } catch let error as LogSegmentError {
            report.problems["baseline"] = error
            logger.error("cannot use the newest baseline", metadata: ["error": "\(error)"])
        }
        let positions = try writer.read { db in try Self.imported(db) }
        let others = try logs.devices().filter { $0 != device }
        var progress = ImportProgress(segments: 0, totalSegments: try others.reduce(0) { $0 + (try logs.segmentCount($1, after: positions[$1])) }, transactions: 0)
        for other in others {
            do {
                let result = try logs.read(other, after: positions[other]) { segment, position in
                    if let reason = unknownSchema(segment) { throw Hold(reason: reason) }
                    let applied = try writer.writeWithoutTransaction { db -> [AppliedChange] in
                        try withoutForeignKeyChecks(db) {
                            var applied: [AppliedChange] = []
                            try db.inTransaction {
                                try flush(db)
                                try capture.withoutCapture(db) {
                                    for record in segment.records {
                                        clock.receive(record.timestamp)
                                        applied += try merger.apply(record, local: false, db, duplicates: self)
                                    }
                                }
                                try importHook?(db, summary(of: applied))
                                try db.execute(sql: "INSERT OR REPLACE INTO ubq_imported(device, number, hash) VALUES (?, ?, ?)", arguments: [other, position.number, position.hash])
                                try Self.noteSegment(segment, db)
                                try saveClock(db)
                                return .commit
                            }
                            return applied
                        }
                    }
                    report.segments += 1
                    report.transactions += segment.records.count
                    progress.segments += 1
                    progress.transactions += segment.records.count
                    onProgress(progress)
                    for change in applied { report.changes.add(change, allColumns: schema.table(change.table)?.valueColumns ?? []) }
                    let changes = summary(of: applied)
                    if !changes.isEmpty { onImported(changes) }
                }
                if let missing = result.missing { report.waiting[other] = "segments \(missing.lowerBound)…\(missing.upperBound) have not arrived" }
                if !result.notDownloaded.isEmpty {
                    report.waiting[other] = "\(result.notDownloaded.count) segment(s) downloading"
                    for url in result.notDownloaded {
                        do { try requestDownload(url) } catch {
                            logger.warning("cannot ask for a segment to be downloaded", metadata: ["segment": "\(url.path)", "error": "\(error)"])
                        }
                    }
                }
            } catch let hold as Hold {
                report.waiting[other] = hold.reason
            } catch let error as LogSegmentError {
                report.problems[other] = error
                logger.error("cannot read a device's log", metadata: ["device": "\(other)", "error": "\(error)"])
            }
        }
        return report
    }

    /// Runs `body` (outside a transaction) with foreign keys not enforced: another device's row
    /// may arrive before the row it refers to (which comes in a third device's log), and a row
    /// may refer to one deleted concurrently elsewhere; an import must not fail for either. The
    /// reference is kept as its device wrote it (the app may repair it in its import hook).
    func withoutForeignKeyChecks<T>(_ db: Database, _ body: () throws -> T) throws -> T {
        let enforced = try Bool.fetchOne(db, sql: "PRAGMA foreign_keys") ?? false
        guard enforced else { return try body() }
        try db.execute(sql: "PRAGMA foreign_keys = OFF")
        do {
            let result = try body()
            try db.execute(sql: "PRAGMA foreign_keys = ON")
            return result
        } catch {
            try db.execute(sql: "PRAGMA foreign_keys = ON")
            throw error
        }
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

    /// Notes the newest timestamp of a segment applied or published here (what collecting
    /// tombstones compares a delete's stamp with).
    static func noteSegment(_ segment: LogSegment, _ db: Database) throws {
        let newest = segment.records.map(\.timestamp.packed).max() ?? 0
        try db.execute(sql: "INSERT OR REPLACE INTO ubq_segment(device, number, newest) VALUES (?, ?, ?)", arguments: [segment.device, segment.number, newest])
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

extension DatabaseSyncEngine: DuplicateResolver {
    /// Removes a duplicate as this device's change: the app's hook first (what it writes is
    /// captured and kept as a transaction of its own), then a logged delete of `removed`.
    func removeDuplicate(_ table: SyncedTable, kept: [LogValue], removed: [LogValue], _ db: Database) throws {
        let rows = DuplicateRows(table: table.name, kept: RowKey(table: table.name, primaryKey: kept), removed: RowKey(table: table.name, primaryKey: removed))
        if let duplicateHook {
            try capture.capturing(db) { try duplicateHook(db, rows) }
            try flush(db) // what is captured next in this transaction is a later change
        }
        let record = ChangeLogRecord(timestamp: clock.tick(), device: device, schema: schema.hash, changes: [RowChange(table: table.name, primaryKey: removed, kind: .delete)])
        try keep(record, db)
        try StoreMerger.delete(table, key: removed, db) // inside the import: not captured
        logger.info("removed a duplicate row", metadata: ["table": "\(table.name)", "kept": "\(kept)", "removed": "\(removed)"])
    }
}

extension DatabaseSyncEngine {
    /// Compares the synced tables with what the logs say — every device's segments read here
    /// (this device's own included), and this device's transactions not yet published — merged
    /// by ``MergeRules``. Rows of devices whose logs wait (a segment not yet here, a newer
    /// schema) are left out of the comparison of what the store should hold only if the store
    /// has not imported them either, so a difference means the store and its logs disagree.
    func verify() throws -> [StoreDifference] {
        try writer.write { db in _ = try flush(db) }
        var rules = MergeRules()
        let (positions, published) = try writer.read { db in (try Self.imported(db), try Self.published(db)) }
        // From the newest baseline this store has applied all of (segments it holds may be gone).
        var start: [String: LogPosition] = [:]
        let applied = { (other: String) -> Int64 in other == self.device ? published?.number ?? 0 : positions[other]?.number ?? 0 }
        if let baseline = try baselines.headers().baselines.first(where: { $0.header.frontier.allSatisfy { $0.value.number <= applied($0.key) } }) {
            try BaselineFolder.read(baseline.url) { line in
                for record in records(of: line, meta: try RowMeta(encoded: [UInt8](line.m)), schema: baseline.header.schema) { rules.apply(record) }
            }
            start = baseline.header.frontier
        }
        for device in try logs.devices() {
            let limit = applied(device)
            guard limit > 0 else { continue }
            _ = try logs.read(device, after: start[device]) { segment, _ in
                if segment.number > limit { return }
                for record in segment.records { rules.apply(record) }
            }
        }
        let pending = try writer.read { db in try Data.fetchAll(db, sql: "SELECT record FROM ubq_outbox ORDER BY tx") }
        for data in pending { rules.apply(try JSONDecoder().decode(ChangeLogRecord.self, from: data)) }
        var differences: [StoreDifference] = []
        for table in schema.tables {
            let expected = rules.table(table.name)
            var actual: [[LogValue]: [String: LogValue]] = [:]
            try writer.read { db in
                let columns = (table.primaryKey + table.valueColumns).map(\.quotedDatabaseIdentifier).joined(separator: ", ")
                let rows = try Row.fetchCursor(db, sql: "SELECT \(columns) FROM main.\(table.name.quotedDatabaseIdentifier)")
                while let row = try rows.next() {
                    let key = (0..<table.primaryKey.count).map { LogValue(row[$0] as DatabaseValue) }
                    var values: [String: LogValue] = [:]
                    for (index, column) in table.valueColumns.enumerated() { values[column] = LogValue(row[table.primaryKey.count + index] as DatabaseValue) }
                    actual[key] = values
                }
            }
            for key in Set(expected.keys).union(actual.keys) {
                let want = expected[key], have = actual[key]
                // A column the logs never set (a default) is the store's to keep.
                if let want, let have, want.allSatisfy({ have[$0.key] == $0.value }) { continue }
                if want == nil, have == nil { continue }
                differences.append(StoreDifference(row: RowKey(table: table.name, primaryKey: key), inLogs: want, inStore: have))
            }
        }
        return differences.sorted { "\($0.row)" < "\($1.row)" }
    }
}

/// A row on which a store and its logs disagree (``UbiquitousDatabase/verify()``).
public struct StoreDifference: Equatable, Sendable {
    /// The row.
    public var row: RowKey
    /// Its values as the logs say (nil: it should not exist).
    public var inLogs: [String: LogValue]?
    /// Its values in the store (nil: it is not there).
    public var inStore: [String: LogValue]?
}
