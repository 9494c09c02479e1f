import Foundation
import Testing
import UbiquityTestSupport
@testable import UbiquityDatabase


@Suite struct MergeRulesTests {
    static func record(_ milliseconds: Int64, _ device: String, _ changes: [RowChange]) -> ChangeLogRecord {
        ChangeLogRecord(timestamp: HLCTimestamp(milliseconds: milliseconds), device: device, schema: "v1", changes: changes)
    }

    @Test func theRulesAsDocumented() {
        let key: [LogValue] = [.integer(1)]
        var merge = MergeRules()
        merge.apply(Self.record(10, "laptop", [RowChange(table: "t", primaryKey: key, kind: .insert, columns: ["a": .text("a0"), "b": .text("b0")])]))
        // Concurrent edits of different columns both stand; of one column, the later wins.
        merge.apply(Self.record(20, "phone", [RowChange(table: "t", primaryKey: key, kind: .update, columns: ["a": .text("a-phone")])]))
        merge.apply(Self.record(15, "laptop", [RowChange(table: "t", primaryKey: key, kind: .update, columns: ["a": .text("a-laptop"), "b": .text("b1")])]))
        #expect(merge.table("t")[key] == ["a": .text("a-phone"), "b": .text("b1")])
        // A tie in time is broken by device id.
        merge.apply(Self.record(20, "ipad", [RowChange(table: "t", primaryKey: key, kind: .update, columns: ["a": .text("a-ipad")])]))
        #expect(merge.table("t")[key]?["a"] == .text("a-phone"), "phone > ipad at the same timestamp")
        // A delete beats an update made later without a re-insert; a later insert revives the row.
        merge.apply(Self.record(30, "laptop", [RowChange(table: "t", primaryKey: key, kind: .delete)]))
        merge.apply(Self.record(40, "phone", [RowChange(table: "t", primaryKey: key, kind: .update, columns: ["b": .text("b-late")])]))
        #expect(merge.table("t")[key] == nil)
        merge.apply(Self.record(50, "ipad", [RowChange(table: "t", primaryKey: key, kind: .insert, columns: ["a": .text("again"), "b": .text("b2")])]))
        #expect(merge.table("t")[key] == ["a": .text("again"), "b": .text("b2")])
        // Within one transaction, later changes follow earlier ones (delete, then insert again).
        merge.apply(Self.record(60, "laptop", [RowChange(table: "t", primaryKey: key, kind: .delete),
                                               RowChange(table: "t", primaryKey: key, kind: .insert, columns: ["a": .text("fresh"), "b": .null])]))
        #expect(merge.table("t")[key] == ["a": .text("fresh"), "b": .null])
    }

    /// Random transactions of 3–5 devices on a few rows, delivered in random orders with
    /// duplicates: every order gives the same state. 1,000 seeds; a failure names its seed.
    @Test func anyOrderWithDuplicatesReachesTheSameState() {
        for seed in UInt64(1)...1_000 {
            var random = SeededGenerator(seed: seed)
            let devices = (0..<Int.random(in: 3...5, using: &random)).map { "device-\($0)" }
            var records: [ChangeLogRecord] = []
            for _ in 0..<Int.random(in: 5...40, using: &random) {
                let device = devices.randomElement(using: &random)!
                let changes = (0..<Int.random(in: 1...4, using: &random)).map { _ -> RowChange in
                    let key: [LogValue] = [.integer(Int64.random(in: 1...4, using: &random))]
                    switch Int.random(in: 0..<10, using: &random) {
                    case 0..<3: return RowChange(table: "t", primaryKey: key, kind: .insert, columns: ["a": .integer(Int64.random(in: 0...9, using: &random)), "b": .text("x")])
                    case 3..<8: return RowChange(table: "t", primaryKey: key, kind: .update, columns: ["a": .integer(Int64.random(in: 0...9, using: &random))])
                    default: return RowChange(table: "t", primaryKey: key, kind: .delete)
                    }
                }
                // Timestamps collide often (same millisecond on two devices): ties must still order.
                records.append(Self.record(Int64.random(in: 0...15, using: &random), device, changes))
            }
            // One record per device and timestamp (a device's clock never repeats a timestamp).
            var seen = Set<String>()
            records = records.filter { seen.insert("\($0.device)@\($0.timestamp)").inserted }
            var reference = MergeRules()
            for record in records.sorted(by: { $0.orderedBefore($1) }) { reference.apply(record) }
            for _ in 0..<3 {
                var delivered = records + records.filter { _ in Bool.random(using: &random) } // duplicates
                delivered.shuffle(using: &random)
                var merge = MergeRules()
                for record in delivered { merge.apply(record) }
                #expect(merge == reference, "seed \(seed) diverged")
                if merge != reference { return }
            }
        }
    }
}
