import Foundation
import Synchronization
import Testing
import UbiquityTestSupport
@testable import UbiquityFiles

/// A thread of its own for blocking work: in order, one at a time, results and errors handed
/// back, never holding the awaiting task's thread, and what was handed over runs even after
/// the object is gone.
@Suite struct WorkThreadTests {
    struct Refused: Error {}

    /// Shut until opened: `pass()` waits for it (blocking its thread).
    final class Gate: @unchecked Sendable {
        private let condition = NSCondition()
        private var isOpen = false // guarded by the condition's lock
        func pass() -> Bool {
            condition.lock()
            defer { condition.unlock() }
            while !isOpen { condition.wait() }
            return true
        }
        func open() {
            condition.lock()
            isOpen = true
            condition.broadcast()
            condition.unlock()
        }
    }

    @Test func workRunsInOrderOffTheCallersThread() async throws {
        let thread = WorkThread(name: "test-work")
        let order = Mutex<[Int]>([])
        for index in 0..<100 { thread.async { order.withLock { $0.append(index) } } }
        let name = await thread.run { Thread.current.name }
        #expect(order.withLock { $0 } == Array(0..<100), "handed over in this order, run in this order before the next")
        #expect(name == "test-work")
        #expect(await thread.run { 6 * 7 } == 42)
        await #expect(throws: Refused.self) { try await thread.run { () throws -> Int in throw Refused() } }
    }

    @Test(.timeLimit(.minutes(1))) func slowWorkHoldsNoTaskThread() async throws {
        // More blocked pieces of work than Swift concurrency has threads: were any of them run
        // on the awaiting task's thread, the tasks below would never get one.
        let threads = (0..<(2 * ProcessInfo.processInfo.activeProcessorCount + 2)).map { WorkThread(name: "test-slow-\($0)") }
        let gate = Gate()
        let waiting = threads.map { thread in Task { await thread.run { gate.pass() } } }
        let sum = await withTaskGroup(of: Int.self) { group in
            for index in 0..<64 { group.addTask { index } }
            return await group.reduce(0, +)
        }
        #expect(sum == 2016)
        gate.open()
        for task in waiting { #expect(await task.value) }
    }

    @Test func workHandedOverRunsAfterTheObjectIsGone() async throws {
        let ended = Mutex(false)
        do {
            let thread = WorkThread(name: "test-end")
            thread.async { Thread.sleep(forTimeInterval: 0.05) }
            thread.async { ended.withLock { $0 = true } }
        } // released: the work handed over still runs, then the thread leaves
        let deadline = ContinuousClock.now + .seconds(10) // (a loaded machine may take a while)
        while !ended.withLock({ $0 }) && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(ended.withLock { $0 })
    }

    /// The watcher's thread is named for `top -H` (a name over 15 bytes, as it had, was refused
    /// by the kernel and the thread kept its creator's).
    @Test func theWatchersThreadIsNamed() throws {
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("named-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let watcher = try DirectoryWatcher(root: folder) { _ in }
        defer { watcher.stop() }
        let deadline = Date().addingTimeInterval(5)
        while !threadNames().contains("ubq-watcher") && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(threadNames().contains("ubq-watcher"))
    }
}
