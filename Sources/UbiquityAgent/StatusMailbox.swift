import Synchronization
import UbiquityAgentProtocol

/// What one client following a container's statuses (`watch`) has not been sent yet: statuses
/// merged by path, a newer one of an item replacing the older. However far behind a client is
/// (a query whose process is busy, a socket it does not read), it misses no item — when it
/// reads again it gets each item's latest status in one answer — and the agent keeps at most
/// one status per item for it (a bounded buffer of messages dropped the older ones).
///
/// The stream the client reads (``stream()``) holds the mailbox; the agent keeps it weakly, and
/// `gone` runs once the stream is released (the client went) so that the agent forgets it.
final class StatusMailbox: Sendable {
    private struct State {
        var pending: [String: UbiquityItemStatus] = [:]
        /// The first answer (every item's status) is due even when there are none.
        var firstDue = true
        var finished = false
        var waiting: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())
    private let gone: @Sendable () -> Void

    /// A mailbox; `gone` runs when it is released (its stream with it).
    init(gone: @escaping @Sendable () -> Void) {
        self.gone = gone
    }

    deinit { gone() }

    /// Adds statuses for the client (replacing what it was not sent yet of the same items).
    func post(_ statuses: some Sequence<UbiquityItemStatus>) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            for status in statuses { state.pending[status.path] = status }
            guard !state.pending.isEmpty || state.firstDue else { return nil }
            defer { state.waiting = nil }
            return state.waiting
        }
        waiter?.resume()
    }

    /// No more statuses: the stream ends once the client has what was posted.
    func finish() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.finished = true
            defer { state.waiting = nil }
            return state.waiting
        }
        waiter?.resume()
    }

    /// Everything posted since the last call, by path (waiting for some; the first call answers
    /// at once, even with none); nil once finished and sent. One reader at a time.
    func next() async -> [UbiquityItemStatus]? {
        while true {
            let taken = state.withLock { state -> [UbiquityItemStatus]?? in
                if !state.pending.isEmpty || state.firstDue {
                    defer { state.pending = [:]; state.firstDue = false }
                    return .some(Array(state.pending.values))
                }
                return state.finished ? .some(nil) : nil
            }
            if let taken { return taken?.sorted { $0.path < $1.path } }
            await withCheckedContinuation { continuation in
                let ready = state.withLock { state -> Bool in
                    guard state.pending.isEmpty && !state.firstDue && !state.finished else { return true }
                    state.waiting = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        }
    }

    /// The client's answers: each what was posted since the one before (the first, the list
    /// of every item the agent posts first). Cancelling the reading task ends it.
    func stream() -> AsyncStream<AgentResponse> {
        AsyncStream(unfolding: { await self.next().map { AgentResponse(items: $0) } }, onCancel: { self.finish() })
    }
}
