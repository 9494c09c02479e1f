import Foundation
import GRDB
import Synchronization
import Testing
import UbiquityTestSupport
@testable import UbiquityDatabase

/// Devices writing to their own stores through SQL, as apps do, importing each other's records
/// in their own time (some offline for long stretches, some delivered twice), and now and then
/// deleting their store and rebuilding it from the logs as a new device: every device's tables
/// end up as ``MergeRules`` says, whatever the interleaving. 1,000 seeds
/// (`UBIQUITY_DATABASE_SEEDS` for more); a failure names its seed.
@Suite struct StoreMergeSimulationTests {
    /// A wall clock the simulation moves, with a skew per device.
    final class SimulatedTime: Sendable {
        let now = Mutex<Int64>(1_700_000_000_000)
        func advance(by milliseconds: Int64) { now.withLock { $0 += milliseconds } }
        func clock(skew: Int64) -> @Sendable () -> Int64 { { [self] in now.withLock { $0 } + skew } }
    }

    struct Device {
        let name: String
        let store: CapturedStore
        /// How many of each other device's records it has imported.
        var imported: [String: Int] = [:]
    }

    static let ids = (0..<6).map { "i\($0)" }
    static let labels = ["red", "blue", "green"]

    /// One random local transaction of 1–4 statements, as an app would write them.
    static func localTransaction(_ queue: DatabaseQueue, _ random: inout SeededGenerator) throws {
        var statements: [(String, StatementArguments)] = []
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            let id = ids.randomElement(using: &random)!
            let label = labels.randomElement(using: &random)!
            let qty = Int64.random(in: 0...99, using: &random)
            switch Int.random(in: 0..<12, using: &random) {
            case 0..<3: statements.append(("INSERT OR IGNORE INTO item VALUES (?, ?, ?, ?)", [id, "n\(qty)", qty, Bool.random(using: &random) ? Data([UInt8(qty)]) : nil]))
            case 3: statements.append(("INSERT OR REPLACE INTO item VALUES (?, ?, ?, NULL)", [id, "r\(qty)", qty]))
            case 4..<7: statements.append(("UPDATE item SET qty = ? WHERE id = ?", [qty, id]))
            case 7: statements.append(("UPDATE item SET name = ?, note = ? WHERE id = ?", ["u\(qty)", Data([1, UInt8(qty)]), id]))
            case 8: statements.append(("DELETE FROM item WHERE id = ?", [id]))
            case 9: statements.append(("INSERT OR IGNORE INTO tag VALUES (?, ?, ?)", [id, label, Double(qty) / 4]))
            case 10: statements.append(("UPDATE tag SET weight = ? WHERE item = ? AND label = ?", [Double(qty) / 8, id, label]))
            default: statements.append(("DELETE FROM tag WHERE item = ? AND label = ?", [id, label]))
            }
        }
        try queue.write { db in
            for (sql, arguments) in statements { try db.execute(sql: sql, arguments: arguments) }
        }
    }

    /// Runs the seeds on a thread of their own at the lowest priority (``onBackgroundThread(_:)``):
    /// half a minute of work must neither hold one of the two threads the other tests' tasks
    /// share nor slow the tests that time what they wait for.
    @Test func devicesWritingAndImportingInAnyInterleavingAgree() async throws {
        let seeds = UInt64(ProcessInfo.processInfo.environment["UBIQUITY_DATABASE_SEEDS"].flatMap(Int.init) ?? 1_000)
        let failure = try await onBackgroundThread { try Self.simulate(seeds: seeds) }
        #expect(failure == nil, "\(failure ?? "")")
    }

    /// The simulation; the first difference found (naming its seed), or nil.
    static func simulate(seeds: UInt64) throws -> String? {
        for seed in 1...seeds {
            var random = SeededGenerator(seed: seed)
            let time = SimulatedTime()
            var devices = try (0..<Int.random(in: 3...5, using: &random)).map { index in
                let name = "device-\(index)"
                return Device(name: name, store: try CapturedStore(device: name, wallClock: time.clock(skew: Int64.random(in: -3...3, using: &random))))
            }
            var logs: [String: [ChangeLogRecord]] = [:]
            var rebuilt = 0
            for _ in 0..<Int.random(in: 10...60, using: &random) {
                time.advance(by: Int64.random(in: 0...2, using: &random))
                let index = Int.random(in: 0..<devices.count, using: &random)
                let device = devices[index]
                switch Int.random(in: 0..<40, using: &random) {
                case 0..<20:
                    try Self.localTransaction(device.store.queue, &random)
                case 20..<24:
                    logs[device.name, default: []] += try device.store.flush()
                case 24:
                    // The store is deleted (what it published stays in its log) and rebuilt as a
                    // new device, from every log there is — its own earlier one included.
                    logs[device.name, default: []] += try device.store.flush()
                    rebuilt += 1
                    let name = "\(device.name)-rebuilt-\(rebuilt)"
                    devices[index] = Device(name: name, store: try CapturedStore(device: name, wallClock: time.clock(skew: Int64.random(in: -3...3, using: &random))))
                default:
                    // Import the next records of one other device's log (in its order, as its log
                    // is read), sometimes again from an earlier place (a duplicate delivery).
                    guard let other = logs.keys.filter({ $0 != device.name }).sorted().randomElement(using: &random) else { continue }
                    let log = logs[other] ?? []
                    var start = device.imported[other] ?? 0
                    if start > 0, Int.random(in: 0..<5, using: &random) == 0 { start = Int.random(in: 0..<start, using: &random) }
                    let end = min(log.count, start + Int.random(in: 1...4, using: &random))
                    guard start < end else { continue }
                    logs[device.name, default: []] += try device.store.importRecords(Array(log[start..<end])).flushed
                    devices[index].imported[other] = max(device.imported[other] ?? 0, end)
                }
            }
            for device in devices { logs[device.name, default: []] += try device.store.flush() }
            for (index, device) in devices.enumerated() {
                for other in logs.keys.sorted() where other != device.name {
                    let log = logs[other] ?? []
                    let start = devices[index].imported[other] ?? 0
                    if start < log.count { _ = try device.store.importRecords(Array(log[start...])) }
                }
            }
            var reference = MergeRules()
            for record in logs.values.joined() { reference.apply(record) }
            for device in devices {
                for table in ["item", "tag"] {
                    let contents = try device.store.contents(of: table)
                    if contents != reference.table(table) {
                        return "seed \(seed): \(device.name)'s \(table) differs from the merge rules: \(contents) against \(reference.table(table))"
                    }
                }
            }
        }
        return nil
    }
}
