import NIOCore
import Synchronization

/// Fetches of the same chunks share one read of the storage: ten devices bringing down the
/// same new file at once ask for the same batches (their agents cut the same chunk list the
/// same way), and the first of each batch reads it while the others wait for that read; a
/// large batch read lately (``keptMinimum`` bytes or more) is kept a few seconds for a device a
/// little behind — its bytes were checked when read, and a chunk removed meanwhile is refused
/// before this is asked. Keyed by account and the hashes asked for, after each device's right
/// to them was checked: a device is only ever given what it could have read itself.
///
/// Bounded: at most ``capacity`` bytes of answers are kept, for at most ``keptSeconds``, the
/// least recently used first out.
final class SharedFetches: Sendable {
    /// One read's answer: the batch body and how many of the chunks it holds.
    struct Answer: Sendable {
        var body: ByteBuffer
        var count: Int
    }

    private struct Key: Hashable {
        var account: Int64
        var hashes: [String]
    }

    private struct Kept {
        var answer: Answer
        var used: ContinuousClock.Instant
    }

    private struct State {
        var reading: [Key: Task<Answer, any Error>] = [:]
        var kept: [Key: Kept] = [:]
        var total = 0
        var shared = 0
    }

    /// The most bytes of answers kept.
    let capacity: Int
    /// How long an answer is kept after its last use.
    let keptSeconds: Double
    /// Answers smaller than this are shared only while being read (small fetches are cheap,
    /// and read afresh each time).
    static let keptMinimum = 1 << 20
    private let state = Mutex(State())

    /// Sharing with at most `capacity` bytes kept, each for `keptSeconds` after its last use.
    init(capacity: Int = 24 << 20, keptSeconds: Double = 5) {
        self.capacity = capacity
        self.keptSeconds = keptSeconds
    }

    /// How many fetches were answered by another's read (kept or in progress).
    var sharedCount: Int { state.withLock { $0.shared } }

    /// The answer to a fetch of `hashes` of `account`: a kept one, the one being read, or read
    /// now by `read`.
    func answer(_ hashes: [String], account: Int64, read: @escaping @Sendable () async throws -> Answer) async throws -> Answer {
        let key = Key(account: account, hashes: hashes)
        let now = ContinuousClock.now
        let found: (kept: Answer?, task: Task<Answer, any Error>?, mine: Bool) = state.withLock { state in
            if let kept = state.kept[key], now - kept.used < .seconds(keptSeconds) {
                state.kept[key]?.used = now
                state.shared += 1
                return (kept.answer, nil, false)
            }
            if let task = state.reading[key] {
                state.shared += 1
                return (nil, task, false)
            }
            let task = Task { try await read() }
            state.reading[key] = task
            return (nil, task, true)
        }
        if let kept = found.kept { return kept }
        guard let task = found.task else { preconditionFailure("a kept answer or a read") }
        guard found.mine else { return try await task.value }
        do {
            let answer = try await task.value
            keep(key, answer)
            return answer
        } catch {
            _ = state.withLock { $0.reading.removeValue(forKey: key) }
            throw error
        }
    }

    private func keep(_ key: Key, _ answer: Answer) {
        state.withLock { state in
            state.reading[key] = nil
            let now = ContinuousClock.now
            // What has not been used for its time goes first, then the least recently used.
            for (old, kept) in state.kept where now - kept.used >= .seconds(keptSeconds) {
                state.total -= kept.answer.body.readableBytes
                state.kept[old] = nil
            }
            // (An answer with no chunk is not kept: the chunk may be sent again any moment.)
            guard answer.count > 0, answer.body.readableBytes >= Self.keptMinimum, answer.body.readableBytes <= capacity else { return }
            if let replaced = state.kept.updateValue(Kept(answer: answer, used: now), forKey: key) { state.total -= replaced.answer.body.readableBytes }
            state.total += answer.body.readableBytes
            while state.total > capacity, let oldest = state.kept.min(by: { $0.value.used < $1.value.used }) {
                state.total -= oldest.value.answer.body.readableBytes
                state.kept[oldest.key] = nil
            }
        }
    }
}
