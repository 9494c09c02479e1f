import CUbiquitySystem
import Foundation

/// A thread of its own that runs the work handed to it, one piece at a time, in order: for
/// blocking work — a coordinated access that may wait for another process's presenters, a
/// hashing beside a reader, a slow `close` — that must neither hold one of Swift concurrency's
/// few threads nor go to Dispatch's shared pool. (On Linux the pool's first thread starts a
/// monitor that wakes the process every second for the rest of its life; a long-running
/// process that never touches the pool sleeps until something happens.)
///
/// Idle, the thread waits on a condition variable: it costs no wake-ups. It ends when the
/// object is released, after the work already handed to it.
package final class WorkThread: Sendable {
    private let queue: Queue

    /// Starts a thread named `name` (as `top -H` and `/proc/PID/task/*/comm` show it: at most
    /// 15 bytes are kept).
    package init(name: String) {
        let queue = Queue()
        self.queue = queue
        let thread = Thread {
            _ = ubq_name_this_thread(name) // a name is for people looking: not having one loses nothing
            queue.serve()
        }
        thread.start()
    }

    deinit { queue.finish() }

    /// Runs `work` on the thread, after what was handed to it before; returns at once.
    package func async(_ work: @escaping @Sendable () -> Void) {
        queue.append(work)
    }

    /// Runs `work` on the thread and waits (suspended, holding no thread) for its result.
    /// - Throws: What `work` throws.
    package func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.append { continuation.resume(with: Result { try work() }) }
        }
    }

    /// Runs `work` on the thread and waits for it.
    package func run<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            queue.append { continuation.resume(returning: work()) }
        }
    }

    /// The work handed over and not yet run; the condition's lock guards it.
    private final class Queue: @unchecked Sendable {
        private let condition = NSCondition()
        private var pending: [@Sendable () -> Void] = [] // a few at most: removing the first is cheap
        private var finished = false

        func append(_ work: @escaping @Sendable () -> Void) {
            condition.withLock {
                pending.append(work)
                condition.signal()
            }
        }

        func finish() {
            condition.withLock {
                finished = true
                condition.signal()
            }
        }

        func serve() {
            while let work = take() { work() }
        }

        /// The next piece of work, waiting for one; nil once finished and drained.
        private func take() -> (@Sendable () -> Void)? {
            condition.lock()
            defer { condition.unlock() }
            while pending.isEmpty {
                if finished { return nil }
                condition.wait()
            }
            return pending.removeFirst()
        }
    }
}
