import NIOCore
import Synchronization
import Testing
@testable import UbiquityServer

/// The read cache of packs (``PackReadCache``): reads shared while in progress, kept within
/// the capacity (least recently used first out), failures not kept.
@Suite struct PackReadCacheTests {
    /// Bytes `range` of a pack whose byte at offset i is i mod 251.
    static func bytes(_ range: Range<Int>) -> ByteBuffer {
        ByteBuffer(bytes: range.map { UInt8($0 % 251) })
    }

    @Test func readsAtOnceShareOneReadAndLaterOnesAreKept() async throws {
        let cache = PackReadCache(capacity: 1 << 20)
        let reads = Count()
        try await withThrowingTaskGroup(of: (Range<Int>, ByteBuffer).self) { group in
            for part in 0..<10 {
                group.addTask {
                    let range = (part * 1_000)..<(part * 1_000 + 1_000)
                    return (range, try await cache.bytes(of: "p", range, readingAhead: 0..<10_000) { ahead in
                        reads.add()
                        try await Task.sleep(for: .milliseconds(100))
                        return Self.bytes(ahead)
                    })
                }
            }
            for try await (range, body) in group { #expect(body == Self.bytes(range)) }
        }
        #expect(reads.value == 1)
        let again = try await cache.bytes(of: "p", 2_500..<3_500, readingAhead: 2_500..<3_500) { _ in
            Issue.record("a kept range read again")
            return ByteBuffer()
        }
        #expect(again == Self.bytes(2_500..<3_500))
        #expect(cache.keptBytes == 10_000)
    }

    @Test func theCapacityHoldsAndTheLeastRecentlyUsedGoesFirst() async throws {
        let cache = PackReadCache(capacity: 30_000)
        for key in ["a", "b", "c"] {
            _ = try await cache.bytes(of: key, 0..<10_000, readingAhead: 0..<10_000) { Self.bytes($0) }
        }
        _ = try await cache.bytes(of: "a", 0..<100, readingAhead: 0..<100) { _ in Issue.record("a was kept"); return ByteBuffer() }
        _ = try await cache.bytes(of: "d", 0..<10_000, readingAhead: 0..<10_000) { Self.bytes($0) } // b goes
        #expect(cache.keptBytes == 30_000)
        let reads = Count()
        for key in ["a", "c", "d", "b"] {
            _ = try await cache.bytes(of: key, 0..<10_000, readingAhead: 0..<10_000) { reads.add(); return Self.bytes($0) }
        }
        #expect(reads.value == 1, "only b was read again")
        #expect(cache.keptBytes <= 30_000)
        // Larger than the whole cache: handed over, not kept.
        let large = try await cache.bytes(of: "e", 0..<40_000, readingAhead: 0..<40_000) { Self.bytes($0) }
        #expect(large.readableBytes == 40_000 && cache.keptBytes <= 30_000)
    }

    @Test func aFailedReadIsNotKept() async throws {
        struct Gone: Error {}
        let cache = PackReadCache(capacity: 1 << 20)
        await #expect(throws: Gone.self) { _ = try await cache.bytes(of: "p", 0..<10, readingAhead: 0..<10) { _ in throw Gone() } }
        let read = try await cache.bytes(of: "p", 0..<10, readingAhead: 0..<10) { Self.bytes($0) }
        #expect(read == Self.bytes(0..<10) && cache.keptBytes == 10)
    }
}

/// A count kept across tasks.
private final class Count: Sendable {
    private let count = Atomic(0)
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
