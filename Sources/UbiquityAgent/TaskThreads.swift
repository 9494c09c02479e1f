@_spi(ExperimentalCustomExecutors) @_spi(ExperimentalScheduling) import _Concurrency
import Foundation
import NIOCore
import NIOPosix

/// Where the agent's tasks run.
package enum TaskThreads {
    /// Makes Swift concurrency run the process's tasks, and wake its sleeping tasks, on the
    /// event loops of `MultiThreadedEventLoopGroup.singleton` (the threads the agent's network
    /// I/O uses) instead of Dispatch's shared pool. Call it first thing, on the main thread,
    /// before any task runs.
    ///
    /// On Linux the first thread of Dispatch's pool starts a timer that wakes the process every
    /// second for the rest of its life (`_dispatch_workq_monitor_pools`, counting the pool's
    /// runnable threads): an idle agent would never sleep longer. Event loops sleep in
    /// `epoll_wait` until something happens. Everything else the agent runs off its tasks has a
    /// thread of its own (``WorkThread``), never the shared pool.
    ///
    /// Two doors lead to the global executor, and both are taken: Swift's own (`Task.sleep`, new
    /// tasks) asks the executor factory, so ``AgentExecutors`` names ours; the runtime's
    /// (a task hopping off an actor) asks `swift_task_enqueueGlobal_hook`, set here to the same
    /// executor. (The factory is SE-0466's custom executors, SPI in Swift 6.3 —
    /// `ExperimentalCustomExecutors`, `ExperimentalScheduling`; the hook is the one SwiftNIO's
    /// own take-over sets.) `AgentEndToEndTests.anIdleAgentSleeps` fails when the agent
    /// touches Dispatch's pool (seen without this take-over, and with the store's readers closed).
    /// - Returns: Whether the hook was set (false when another executor had set it first: then
    ///   tasks hopping off actors still go to Dispatch's pool).
    @discardableResult
    package static func takeOver() -> Bool {
        _createExecutors(factory: AgentExecutors.self)
        guard let process = dlopen(nil, RTLD_NOW), let hook = dlsym(process, "swift_task_enqueueGlobal_hook"),
              hook.load(as: UnsafeRawPointer?.self) == nil else { return false }
        let enqueue: EnqueueGlobalHook = { job, _ in EventLoopTaskExecutor.shared.run(job) }
        // No task runs yet (the caller is the main thread, first thing): a plain store suffices.
        hook.storeBytes(of: unsafeBitCast(enqueue, to: UnsafeRawPointer.self), as: UnsafeRawPointer.self)
        return true
    }

    /// The runtime's hook (`swift/Runtime/ConcurrencyHooks.def`): a job for the global
    /// executor, and the runtime's own way of enqueueing it.
    private typealias EnqueueGlobalHook = @convention(thin) (UnownedJob, @convention(thin) (UnownedJob) -> Void) -> Void
}

/// The process's executors: the main one stays the platform's; tasks go to the event loops.
private struct AgentExecutors: ExecutorFactory {
    static var mainExecutor: any MainExecutor { PlatformExecutorFactory.mainExecutor }
    static var defaultExecutor: any TaskExecutor { EventLoopTaskExecutor.shared }
}

/// Runs tasks on the event loops of `MultiThreadedEventLoopGroup.singleton`, and the ones that
/// sleep (`Task.sleep`) after their delay with the loops' timers.
private final class EventLoopTaskExecutor: TaskExecutor, SchedulingExecutor {
    static let shared = EventLoopTaskExecutor()
    private let group = MultiThreadedEventLoopGroup.singleton

    func enqueue(_ job: consuming ExecutorJob) {
        run(UnownedJob(job))
    }

    /// Runs `job` on an event loop (the one running now, if it is one of the group's).
    func run(_ job: UnownedJob) {
        group.any().execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    func enqueue<C: Clock>(_ job: consuming ExecutorJob, after delay: C.Duration, tolerance: C.Duration?, clock: C) {
        guard let delay = delay as? Duration else {
            // A clock whose durations are not `Duration`s: the platform's way.
            if let platform = PlatformExecutorFactory.defaultExecutor as? any SchedulingExecutor {
                platform.enqueue(job, after: delay, tolerance: tolerance, clock: clock)
            } else {
                run(UnownedJob(job)) // never seen: early rather than never
            }
            return
        }
        let job = UnownedJob(job)
        let (seconds, attoseconds) = delay.components
        let nanoseconds = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let amount: TimeAmount = nanoseconds.overflow ? .nanoseconds(.max) : .nanoseconds(nanoseconds.partialValue &+ attoseconds / 1_000_000_000)
        group.any().scheduleTask(in: amount) { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
