import Foundation
import Testing
@testable import UbiquityCoordination

/// Local history thinning, judged at injected times.
@Suite struct VersionHistoryTests {
    let now = Date(timeIntervalSince1970: 1_900_000_000)

    @Test func theStandardPolicyKeepsAllRecentHourlyThenDaily() {
        let policy = VersionHistoryPolicy.standard
        let minute: TimeInterval = 60, hour: TimeInterval = 3_600, day: TimeInterval = 86_400
        // Every 10 minutes for 3 days, then one 40 days old.
        var dates = stride(from: 0.0, through: 3 * day, by: 10 * minute).map { now.addingTimeInterval(-$0) }
        dates.append(now.addingTimeInterval(-40 * day))
        let kept = policy.indicesToKeep(dates, now: now).map { now.timeIntervalSince(dates[$0]) }
        let lastHour = kept.filter { $0 <= hour }
        #expect(lastHour.count == 7, "every version of the last hour (0, 10, … 60 minutes)")
        let day1 = kept.filter { $0 > hour && $0 <= day }
        #expect(day1.count >= 22 && day1.count <= 24, "about one per hour of the rest of the day: \(day1.count)")
        let older = kept.filter { $0 > day }
        #expect(older.count >= 2 && older.count <= 3, "one per calendar day slot: \(older.count)")
        #expect(!kept.contains { $0 > 30 * day }, "nothing past the last tier")
    }

    @Test func aVersionKeptOnceStaysKeptAsItAges() {
        let policy = VersionHistoryPolicy(tiers: [.init(upTo: 100, spacing: 0), .init(upTo: 1_000, spacing: 50)])
        let dates = (0..<20).map { now.addingTimeInterval(-Double($0) * 10) }
        let before = policy.indicesToKeep(dates, now: now)
        #expect(before.count == 11 + 2, "0…100 s all, then 110…190 s one per 50-second slot of the clock (two slots)")
        let later = now.addingTimeInterval(30)
        let after = policy.indicesToKeep(dates, now: later)
        #expect(after.isSubset(of: before))
    }

    @Test func thinningRemovesOnlyLocalHistory() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("diary.txt")
        try Data("today".utf8).write(to: item)
        let source = scratch.file("old.txt")
        func add(ageInDays: Double, discardable: Bool, conflict: Bool = false) throws -> NSFileVersion {
            try Data("\(ageInDays)".utf8).write(to: source)
            return try NSFileVersion.add(
                ofItemAt: item, contents: source, conflict: conflict, savingComputer: "here",
                modificationDate: now.addingTimeInterval(-ageInDays * 86_400), byMoving: false, discardable: discardable)
        }
        let ancient = try add(ageInDays: 45, discardable: true)
        let recent = try add(ageInDays: 0.001, discardable: true) // added last: the newest history
        let pinned = try add(ageInDays: 45, discardable: false)
        let conflict = try add(ageInDays: 45, discardable: false, conflict: true)
        try NSFileVersion.thinLocalHistory(ofItemAt: item, policy: .standard, now: now)
        let left = Set(try #require(NSFileVersion.otherVersionsOfItem(at: item)).map(\.versionIdentifier))
        #expect(left == [recent.versionIdentifier, pinned.versionIdentifier, conflict.versionIdentifier])
        #expect(!left.contains(ancient.versionIdentifier))
    }

    @Test func preservingTheCurrentVersionSharesItsFiles() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let package = scratch.file("Trip.note")
        try FileManager.default.createDirectory(at: package, withIntermediateDirectories: true)
        try Data(repeating: 9, count: 100_000).write(to: package.appendingPathComponent("image.png"))
        try Data("text".utf8).write(to: package.appendingPathComponent("text.txt"))
        let version = try #require(try NSFileVersion.preserveCurrentVersion(ofItemAt: package, now: now))
        func inode(_ url: URL) throws -> UInt64 { try #require(try FileManager.default.attributesOfItem(atPath: url.path)[.systemFileNumber] as? UInt64) }
        #expect(try inode(version.url.appendingPathComponent("image.png")) == inode(package.appendingPathComponent("image.png")))
        let usage = try NSFileVersion.storageUsage(ofItemAt: package)
        #expect(usage.bytes == 100_004 && usage.sharedBytes == 100_004, "shared with the item, not copied")
        #expect(try NSFileVersion.preserveCurrentVersion(ofItemAt: scratch.file("missing"), now: now) == nil)
    }
}
