import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Testing
@testable import UbiquityServer

/// The server's background work runs as services: it starts with the group and ends with its
/// graceful shutdown, leaving nothing behind.
@Suite struct MaintenanceServicesTests {
    @Test func garbageIsCollectedAtStartAndTheWorkEndsOnShutdown() async throws {
        let directory = NSTemporaryDirectory() + "ubiquity-maintenance-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let logger = Logger(label: "test")
        let storage = try await ServerStorage.open(dataDirectory: directory, database: nil, logger: logger)
        let collections = Mutex(0)
        let collector = GarbageCollectionService(storage: storage, retention: 0, logger: logger, interval: .seconds(3_600)) { _, _ in
            collections.withLock { $0 += 1 }
        }
        let group = ServiceGroup(configuration: .init(
            services: [collector, ChangeRelayService(database: storage.database, notifier: ChangeNotifier())], logger: logger))
        let running = Task { try await group.run() }
        let deadline = ContinuousClock.now + .seconds(60) // generous: a loaded suite once held it past 10 s
        while collections.withLock({ $0 }) == 0 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(collections.withLock { $0 } == 1, "collected once at start, then waits an hour")
        await group.triggerGracefulShutdown()
        try await running.value // both services end: the relay (nothing to relay here) waited for the shutdown
        await storage.database.close()
    }
}
