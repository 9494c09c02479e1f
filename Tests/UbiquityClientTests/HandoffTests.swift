import Foundation
import Synchronization
import Testing
import UbiquityProtocol
@testable import UbiquityClient
import UbiquityTestSupport

/// Handoff's rules on one device, with the test writing the store as the agent would bring
/// another device's activities: bounds, expiry, what is refused, and what a hostile record gets.
@Suite struct HandoffTests {
    func device() throws -> (UbiquityContainers, UbiquityHandoff, URL) {
        let paths = temporaryPaths()
        try credentials().save(to: paths)
        let containers = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: ["ABCDE12345.com.example.notes"]))
        return (containers, UbiquityHandoff(containers: containers), paths.account("identity-ada").appendingPathComponent("kv"))
    }

    func remove(_ containers: UbiquityContainers) {
        try? FileManager.default.removeItem(at: containers.paths.configuration.deletingLastPathComponent().deletingLastPathComponent())
    }

    /// What the agent writes when another device's activities arrive.
    func arrive(_ values: [String: PropertyListValue?], in folder: URL, serial: Int) throws {
        try KeyValueStoreFile.update(UbiquityHandoff.storeIdentifier, in: folder) { file in
            for (key, value) in values { file.entries[key] = .init(value: value, timestamp: Date().timeIntervalSince1970, pending: false) }
            file.change = .init(serial: serial, reason: NSUbiquitousKeyValueStoreServerChange, keys: Array(values.keys))
        }
    }

    func record(_ type: String, device: String = "device-2", updated: Date = Date(), expires: Date = Date().addingTimeInterval(600),
                userInfo: [String: PropertyListValue] = [:]) -> PropertyListValue {
        HandoffRecord(type: type, title: "t", userInfo: .dictionary(userInfo), webpageURL: nil, keywords: [], device: device, deviceName: "phone",
                      updated: updated, expires: expires).value
    }

    @Test func anActivityIsSentWithinItsBoundsAndNeverBeyond() throws {
        let (containers, handoff, folder) = try device()
        defer { remove(containers) }
        let store = handoff.store
        let activity = NSUserActivity(activityType: "com.example.a", handoff: handoff)
        activity.userInfo = ["note": String(repeating: "x", count: 100)]
        activity.expirationDate = Date().addingTimeInterval(10 * 86_400)
        activity.becomeCurrent()
        let value = try #require(store.propertyListValues[activity.identifier.uuidString])
        let sent = try #require(HandoffRecord(value))
        #expect(sent.device == "device-1" && sent.type == "com.example.a")
        #expect(sent.expires.timeIntervalSinceNow <= UbiquityHandoff.maximumLifetime + 1, "an expiration date past the limit is cut to it")
        #expect(FileManager.default.fileExists(atPath: KeyValueStoreFile.url(UbiquityHandoff.storeIdentifier, in: folder).path), "the agent keeps the store in step")

        // Too large: not sent; the earlier state stays.
        activity.userInfo = ["note": String(repeating: "x", count: UbiquityHandoff.maximumEncodedSize)]
        #expect(store.propertyListValues[activity.identifier.uuidString].flatMap(HandoffRecord.init)?.userInfo == sent.userInfo)
        // A value Handoff cannot carry (not a property-list value, URL or UUID): not sent.
        let other = NSUserActivity(activityType: "com.example.b", handoff: handoff)
        other.userInfo = ["object": NSObject()]
        other.becomeCurrent()
        #expect(store.propertyListValues[other.identifier.uuidString] == nil)
        #expect(activity.isCurrent == false, "one current activity a process: the first was resigned")
        #expect(store.propertyListValues[activity.identifier.uuidString] == nil, "and withdrawn")
        // Not eligible: not sent.
        let private_ = NSUserActivity(activityType: "com.example.c", handoff: handoff)
        private_.isEligibleForHandoff = false
        private_.becomeCurrent()
        #expect(store.propertyListValues[private_.identifier.uuidString] == nil)
        // Invalidated: withdrawn, and never current again.
        let last = NSUserActivity(activityType: "com.example.d", handoff: handoff)
        last.becomeCurrent()
        #expect(store.propertyListValues[last.identifier.uuidString] != nil)
        last.invalidate()
        last.becomeCurrent()
        #expect(store.propertyListValues[last.identifier.uuidString] == nil && !last.isCurrent)
    }

    @Test func otherDevicesActivitiesAreListedNewestFirstAndWhatIsExpiredOrHostileIsNot() async throws {
        let (containers, handoff, folder) = try device()
        defer { remove(containers) }
        _ = handoff.store
        let older = UUID(), newer = UUID(), expired = UUID(), mine = UUID(), hostile = UUID(), escaping = UUID()
        try arrive([
            older.uuidString: record("com.example.a", updated: Date().addingTimeInterval(-60)),
            newer.uuidString: record("com.example.b", userInfo: ["where": .dictionary(["$ubiquitousItem": .array([.string("ABCDE12345.com.example.notes"), .string("Documents/Trip.txt")])])]),
            expired.uuidString: record("com.example.a", expires: Date().addingTimeInterval(-1)),
            mine.uuidString: record("com.example.a", device: "device-1"),
            hostile.uuidString: .dictionary(["format": .integer(99), "type": .string("com.example.a")]),
            escaping.uuidString: record("com.example.a", userInfo: ["where": .dictionary(["$ubiquitousItem": .array([.string("ABCDE12345.com.example.notes"), .string("../../../etc/passwd")])])]),
            "not-an-id": record("com.example.a"),
        ], in: folder, serial: 1)
        #expect(await waitUntil { handoff.activities().count == 3 }, "the store takes in what the agent wrote")
        let listed = handoff.activities()
        #expect(Set(listed.map(\.identifier)) == [older, newer, escaping], "not the expired one, not this device's, not a record of another format")
        #expect(listed.last?.identifier == older, "newest first")
        let item = try #require(listed.first { $0.identifier == newer }?.userInfo?["where"] as? URL)
        #expect(item.path.hasSuffix("/containers/ABCDE12345.com.example.notes/Documents/Trip.txt"), "this device's URL of the same item")
        #expect(listed.first { $0.identifier == escaping }?.userInfo?["where"] == nil, "a path that climbs out of the container is dropped")
        #expect(handoff.activities(ofTypes: ["com.example.b"]).map(\.identifier) == [newer])

        // Past the most activities the account keeps: the oldest go when this device sends.
        var many: [String: PropertyListValue?] = [:]
        for index in 0..<UbiquityHandoff.maximumCount { many[UUID().uuidString] = record("com.example.bulk", updated: Date().addingTimeInterval(Double(index) - 1_000)) }
        try arrive(many, in: folder, serial: 2)
        #expect(await waitUntil { handoff.activities().count == 3 + UbiquityHandoff.maximumCount })
        let activity = NSUserActivity(activityType: "com.example.mine", handoff: handoff)
        activity.becomeCurrent()
        let kept = handoff.store.propertyListValues.filter { UUID(uuidString: $0.key) != nil }
        #expect(kept.count == UbiquityHandoff.maximumCount)
        #expect(kept[activity.identifier.uuidString] != nil && kept[expired.uuidString] == nil && kept[hostile.uuidString] == nil)
    }
}

/// Waits (at most 10 s) until `condition` holds.
func waitUntil(_ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(10)
    while !condition() {
        guard ContinuousClock.now < deadline else { return false }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return true
}
