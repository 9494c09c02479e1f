import Foundation
import UbiquityTestSupport
import Synchronization
import Testing
@testable import UbiquityCoordination

/// A fresh directory for one test.
struct Scratch {
    let url: URL
    init() throws {
        url = URL(fileURLWithPath: FileCoordinationLocks.realPath(NSTemporaryDirectory())!)
            .appendingPathComponent("ubiquity-coord-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    func file(_ name: String) -> URL { url.appendingPathComponent(name) }
    func remove() { try? FileManager.default.removeItem(at: url) }
}

/// Whether `read`/`write` access to the URLs can be taken (then released), waiting up to two
/// seconds: a lock released by `close` may stay held for an instant by a child process that is
/// between fork and exec (it shares the descriptor until exec closes it).
func canAcquire(reading: [URL] = [], writing: [URL] = [], locks: FileCoordinationLocks = .shared) async throws -> Bool {
    let plan = locks.plan(reading: reading.map { FileCoordinationLocks.canonicalPath($0) }, writing: writing.map { FileCoordinationLocks.canonicalPath($0) })
    return try await onOwnThread {
        do {
            try locks.acquire(plan, deadline: .now + .seconds(2)).release()
            return true
        } catch let error as FileCoordinationError where error.code == .timedOut {
            return false
        }
    }
}

/// Whether access to the URLs conflicts with something held right now (checked without waiting).
func cannotAcquire(reading: [URL] = [], writing: [URL] = [], locks: FileCoordinationLocks = .shared) throws -> Bool {
    let plan = locks.plan(reading: reading.map { FileCoordinationLocks.canonicalPath($0) }, writing: writing.map { FileCoordinationLocks.canonicalPath($0) })
    guard let held = try locks.tryAcquire(plan) else { return true }
    held.release()
    return false
}

/// A presenter that records every callback, in order.
final class RecordingPresenter: NSFilePresenter, @unchecked Sendable {
    let queue: OperationQueue = {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        return queue
    }()
    let url = Mutex<URL?>(nil)
    let events = Mutex<[String]>([])
    let answers: Bool

    init(_ url: URL, answers: Bool = true) {
        self.url.withLock { $0 = url }
        self.answers = answers
    }

    var presentedItemURL: URL? { url.withLock { $0 } }
    var presentedItemOperationQueue: OperationQueue { queue }
    func log(_ event: String) { events.withLock { $0.append(event) } }
    var log: [String] {
        queue.waitUntilAllOperationsAreFinished()
        return events.withLock { $0 }
    }

    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        log("relinquishToReader")
        if answers { reader { self.log("reacquire") } }
    }
    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        log("relinquishToWriter")
        if answers { writer { self.log("reacquire") } }
    }
    func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        log("save")
        completionHandler(nil)
    }
    func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        log("accommodateDeletion")
        completionHandler(nil)
    }
    func presentedItemDidMove(to newURL: URL) {
        log("didMove:\(newURL.lastPathComponent)")
        url.withLock { $0 = newURL }
    }
    func presentedItemDidChange() { log("didChange") }
    func presentedSubitemDidChange(at url: URL) { log("subitemDidChange:\(url.lastPathComponent)") }
    func presentedSubitemDidAppear(at url: URL) { log("subitemDidAppear:\(url.lastPathComponent)") }
    func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) { log("subitemDidMove:\(newURL.lastPathComponent)") }
    func accommodatePresentedSubitemDeletion(at url: URL, completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        log("accommodateSubitemDeletion:\(url.lastPathComponent)")
        completionHandler(nil)
    }
}

/// A second process holding coordinated access (Tests/Helpers/Coordinator). Its waits are made on
/// threads of their own, never on the two threads the tests' tasks share.
final class HelperProcess: Sendable {
    let process = ChildProcess()
    let input = Pipe()
    let output = Pipe()

    init(_ mode: String, _ url: URL, text: String? = nil) throws {
        let binary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("UbiquityCoordinatorHelper")
        process.executableURL = binary
        process.arguments = [mode, url.path] + (text.map { [$0] } ?? [])
        process.standardInput = input
        process.standardOutput = output
        try process.run()
    }

    /// Waits until the helper says it holds access.
    func waitUntilAcquired() async throws -> Bool {
        let output = output
        return try await onOwnThread {
            var text = ""
            while !text.contains("acquired\n") {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { return false }
                text += String(decoding: chunk, as: UTF8.self)
            }
            return true
        }
    }

    /// Tells the helper to release and waits for it to exit.
    func release() async throws {
        input.fileHandleForWriting.write(Data("\n".utf8))
        let process = process
        try await onOwnThread { process.waitUntilExit() }
    }

    /// Kills the helper with SIGKILL and waits for it.
    func kill() async throws {
        Foundation.kill(process.processIdentifier, SIGKILL)
        let process = process
        try await onOwnThread { process.waitUntilExit() }
    }
}

/// Polls `condition` until it holds, for at most `timeout` (a deadline for something that is
/// expected to happen, not a sleep a test relies on). It sleeps between looks without holding a
/// thread: the two threads the tests' tasks share are every other test's too.
func eventually(_ timeout: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return condition()
}

/// Runs a shell command in another process that knows nothing of file coordination, waiting
/// for it on a thread of its own.
func shell(_ command: String) async throws {
    let status = try await onOwnThread {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }
    #expect(status == 0, "\(command)")
}
