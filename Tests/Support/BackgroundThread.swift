import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Runs `body` — long CPU work such as a seeded simulation — on a thread of its own at the
/// lowest priority, and waits for it: it holds none of the threads the other tests' tasks share,
/// and yields the processor to anything else that runs (tests that time what they wait for).
public func onBackgroundThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            #if canImport(Glibc)
            // Linux keeps a nice value per thread; `0` names the calling one. Best effort: at
            // worst the work runs at the usual priority.
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
            #endif
            continuation.resume(with: Result { try body() })
        }
        thread.stackSize = 8 << 20
        thread.start()
    }
}

/// Runs `body` — a blocking wait, such as for a child process to start — on a thread of its own,
/// and waits for it without holding one of the few threads Swift's concurrency shares (two on
/// this machine): a test that blocks one of those starves every other test's tasks.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

/// Turns for tests that cannot overlap: one holds it at a time, the others wait (without holding
/// a thread) in the order they came.
public final class TestTurns: Sendable {
    private let state = Mutex<(busy: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    /// Turns no test holds yet.
    public init() {}

    /// Waits for the turn.
    public func take() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if !state.busy {
                    state.busy = true
                    return true
                }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Gives the turn to the next test waiting.
    public func give() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiting.isEmpty else {
                state.busy = false
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }

    /// The turns of tests whose processes present files to one another: the presenters' channel
    /// is one folder for the whole test process, so a test that stops a process holding
    /// presenters (to show it cannot block others forever) makes every other cross-process
    /// exchange wait out its timeout meanwhile.
    public static let presenterProcesses = TestTurns()
}

/// The names of this process's threads now (`/proc/self/task/*/comm`): what `top -H` shows.
public func threadNames() -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []).compactMap {
        try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
