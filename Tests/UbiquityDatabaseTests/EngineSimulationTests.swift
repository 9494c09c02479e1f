import Foundation
import GRDB
import Logging
import Testing
import UbiquityTestSupport
@testable import UbiquityDatabase

/// The whole engine on real stores and a real logs folder (shared, as if the agents synced it at
/// once): devices write SQL, publish, import, announce how far they have come, compact (baselines,
/// deleting segments everyone applied, collecting tombstones), and delete and rebuild their
/// stores. At the end every device holds what the merge rules say of every transaction ever
/// published, and `verify()` finds nothing. 1,000 seeds in CI (`CI` set; about 110 s of one core,
/// at the lowest priority), 200 elsewhere (`UBIQUITY_ENGINE_SEEDS` sets it), on a thread of their
/// own, in a memory file system where there is one.
@Suite struct EngineSimulationTests {
    struct Device {
        let name: String
        let queue: DatabaseQueue
        let engine: DatabaseSyncEngine
    }

    static func open(_ folder: URL, _ file: String, time: StoreMergeSimulationTests.SimulatedTime, skew: Int64) throws -> Device {
        let queue = try DatabaseQueue(path: folder.appendingPathComponent(file).path)
        try queue.write { db in try db.execute(sql: CapturedStore.sampleSchema) }
        // Ids and clocks of the simulation's own: a seed replays exactly. Its thousands of
        // baselines and catch-ups are routine: only warnings reach the suite's output.
        var logger = Logger(label: file)
        logger.logLevel = .warning
        let engine = try DatabaseSyncEngine(writer: queue, logs: LogFolder(url: folder.appendingPathComponent("Sim/logs")), localTables: [], logger: logger,
                                            newDeviceIdentifier: "device-" + file.replacingOccurrences(of: ".sqlite", with: ""), wallClock: time.clock(skew: skew))
        return Device(name: file, queue: queue, engine: engine)
    }

    /// Every segment published so far, read before compaction can delete it.
    static func collect(_ logs: URL, into seen: inout [String: ChangeLogRecord], order: inout [String]) throws {
        let folder = LogFolder(url: logs)
        for device in try folder.devices() {
            let files = try FileManager.default.contentsOfDirectory(atPath: logs.appendingPathComponent(device).path).filter { $0.hasSuffix(".ubqlog") }
            for file in files {
                let key = "\(device)/\(file)"
                guard !order.contains(key) else { continue }
                order.append(key)
                let (segment, _) = try LogSegment.decode(try Data(contentsOf: logs.appendingPathComponent(device).appendingPathComponent(file)))
                for (index, record) in segment.records.enumerated() { seen["\(key)#\(index)"] = record }
            }
        }
    }

    static func contents(_ queue: DatabaseQueue, _ table: String) throws -> [String] {
        try queue.read { db in try Row.fetchAll(db, sql: "SELECT * FROM \(table) ORDER BY 1, 2").map { "\($0)" } }
    }

    @Test func theWholeEngineConvergesThroughCompactionAndRebuilds() async throws {
        let environment = ProcessInfo.processInfo.environment
        let seeds = UInt64(environment["UBIQUITY_ENGINE_SEEDS"].flatMap(Int.init) ?? (environment["CI"] != nil ? 1_000 : 200))
        let failure = try await onBackgroundThread { try Self.simulate(seeds: seeds) }
        #expect(failure == nil, "\(failure ?? "")")
    }

    static func simulate(seeds: UInt64) throws -> String? {
        var baselines = 0, loadedBaselines = 0, deletedSegments = 0, tombstones = 0, rebuilt = 0
        defer {
            // What the seeds went through (so that a change making them skip a step shows).
            print("engine simulation: \(seeds) seeds, \(baselines) baselines written, \(loadedBaselines) loaded, \(deletedSegments) segments deleted, \(tombstones) tombstones collected, \(rebuilt) stores rebuilt")
        }
        let base = FileManager.default.fileExists(atPath: "/dev/shm") ? URL(fileURLWithPath: "/dev/shm") : FileManager.default.temporaryDirectory
        let only = ProcessInfo.processInfo.environment["UBIQUITY_ENGINE_SEED"].flatMap(UInt64.init)
        let trace = only != nil
        for seed in only.map({ $0...$0 }) ?? 1...seeds {
            let folder = base.appendingPathComponent("ubiquity-engine-sim-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            var random = SeededGenerator(seed: seed)
            var stores = 0
            let time = StoreMergeSimulationTests.SimulatedTime()
            func newDevice() throws -> Device {
                stores += 1
                return try open(folder, "store-\(stores).sqlite", time: time, skew: Int64.random(in: -3...3, using: &random))
            }
            var devices = try (0..<Int.random(in: 3...4, using: &random)).map { _ in try newDevice() }
            var records: [String: ChangeLogRecord] = [:], order: [String] = []
            let logs = folder.appendingPathComponent("Sim/logs")
            for _ in 0..<Int.random(in: 15...50, using: &random) {
                time.advance(by: Int64.random(in: 0...2, using: &random))
                let index = Int.random(in: 0..<devices.count, using: &random)
                let device = devices[index]
                let action = Int.random(in: 0..<30, using: &random)
                if trace { print("step: \(device.name) action \(action) tags \((try? contents(device.queue, "tag")) ?? [])") }
                switch action {
                case 0..<12:
                    try StoreMergeSimulationTests.localTransaction(device.queue, &random)
                case 12..<16:
                    try device.queue.write { db in _ = try device.engine.flush(db) }
                    try device.engine.publish()
                case 16..<24:
                    // As a database does: an import is followed by a word of how far it has come.
                    let report = try device.engine.importLogs()
                    loadedBaselines += report.baselines
                    if report.segments > 0 { try device.engine.publish(heartbeat: true) }
                case 24..<27:
                    try device.engine.publish(heartbeat: true)
                case 27..<29:
                    // (What it publishes first is read here before compaction may delete it.)
                    try device.queue.write { db in _ = try device.engine.flush(db) }
                    try device.engine.publish()
                    try collect(logs, into: &records, order: &order)
                    let compaction = try device.engine.compact(registration: 3600, now: Date(timeIntervalSince1970: Double(time.now.withLock { $0 }) / 1000))
                    baselines += compaction.baseline == nil ? 0 : 1
                    deletedSegments += compaction.deletedSegments
                    tombstones += compaction.collectedTombstones
                    if trace { print("  compaction \(compaction)") }
                default:
                    // The store deleted (what it published stays) and rebuilt as a new device.
                    try device.queue.write { db in _ = try device.engine.flush(db) }
                    try device.engine.publish()
                    try device.queue.close()
                    devices[index] = try newDevice()
                    rebuilt += 1
                }
                try collect(logs, into: &records, order: &order)
            }
            // Heal: everyone publishes and imports until nothing moves.
            for _ in 0..<4 {
                for device in devices {
                    try device.queue.write { db in _ = try device.engine.flush(db) }
                    try device.engine.publish()
                    _ = try device.engine.importLogs()
                    try collect(logs, into: &records, order: &order)
                }
            }
            var rules = MergeRules()
            for record in records.values { rules.apply(record) }
            let reference = try devices.map { device in try ["item", "tag"].map { try contents(device.queue, $0) } }
            for device in devices {
                for table in ["item", "tag"] {
                    let expected = rules.table(table).count
                    let actual = try contents(device.queue, table).count
                    if expected != actual {
                        let have = try contents(device.queue, table)
                        var detail = ""
                        do {
                            let metas = try device.queue.read { db in try Row.fetchAll(db, sql: "SELECT tbl, pk, meta FROM ubq_row WHERE tbl = ?", arguments: [table]) }
                            for row in metas {
                                let key = try RowMeta.decodedKey([UInt8](row[1] as Data)), meta = try RowMeta(encoded: [UInt8](row[2] as Data))
                                detail += "\n  meta \(key): ins \(meta.inserted.map { "\($0.timestamp)@\($0.device.prefix(4))" } ?? "-") del \(meta.deleted.map { "\($0.timestamp)@\($0.device.prefix(4))" } ?? "-")"
                            }
                            for (key, row) in rules.rows where key.table == table {
                                detail += "\n  rules \(key.primaryKey): ins \(row.inserted.map { "\($0.timestamp)@\($0.device.prefix(4))" } ?? "-") del \(row.deleted.map { "\($0.timestamp)@\($0.device.prefix(4))" } ?? "-") exists \(row.exists)"
                            }
                        }
                        return "seed \(seed): \(device.name) has \(actual) rows of \(table), the merge rules \(expected): \(have)\(detail)"
                    }
                }
            }
            if Set(reference.map { "\($0)" }).count != 1 { return "seed \(seed): the devices differ: \(reference)" }
            for device in devices {
                let differences = try device.engine.verify()
                if !differences.isEmpty { return "seed \(seed): \(device.name) differs from its logs (verify): \(differences.prefix(3))" }
            }
            for device in devices { try device.queue.close() }
        }
        return nil
    }
}
