import Foundation
import GRDB
import UbiquityCoordination
import UbiquityFiles

/// What compacting did.
public struct CompactionReport: Equatable, Sendable {
    /// The baseline written (its number among this device's), if one was.
    public var baseline: Int64?
    /// The rows it holds.
    public var rows = 0
    /// This device's segments deleted (covered by a baseline and applied by every registered
    /// device).
    public var deletedSegments = 0
    /// Tombstones collected (deleted rows every registered device has seen deleted).
    public var collectedTombstones = 0
    /// Devices not heard of for longer than the registration lasts: they no longer hold logs
    /// back (back again, they catch up from a baseline, keeping what they did meanwhile).
    public var expiredDevices: [String] = []

    /// Nothing done.
    public init() {}
}

extension DatabaseSyncEngine {
    /// The database's baselines, beside its logs.
    var baselines: BaselineFolder { BaselineFolder(url: logs.url.deletingLastPathComponent().appendingPathComponent("baselines", isDirectory: true)) }

    // MARK: Writing

    /// Writes a baseline of the store as it is: this device's changes published first, then,
    /// inside one write transaction (no app transaction between), every row with its stamps at
    /// the frontier of what the store has applied. Returns its header, or nil when there is
    /// nothing to hold or a change arrived meanwhile (tried again later).
    func writeBaseline() throws -> Baseline.Header? {
        try publish()
        let folder = baselines
        return try writer.write { db -> Baseline.Header? in
            try flush(db)
            guard try Int.fetchOne(db, sql: "SELECT count(*) FROM ubq_outbox") == 0 else { return nil }
            var frontier = try Self.imported(db)
            if let own = try Self.published(db) { frontier[device] = own }
            guard !frontier.isEmpty else { return nil }
            let number = (try Int64.fetchOne(db, sql: "SELECT value FROM ubq_state WHERE key = 'baseline'") ?? 0) + 1
            let names = schema.tables.map(\.name)
            let placeholders = names.map { _ in "?" }.joined(separator: ", ")
            let rows = names.isEmpty ? 0 : try Int.fetchOne(db, sql: "SELECT count(*) FROM ubq_row WHERE tbl IN (\(placeholders))", arguments: StatementArguments(names)) ?? 0
            let header = Baseline.Header(format: Baseline.currentFormat, device: device, number: number, schema: schema.hash, frontier: frontier, rows: rows)
            try folder.publish(header) { emit in
                guard !names.isEmpty else { return }
                let cursor = try Row.fetchCursor(db, sql: "SELECT tbl, pk, meta FROM ubq_row WHERE tbl IN (\(placeholders)) ORDER BY tbl, pk", arguments: StatementArguments(names))
                while let row = try cursor.next() {
                    let name: String = row[0]
                    guard let table = schema.table(name) else { continue }
                    let key = try RowMeta.decodedKey([UInt8](row[1] as Data))
                    let bytes: Data = row[2]
                    let meta = try RowMeta(encoded: [UInt8](bytes))
                    let values = meta.exists ? try ChangeCapture.values(of: table.valueColumns, in: table, key: key, db) : nil
                    try emit(Baseline.Line(t: name, k: key, m: bytes, v: values))
                }
            }
            try db.execute(sql: "INSERT OR REPLACE INTO ubq_state(key, value) VALUES ('baseline', ?)", arguments: [number])
            logger.info("wrote a baseline", metadata: ["baseline": "\(number)", "rows": "\(rows)"])
            return header
        }
    }

    // MARK: Reading

    /// A baseline row as the changes that made it (one per distinct stamp: its insert, its
    /// delete, the updates of its columns): applied by the merge rules like any record, in any
    /// order, with anything else.
    func records(of line: Baseline.Line, meta: RowMeta, schema hash: String) -> [ChangeLogRecord] {
        let values = meta.exists ? (line.v ?? [:]) : meta.ghost
        var byStamp: [ChangeStamp: [String: LogValue]] = [:]
        for (column, stamp) in meta.stamps {
            guard let value = values[column] else { continue }
            byStamp[stamp, default: [:]][column] = value
        }
        var changes: [(ChangeStamp, RowChange)] = []
        if let inserted = meta.inserted {
            changes.append((inserted, RowChange(table: line.t, primaryKey: line.k, kind: .insert, columns: byStamp.removeValue(forKey: inserted) ?? [:])))
        }
        if let deleted = meta.deleted {
            changes.append((deleted, RowChange(table: line.t, primaryKey: line.k, kind: .delete)))
        }
        for (stamp, columns) in byStamp { changes.append((stamp, RowChange(table: line.t, primaryKey: line.k, kind: .update, columns: columns))) }
        return changes.map { stamp, change in
            ChangeLogRecord(timestamp: stamp.timestamp, device: stamp.device, schema: hash, changes: [change], startIndex: stamp.index)
        }
    }

    /// Merges a baseline into the store, in one transaction, and moves the positions of the
    /// devices it is ahead on to its frontier. This device's changes not yet published are kept
    /// (they merge with it as they would with any device's).
    /// - Returns: What changed in the app's tables.
    func load(_ header: Baseline.Header, from file: URL) throws -> [AppliedChange] {
        try writer.writeWithoutTransaction { db -> [AppliedChange] in
            try withoutForeignKeyChecks(db) {
                var applied: [AppliedChange] = []
                try db.inTransaction {
                    try flush(db)
                    try capture.withoutCapture(db) {
                        try BaselineFolder.read(file) { line in
                            guard let table = schema.table(line.t), line.k.count == table.primaryKey.count else {
                                throw LogSegmentError(.newerFormat, "baseline \(header.number) of \(header.device) has rows of \(line.t), which this version of the app does not have")
                            }
                            let meta = try RowMeta(encoded: [UInt8](line.m))
                            for record in records(of: line, meta: meta, schema: header.schema) {
                                clock.receive(record.timestamp)
                                applied += try merger.apply(record, local: false, db, duplicates: self)
                            }
                        }
                    }
                    let positions = try Self.imported(db)
                    for (other, position) in header.frontier where other != device && position.number > positions[other]?.number ?? 0 {
                        try db.execute(sql: "INSERT OR REPLACE INTO ubq_imported(device, number, hash) VALUES (?, ?, ?)", arguments: [other, position.number, position.hash])
                    }
                    try saveClock(db)
                    return .commit
                }
                logger.notice("caught up from a baseline", metadata: ["baseline": "\(header.device)/\(header.number)", "rows": "\(header.rows)"])
                return applied
            }
        }
    }

    /// The newest baseline to start from, if the store should: when it is new (nothing applied
    /// yet: a baseline is quicker than every segment), or when a device's segments it needs
    /// were deleted since (it was away longer than the logs are kept).
    func baselineToLoad() throws -> (header: Baseline.Header, url: URL)? {
        // Another device's (this store's own hold nothing it lacks), newest first.
        let candidates = try baselines.headers().baselines.filter { $0.header.device != device }
        guard let newest = candidates.first else { return nil }
        let positions = try writer.read { db in try Self.imported(db) }
        if positions.isEmpty { return newest }
        // A device whose next segment is gone: the newest baseline that is past it.
        for other in Set(candidates.flatMap(\.header.frontier.keys)) where other != device {
            let next = (positions[other]?.number ?? 0) + 1
            let first = try logs.firstSegment(other)
            guard first.map({ $0 > next }) ?? true else { continue } // its segments are here
            if let baseline = candidates.first(where: { ($0.header.frontier[other]?.number ?? 0) >= next }) { return baseline }
        }
        return nil
    }

    // MARK: Deleting what is held

    /// Deletes this device's segments that a baseline holds and every registered device has
    /// applied. A device is registered while it was heard of (its newest segment written)
    /// within `registration`; one not heard of since no longer holds segments back.
    func collectGarbage(registration: TimeInterval, now: Date = Date()) throws -> (deleted: Int, expired: [String]) {
        guard let own = try writer.read({ db in try Self.published(db) }) else { return (0, []) }
        let covered = try baselines.headers().baselines.compactMap { $0.header.frontier[device]?.number }.max() ?? 0
        // The newest segment always stays: its frontier tells the others how far this device
        // has come (without it, they would take this device for one they never heard of).
        var limit = min(covered, own.number - 1)
        var expired: [String] = []
        for other in try logs.devices() where other != device {
            guard let newest = try logs.newestSegment(other) else { continue }
            let written = newest.written.map { Date(timeIntervalSince1970: Double($0) / 1000) } ?? .distantPast
            if now.timeIntervalSince(written) > registration {
                expired.append(other)
                continue
            }
            limit = min(limit, newest.frontier[device] ?? 0)
        }
        var deleted = 0
        if limit > 0 {
            let folder = logs.url.appendingPathComponent(device)
            let coordinator = NSFileCoordinator(filePresenter: nil)
            for name in try POSIX.directoryEntries(folder.path) where name.hasSuffix(".ubqlog") {
                guard let number = Int64(name.dropLast(7)), number <= limit else { continue }
                try coordinator.coordinate(writingItemAt: folder.appendingPathComponent(name), options: .forDeleting) { try FileManager.default.removeItem(at: $0) }
                deleted += 1
            }
        }
        if deleted > 0 { logger.info("deleted segments a baseline holds", metadata: ["segments": "\(deleted)", "through": "\(limit)"]) }
        return (deleted, expired.sorted())
    }

    /// Drops tombstones (rows whose delete won, holding nothing else) that can no longer matter:
    /// every registered device has applied the delete (the device's newest segment's frontier
    /// covers the segment holding it), and this store has applied every registered device's
    /// segments up to that newest one — so every change not yet applied here was made after
    /// its device saw the delete, and is later than it — and the delete is older than the
    /// registration. Only a device out of touch for longer than that (away, or never synced at
    /// all: a device not heard of is not registered) could still bring such a row back, with an
    /// insert of the same key it made before the delete: its risk, as with Core Data.
    /// - Parameters:
    ///   - registration: How long a device not heard of stays registered, and how old a delete
    ///     must be before its tombstone goes.
    ///   - minimumAge: How old a delete must be (default: the registration).
    func collectTombstones(registration: TimeInterval, minimumAge: TimeInterval? = nil, now: Date = Date()) throws -> Int {
        let oldest = Int64((now.timeIntervalSince1970 - (minimumAge ?? registration)) * 1000)
        let (positions, published) = try writer.read { db in (try Self.imported(db), try Self.published(db)) }
        // What each registered device has applied of each device's log (segment numbers).
        var seen: [[String: Int64]] = [positions.mapValues(\.number).merging(published.map { [device: $0.number] } ?? [:]) { $1 }]
        for other in try logs.devices() where other != device {
            guard let newest = try logs.newestSegment(other) else { continue }
            let written = newest.written.map { Date(timeIntervalSince1970: Double($0) / 1000) } ?? .distantPast
            guard now.timeIntervalSince(written) <= registration else { continue }
            guard positions[other]?.number ?? 0 >= newest.number else { return 0 } // its changes are not all here yet
            seen.append(newest.frontier.merging([other: newest.number]) { $1 })
        }
        return try writer.write { db -> Int in
            // The newest timestamp of the last segment of each device every registered device applied.
            var cutoff: [String: Int64] = [:]
            for author in Set(seen.flatMap(\.keys)) {
                let number = seen.map { $0[author] ?? 0 }.min() ?? 0
                guard number > 0, let newest = try Int64.fetchOne(db, sql: "SELECT max(newest) FROM ubq_segment WHERE device = ? AND number <= ?", arguments: [author, number]) else { continue }
                cutoff[author] = newest
            }
            var dropped: [(String, Data)] = []
            let rows = try Row.fetchCursor(db, sql: "SELECT tbl, pk, meta FROM ubq_row")
            while let row = try rows.next() {
                let meta = try RowMeta(encoded: [UInt8](row[2] as Data))
                guard !meta.exists, meta.stamps.isEmpty, meta.ghost.isEmpty, let deleted = meta.deleted, deleted.timestamp.milliseconds < oldest,
                      let limit = cutoff[deleted.device], deleted.timestamp.packed <= limit else { continue }
                dropped.append((row[0], row[1]))
            }
            for (table, key) in dropped { try db.execute(sql: "DELETE FROM ubq_row WHERE tbl = ? AND pk = ?", arguments: [table, key]) }
            if !dropped.isEmpty { logger.info("collected tombstones", metadata: ["rows": "\(dropped.count)"]) }
            return dropped.count
        }
    }

    /// Writes a baseline and deletes what it (and every registered device) covers.
    func compact(registration: TimeInterval, now: Date = Date()) throws -> CompactionReport {
        var report = CompactionReport()
        report.collectedTombstones = try collectTombstones(registration: registration, now: now)
        if let header = try writeBaseline() {
            report.baseline = header.number
            report.rows = header.rows
        }
        (report.deletedSegments, report.expiredDevices) = try collectGarbage(registration: registration, now: now)
        return report
    }

    /// How many of this device's segments no baseline holds yet.
    func segmentsSinceBaseline() throws -> Int64 {
        guard let own = try writer.read({ db in try Self.published(db) }) else { return 0 }
        let covered = try baselines.headers().baselines.compactMap { $0.header.frontier[device]?.number }.max() ?? 0
        return own.number - covered
    }
}

extension LogFolder {
    /// The number of `device`'s first segment here (nil: none).
    func firstSegment(_ device: String) throws -> Int64? {
        try segmentNumbers(device).min()
    }

    /// `device`'s newest segment here, read and checked (nil: none).
    func newestSegment(_ device: String) throws -> LogSegment? {
        guard let number = try segmentNumbers(device).max() else { return nil }
        let file = url.appendingPathComponent(device).appendingPathComponent(LogSegment.fileName(number: number))
        return try LogSegment.decode(try POSIX.readFile(file.path)).segment
    }

    /// The numbers of `device`'s segments here.
    func segmentNumbers(_ device: String) throws -> [Int64] {
        try Self.checkDevice(device)
        let folder = url.appendingPathComponent(device, isDirectory: true)
        guard FileManager.default.fileExists(atPath: folder.path) else { return [] }
        return try POSIX.directoryEntries(folder.path).compactMap { $0.hasSuffix(".ubqlog") ? Int64($0.dropLast(7)) : nil }
    }
}

extension RowMeta {
    /// Reads ``encodedKey(_:)``.
    static func decodedKey(_ bytes: [UInt8]) throws -> [LogValue] {
        var reader = ByteReader(bytes)
        var key: [LogValue] = []
        while !reader.isAtEnd { key.append(try reader.value()) }
        return key
    }
}
