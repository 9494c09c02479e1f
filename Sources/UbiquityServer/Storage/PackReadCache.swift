import NIOCore
import Synchronization

/// Ranges of packs lately read from the object store, kept for the next fetches: a device
/// fetching a large file in batches reads its pack once (the first batch reads ahead to the
/// pack's end), and devices fetching the same new file at once share one read of each range
/// (a read in progress is waited for, not made again). Packs never change once written, so a
/// kept range is never stale; one compacted away is simply never asked for again.
///
/// Bounded: at most ``capacity`` bytes are kept, the least recently used range going first;
/// a range larger than the capacity is read and handed over, not kept.
final class PackReadCache: Sendable {
    /// One kept range of a pack.
    private struct Kept {
        var range: Range<Int>
        var bytes: ByteBuffer
        var used: UInt64
    }

    /// A read in progress, which others asking within its range wait for.
    private struct Reading {
        var range: Range<Int>
        var task: Task<ByteBuffer, any Error>
    }

    private struct State {
        var kept: [String: [Kept]] = [:]
        var reading: [String: [Reading]] = [:]
        var total = 0
        var clock: UInt64 = 0
        var hits = 0
    }

    /// The most bytes kept.
    let capacity: Int
    private let state = Mutex(State())

    /// A cache keeping at most `capacity` bytes (0: nothing is kept; reads in progress are
    /// still shared).
    init(capacity: Int) {
        self.capacity = capacity
    }

    /// Bytes kept now.
    var keptBytes: Int { state.withLock { $0.total } }
    /// How many reads were answered from kept ranges or reads in progress (not the store).
    var hits: Int { state.withLock { $0.hits } }

    /// The bytes of `range` of the pack `key`: from a kept range, from a read in progress that
    /// covers it, or read by `read` — asked for `ahead` (which holds `range`), the whole of
    /// which is kept for later.
    /// - Throws: What `read` throws (every waiter of that read sees it).
    func bytes(of key: String, _ range: Range<Int>, readingAhead ahead: Range<Int>,
               read: @escaping @Sendable (Range<Int>) async throws -> ByteBuffer) async throws -> ByteBuffer {
        precondition(ahead.lowerBound <= range.lowerBound && range.upperBound <= ahead.upperBound, "the range read holds the one asked for")
        let found: Found = state.withLock { state in
            if let found = Self.find(key, range, in: &state) { return found }
            let reading = Reading(range: ahead, task: Task { try await read(ahead) })
            state.reading[key, default: []].append(reading)
            return .reading(reading)
        }
        let reading: Reading
        switch found {
        case .kept(let bytes): return bytes
        case .reading(let read): reading = read
        }
        let body: ByteBuffer
        do {
            body = try await reading.task.value
        } catch {
            forget(key, reading.range)
            throw error
        }
        keep(key, reading.range, body)
        return Self.slice(body, from: reading.range, range)
    }

    /// The bytes of `range` of the pack `key` if a kept range or a read in progress holds them
    /// (nil: the store is to be asked; nothing is read here).
    func lookUp(_ key: String, _ range: Range<Int>) async throws -> ByteBuffer? {
        switch state.withLock({ Self.find(key, range, in: &$0) }) {
        case nil: return nil
        case .kept(let bytes)?: return bytes
        case .reading(let reading)?:
            guard let body = try? await reading.task.value else { return nil } // (its reader says why it failed)
            return Self.slice(body, from: reading.range, range)
        }
    }

    /// Where `range` of the pack `key` is to be had without reading it: a kept range (its
    /// use noted), or a read in progress that holds it.
    private enum Found {
        case kept(ByteBuffer)
        case reading(Reading)
    }

    private static func find(_ key: String, _ range: Range<Int>, in state: inout State) -> Found? {
        state.clock += 1
        if let index = state.kept[key]?.firstIndex(where: { $0.range.lowerBound <= range.lowerBound && range.upperBound <= $0.range.upperBound }) {
            state.kept[key]![index].used = state.clock
            state.hits += 1
            let kept = state.kept[key]![index]
            return .kept(slice(kept.bytes, from: kept.range, range))
        }
        guard let reading = state.reading[key]?.first(where: { $0.range.lowerBound <= range.lowerBound && range.upperBound <= $0.range.upperBound }) else { return nil }
        state.hits += 1
        return .reading(reading)
    }

    /// `range` out of `bytes`, which hold `whole`.
    private static func slice(_ bytes: ByteBuffer, from whole: Range<Int>, _ range: Range<Int>) -> ByteBuffer {
        bytes.getSlice(at: bytes.readerIndex + range.lowerBound - whole.lowerBound, length: range.count) ?? ByteBuffer()
    }

    private func forget(_ key: String, _ range: Range<Int>) {
        state.withLock { state in
            state.reading[key]?.removeAll { $0.range == range }
            if state.reading[key]?.isEmpty == true { state.reading[key] = nil }
        }
    }

    /// Keeps what a read brought (once: every waiter of the read calls this), then lets the
    /// least recently used ranges go until the cache is within its capacity.
    private func keep(_ key: String, _ range: Range<Int>, _ bytes: ByteBuffer) {
        state.withLock { state in
            guard state.reading[key]?.contains(where: { $0.range == range }) == true else { return } // kept by another waiter
            state.reading[key]?.removeAll { $0.range == range }
            if state.reading[key]?.isEmpty == true { state.reading[key] = nil }
            guard bytes.readableBytes == range.count, range.count <= capacity else { return }
            state.clock += 1
            state.kept[key, default: []].append(Kept(range: range, bytes: bytes, used: state.clock))
            state.total += range.count
            while state.total > capacity {
                guard let (oldestKey, index) = state.kept.flatMap({ key, ranges in ranges.indices.map { (key, $0) } })
                    .min(by: { state.kept[$0.0]![$0.1].used < state.kept[$1.0]![$1.1].used }) else { break }
                state.total -= state.kept[oldestKey]![index].range.count
                state.kept[oldestKey]!.remove(at: index)
                if state.kept[oldestKey]!.isEmpty { state.kept[oldestKey] = nil }
            }
        }
    }
}
