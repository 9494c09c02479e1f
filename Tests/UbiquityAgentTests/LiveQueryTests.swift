import Foundation
import UbiquityTestSupport
import Synchronization
import Testing
import UbiquityClient
import UbiquityQuery
@testable import UbiquityAgent

/// A metadata query on one device following what another device does, through running agents.
@Suite struct LiveQueryTests {
    let notes = "ABCDE12345.com.example.notes"

    @Test(.timeLimit(.minutes(3))) func aQueryFollowsAnotherDevicesDocumentsLive() async throws {
        let notes = notes
        let dir = NSTemporaryDirectory() + "live-query-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let running = try await RunningAgents.start(["laptop", "phone"], containers: [notes], in: dir)
        defer { running.stop() }
        let (devices, documents) = try await running.connectedDevices(containers: [notes])
        let laptop = documents[0], phone = documents[1]

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
        // (A minute at most, as below: the whole suite's busiest minute runs dozens of processes.)
        #expect(await eventually(60) { updates.withLock { $0.contains { $0.added == ["Trip.txt"] } } })
        let listed = try #require(updates.withLock { $0.first { $0.added == ["Trip.txt"] }?.at }) - saved
        let item = try #require(query.results.compactMap { $0 as? NSMetadataItem }.first)
        #expect(item.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String == NSMetadataUbiquitousItemDownloadingStatusNotDownloaded)
        #expect(item.value(forAttribute: NSMetadataItemFSSizeKey) as? Int64 == 13)

        // The phone asks for it: the same result changes to current (the agent's status stream).
        let phoneDevice = devices[1]
        try await onOwnThread { try phoneDevice.startDownloading(at: phone.appendingPathComponent("Trip.txt")) }
        // (A minute at most: once in CI, at the suite's busiest start, 15 s were not enough.)
        #expect(await eventually(60) { item.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String == NSMetadataUbiquitousItemDownloadingStatusCurrent })
        #expect(await eventually(60) { item.value(forAttribute: NSMetadataUbiquitousItemIsUploadedKey) as? Bool == true })
        #expect(await eventually { updates.withLock { $0.contains { $0.changed.contains("Trip.txt") } } })
        print("a document saved on one device listed by the other's query after \(listed)")
    }
}
