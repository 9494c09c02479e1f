import Foundation
import UbiquityTestSupport
import Testing
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
@testable import UbiquityCoordination

/// A presenter written as Apple's documentation writes one: a plain `NSObject` subclass with a
/// `var presentedItemURL` and its own queue — not `Sendable`, no annotations.
final class PlainPresenter: NSObject, NSFilePresenter {
    var presentedItemURL: URL?
    let presentedItemOperationQueue = OperationQueue()
    private let lock = NSLock()
    private var changeCount = 0
    var changes: Int { lock.withLock { changeCount } }

    init(url: URL) {
        presentedItemURL = url
        presentedItemOperationQueue.maxConcurrentOperationCount = 1
    }

    func presentedItemDidChange() {
        lock.withLock { changeCount += 1 }
    }
}

@Suite struct PlainPresenterTests {
    @Test func aPlainPresenterClassIsToldOfACoordinatedWrite() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("plain.txt")
        try Data("one".utf8).write(to: item)
        let presenter = PlainPresenter(url: item)
        NSFileCoordinator.addFilePresenter(presenter)
        defer { NSFileCoordinator.removeFilePresenter(presenter) }
        try NSFileCoordinator().coordinate(writingItemAt: item) { try Data("two".utf8).write(to: $0) }
        #expect(await eventually { presenter.changes >= 1 })
    }
}

/// A presenter that observes an item's download status, as an app that shows it does.
final class StatusPresenter: NSObject, NSFilePresenter {
    var presentedItemURL: URL?
    let presentedItemOperationQueue = OperationQueue()
    var observedPresentedItemUbiquityAttributes: Set<URLResourceKey> { [.ubiquitousItemDownloadingStatusKey] }
    private let lock = NSLock()
    private var heard: [Set<URLResourceKey>] = []
    var changes: [Set<URLResourceKey>] { lock.withLock { heard } }
    /// Whether it lets its item's local copy be evicted.
    var acceptsEviction: Bool {
        get { lock.withLock { accepts } }
        set { lock.withLock { accepts = newValue } }
    }
    private var accepts = false

    init(url: URL) { presentedItemURL = url }

    func presentedItemDidChangeUbiquityAttributes(_ attributes: Set<URLResourceKey>) {
        lock.withLock { heard.append(attributes) }
    }

    func accommodatePresentedItemEviction(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        completionHandler(acceptsEviction ? nil : CocoaError(.userCancelled))
    }
}

@Suite struct UbiquityAttributeTests {
    @Test func presentersHearOfTheUbiquityAttributesTheyObserveHereAndInOtherProcesses() async throws {
        await TestTurns.presenterProcesses.take(); defer { TestTurns.presenterProcesses.give() }
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("photo.jpg")
        try Data("jpeg".utf8).write(to: item)
        let here = StatusPresenter(url: item)
        NSFileCoordinator.addFilePresenter(here)
        defer { NSFileCoordinator.removeFilePresenter(here) }
        // A presenter in another process, observing the same attribute.
        let (process, reader) = try await observingProcess(item)

        // An eviction asks presenters in every process; the other process's presenter does
        // not accommodate it (Apple's default), so nothing runs and the file stays.
        here.acceptsEviction = true
        // (The coordination waits for the other process's answer: on a thread of its own, not
        // one of the two the tests' tasks share.)
        let (ran, refusal) = try await onOwnThread { () -> (Bool, (any Error)?) in
            var ran = false
            do {
                try NSFileCoordinator().coordinate(writingItemAt: item, options: .forEvicting) { _ in ran = true }
                return (ran, nil)
            } catch {
                return (ran, error)
            }
        }
        #expect((refusal as? FileCoordinationError)?.code == .refusedByPresenter, "\(String(describing: refusal))")
        #expect(!ran && FileManager.default.fileExists(atPath: item.path))

        // What they do not observe is not news; what they do is, with only the observed keys.
        NSFileCoordinator().item(at: item, didChangeUbiquityAttributes: [.ubiquitousItemIsUploadedKey])
        NSFileCoordinator().item(at: item, didChangeUbiquityAttributes: [.ubiquitousItemDownloadingStatusKey, .ubiquitousItemIsDownloadingKey])
        #expect(await eventually { here.changes == [[.ubiquitousItemDownloadingStatusKey]] }, "\(here.changes)")
        let rest = try await onOwnThread {
            let rest = try reader.readToEnd() ?? Data()
            process.waitUntilExit()
            return rest
        }
        #expect(String(decoding: rest, as: UTF8.self) == URLResourceKey.ubiquitousItemDownloadingStatusKey.rawValue + "\n", "the other process's presenter heard it")
        // The defaults: nothing observed; eviction refused (Apple: it fails when a presenter
        // does not implement the method).
        let plain = PlainPresenter(url: item)
        #expect(plain.observedPresentedItemUbiquityAttributes.isEmpty)
        let refused = Mutex(false)
        plain.accommodatePresentedItemEviction { error in refused.withLock { $0 = error != nil } }
        #expect(refused.withLock { $0 })
    }
}

/// An eviction is asked of the presenters of every process; one that does not answer in time —
/// stopped, or slow on a loaded machine — refuses it, as a presenter here does: nothing is
/// evicted from under a presenter that did not agree (found by a full test run under load: the
/// file was evicted while another process's presenter would have refused).
@Suite struct RemoteEvictionTests {
    @Test func aProcessThatDoesNotAnswerInTimeRefusesAnEviction() async throws {
        await TestTurns.presenterProcesses.take(); defer { TestTurns.presenterProcesses.give() }
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("photo.jpg")
        try Data("jpeg".utf8).write(to: item)
        let (process, _) = try await observingProcess(item)
        defer { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() }
        kill(process.processIdentifier, SIGSTOP)
        defer { kill(process.processIdentifier, SIGCONT) }
        let pid = "\(process.processIdentifier)"
        let (ran, refusal, quiet) = try await onOwnThread { () -> (Bool, (any Error)?, (wait: Duration, after: Duration)) in
            var ran = false, refusal: (any Error)?
            let coordinator = NSFileCoordinator(filePresenter: nil, locks: .shared, presenterTimeout: .milliseconds(300))
            let started = ContinuousClock.now
            do {
                try coordinator.coordinate(writingItemAt: item, options: .forEvicting) { url in
                    ran = true
                    try FileManager.default.removeItem(at: url)
                }
            } catch {
                refusal = error
            }
            // (Read at once, on this thread: the mark lasts `quietPeriod`, and a full test run's
            // load once kept this test's task from running again for longer than that.)
            return (ran, refusal, (PresenterChannel.wait(for: pid, timeout: .seconds(5)), ContinuousClock.now - started))
        }
        #expect((refusal as? FileCoordinationError)?.code == .refusedByPresenter, "\(String(describing: refusal))")
        #expect(!ran && FileManager.default.fileExists(atPath: item.path), "nothing is evicted from under a process that did not agree")

        // Known not to answer, it is asked with a short wait for a while (every coordinated
        // access of this process would otherwise wait the whole timeout for it, one after
        // another, while it stays stopped) — unless the mark had lapsed before it was read.
        #expect(quiet.wait == PresenterChannel.quietWait || quiet.after >= PresenterChannel.quietPeriod, "\(quiet)")
        #expect(PresenterChannel.wait(for: "\(getpid() + 1_000_000)", timeout: .seconds(5)) == .seconds(5), "a process that answered gets the whole wait")
    }
}

/// The coordinator helper in another process presenting `item` and observing its downloading
/// status, once it says it is ready; and where it prints what it hears.
func observingProcess(_ item: URL) async throws -> (ChildProcess, FileHandle) {
    let process = ChildProcess()
    process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
        .appendingPathComponent("UbiquityCoordinatorHelper")
    process.arguments = ["observe", item.path, URLResourceKey.ubiquitousItemDownloadingStatusKey.rawValue]
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let reader = output.fileHandleForReading
    try await onOwnThread {
        var printed = ""
        while !printed.contains("ready\n"), let chunk = try reader.read(upToCount: 1), !chunk.isEmpty { printed += String(decoding: chunk, as: UTF8.self) }
    }
    return (process, reader)
}

/// A process with presenters that is alive but takes no connection (its queue of them full: a
/// process starved on a loaded machine) is a process that does not answer in time: an eviction
/// waits rather than go on without it. Found by a full test run, where an eviction went ahead
/// from under another process's presenter, which had not agreed.
@Suite struct BusyPresenterProcessTests {
    @Test(.timeLimit(.minutes(2))) func aProcessThatTakesNoConnectionRefusesAnEviction() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("photo.jpg")
        try Data("jpeg".utf8).write(to: item)
        // A runtime folder of the helper's own, whose only "process with presenters" is a socket
        // that listens and never accepts, its queue filled.
        let runtime = scratch.file("runtime"), presenters = runtime.appendingPathComponent("ubiquity/presenters")
        try FileManager.default.createDirectory(at: presenters, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: runtime.path)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: runtime.appendingPathComponent("ubiquity").path)
        let path = presenters.appendingPathComponent("99999999.sock").path
        func address() -> sockaddr_un {
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                let bytes = Array(path.utf8.prefix(raw.count - 1))
                raw.copyBytes(from: bytes)
            }
            return address
        }
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        #expect(listener >= 0)
        defer { close(listener) }
        var bound = address()
        #expect(withUnsafePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } } == 0)
        #expect(listen(listener, 0) == 0)
        var queued: [Int32] = []
        defer { for fd in queued { close(fd) } }
        for _ in 0..<16 {
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            var target = address()
            let result = withUnsafePointer(to: &target) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
            if result != 0 { close(fd); break }
            queued.append(fd)
        }
        #expect(!queued.isEmpty, "the queue is full")

        let (status, output) = try await onOwnThread { () -> (Int32, String) in
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
                .appendingPathComponent("UbiquityCoordinatorHelper")
            process.arguments = ["evict", item.path]
            var environment = ProcessInfo.processInfo.environment
            environment["XDG_RUNTIME_DIR"] = runtime.path
            process.environment = environment
            let pipe = Pipe()
            process.standardOutput = pipe
            try process.run()
            let printed = try pipe.fileHandleForReading.readToEnd() ?? Data()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: printed, as: UTF8.self))
        }
        #expect(status == 0 && output == "refused\n", "\(output)")
        #expect(FileManager.default.fileExists(atPath: item.path))
    }
}
