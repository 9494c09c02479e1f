import Foundation
import Testing
import UbiquityTestSupport
@testable import UbiquitySync

/// Sealed patches' plaintext side: a patch made against block prints (the old chunk's bytes
/// gone) keeps the blocks that agree at either end and makes the new chunk from the old one.
@Suite struct SealedPatchTests {
    func random(_ count: Int) -> [UInt8] { [UInt8](randomBytes(count)) }

    @Test func aPatchMadeAgainstPrintsMakesTheNewChunkAndCarriesLittleMore() throws {
        let old = random(130_001) // not a whole number of blocks: the back prints differ
        let prints = old.withUnsafeBytes { BlockPrints(of: $0) }
        var replaced = old
        replaced[65_000] ^= 0xff
        var inserted = old
        inserted.insert(contentsOf: random(100), at: 40_000)
        var removed = old
        removed.removeSubrange(90_000..<90_050)
        let grown = old + random(3_000)
        for (what, new) in [("a byte replaced", replaced), ("bytes inserted", inserted), ("bytes removed", removed), ("bytes appended", grown)] {
            let patch = new.withUnsafeBytes { PatchBody(making: $0, against: prints) }
            #expect(old.withUnsafeBytes { patch.applied(to: $0) } == new, "\(what)")
            let growth = Int((new.count - old.count).magnitude)
            let allowed: Int = 2 * BlockPrints.blockSize + growth + 3_000
            #expect(patch.middle.count <= allowed, "\(what): \(patch.middle.count) bytes travel")
            #expect(PatchBody(decoding: patch.encoded) == patch)
        }
        // Nothing in common: the whole chunk is the middle; a patch never keeps more than the base has.
        let other = random(50_000)
        let unrelated = other.withUnsafeBytes { PatchBody(making: $0, against: prints) }
        #expect(unrelated.prefix == 0 && unrelated.suffix == 0 && unrelated.middle == other)
        #expect(PatchBody(prefix: 10, suffix: 10, middle: []).applied(to: UnsafeRawBufferPointer(start: nil, count: 0)) == nil)
        #expect(PatchBody(decoding: [1, 2, 3]) == nil)
    }

    @Test func thePrintCacheKeepsLargeChunksAndForgetsTheOldestPastItsCapacity() {
        let cache = BlockPrintCache(capacity: 1_500)
        let small = random(1_000)
        small.withUnsafeBytes { cache.note($0, as: "small") }
        #expect(cache.prints(of: "small") == nil, "a small chunk travels whole: no prints")
        let chunks = (0..<4).map { _ in random(BlockPrintCache.smallestChunk * 2) } // 576 bytes of prints each
        for (index, chunk) in chunks.enumerated() { chunk.withUnsafeBytes { cache.note($0, as: "c\(index)") } }
        #expect(cache.prints(of: "c0") == nil && cache.prints(of: "c3") != nil, "the oldest went first")
        #expect(cache.count <= 3)
    }
}
