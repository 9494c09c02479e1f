import Foundation
import Logging
import Synchronization
import Testing
import UbiquityClient
import UbiquityServer
@testable import UbiquityAgent

/// A metadata query on one device following what another device does, through running agents.
@Suite struct LiveQueryTests {
    let notes = "ABCDE12345.com.example.notes"

    @Test(.timeLimit(.minutes(1))) func aQueryFollowsAnotherDevicesDocumentsLive() async throws {
        let dir = NSTemporaryDirectory() + "live-query-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let server = try await EmbeddedServer.start(dataDirectory: dir + "/server", account: "ada", password: "correct horse", logger: logger)
        var devices: [UbiquityContainers] = [], agents: [Task<Void, any Error>] = []
        for name in ["laptop", "phone"] {
            let root = URL(fileURLWithPath: dir).appendingPathComponent(name)
            let paths = UbiquityPaths(configuration: root.appendingPathComponent("config"), data: root.appendingPathComponent("data"), runtime: root.appendingPathComponent("run"))
            try await SyncClient(server: server.url).signIn(account: "ada", password: "correct horse", deviceName: name, savingTo: paths)
            let agent = Agent(paths: paths, configuration: AgentConfiguration(containers: [notes], rescanSeconds: 60), logger: logger)
            agents.append(Task { try await agent.run() })
            devices.append(UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [notes])))
        }
        defer {
            for agent in agents { agent.cancel() }
            server.cancel()
        }
        // Apps' calls to the agent block: they run on threads of their own, never on the
        // concurrency pool the in-process agents need to answer them.
        let notes = notes, laptopDevice = devices[0], phoneDevice = devices[1]
        let laptop = try #require(try await blocking { laptopDevice.url(forContainer: notes) }).appendingPathComponent("Documents")
        let phone = try #require(try await blocking { phoneDevice.url(forContainer: notes) }).appendingPathComponent("Documents")
        // Both agents answer.
        for device in devices {
            var connected = false
            for _ in 0..<100 where !connected {
                connected = try await blocking { (try? device.agent.send(AgentRequest(.status), timeout: .seconds(1)).status?.connected) == true }
                if !connected { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(connected)
        }

        let query = NSMetadataQuery(containers: devices[1])
        query.searchScopes = [NSMetadataQueryUbiquitousDocumentsScope]
        query.predicate = NSPredicate(format: "%K LIKE '*.txt'", NSMetadataItemFSNameKey)
        query.notificationBatchingInterval = 0.005
        let updates = Mutex<[(at: ContinuousClock.Instant, added: [String], changed: [String])]>([])
        let finished = Mutex(false)
        let observers = [
            NotificationCenter.default.addObserver(forName: .NSMetadataQueryDidFinishGathering, object: query, queue: nil) { _ in finished.withLock { $0 = true } },
            NotificationCenter.default.addObserver(forName: .NSMetadataQueryDidUpdate, object: query, queue: nil) { note in
                func names(_ key: String) -> [String] { ((note.userInfo?[key] as? [NSMetadataItem]) ?? []).compactMap { $0.value(forAttribute: NSMetadataItemFSNameKey) as? String } }
                updates.withLock { $0.append((ContinuousClock.now, names(NSMetadataQueryUpdateAddedItemsKey), names(NSMetadataQueryUpdateChangedItemsKey))) }
            },
        ]
        defer {
            for observer in observers { NotificationCenter.default.removeObserver(observer) }
            query.stop()
        }
        query.start()
        #expect(await eventually { finished.withLock { $0 } })

        // The laptop saves a document: the phone's query lists it (metadata first: not downloaded).
        let saved = ContinuousClock.now
        try Data("pack the tent".utf8).write(to: laptop.appendingPathComponent("Trip.txt"))
        #expect(await eventually { updates.withLock { $0.contains { $0.added == ["Trip.txt"] } } })
        let listed = updates.withLock { $0.first { $0.added == ["Trip.txt"] }!.at } - saved
        let item = try #require(query.results.compactMap { $0 as? NSMetadataItem }.first)
        #expect(item.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String == NSMetadataUbiquitousItemDownloadingStatusNotDownloaded)
        #expect(item.value(forAttribute: NSMetadataItemFSSizeKey) as? Int64 == 13)

        // The phone asks for it: the same result changes to current (the agent's status stream).
        try await blocking { try phoneDevice.startDownloading(at: phone.appendingPathComponent("Trip.txt")) }
        #expect(await eventually { item.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String == NSMetadataUbiquitousItemDownloadingStatusCurrent })
        #expect(await eventually { item.value(forAttribute: NSMetadataUbiquitousItemIsUploadedKey) as? Bool == true })
        #expect(await eventually { updates.withLock { $0.contains { $0.changed.contains("Trip.txt") } } })
        print("a document saved on one device listed by the other's query after \(listed)")
    }

    /// Runs a blocking call on a thread of its own.
    func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    func eventually(_ seconds: Double = 15, _ condition: () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return condition()
    }
}
