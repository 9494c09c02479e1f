import Crypto
import Foundation
import Testing
import UbiquityClient
import UbiquityProtocol
import UbiquityTestSupport
@testable import UbiquityAgent

/// Incoming revisions between devices (issue 48): the laptop announces a large file before its
/// chunks; the phone fetches them as they land, before the commit, and at the commit only
/// places the file. A revision withdrawn without a commit, or replaced by another, leaves
/// nothing on the phone. (The push that says "incoming" is stood in for by calling
/// ``ContainerSync/noteIncoming()``, as the agent does on it.)
@Suite struct IncomingPrefetchTests {
    static let size = 24 << 20

    @Test(arguments: TestPostgres.storages)
    func aLargeFileIsFetchedBeforeItsCommitAndOnlyPlacedAtIt(storage: String) async throws {
        try await ContainerSyncTests().withServer(storage: storage) { base, dir in
            // The laptop uploads through a 50 Mbit/s link: about 4 s for the file.
            let shaped = try RelayProxy.start(to: try #require(base.port), shape: LinkShape(up: LinkDirection(megabits: 50, delayMilliseconds: 2),
                                                                                            down: LinkDirection(megabits: 1_000, delayMilliseconds: 2)))
            defer { shaped.stop() }
            let counted = try RelayProxy.start(to: try #require(base.port))
            defer { counted.stop() }
            let laptop = try await ContainerSyncTests().device("laptop", base: URL(string: "http://127.0.0.1:\(shaped.port)")!, dir: dir, greedy: true)
            let phone = try await ContainerSyncTests().device("phone", base: URL(string: "http://127.0.0.1:\(counted.port)")!, dir: dir, greedy: true)
            let watcher = try await ContainerSyncTests().device("watcher", base: base, dir: dir, greedy: false)
            let bytes = randomBytes(Self.size)
            try laptop.write("Film.mov", bytes)
            let upload = Task { try await laptop.sync.syncOnce() }

            // Until the commit shows: the phone looks at what is incoming, as pushes would have it.
            var fetchedBeforeCommit: Int64 = 0
            let deadline = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < deadline {
                if try await !watcher.client.changes(container: ContainerSyncTests().notes, since: 0).items.isEmpty { break }
                fetchedBeforeCommit = counted.bytes
                await phone.sync.noteIncoming()
                try await Task.sleep(for: .milliseconds(100))
            }
            try await upload.value
            // (Without chunks given out as they land, about 1 MB went to the phone before the
            // commit: its requests, and the lists of what was incoming.)
            #expect(fetchedBeforeCommit >= Int64(4 << 20), "the phone fetched \(fetchedBeforeCommit) bytes before the commit")
            let partials = try FileManager.default.contentsOfDirectory(atPath: phone.documents.deletingLastPathComponent().path).filter { $0.hasPrefix(".ubiquity-partial-") }
            #expect(partials.count == 1, "fetched ahead into one hidden file at the container's top: \(partials)")
            #expect(!phone.exists("Film.mov"), "nothing is shown before the commit is read")

            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Film.mov")) == bytes)
            #expect(counted.bytes <= Int64(Self.size) + Int64(2 << 20), "each chunk came once: \(counted.bytes) bytes for \(Self.size)")
            let left = try FileManager.default.contentsOfDirectory(atPath: phone.documents.deletingLastPathComponent().path).filter { $0.hasPrefix(".ubiquity-") }
            #expect(left.isEmpty, "nothing left behind: \(left)")
        }
    }

    /// Announced, half uploaded, then given up: what the phone fetched of it goes; announced
    /// again with other contents: the first one's file goes at once, and the second arrives whole.
    @Test(arguments: TestPostgres.storages)
    func anAbandonedRevisionLeavesNothingAndASupersededOneLosesNothing(storage: String) async throws {
        try await ContainerSyncTests().withServer(storage: storage) { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await ContainerSyncTests().device("phone", base: base, dir: dir, greedy: true)
            await phone.sync.setPrefetchCommitGrace(.milliseconds(300))
            let container = ContainerSyncTests().notes
            func update(_ chunks: [Data]) -> ItemUpdate {
                ItemUpdate(baseRevision: nil, name: "Film.mov", parent: nil, kind: .file, modificationDate: 1_800_000_000,
                           manifest: Manifest(chunks: chunks.map { ChunkReference(hash: Self.hash($0), size: Int64($0.count)) }), deleted: nil)
            }
            func partials() throws -> [String] {
                try FileManager.default.contentsOfDirectory(atPath: phone.documents.deletingLastPathComponent().path).filter { $0.hasPrefix(".ubiquity-partial-") }
            }
            let first = (0..<6).map { _ in randomBytes(1 << 20) }
            try await laptop.client.announceIncoming(container: container, item: "film", update: update(first))
            for chunk in first.prefix(3) { try await laptop.client.upload([UInt8](chunk), hash: Self.hash(chunk)) }
            await phone.sync.noteIncoming()
            try await waitUntil { try partials().count == 1 }
            try await laptop.client.withdrawIncoming(container: container, item: "film")
            await phone.sync.noteIncoming()
            try await waitUntil { try partials().isEmpty }

            // Announced again, then replaced by other contents before it is done.
            try await laptop.client.announceIncoming(container: container, item: "film", update: update(first))
            await phone.sync.noteIncoming()
            try await waitUntil { try partials().count == 1 }
            let replaced = try partials()
            let second = (0..<6).map { _ in randomBytes(1 << 20) }
            try await laptop.client.announceIncoming(container: container, item: "film", update: update(second))
            for chunk in second { try await laptop.client.upload([UInt8](chunk), hash: Self.hash(chunk)) }
            await phone.sync.noteIncoming()
            try await waitUntil { try partials().count == 1 && partials() != replaced }
            _ = try await laptop.client.commit(container: container, item: "film", update: update(second))
            try await laptop.client.withdrawIncoming(container: container, item: "film")
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Film.mov")) == second.reduce(Data(), +))
            #expect(try partials().isEmpty)
        }
    }

    static func hash(_ bytes: Data) -> String { SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined() }

    /// Waits (up to 90 s: alone each wait takes under 3 s, but in CI's whole suite on two busy
    /// cores one took more than 20 s) until `condition` holds.
    func waitUntil(_ condition: () throws -> Bool, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let deadline = ContinuousClock.now + .seconds(90)
        while try !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("waited 90 s in vain", sourceLocation: sourceLocation)
                return
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

/// The wake-up a prefetch waits on: a wait woken early leaves nothing behind, so waits in a row
/// each wait (found by the link benchmark: a cancelled timer's wake-up ended the next wait at
/// once, and a prefetch waiting for its commit spun, starving the agent's network).
@Suite struct WakeUpTests {
    @Test func aWaitWokenEarlyLeavesNothingBehind() async {
        let wakeUp = WakeUp()
        let clock = ContinuousClock()
        for _ in 0..<3 {
            Task {
                try? await Task.sleep(for: .milliseconds(10))
                wakeUp.signal()
            }
            await wakeUp.wait(upTo: .seconds(600)) // (only the signal ends it)
            for _ in 0..<20 { await Task.yield() } // (its timer, cancelled, runs meanwhile)
            try? await Task.sleep(for: .milliseconds(20))
            let start = clock.now
            await wakeUp.wait(upTo: .milliseconds(60))
            #expect(clock.now - start >= .milliseconds(50), "a wait ended early: \(clock.now - start)")
        }
        wakeUp.signal()
        await wakeUp.wait(upTo: .seconds(600)) // a wake-up given before the wait ends it
    }
}
