import Synchronization

/// Values waiting for one reader, merged by key: a value posted for a key that already waits
/// is merged with it (by default the later replaces the earlier), so however far behind the
/// reader falls, what waits is at most one value per key, and the reader takes all of them at
/// once, in the order their keys were first posted. The server's push connections
/// (`PushMailbox`) and the agent's status watchers (`StatusMailbox`) are made of one.
///
/// Posting is inlinable, so each module that posts has it specialized for its types: the
/// server posts once per connected device for every commit, and the generic code, called from
/// another module, spent most of that time looking up its types' metadata (a thousand devices'
/// posts took about 10 ms a commit — `ubiquity-load`, issue 49).
@_spi(UbiquityInternal) public final class CoalescingMailbox<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    @usableFromInline
    struct State {
        @usableFromInline var pending: [Key: Value] = [:]
        @usableFromInline var order: [Key] = []
        /// The next ``next(notBefore:)`` answers even with nothing waiting.
        @usableFromInline var due = false
        @usableFromInline var waiter: CheckedContinuation<Void, Never>?
        @usableFromInline var finished = false

        @inlinable init() {}

        @inlinable var isReady: Bool { !order.isEmpty || due }

        /// Adds `value` under `key`, merged with one waiting under it.
        @inlinable mutating func add(_ value: Value, for key: Key, merge: (Value, Value) -> Value) {
            if let earlier = pending[key] {
                pending[key] = merge(earlier, value)
            } else {
                pending[key] = value
                order.append(key)
            }
        }
    }

    @usableFromInline let state = Mutex(State())
    @usableFromInline let merge: @Sendable (_ earlier: Value, _ later: Value) -> Value

    /// An empty mailbox; `merge` makes one value of two posted for the same key.
    package init(merge: @escaping @Sendable (_ earlier: Value, _ later: Value) -> Value = { $1 }) {
        self.merge = merge
    }

    /// Leaves values for the reader (nothing once finished).
    @inlinable
    @_spi(UbiquityInternal) public func post(_ values: some Sequence<(key: Key, value: Value)>) {
        changeAndWake { state in
            guard !state.finished else { return false }
            for (key, value) in values { state.add(value, for: key, merge: merge) }
            return state.isReady
        }
    }

    /// Leaves one value for the reader.
    @inlinable
    @_spi(UbiquityInternal) public func post(_ value: Value, for key: Key) {
        changeAndWake { state in
            guard !state.finished else { return false }
            state.add(value, for: key, merge: merge)
            return state.isReady
        }
    }

    /// Makes the next ``next(notBefore:)`` answer at once, even with nothing waiting.
    package func wake() {
        changeAndWake { state in
            state.due = true
            return true
        }
    }

    /// No more values: ``next(notBefore:)`` answers nil once what waits was taken.
    package func finish() {
        changeAndWake { state in
            state.finished = true
            return true
        }
    }

    /// Applies `change`; when it says so, the waiting reader (if any) is resumed (outside the lock).
    @inlinable
    func changeAndWake(_ change: (inout State) -> Bool) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard change(&state) else { return nil }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// The values waiting, in the order their keys were first posted, as soon as there are any
    /// and not before `notBefore` (what comes meanwhile joins them); nil when finished (or when
    /// the task is cancelled) with nothing waiting. One reader at a time.
    /// - Parameter sleep: Waits until the instant it is given (by default `Task.sleep`; the
    ///   server's push connections share one clock instead of a timer each).
    package func next(notBefore: ContinuousClock.Instant? = nil,
                      sleep: (ContinuousClock.Instant) async -> Void = { try? await Task.sleep(until: $0) }) async -> [Value]? {
        while true {
            let (ready, finished) = state.withLock { state in (state.isReady, state.finished) }
            if ready {
                if let notBefore, notBefore > .now { await sleep(notBefore) } // (cancelled: what waits goes now)
                return state.withLock { state -> [Value] in
                    defer { state.pending = [:]; state.order = []; state.due = false }
                    return state.order.compactMap { state.pending[$0] }
                }
            }
            if finished || Task.isCancelled { return nil }
            await wait()
        }
    }

    /// Returns when something is posted, the mailbox finishes or the task is cancelled.
    private func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { state -> Bool in
                    // (Cancelled before the waiter was in place: the handler found none to resume.)
                    guard !state.isReady, !state.finished, !Task.isCancelled else { return true }
                    state.waiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            changeAndWake { _ in true }
        }
    }
}
