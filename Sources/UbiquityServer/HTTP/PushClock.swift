import Synchronization

/// One clock for every paced push connection of a server.
///
/// A device's push connection waits ``PushMailbox/pace`` (or more) between two messages. With a
/// timer each, a thousand connected devices of an account meant about 15,000 timers a second
/// armed and fired through Dispatch's timer thread — about a twentieth of the machine in
/// `ubiquity-load --devices 1000` (issue 49). Instead, connections that wait are kept in slots
/// of ``tick``, and one task wakes every tick, while any wait, and resumes those whose time has
/// come: at most a tick early, never late for want of a timer.
final class PushClock: Sendable {
    /// The width of a slot, and how often the clock looks while any connection waits.
    static let tick: Duration = .milliseconds(2)

    private struct State {
        /// The waiting connections, by slot (whole ticks since ``origin``).
        var sleepers: [Int64: [CheckedContinuation<Void, Never>]] = [:]
        /// Whether the clock's task runs.
        var running = false
    }

    private let origin = ContinuousClock.now
    private let state = Mutex(State())

    /// How many connections wait now.
    var waiting: Int { state.withLock { $0.sleepers.values.reduce(0) { $0 + $1.count } } }

    /// Returns at `deadline`, or up to a ``tick`` before it. (A cancelled task is not woken
    /// sooner: a push connection's wait is short, and what waits then goes at once.)
    func sleep(until deadline: ContinuousClock.Instant) async {
        guard deadline > .now else { return }
        let slot = self.slot(of: deadline)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let start = state.withLock { state -> Bool in
                state.sleepers[slot, default: []].append(continuation)
                defer { state.running = true }
                return !state.running
            }
            if start { Task { await self.run() } }
        }
    }

    /// Whole ticks from ``origin`` to `instant`, rounded down.
    private func slot(of instant: ContinuousClock.Instant) -> Int64 {
        let (seconds, attoseconds) = (instant - origin).components
        let nanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        return nanoseconds / Int64(Self.tick.components.attoseconds / 1_000_000_000)
    }

    /// Wakes the due connections every tick until none waits.
    private func run() async {
        while true {
            try? await Task.sleep(for: Self.tick)
            let now = slot(of: .now)
            let due = state.withLock { state -> [CheckedContinuation<Void, Never>]? in
                if state.sleepers.isEmpty {
                    state.running = false
                    return nil
                }
                var due: [CheckedContinuation<Void, Never>] = []
                for slot in state.sleepers.keys where slot <= now {
                    due += state.sleepers.removeValue(forKey: slot) ?? []
                }
                return due
            }
            guard let due else { return }
            for continuation in due { continuation.resume() }
        }
    }
}
