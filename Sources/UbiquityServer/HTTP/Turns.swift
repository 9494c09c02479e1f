import DequeModule
import Synchronization

/// Turns at a limited resource, for each key: at most `slots` taken at once, at most
/// `waitingLimit` waiting for one, in order. A key is remembered only while it has turns taken
/// or waiting. (Each account's share of the server, ``AccountShare``, keyed by account; the
/// password hasher's threads, ``PasswordHasher``, with one key.)
final class Turns<Key: Hashable & Sendable>: Sendable {
    private struct Queue {
        var taken = 0
        var waiting: Deque<CheckedContinuation<Void, Never>> = []
    }

    /// Turns taken at once, per key.
    let slots: Int
    /// Requests waiting for a turn, per key; more are turned away.
    let waitingLimit: Int
    private let queues = Mutex<[Key: Queue]>([:])

    private enum Decision { case now, wait, full }

    init(slots: Int, waitingLimit: Int) {
        self.slots = slots
        self.waitingLimit = waitingLimit
    }

    /// Takes one of `key`'s turns, waiting for one when all are taken.
    /// - Returns: Whether it had to wait; nil when the waiting room was full (no turn taken).
    func take(_ key: Key) async -> Bool? {
        let decision = queues.withLock { queues -> Decision in
            var queue = queues[key, default: Queue()]
            defer { queues[key] = queue }
            if queue.taken < slots {
                queue.taken += 1
                return .now
            }
            return queue.waiting.count < waitingLimit ? .wait : .full
        }
        switch decision {
        case .now: return false
        case .full: return nil
        case .wait: break
        }
        // Judged and queued under two holds of the lock: a turn given back between them found
        // no one waiting and was freed, so look again before waiting.
        await withCheckedContinuation { continuation in
            let now = queues.withLock { queues -> Bool in
                var queue = queues[key, default: Queue()]
                defer { queues[key] = queue }
                if queue.taken < slots, queue.waiting.isEmpty {
                    queue.taken += 1
                    return true
                }
                queue.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
        return true
    }

    /// Gives one of `key`'s turns back: the first waiting takes it over.
    func giveBack(_ key: Key) {
        let next = queues.withLock { queues -> CheckedContinuation<Void, Never>? in
            guard var queue = queues[key] else { return nil }
            if let next = queue.waiting.popFirst() {
                queues[key] = queue // the turn passes on: as many taken as before
                return next
            }
            queue.taken -= 1
            queues[key] = queue.taken == 0 ? nil : queue
            return nil
        }
        next?.resume()
    }

    /// How many of `key`'s turns are taken, and how many wait.
    func load(of key: Key) -> (taken: Int, waiting: Int) {
        queues.withLock { queues in queues[key].map { ($0.taken, $0.waiting.count) } ?? (0, 0) }
    }
}
