import Foundation
import Synchronization
import Testing
import UbiquityProtocol
@testable import UbiquityClient
import UbiquityTestSupport

/// What a test sees of a store's external-change notifications.
final class KeyValueRecorder: Sendable {
    let changes = Mutex<[(reason: Int, keys: [String])]>([])
    let observer = Mutex<ObserverToken?>(nil)

    init(_ store: NSUbiquitousKeyValueStore) {
        let token = NotificationCenter.default.addObserver(forName: NSUbiquitousKeyValueStore.didChangeExternallyNotification, object: store, queue: nil) { [weak self] notification in
            let reason = notification.userInfo?[NSUbiquitousKeyValueStoreChangeReasonKey] as? Int ?? -1
            let keys = notification.userInfo?[NSUbiquitousKeyValueStoreChangedKeysKey] as? [String] ?? []
            self?.changes.withLock { $0.append((reason, keys)) }
        }
        let sendable = ObserverToken(token)
        observer.withLock { $0 = sendable }
    }

    func remove() {
        if let token = observer.withLock({ $0 }) { NotificationCenter.default.removeObserver(token.token) }
    }

    var all: [(reason: Int, keys: [String])] { changes.withLock { $0 } }

    func wait(_ seconds: Double = 10, until condition: ([(reason: Int, keys: [String])]) -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if changes.withLock({ condition($0) }) { return true }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return changes.withLock { condition($0) }
    }
}

@Suite struct KeyValueStoreTests {
    let store = "ABCDE12345.com.example.game"

    func device() throws -> (UbiquityContainers, NSUbiquitousKeyValueStore) {
        let paths = temporaryPaths()
        try credentials().save(to: paths)
        let containers = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [], keyValueStore: store))
        return (containers, NSUbiquitousKeyValueStore(identifier: store, containers: containers))
    }

    func remove(_ containers: UbiquityContainers) {
        try? FileManager.default.removeItem(at: containers.paths.configuration.deletingLastPathComponent().deletingLastPathComponent())
    }

    @Test func everyPropertyListTypeIsKeptAndPersists() throws {
        let (containers, kv) = try device()
        defer { remove(containers) }
        let date = Date(timeIntervalSince1970: 1_800_000_000)
        kv.set("Ada", forKey: "name")
        kv.set(Int64(42), forKey: "level")
        kv.set(0.75, forKey: "volume")
        kv.set(true, forKey: "sound")
        kv.set(Data([1, 2, 3]), forKey: "blob")
        kv.set(["a", 1, true] as [Any], forKey: "list")
        kv.set(["x": 1, "when": date] as [String: Any], forKey: "map")
        kv.set(date, forKey: "date")
        #expect(kv.string(forKey: "name") == "Ada" && kv.longLong(forKey: "level") == 42 && kv.double(forKey: "volume") == 0.75)
        #expect(kv.bool(forKey: "sound") && kv.data(forKey: "blob") == Data([1, 2, 3]))
        #expect(kv.array(forKey: "list")?.count == 3 && kv.dictionary(forKey: "map")?["x"] as? Int64 == 1)
        #expect(kv.object(forKey: "date") as? Date == date)
        // Values bridge as Foundation's do on Apple's platforms.
        #expect(kv.object(forKey: "level") as? Int == 42 && kv.object(forKey: "level") as? Double == 42 && (kv.object(forKey: "level") as? NSNumber)?.int64Value == 42)
        #expect(kv.object(forKey: "volume") as? Double == 0.75 && kv.object(forKey: "volume") as? Int == nil)
        #expect(kv.object(forKey: "sound") as? Bool == true && (kv.object(forKey: "sound") as? NSNumber)?.boolValue == true)
        #expect(kv.array(forKey: "list")?[1] as? Int == 1 && kv.array(forKey: "list")?[2] as? Bool == true)
        #expect(kv.dictionary(forKey: "map")?["x"] as? Int == 1 && kv.dictionaryRepresentation["level"] as? Int == 42)
        // And what comes back can be set again as it is: a Boolean stays a Boolean.
        kv.set(kv.object(forKey: "sound"), forKey: "sound again")
        kv.set(NSNumber(value: 2.5), forKey: "ratio")
        #expect(kv.object(forKey: "sound again") as? Bool == true && kv.longLong(forKey: "sound again") == 1)
        #expect(kv.object(forKey: "ratio") as? Double == 2.5)
        kv.removeObject(forKey: "sound again")
        kv.removeObject(forKey: "ratio")
        #expect(kv.longLong(forKey: "volume") == 0 && kv.double(forKey: "level") == 42 && kv.bool(forKey: "level"), "typed getters convert numbers")
        #expect(kv.string(forKey: "level") == nil && kv.longLong(forKey: "missing") == 0 && !kv.bool(forKey: "missing") && kv.object(forKey: "missing") == nil)
        kv.set(NSObject(), forKey: "bad") // not a property list: ignored
        #expect(kv.object(forKey: "bad") == nil)
        kv.removeObject(forKey: "blob")
        kv.set(nil as String?, forKey: "name")
        #expect(kv.object(forKey: "blob") == nil && kv.object(forKey: "name") == nil)
        #expect(Set(kv.dictionaryRepresentation.keys) == ["level", "volume", "sound", "list", "map", "date"])
        #expect(kv.synchronize())

        // Another process of the same app on this device sees them (offline: nothing synced).
        let again = NSUbiquitousKeyValueStore(identifier: store, containers: containers)
        #expect(again.longLong(forKey: "level") == 42 && again.object(forKey: "blob") == nil && again.dictionaryRepresentation.count == 6)
        let file = KeyValueStoreFile.read(store, in: containers.paths.account("identity-ada").appendingPathComponent("kv"))
        #expect(file.entries["level"]?.pending == true && file.entries["blob"]?.value == nil && file.entries["blob"]?.pending == true,
                "set and removed keys wait for the agent")
        #expect(!NSUbiquitousKeyValueStore(identifier: nil, containers: containers).synchronize(), "no entitlement")
    }

    @Test func writesPastApplesLimitsChangeNothingAndSaySo() async throws {
        let (containers, kv) = try device()
        defer { remove(containers) }
        let recorder = KeyValueRecorder(kv)
        defer { recorder.remove() }
        kv.set("kept", forKey: "k")
        kv.set("x", forKey: String(repeating: "k", count: 65))
        kv.set(Data(count: 1_048_577), forKey: "huge")
        #expect(await recorder.wait { $0.count == 2 })
        #expect(recorder.all.allSatisfy { $0.reason == NSUbiquitousKeyValueStoreQuotaViolationChange })
        #expect(recorder.all.map(\.keys) == [[String(repeating: "k", count: 65)], ["huge"]])
        kv.set("x", forKey: String(repeating: "é", count: 32)) // 64 bytes of UTF-8: allowed
        #expect(kv.string(forKey: String(repeating: "é", count: 32)) == "x")

        // 1,024 keys at most.
        for index in 0..<1_022 { kv.set(Int64(index), forKey: "key-\(index)") }
        #expect(kv.dictionaryRepresentation.count == 1_024)
        kv.set(Int64(1), forKey: "one-too-many")
        #expect(await recorder.wait { $0.last?.keys == ["one-too-many"] })
        #expect(kv.object(forKey: "one-too-many") == nil && kv.dictionaryRepresentation.count == 1_024)
        kv.set(Int64(7), forKey: "key-5") // replacing is fine
        #expect(kv.longLong(forKey: "key-5") == 7)

        // 1 MB in all.
        for index in 0..<1_022 { kv.removeObject(forKey: "key-\(index)") }
        kv.set(Data(count: 700_000), forKey: "first")
        kv.set(Data(count: 400_000), forKey: "second")
        #expect(await recorder.wait { $0.last?.keys == ["second"] })
        #expect(kv.data(forKey: "first")?.count == 700_000 && kv.object(forKey: "second") == nil, "consistent: the first stays, the second never was")
        #expect(kv.synchronize())
        #expect(!recorder.all.contains { $0.reason != NSUbiquitousKeyValueStoreQuotaViolationChange }, "the app's own changes are never announced to it")
    }

    @Test func changesFromElsewhereAreAnnouncedWithTheirReason() async throws {
        let (containers, kv) = try device()
        defer { remove(containers) }
        let recorder = KeyValueRecorder(kv)
        defer { recorder.remove() }
        kv.set("mine", forKey: "here")
        #expect(kv.synchronize())
        let folder = containers.paths.account("identity-ada").appendingPathComponent("kv")
        // What the agent does after a pull: new values, and a record of why.
        try KeyValueStoreFile.update(store, in: folder) { file in
            file.entries["level"] = .init(value: .integer(9), timestamp: 1_800_000_000, pending: false)
            file.synced = true
            file.change = .init(serial: 1, reason: NSUbiquitousKeyValueStoreInitialSyncChange, keys: ["level"])
        }
        #expect(await recorder.wait { $0.count == 1 })
        #expect(recorder.all[0].reason == NSUbiquitousKeyValueStoreInitialSyncChange && recorder.all[0].keys == ["level"])
        #expect(kv.longLong(forKey: "level") == 9 && kv.string(forKey: "here") == "mine")
        try KeyValueStoreFile.update(store, in: folder) { file in
            file.entries["level"] = .init(value: .integer(10), timestamp: 1_800_000_001, pending: false)
            file.change = .init(serial: 2, reason: NSUbiquitousKeyValueStoreServerChange, keys: ["level"])
        }
        #expect(await recorder.wait { $0.count == 2 })
        #expect(recorder.all[1].reason == NSUbiquitousKeyValueStoreServerChange && kv.longLong(forKey: "level") == 10)
        // A damaged file is kept aside, never overwritten silently.
        try Data("{not json".utf8).write(to: KeyValueStoreFile.url(store, in: folder))
        #expect(KeyValueStoreFile.read(store, in: folder).entries.isEmpty)
        #expect(FileManager.default.fileExists(atPath: KeyValueStoreFile.url(store, in: folder).appendingPathExtension("damaged").path))
    }

    /// `ubiquity kv remove` then `get` once found the removed value: the store's own save, due
    /// 20 ms after a change, had taken the change when `synchronize()` came, so `synchronize()`
    /// found nothing to write, read the file the save had not written yet — and took the old
    /// value back. A save under way is waited for, and a change is kept until it is written.
    @Test func synchronizeWaitsForTheSaveAlreadyUnderWay() throws {
        let (containers, kv) = try device()
        defer { remove(containers) }
        let folder = containers.paths.account("identity-ada").appendingPathComponent("kv")
        for round in 0..<60 {
            kv.set("value \(round)", forKey: "k")
            #expect(kv.synchronize())
            kv.removeObject(forKey: "k")
            // Around the moment the store's own save starts.
            usleep(useconds_t(15_000 + round % 12 * 1_000))
            #expect(kv.synchronize())
            #expect(kv.object(forKey: "k") == nil, "round \(round): the removed value came back")
            #expect(KeyValueStoreFile.read(store, in: folder).values["k"] == nil, "round \(round): the removal is not in the file")
        }
    }

    @Test func anAccountChangeClearsTheStoresView() async throws {
        let (containers, kv) = try device()
        defer { remove(containers) }
        let recorder = KeyValueRecorder(kv)
        defer { recorder.remove() }
        kv.set(Int64(12), forKey: "level")
        kv.set("Ada", forKey: "name")
        #expect(kv.synchronize())
        // Bob signs in on this device: Ada's values are not his.
        try credentials(identity: "identity-bob").save(to: containers.paths)
        #expect(kv.object(forKey: "level") == nil && kv.dictionaryRepresentation.isEmpty)
        #expect(await recorder.wait { $0.contains { $0.reason == NSUbiquitousKeyValueStoreAccountChange } })
        #expect(recorder.all.last?.keys == ["level", "name"])
        kv.set(Int64(1), forKey: "level")
        #expect(kv.synchronize())
        // Ada again: her values are back.
        try credentials(identity: "identity-ada").save(to: containers.paths)
        #expect(kv.longLong(forKey: "level") == 12 && kv.string(forKey: "name") == "Ada")
        // Signed out: a store of its own, still usable offline.
        try FileManager.default.removeItem(at: containers.paths.credentials)
        kv.set("offline", forKey: "note")
        #expect(kv.string(forKey: "note") == "offline" && kv.object(forKey: "level") == nil)
    }
}
