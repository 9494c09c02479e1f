import Foundation
import Testing
import UbiquityTestSupport
@testable import UbiquityCoordination

/// Two real processes: the helper holds coordinated access; this process checks what it can take.
@Suite(.serialized) struct CrossProcessLockTests {
    @Test func aWriterExcludesReadersAndWritersUntilItReleases() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("doc.txt")
        let helper = try HelperProcess("write", item)
        #expect(try await helper.waitUntilAcquired())
        #expect(try cannotAcquire(reading: [item]))
        #expect(try cannotAcquire(writing: [item]))
        #expect(try await canAcquire(writing: [scratch.file("other.txt")]), "other items are not affected")
        try await helper.release()
        #expect(try await canAcquire(writing: [item]))
    }

    @Test func readersShareButExcludeWriters() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("doc.txt")
        let helper = try HelperProcess("read", item)
        #expect(try await helper.waitUntilAcquired())
        #expect(try await canAcquire(reading: [item]))
        #expect(try cannotAcquire(writing: [item]))
        try await helper.release()
        #expect(try await canAcquire(writing: [item]))
    }

    @Test func writingADirectoryExcludesItemsInside() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let folder = scratch.file("Package.pkg")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let helper = try HelperProcess("write", folder)
        #expect(try await helper.waitUntilAcquired())
        #expect(try cannotAcquire(reading: [folder.appendingPathComponent("member")]))
        #expect(try cannotAcquire(writing: [folder.appendingPathComponent("deep/member")]))
        #expect(try await canAcquire(reading: [scratch.file("sibling")]))
        try await helper.release()
        #expect(try await canAcquire(writing: [folder.appendingPathComponent("member")]))
    }

    @Test func aProcessKilledWhileHoldingAccessReleasesIt() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("doc.txt")
        let helper = try HelperProcess("write", item)
        #expect(try await helper.waitUntilAcquired())
        #expect(try cannotAcquire(reading: [item]))
        try await helper.kill()
        #expect(try await canAcquire(writing: [item]))
    }

    @Test func aCoordinatedReadWaitsForTheOtherProcessesWrite() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("doc.txt")
        let helper = try HelperProcess("write", item)
        #expect(try await helper.waitUntilAcquired())
        let coordinator = NSFileCoordinator()
        let done = DispatchSemaphore(value: 0)
        let order = OrderLog()
        DispatchQueue.global().async {
            try? coordinator.coordinate(readingItemAt: item) { _ in order.append("read") }
            done.signal()
        }
        #expect(try await onOwnThread { done.wait(timeout: .now() + 0.2) } == .timedOut, "the read must wait while the other process writes")
        order.append("released")
        try await helper.release()
        try await onOwnThread { done.wait() }
        #expect(order.entries == ["released", "read"])
    }
}

final class OrderLog: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [String] = []
    func append(_ entry: String) { lock.withLock { stored.append(entry) } }
    var entries: [String] { lock.withLock { stored } }
}
