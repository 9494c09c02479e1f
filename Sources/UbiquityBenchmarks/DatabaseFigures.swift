import Foundation
import UbiquityTestSupport
import GRDB
import UbiquityDatabase

/// Databases in iCloud, beside plain GRDB in the same run: what capturing changes costs an
/// app's transaction, how fast other devices' changes merge, what one remote change costs a
/// large store, and how long a new device takes to build its store from the logs.
///
/// Devices here are containers on this machine whose log folders are copied across (what the
/// agents do); the wire is measured by ubiquity-sync-bench and the end-to-end tests.
func databaseFigures(in directory: URL, iterations: Int, largeRows: Int, historyRows: Int) throws -> [String: Any] {
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let clock = ContinuousClock()
    let runs = max(3, min(iterations, 7))
    let migrator = benchMigrator()
    func open(_ name: String) throws -> UbiquitousDatabase {
        try UbiquitousDatabase(container: directory.appendingPathComponent(name), name: "Bench", migrator: migrator, automaticallySynchronizes: false)
    }
    func insertRows(_ db: Database, prefix: String, count: Int) throws {
        let statement = try db.makeStatement(sql: "INSERT INTO item VALUES (?, ?, ?, ?, ?)")
        for index in 0..<count {
            try statement.execute(arguments: ["\(prefix)-\(index)", "Item \(index)", index, "a note about item \(index)", Double(index) / 100])
        }
    }
    func copyLogs(from source: String, to destination: String) throws {
        let manager = FileManager.default
        let from = directory.appendingPathComponent(source).appendingPathComponent("Databases/Bench/logs")
        let to = directory.appendingPathComponent(destination).appendingPathComponent("Databases/Bench/logs")
        for device in try manager.contentsOfDirectory(atPath: from.path) {
            try manager.createDirectory(at: to.appendingPathComponent(device), withIntermediateDirectories: true)
            for file in try manager.contentsOfDirectory(atPath: from.appendingPathComponent(device).path) where file.hasSuffix(".ubqlog") {
                let target = to.appendingPathComponent(device).appendingPathComponent(file)
                if !manager.fileExists(atPath: target.path) { try manager.copyItem(at: from.appendingPathComponent(device).appendingPathComponent(file), to: target) }
            }
        }
    }
    func seconds(_ body: () throws -> Void) rethrows -> Double {
        let start = clock.now
        try body()
        return (clock.now - start).inSeconds
    }
    let rowsPerTransaction = 10_000

    // 1. Capture: a 10,000-row insert transaction, plain GRDB against a synced store.
    let plain = try DatabasePool(path: directory.appendingPathComponent("plain.sqlite").path)
    try migrator.migrate(plain)
    let synced = try open("capture")
    var plainTimes: [Double] = [], capturedTimes: [Double] = [], publishTimes: [Double] = []
    for run in 0..<runs {
        plainTimes.append(try seconds { try plain.write { db in try insertRows(db, prefix: "p\(run)", count: rowsPerTransaction) } })
        capturedTimes.append(try seconds { try synced.writer.write { db in try insertRows(db, prefix: "c\(run)", count: rowsPerTransaction) } })
        publishTimes.append(try seconds { try synced.synchronize() })
    }
    try plain.close()
    let segmentBytes = try FileManager.default.contentsOfDirectory(at: synced.logsURL.appendingPathComponent(synced.deviceIdentifier), includingPropertiesForKeys: [.fileSizeKey])
        .compactMap { try $0.resourceValues(forKeys: [.fileSizeKey]).fileSize }.max() ?? 0

    // 2. Merge: another device imports those transactions (4 value columns a row).
    let importer = try open("import")
    try copyLogs(from: "capture", to: "import")
    var imported = ImportReport()
    let importSeconds = try seconds { imported = try importer.synchronize() }
    let columnChanges = imported.transactions * rowsPerTransaction * 4

    // 3. One remote change applied to a large store.
    let large = try open("large")
    try large.writer.write { db in
        for batch in 0..<(largeRows / rowsPerTransaction) { try insertRows(db, prefix: "l\(batch)", count: rowsPerTransaction) }
    }
    try large.synchronize()
    let editor = try open("editor")
    var oneChange: [Double] = []
    var oneChangeSegmentBytes = 0
    for run in 0..<max(runs, 11) {
        try editor.writer.write { db in try db.execute(sql: "INSERT OR REPLACE INTO item VALUES ('e-1', 'Edited', ?, NULL, 1.5)", arguments: [run]) }
        try editor.synchronize()
        try copyLogs(from: "editor", to: "large")
        oneChange.append(try seconds { try large.synchronize() })
    }
    if let newest = try FileManager.default.contentsOfDirectory(at: editor.logsURL.appendingPathComponent(editor.deviceIdentifier), includingPropertiesForKeys: [.fileSizeKey]).sorted(by: { $0.path < $1.path }).last {
        oneChangeSegmentBytes = try newest.resourceValues(forKeys: [.fileSizeKey]).fileSize ?? 0
    }
    let largeCount = try large.writer.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM item") } ?? 0

    let built = try firstImportFigures(in: directory.appendingPathComponent("first-import"), rows: historyRows)
    for database in [synced, importer, large, editor] { try database.close() }

    oneChange.sort()
    return [
        "captureInsert10000": [
            "plainGRDBSeconds": plainTimes.min() ?? 0, "syncedSeconds": capturedTimes.min() ?? 0,
            "ratioToPlainGRDB": (capturedTimes.min() ?? 0) / max(plainTimes.min() ?? 1, 1e-9),
            "publishSeconds": publishTimes.min() ?? 0, "segmentBytes": segmentBytes, "runs": runs,
            "note": "time of the app's write transaction; publish = collecting, stamping and writing the segment afterwards",
        ],
        "merge": [
            "transactions": imported.transactions, "rows": imported.changes.inserted.count, "columnChanges": columnChanges,
            "seconds": importSeconds, "columnChangesPerSecond": Double(columnChanges) / max(importSeconds, 1e-9),
            "note": "another device importing the capture figure's segments (JSON decode, merge, write)",
        ],
        "oneRemoteChange": [
            "storeRows": largeCount, "runs": oneChange.count,
            "p50Milliseconds": oneChange[oneChange.count / 2] * 1000, "maxMilliseconds": (oneChange.last ?? 0) * 1000,
            "segmentBytes": oneChangeSegmentBytes,
            "note": "synchronize() of the large store after another device's one-row segment arrived (reading the folder, applying, committing)",
        ],
        "firstImport": built,
    ]
}

/// A new device building its store from a history of `rows` rows (10,000 a transaction): the
/// time, and the process's memory before and at its peak (run alone, `--only databaseImport`,
/// for a peak that is the import's own).
func firstImportFigures(in directory: URL, rows: Int) throws -> [String: Any] {
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    // The history is written by a process of its own, so that this one's memory is the import's.
    let child = ChildProcess()
    child.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    child.arguments = ["--database-history", directory.appendingPathComponent("history").path, String(rows)]
    try child.run()
    child.waitUntilExit()
    guard child.terminationStatus == 0 else { throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "writing the history failed"]) }
    let migrator = benchMigrator()
    let newcomer = directory.appendingPathComponent("newcomer")
    try FileManager.default.createDirectory(at: newcomer.appendingPathComponent("Databases/Bench"), withIntermediateDirectories: true)
    try FileManager.default.copyItem(at: directory.appendingPathComponent("history/Databases/Bench/logs"), to: newcomer.appendingPathComponent("Databases/Bench/logs"))
    let before = residentMiB()
    let clock = ContinuousClock(), start = clock.now
    let database = try UbiquitousDatabase(container: newcomer, name: "Bench", migrator: migrator, automaticallySynchronizes: false)
    let report = try database.synchronize()
    let seconds = (clock.now - start).inSeconds
    try database.close()
    return [
        "rows": report.changes.inserted.count, "segments": report.segments, "seconds": seconds,
        "residentMiBBefore": before, "peakResidentMiB": peakResidentMiB(),
        "note": "a new device's store built from the logs (opening included); peak is the whole process's: run alone (--only databaseImport)",
    ]
}

/// The benchmarks' schema.
func benchMigrator() -> DatabaseMigrator {
    var migrator = DatabaseMigrator()
    migrator.registerMigration("v1") { db in
        try db.execute(sql: "CREATE TABLE item(id TEXT PRIMARY KEY, name TEXT NOT NULL, qty INTEGER NOT NULL, note TEXT, price REAL)")
    }
    return migrator
}

/// Writes a history of `rows` rows (10,000 a transaction) into a database in `container` and
/// publishes it: the child process of ``firstImportFigures(in:rows:)``.
func writeDatabaseHistory(container: URL, rows: Int) throws {
    let history = try UbiquitousDatabase(container: container, name: "Bench", migrator: benchMigrator(), automaticallySynchronizes: false)
    for batch in 0..<max(1, rows / 10_000) {
        try history.writer.write { db in
            let statement = try db.makeStatement(sql: "INSERT INTO item VALUES (?, ?, ?, ?, ?)")
            for index in 0..<10_000 {
                try statement.execute(arguments: ["h\(batch)-\(index)", "Item \(index)", index, "a note about item \(index)", Double(index) / 100])
            }
        }
    }
    try history.synchronize()
    try history.close()
}

/// The process's resident memory now, in MiB (Linux).
func residentMiB() -> Double { statusField("VmRSS:") }

/// The process's peak resident memory, in MiB (Linux).
func peakResidentMiB() -> Double { statusField("VmHWM:") }

private func statusField(_ field: String) -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) }),
          let kilobytes = Double(line.split(separator: " ").dropFirst().first ?? "") else { return 0 }
    return kilobytes / 1024
}
