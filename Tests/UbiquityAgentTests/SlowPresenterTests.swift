import Foundation
import Synchronization
import Testing
import UbiquityCoordination
import UbiquityProtocol
import UbiquityTestSupport
@testable import UbiquityAgent

/// A presenter that, asked to let a writer in, waits until the test lets it go (or `patience`
/// runs out) — an app slow to finish what it is doing with its document.
final class SlowPresenter: NSFilePresenter, @unchecked Sendable {
    let presentedItemURL: URL?
    let presentedItemOperationQueue: OperationQueue = {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        return queue
    }()
    /// Whether a writer asked; whether the test let the presenter go; how the wait ended.
    let asked = Mutex(false)
    let released = Mutex(false)
    let outcome = Mutex<String?>(nil)
    let patience: Duration

    init(_ url: URL, patience: Duration) {
        presentedItemURL = url
        self.patience = patience
    }

    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        asked.withLock { $0 = true }
        let deadline = ContinuousClock.now + patience
        while !released.withLock({ $0 }) && ContinuousClock.now < deadline { usleep(5_000) } // the presenter's own queue: blocking is the point
        outcome.withLock { $0 = released.withLock { $0 } ? "released" : "gave up" }
        writer(nil)
    }
}

extension ContainerSyncTests {
    /// While a download waits for an app's presenter to let go of the document, the agent
    /// still answers: coordinated accesses wait on a thread of their own, not on the actor (a
    /// status asked for meanwhile comes back before the presenter is let go, which it could not
    /// if the wait held the actor — the presenter would then give up after its patience).
    @Test func aSlowPresenterDoesNotStallTheAgent() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            try laptop.write("Draft.txt", Data("first".utf8))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(phone.read("Draft.txt") == "first")

            let presenter = SlowPresenter(phone.documents.appendingPathComponent("Draft.txt"), patience: .seconds(4))
            NSFileCoordinator.addFilePresenter(presenter)
            defer { NSFileCoordinator.removeFilePresenter(presenter) }
            try laptop.write("Draft.txt", Data("second".utf8))
            try await laptop.sync.syncOnce()

            let round = Task { try await phone.sync.syncOnce() }
            let waitStart = ContinuousClock.now
            while !presenter.asked.withLock({ $0 }) {
                try #require(ContinuousClock.now - waitStart < .seconds(30), "the download never asked the presenter")
                try await Task.sleep(for: .milliseconds(5))
            }
            let statuses = await phone.sync.statuses() // answered while the download waits
            presenter.released.withLock { $0 = true }
            try await round.value
            #expect(presenter.outcome.withLock { $0 } == "released")
            #expect(statuses.contains { $0.path.hasSuffix("Documents/Draft.txt") })
            #expect(phone.read("Draft.txt") == "second")
        }
    }
}

extension ContainerSyncTests {
    /// While pushes tell a device what changes, a round started by a local change does not
    /// fetch the page of changes (its own commits' answers say enough); a push of a newer
    /// sequence, or pushes going away, makes the next round fetch.
    @Test func aDeviceToldByPushesFetchesOnlyWhenTold() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            await phone.sync.notePushes(live: true)
            try await phone.sync.syncOnce() // catches up once pushes are live
            func requests() -> Int { phone.client.traffic.snapshot.requests }

            let before = requests()
            try await phone.sync.syncOnce()
            #expect(requests() == before, "nothing local, nothing pushed: no request")

            try laptop.write("List.txt", Data("milk".utf8))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(requests() == before && !phone.exists("List.txt"), "not told yet")

            await phone.sync.noteRemoteChange(upTo: await laptop.sync.cursor)
            try await phone.sync.syncOnce()
            #expect(phone.read("List.txt") == "milk")

            try phone.write("Reply.txt", Data("eggs".utf8))
            let sending = requests()
            try await phone.sync.syncOnce()
            #expect(requests() == sending + 1, "its own change: one commit, no page")

            await phone.sync.notePushes(live: false)
            let unheard = requests()
            try await phone.sync.syncOnce()
            #expect(requests() == unheard + 1, "without pushes every round fetches")
        }
    }

    /// A batch of commits the server cannot be reached for is one failure, said once with how
    /// many changes wait (it was a warning a change: a folder of a thousand files, a thousand).
    @Test func aBatchThatFailsIsSaidOnce() async throws {
        try await withServer { base, dir in
            let token = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: "laptop").token
            let warnings = LogCapture(level: .warning)
            let root = URL(fileURLWithPath: dir).appendingPathComponent("laptop")
            let sync = try ContainerSync(container: notes, root: root, client: SyncClient(server: URL(string: "http://127.0.0.1:1")!, token: token),
                                         store: try AgentStore(path: dir + "/laptop.sqlite"), device: "laptop", logger: warnings.logger(label: "agent"))
            let documents = root.appendingPathComponent("Documents")
            try FileManager.default.createDirectory(at: documents, withIntermediateDirectories: true)
            for index in 0..<12 { try Data("note \(index)".utf8).write(to: documents.appendingPathComponent("note-\(index).txt")) }
            try? await sync.syncOnce() // nothing reaches the server
            let failures = warnings.lines.withLock { $0 }.filter { $0.message == "sync request failed" }
            #expect(failures.contains { $0.metadata["changes"] == "12" }, "\(failures.map(\.metadata))")
            #expect(failures.count <= 2, "the batch once (and the fetch, if asked): \(failures.count)")
            #expect(await sync.containerStatus(root: root).queued >= 12, "every change waits for the next round")
        }
    }

    /// A laptop and a phone keeping every file, the phone told its pushes are live and in step.
    func greedyPairWithPushes(base: URL, dir: String) async throws -> (laptop: Device, phone: Device) {
        let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
        let phone = try await device("phone", base: base, dir: dir, greedy: true)
        await phone.sync.notePushes(live: true)
        try await phone.sync.syncOnce()
        return (laptop, phone)
    }

    /// A push that brought the page of changes after the device's cursor is taken as the
    /// fetch: the change is put in place with no request; a page from elsewhere is fetched.
    @Test func aPageBroughtByAPushIsTakenWithoutARequest() async throws {
        try await withServer { base, dir in
            let (laptop, phone) = try await greedyPairWithPushes(base: base, dir: dir)
            func requests() -> Int { phone.client.traffic.snapshot.requests }

            try laptop.write("List.txt", Data("milk".utf8))
            try await laptop.sync.syncOnce()
            let since = await phone.sync.cursor
            // The page the server pushes along (here: asked for beforehand, then not counted).
            let page = try await phone.client.changes(container: phone.sync.container, since: since, brief: true, inline: ItemUpdate.maximumInlineBytes)
            let before = requests()
            await phone.sync.noteRemoteChange(upTo: page.sequence)
            await phone.sync.notePushedPage(page, since: since)
            try await phone.sync.syncOnce()
            #expect(phone.read("List.txt") == "milk")
            #expect(requests() == before, "no request: the push brought the page and the bytes")
            #expect(await phone.sync.pushedChanges == 1)

            // A page after another sequence than the cursor is not taken: the device fetches.
            try laptop.write("List.txt", Data("milk, eggs".utf8))
            try await laptop.sync.syncOnce()
            let stale = ChangesResponse(sequence: await laptop.sync.cursor, items: [], more: false)
            await phone.sync.noteRemoteChange(upTo: stale.sequence)
            await phone.sync.notePushedPage(stale, since: since)
            try await phone.sync.syncOnce()
            #expect(phone.read("List.txt") == "milk, eggs" && requests() > before)
            #expect(await phone.sync.pushedChanges == 1)
        }
    }

    /// Pages pushed one after another while the device has not taken them yet are joined: the
    /// round takes them all with no request (each newer page used to replace the one the
    /// cursor could take, and every page's bytes were fetched again).
    @Test func pagesPushedOneAfterAnotherAreJoined() async throws {
        try await withServer { base, dir in
            let (laptop, phone) = try await greedyPairWithPushes(base: base, dir: dir)
            func requests() -> Int { phone.client.traffic.snapshot.requests }
            let container = await phone.sync.container

            var since = await phone.sync.cursor
            var pages: [(since: Int64, page: ChangesResponse)] = []
            for (name, text) in [("A.txt", "one"), ("B.txt", "two"), ("A.txt", "one, edited")] {
                try laptop.write(name, Data(text.utf8))
                try await laptop.sync.syncOnce()
                let page = try await phone.client.changes(container: container, since: since, brief: true, inline: ItemUpdate.maximumInlineBytes)
                pages.append((since, page))
                since = page.sequence
            }
            let before = requests()
            for (since, page) in pages {
                await phone.sync.noteRemoteChange(upTo: page.sequence)
                await phone.sync.notePushedPage(page, since: since)
            }
            // A page from elsewhere meanwhile does not replace the joined one.
            await phone.sync.notePushedPage(ChangesResponse(sequence: since + 5, items: [], more: false), since: since + 3)
            try await phone.sync.syncOnce()
            #expect(phone.read("A.txt") == "one, edited" && phone.read("B.txt") == "two")
            #expect(requests() == before, "no request: three pushed pages joined")
            #expect(await phone.sync.pushedChanges == 1)
            #expect(await phone.sync.cursor == since)
        }
    }
}
