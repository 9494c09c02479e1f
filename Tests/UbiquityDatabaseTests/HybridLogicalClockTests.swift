import Foundation
import Synchronization
import Testing
@testable import UbiquityDatabase

/// A wall clock a test sets.
final class TestWallClock: Sendable {
    private let now = Mutex<Int64>(0)
    init(_ start: Int64) { now.withLock { $0 = start } }
    func set(_ value: Int64) { now.withLock { $0 = value } }
    var read: @Sendable () -> Int64 { { [self] in now.withLock { $0 } } }
}

@Suite struct HybridLogicalClockTests {
    @Test func timestampsFollowTheWallClockAndNeverGoBack() {
        let wall = TestWallClock(1_000)
        var clock = HybridLogicalClock(wallClock: wall.read)
        let first = clock.tick()
        #expect(first == HLCTimestamp(milliseconds: 1_000))
        #expect(clock.tick() == HLCTimestamp(milliseconds: 1_000, counter: 1), "same millisecond: the counter orders")
        wall.set(900) // the wall clock steps back (NTP, a user): timestamps do not
        let third = clock.tick()
        #expect(third > first && third == HLCTimestamp(milliseconds: 1_000, counter: 2))
        wall.set(2_000)
        #expect(clock.tick() == HLCTimestamp(milliseconds: 2_000))
    }

    @Test func aTimestampSeenFromAnotherDeviceOrdersWhatFollows() {
        let wall = TestWallClock(1_000)
        var clock = HybridLogicalClock(wallClock: wall.read)
        _ = clock.tick()
        // Another device's clock runs minutes ahead: what this device does next still comes after.
        let remote = HLCTimestamp(milliseconds: 301_000, counter: 4)
        #expect(clock.receive(remote) == HLCTimestamp(milliseconds: 301_000, counter: 5))
        #expect(clock.tick() == HLCTimestamp(milliseconds: 301_000, counter: 6))
        // An older remote timestamp changes nothing but the counter.
        #expect(clock.receive(HLCTimestamp(milliseconds: 5)) == HLCTimestamp(milliseconds: 301_000, counter: 7))
        // Once the wall clock passes, it leads again.
        wall.set(400_000)
        #expect(clock.tick() == HLCTimestamp(milliseconds: 400_000))
        #expect(clock.receive(HLCTimestamp(milliseconds: 10)) == HLCTimestamp(milliseconds: 400_000, counter: 1))
    }

    @Test func aSpentCounterMovesOnByAMillisecond() {
        var clock = HybridLogicalClock(latest: HLCTimestamp(milliseconds: 50, counter: .max), wallClock: { 0 })
        #expect(clock.tick() == HLCTimestamp(milliseconds: 51))
    }

    @Test func recordsMergeInOneOrderOnEveryDevice() {
        let earlier = ChangeLogRecord(timestamp: HLCTimestamp(milliseconds: 5), device: "phone", schema: "s", changes: [])
        let tieA = ChangeLogRecord(timestamp: HLCTimestamp(milliseconds: 9, counter: 1), device: "laptop", schema: "s", changes: [])
        let tieB = ChangeLogRecord(timestamp: HLCTimestamp(milliseconds: 9, counter: 1), device: "phone", schema: "s", changes: [])
        for order in [[tieB, earlier, tieA], [tieA, tieB, earlier], [earlier, tieB, tieA]] {
            #expect(order.sorted { $0.orderedBefore($1) }.map(\.device) == ["phone", "laptop", "phone"])
        }
    }
}
