import Foundation
import Testing
import UbiquityTestSupport
@testable import UbiquityCoordination

@Suite(.serialized) struct CoordinatorTests {
    @Test func nestedCoordinationOnOneThreadDoesNotWaitForItself() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        let outer = NSFileCoordinator()
        let text: String = try outer.coordinate(writingItemAt: item) { url in
            try Data("inner".utf8).write(to: url)
            return try NSFileCoordinator().coordinate(readingItemAt: url) { try String(contentsOf: $0, encoding: .utf8) }
        }
        #expect(text == "inner")
        #expect(try await canAcquire(writing: [item]), "everything is released afterwards")
    }

    @Test func cancelStopsAWaitingCoordination() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        let plan = FileCoordinationLocks.shared.plan(reading: [], writing: [FileCoordinationLocks.canonicalPath(item)])
        let held = try #require(try FileCoordinationLocks.shared.tryAcquire(plan))
        defer { held.release() }
        let coordinator = NSFileCoordinator()
        let result = OrderLog()
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            var error: NSError?
            coordinator.coordinate(readingItemAt: item, options: [], error: &error) { _ in result.append("accessor ran") }
            result.append(error.map { "error: \($0.localizedDescription)" } ?? "no error")
            done.signal()
        }
        #expect(try await onOwnThread { done.wait(timeout: .now() + 0.1) } == .timedOut)
        coordinator.cancel()
        try await onOwnThread { done.wait() } // (waits are made on threads of their own, never the tests' shared ones)
        #expect(result.entries.count == 1 && result.entries[0].contains("cancelled"))
    }

    @Test func presentersSaveRelinquishHearAndReacquireAroundAWrite() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        let presenter = RecordingPresenter(item)
        let folder = RecordingPresenter(scratch.url)
        NSFileCoordinator.addFilePresenter(presenter)
        NSFileCoordinator.addFilePresenter(folder)
        defer { NSFileCoordinator.removeFilePresenter(presenter); NSFileCoordinator.removeFilePresenter(folder) }

        try NSFileCoordinator().coordinate(writingItemAt: item) { try Data("x".utf8).write(to: $0) }
        #expect(presenter.log == ["save", "relinquishToWriter", "didChange", "reacquire"])
        #expect(folder.log == ["subitemDidChange:a.txt"])

        // The presenter's own coordinator does not disturb it. (Unless inotify's queue overflowed
        // meanwhile — other suites' files, a loaded machine — which tells every presenter
        // `didChange`, as it should: that alone is allowed.)
        let overflows = PresenterWatcher.shared.state.withLock { $0.overflows }
        try NSFileCoordinator(filePresenter: presenter).coordinate(writingItemAt: item) { _ in }
        let after = presenter.log.dropFirst(4)
        let overflowed = PresenterWatcher.shared.state.withLock { $0.overflows } != overflows
        #expect(after.isEmpty || (overflowed && after.allSatisfy { $0 == "didChange" }), "\(presenter.log)")

        try NSFileCoordinator().coordinate(readingItemAt: item, options: .withoutChanges) { _ in }
        #expect(presenter.log.suffix(2) == ["relinquishToReader", "reacquire"])
        try NSFileCoordinator().coordinate(readingItemAt: item) { _ in }
        #expect(presenter.log.suffix(3) == ["save", "relinquishToReader", "reacquire"])
    }

    @Test func movesAndDeletionsReachPresenters() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        try Data("x".utf8).write(to: item)
        let presenter = RecordingPresenter(item)
        let folder = RecordingPresenter(scratch.url)
        NSFileCoordinator.addFilePresenter(presenter)
        NSFileCoordinator.addFilePresenter(folder)
        defer { NSFileCoordinator.removeFilePresenter(presenter); NSFileCoordinator.removeFilePresenter(folder) }
        // What the watcher may still say of the write before the presenters came (seen once in
        // a full suite: a `didChange` ahead of the move) is not what this test is about: let it
        // settle (past the watcher's longest wait), then look at the move alone.
        try await Task.sleep(for: .milliseconds(250))
        _ = presenter.log
        presenter.events.withLock { $0.removeAll() }

        let moved = scratch.file("b.txt")
        let coordinator = NSFileCoordinator()
        var error: NSError?
        coordinator.coordinate(writingItemAt: item, options: .forMoving, writingItemAt: moved, options: .forReplacing, error: &error) { from, to in
            coordinator.item(at: from, willMoveTo: to)
            try? FileManager.default.moveItem(at: from, to: to)
            coordinator.item(at: from, didMoveTo: to)
        }
        #expect(error == nil)
        #expect(presenter.log == ["save", "relinquishToWriter", "didMove:b.txt", "reacquire"])
        #expect(presenter.presentedItemURL == moved)
        #expect(folder.log.contains("subitemDidMove:b.txt"))

        try NSFileCoordinator().coordinate(writingItemAt: moved, options: .forDeleting) { try FileManager.default.removeItem(at: $0) }
        #expect(presenter.log.last == "accommodateDeletion")
        #expect(folder.log.last == "accommodateSubitemDeletion:b.txt")
    }

    @Test func aPresenterThatNeverAnswersCannotBlockForever() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        let hung = RecordingPresenter(item, answers: false)
        NSFileCoordinator.addFilePresenter(hung)
        defer { NSFileCoordinator.removeFilePresenter(hung) }
        let coordinator = NSFileCoordinator(filePresenter: nil, locks: .shared, presenterTimeout: .milliseconds(200))
        // (The wait is made on a thread of its own, never on one the tests' tasks share.)
        let waited = try await onOwnThread {
            let start = ContinuousClock.now
            try coordinator.coordinate(writingItemAt: item) { try Data("x".utf8).write(to: $0) }
            return ContinuousClock.now - start
        }
        #expect(waited >= .milliseconds(200) && waited < .seconds(3))
        #expect(hung.log.contains("relinquishToWriter"))
    }

    @Test func coordinatingFromThePresentersOwnQueueDoesNotDeadlock() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        let presenter = RecordingPresenter(item)
        NSFileCoordinator.addFilePresenter(presenter)
        defer { NSFileCoordinator.removeFilePresenter(presenter) }
        let done = DispatchSemaphore(value: 0)
        presenter.queue.addOperation {
            try? NSFileCoordinator().coordinate(writingItemAt: item) { try Data("x".utf8).write(to: $0) }
            done.signal()
        }
        #expect(try await onOwnThread { done.wait(timeout: .now() + 3) } == .success, "a coordinator on the presenter's own queue must not wait for that queue")
        #expect(presenter.log.prefix(2) == ["save", "relinquishToWriter"])
    }

    @Test func twoCoordinatorsSharingAPresenterDoNotDeadlock() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        let presenter = RecordingPresenter(item)
        NSFileCoordinator.addFilePresenter(presenter)
        defer { NSFileCoordinator.removeFilePresenter(presenter) }
        let done = DispatchSemaphore(value: 0)
        let order = OrderLog()

        // On the presenter's queue: its own coordinator writes, and inside that access a second
        // coordinator of the same presenter reads the item.
        presenter.queue.addOperation {
            try? NSFileCoordinator(filePresenter: presenter).coordinate(writingItemAt: item) { url in
                try Data("first".utf8).write(to: url)
                let seen = try NSFileCoordinator(filePresenter: presenter).coordinate(readingItemAt: url) { try String(contentsOf: $0, encoding: .utf8) }
                order.append("nested read: \(seen)")
            }
            done.signal()
        }
        // Meanwhile, on other threads: a third coordinator of the same presenter, and one
        // without a presenter (which has to ask the busy presenter to relinquish).
        DispatchQueue.global().async {
            try? NSFileCoordinator(filePresenter: presenter).coordinate(writingItemAt: item) { try Data("second".utf8).write(to: $0) }
            order.append("shared presenter wrote")
            done.signal()
        }
        DispatchQueue.global().async {
            try? NSFileCoordinator().coordinate(writingItemAt: item) { try Data("third".utf8).write(to: $0) }
            order.append("other coordinator wrote")
            done.signal()
        }
        for _ in 0..<3 { #expect(try await onOwnThread { done.wait(timeout: .now() + 10) } == .success, "no coordination may hang") }
        #expect(Set(order.entries) == ["nested read: first", "shared presenter wrote", "other coordinator wrote"])
        #expect(presenter.log.filter { $0 == "relinquishToWriter" }.count == 1, "only the coordinator without the presenter asks it")
    }

    @Test func intentsRunTheAccessorOnTheGivenQueue() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let source = scratch.file("in.txt")
        try Data("copy me".utf8).write(to: source)
        let target = scratch.file("out.txt")
        let queue = OperationQueue()
        let read = NSFileAccessIntent.readingIntent(with: source)
        let write = NSFileAccessIntent.writingIntent(with: target, options: .forReplacing)
        let error: (any Error)? = await withCheckedContinuation { continuation in
            NSFileCoordinator().coordinate(with: [read, write], queue: queue) { error in
                if error == nil { try? FileManager.default.copyItem(at: read.url, to: write.url) }
                continuation.resume(returning: error)
            }
        }
        #expect(error == nil)
        #expect(try String(contentsOf: target, encoding: .utf8) == "copy me")
        let text = try await NSFileCoordinator().read(itemAt: target) { try String(contentsOf: $0, encoding: .utf8) }
        #expect(text == "copy me")
    }

    @Test func forUploadingReadsAPrivateSnapshot() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        try Data("original".utf8).write(to: item)
        var seen: URL?
        try NSFileCoordinator().coordinate(readingItemAt: item, options: .forUploading) { url in
            seen = url
            #expect(url != item && (try? String(contentsOf: url, encoding: .utf8)) == "original")
        }
        #expect(seen.map { !FileManager.default.fileExists(atPath: $0.path) } == true, "the snapshot is removed afterwards")
    }

    @Test func unsafeLockDirectoriesAreRefused() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let open = scratch.file("open")
        try FileManager.default.createDirectory(at: open.appendingPathComponent("locks"), withIntermediateDirectories: true)
        chmod(open.appendingPathComponent("locks").path, 0o777)
        let error = #expect(throws: FileCoordinationError.self) { try FileCoordinationLocks(directory: open.appendingPathComponent("locks")) }
        #expect(error?.code == .unsafeLockDirectory)
    }
}
