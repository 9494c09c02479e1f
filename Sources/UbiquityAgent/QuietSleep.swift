import NIOCore
import NIOPosix

/// Suspends the task for `duration` (or until it is cancelled: then throws
/// `CancellationError`) without waking the process meanwhile.
///
/// On Linux, `Task.sleep` waits through libdispatch, which re-arms its timer once a second
/// however far away the deadline is: an agent that sleeps ten minutes between rescans would
/// wake every second for nothing (seen with strace: `timerfd_settime` each second on the
/// dispatch manager thread). An event loop's timer sleeps in `epoll_wait` until its deadline.
/// For the agent's long, idle waits (the slow rescan timer, retry back-offs); short waits may
/// use `Task.sleep`. (In `ubiquity agent` itself `Task.sleep` runs on event loops too, see
/// ``TaskThreads``; an agent run in another process — the tests — has Dispatch's executor.)
func quietSleep(for duration: Duration) async throws {
    let (seconds, attoseconds) = duration.components
    let nanoseconds = seconds.multipliedReportingOverflow(by: 1_000_000_000)
    let delay: TimeAmount = nanoseconds.overflow ? .nanoseconds(.max) : .nanoseconds(nanoseconds.partialValue + attoseconds / 1_000_000_000)
    let scheduled = MultiThreadedEventLoopGroup.singleton.next().scheduleTask(in: delay) {}
    do {
        try await withTaskCancellationHandler {
            try await scheduled.futureResult.get()
        } onCancel: {
            scheduled.cancel()
        }
    } catch EventLoopError.cancelled {
        throw CancellationError()
    }
}
