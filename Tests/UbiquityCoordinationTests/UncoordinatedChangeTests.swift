import Foundation
import Testing
import UbiquityTestSupport
#if canImport(Glibc)
import Glibc
#endif
@testable import UbiquityCoordination

/// Programs that know nothing of file coordination (a shell) change presented items; the
/// presenters hear about it through inotify, and coordinated writes are not reported twice.
@Suite(.serialized) struct UncoordinatedChangeTests {
    func count(_ event: String, in presenter: RecordingPresenter) -> Int {
        presenter.events.withLock { $0.filter { $0 == event }.count }
    }

    /// Runs `body` with a registered presenter of `url` (unregistered afterwards).
    func presenting(_ url: URL, _ body: (RecordingPresenter) async throws -> Void) async throws {
        let presenter = RecordingPresenter(url)
        NSFileCoordinator.addFilePresenter(presenter)
        defer { NSFileCoordinator.removeFilePresenter(presenter) }
        try await body(presenter)
    }

    @Test func anAppendByAProgramThatDoesNotCoordinateReachesThePresenter() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        try Data("v1\n".utf8).write(to: item)
        try await presenting(item) { presenter in
            // (A writer the system puts aside for more than 100 ms between its write and its close
            // — a loaded machine — is heard twice: the watcher does not wait longer for a close.)
            try await shell("echo more >> '\(item.path)'")
            #expect(await eventually { count("didChange", in: presenter) >= 1 })
            let first = count("didChange", in: presenter)
            try await shell("echo again >> '\(item.path)'")
            #expect(await eventually { count("didChange", in: presenter) > first })
            #expect(presenter.log.allSatisfy { $0 == "didChange" }, "notices of the change, nothing else: \(presenter.log)")
        }
    }

    @Test func coordinatedWritesHereOrElsewhereAreReportedOnce() async throws {
        await TestTurns.presenterProcesses.take(); defer { TestTurns.presenterProcesses.give() }
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        try Data("v1".utf8).write(to: item)
        try await presenting(item) { presenter in
            // In this process, by another coordinator. Known, not yet explained: in about one
            // full-suite run in five on this machine, a coordinated write is heard a second time
            // (docs/Coordination.md, "Known issues"); never a third.
            func heardOnce(_ notices: Int) {
                withKnownIssue("a coordinated write is sometimes heard a second time under the full suite's load", isIntermittent: true) {
                    #expect(notices == 1, "\(presenter.log)")
                }
                #expect((1...2).contains(notices), "\(presenter.log)")
            }
            try await onOwnThread { try NSFileCoordinator().coordinate(writingItemAt: item) { try Data("local".utf8).write(to: $0) } }
            #expect(await eventually { count("didChange", in: presenter) >= 1 })
            try await Task.sleep(for: .milliseconds(300)) // (a second notice, if any, arrives meanwhile)
            let local = count("didChange", in: presenter)
            heardOnce(local)
            // In another process.
            let writer = try HelperProcess("write", item, text: "remote")
            #expect(try await writer.waitUntilAcquired())
            try await writer.release()
            // Under a loaded machine the writer may give up waiting for this process (5 s) while
            // this process waits for its presenter (5 s): the notice then comes from inotify,
            // after both timeouts. What matters here is that it comes.
            #expect(await eventually(.seconds(30)) { count("didChange", in: presenter) > local })
            try await Task.sleep(for: .milliseconds(300))
            heardOnce(count("didChange", in: presenter) - local)
            // The presenter's own coordinator: not reported to it at all. (First the notices of
            // the writes before settle: under a full run's load a second notice of the other
            // process's write came after the 300 ms above, and was counted as this one's.)
            var settled = count("didChange", in: presenter), quietSince = ContinuousClock.now
            let settling = ContinuousClock.now + .seconds(15)
            while ContinuousClock.now - quietSince < .milliseconds(1_500), ContinuousClock.now < settling {
                try await Task.sleep(for: .milliseconds(100))
                let now = count("didChange", in: presenter)
                if now != settled { (settled, quietSince) = (now, ContinuousClock.now) }
            }
            let before = count("didChange", in: presenter)
            try await onOwnThread { try NSFileCoordinator(filePresenter: presenter).coordinate(writingItemAt: item) { try Data("own".utf8).write(to: $0) } }
            try await Task.sleep(for: .milliseconds(300))
            withKnownIssue("a coordinated write is sometimes heard a second time under the full suite's load", isIntermittent: true) {
                #expect(count("didChange", in: presenter) == before, "its own write is not news to a presenter: \(presenter.log)")
            }
            #expect(count("didChange", in: presenter) <= before + 1, "its own write is not news to a presenter: \(presenter.log)")
            // Then one change nobody coordinated. (A writer the system puts aside
            // for more than 100 ms between its open, which truncates, and its close — a loaded
            // machine — is heard twice, as in the append test: the watcher does not wait longer
            // for a close.)
            try await shell("printf shell > '\(item.path)'")
            #expect(await eventually { count("didChange", in: presenter) > before })
            try await Task.sleep(for: .milliseconds(300))
            #expect((1...2).contains(count("didChange", in: presenter) - before), "\(presenter.log)")
            #expect(try String(contentsOf: item, encoding: .utf8) == "shell")
        }
    }

    @Test func aRenameByAProgramThatDoesNotCoordinateIsFollowed() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        try Data("v1".utf8).write(to: item)
        try await presenting(item) { presenter in
            try await shell("mv '\(item.path)' '\(scratch.file("b.txt").path)'")
            #expect(await eventually { presenter.events.withLock { $0.contains("didMove:b.txt") } })
            // Still watched at its new name. (Heard twice when the writer is put aside between its
            // write and its close — a loaded machine — as in the append test.)
            try await shell("echo more >> '\(scratch.file("b.txt").path)'")
            #expect(await eventually { count("didChange", in: presenter) >= 1 })
        }
    }

    @Test func aReplacementByRenameIsAChangeNotAMove() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        try Data("v1".utf8).write(to: item)
        try await presenting(item) { presenter in
            // What editors do: keep a backup under another name, write the new file in place.
            try await shell("mv '\(item.path)' '\(item.path)~' && printf v2 > '\(item.path)'")
            #expect(await eventually { count("didChange", in: presenter) >= 1 })
            #expect(!presenter.log.contains { $0.hasPrefix("didMove") })
            #expect(presenter.presentedItemURL == item)
        }
    }

    @Test func aDirectoryPresenterHearsAboutItemsInsideAtAnyDepth() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let folder = scratch.file("folder")
        try FileManager.default.createDirectory(at: folder.appendingPathComponent("deep"), withIntermediateDirectories: true)
        try Data("old".utf8).write(to: folder.appendingPathComponent("deep/existing.txt"))
        try await presenting(folder) { presenter in
            try await shell("cd '\(folder.path)' && echo new >> deep/existing.txt && mkdir sub && echo x > sub/new.txt")
            #expect(await eventually {
                presenter.events.withLock { Set($0).isSuperset(of: ["subitemDidChange:existing.txt", "subitemDidAppear:sub", "subitemDidAppear:new.txt"]) }
            })
            // The new directory is watched from now on.
            try await shell("echo more >> '\(folder.path)/sub/new.txt'")
            #expect(await eventually { presenter.events.withLock { $0.contains("subitemDidChange:new.txt") } })
        }
    }

    /// As on Apple's systems, a presenter hears what happens after it is added: a write made a
    /// moment before (its events still on their way, as the folder was already watched for
    /// another presenter) is not news to it; the next one is. A round in which inotify's queue
    /// overflowed (the process's watcher then tells every presenter, by design) proves nothing
    /// and is not judged.
    @Test func aPresenterDoesNotHearOfAChangeMadeBeforeItWasAdded() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("a.txt")
        try Data("v1".utf8).write(to: item)
        let overflows = { PresenterWatcher.shared.state.withLock { $0.overflows } }
        var judged = 0
        try await presenting(scratch.url) { folder in
            let heard = { folder.events.withLock { $0.filter { $0 == "subitemDidChange:a.txt" }.count } }
            for round in 0..<5 {
                let before = heard(), overflowed = overflows()
                // Not coordinated; written and closed with the system's calls before the
                // presenter comes, so no event of the write (its close is one) can follow the
                // presenter's mark. (This test heard such a change once under a loaded full run;
                // the cause is not pinned down — this rules the late close out.)
                try Self.writeClosing("before \(round)", to: item)
                try await presenting(item) { presenter in
                    // Once the folder's presenter has heard of it, a notice to the new one would
                    // be on its queue too (`log` waits for the queue).
                    #expect(await eventually { heard() > before })
                    let log = presenter.log
                    if overflows() == overflowed {
                        judged += 1
                        let marks = PresenterWatcher.shared.state.withLock { "marks made \($0.marksMade), read \($0.marksRead), writes \($0.writes.count)" }
                        #expect(log.isEmpty, "round \(round): heard of a change made before it was added: \(log) (\(marks))")
                    }
                    try Data("after \(round)".utf8).write(to: item)
                    #expect(await eventually { count("didChange", in: presenter) >= 1 })
                }
            }
        }
        #expect(judged > 0, "inotify's queue overflowed in every round")
    }

    /// Writes `text` to `url` with the system's calls, the file closed when this returns.
    static func writeClosing(_ text: String, to url: URL) throws {
        let fd = open(url.path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard close(fd) == 0, written == bytes.count else { throw POSIXError(.EIO) }
    }
}
