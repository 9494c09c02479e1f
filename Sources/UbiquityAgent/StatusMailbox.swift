import UbiquityAgentProtocol
@_spi(UbiquityInternal) import UbiquityFiles

/// What one client following a container's statuses (`watch`) has not been sent yet: statuses
/// merged by path, a newer one of an item replacing the older (a ``CoalescingMailbox``). However
/// far behind a client is (a query whose process is busy, a socket it does not read), it misses
/// no item — when it reads again it gets each item's latest status in one answer — and the
/// agent keeps at most one status per item for it (a bounded buffer of messages dropped the
/// older ones).
///
/// The stream the client reads (``stream()``) holds the mailbox; the agent keeps it weakly, and
/// `gone` runs once the stream is released (the client went) so that the agent forgets it.
final class StatusMailbox: Sendable {
    private let waiting = CoalescingMailbox<String, UbiquityItemStatus>()
    private let gone: @Sendable () -> Void

    /// A mailbox whose first answer comes at once, even with no status posted; `gone` runs
    /// when it is released (its stream with it).
    init(gone: @escaping @Sendable () -> Void) {
        self.gone = gone
        waiting.wake()
    }

    deinit { gone() }

    /// Adds statuses for the client (replacing what it was not sent yet of the same items).
    func post(_ statuses: some Sequence<UbiquityItemStatus>) {
        waiting.post(statuses.lazy.map { (key: $0.path, value: $0) })
    }

    /// No more statuses: the stream ends once the client has what was posted.
    func finish() {
        waiting.finish()
    }

    /// Everything posted since the last call, by path (waiting for some; the first call answers
    /// at once, even with none); nil once finished and sent, or when the reading task is
    /// cancelled. One reader at a time.
    func next() async -> [UbiquityItemStatus]? {
        await waiting.next()?.sorted { $0.path < $1.path }
    }

    /// The client's answers: each what was posted since the one before (the first, the list
    /// of every item the agent posts first).
    func stream() -> AsyncStream<AgentResponse> {
        AsyncStream(unfolding: { await self.next().map { AgentResponse(items: $0) } })
    }
}
