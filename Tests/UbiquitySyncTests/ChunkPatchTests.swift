import Foundation
import Testing
import UbiquityProtocol
@testable import UbiquitySync

/// Chunks sent as changes of chunks the other side has: the exact patch (server to device), the
/// patch from a block signature (device to server), the framing, and which old chunk each new
/// one is paired with.
@Suite struct ChunkPatchTests {
    static func hash(_ bytes: [UInt8]) -> String { bytes.withUnsafeBytes { ContentChunker.hash($0) } }

    /// A chunk's bytes and three edits of it: one byte changed in place, one inserted, 700 removed.
    static let base = [UInt8](randomData(16 << 10, seed: 7))
    static var edits: [(name: String, bytes: [UInt8])] {
        var changed = base
        changed[9_000] ^= 0x5a
        var inserted = base
        inserted.insert(42, at: 3_333)
        var removed = base
        removed.removeSubrange(100..<800)
        return [("changed", changed), ("inserted", inserted), ("removed", removed), ("appended", base + [1, 2, 3])]
    }

    @Test func anExactPatchCarriesOnlyWhatDiffers() throws {
        for (name, target) in Self.edits {
            let patch = ChunkPatch(making: target, hash: Self.hash(target), from: Self.base, baseHash: Self.hash(Self.base))
            #expect(patch.made(from: Self.base) == target, "\(name)")
            #expect(patch.middle.count <= 3, "\(name): \(patch.middle.count) bytes travel")
        }
        // Identical, empty and unrelated contents: still exact.
        for target in [Self.base, [], [UInt8](randomData(4_000, seed: 8))] {
            let patch = ChunkPatch(making: target, hash: Self.hash(target), from: Self.base, baseHash: Self.hash(Self.base))
            #expect(patch.made(from: Self.base) == target)
            #expect(patch.prefix + patch.suffix <= min(target.count, Self.base.count))
        }
        // Repeated bytes: prefix and suffix never overlap.
        let zeros = [UInt8](repeating: 0, count: 100), longer = [UInt8](repeating: 0, count: 130)
        let patch = ChunkPatch(making: longer, hash: Self.hash(longer), from: zeros, baseHash: Self.hash(zeros))
        #expect(patch.made(from: zeros) == longer && patch.middle.count == 30)
    }

    @Test func aPatchFromASignatureKeepsTheBlocksThatAgree() throws {
        let signature = ChunkSignature(of: Self.base, hash: Self.hash(Self.base))
        #expect(signature.front.count == 32 * 4 && signature.back.count == 32 * 4, "16 KiB in 512-byte blocks")
        for (name, target) in Self.edits {
            let patch = try #require(ChunkPatch(making: target, hash: Self.hash(target), against: signature))
            #expect(patch.made(from: Self.base) == target, "\(name)")
            #expect(patch.middle.count <= 2 * ChunkSignature.standardBlockSize, "\(name): \(patch.middle.count) bytes travel")
        }
        // A signature that does not add up is not used; one of other contents makes a patch
        // that does not check out (whoever applies it sends the chunk whole).
        var damaged = signature
        damaged.front.removeLast()
        #expect(ChunkPatch(making: Self.base, hash: Self.hash(Self.base), against: damaged) == nil)
        let other = [UInt8](randomData(16 << 10, seed: 9))
        let lying = ChunkSignature(of: Self.base, hash: Self.hash(other))
        let patch = try #require(ChunkPatch(making: Self.base, hash: Self.hash(Self.base), against: lying))
        #expect(patch.made(from: other) == nil)
    }

    @Test func theFramingReadsBackAndRefusesWhatIsNotABatch() throws {
        let patches = Self.edits.map { ChunkPatch(making: $0.bytes, hash: Self.hash($0.bytes), from: Self.base, baseHash: Self.hash(Self.base)) }
        let encoded = ChunkPatchBatch(patches).encoded()
        #expect(encoded.count == patches.reduce(0) { $0 + ChunkPatchBatch.framing + $1.middle.count })
        #expect(try ChunkPatchBatch(decoding: encoded, maximumChunkSize: 1 << 20, maximumTotal: 1 << 20).patches == patches)

        #expect(throws: ChunkPatchBatch.FormatError.self) { try ChunkPatchBatch(decoding: Array(encoded.dropLast()), maximumChunkSize: 1 << 20, maximumTotal: 1 << 20) }
        #expect(throws: ChunkPatchBatch.FormatError.self) { try ChunkPatchBatch(decoding: Array(encoded.prefix(100)), maximumChunkSize: 1 << 20, maximumTotal: 1 << 20) }
        #expect(throws: ChunkPatchBatch.FormatError.self, "a chunk over the limit") {
            try ChunkPatchBatch(decoding: encoded, maximumChunkSize: 10_000, maximumTotal: 1 << 20)
        }
        #expect(throws: ChunkPatchBatch.FormatError.self, "more than the total") {
            try ChunkPatchBatch(decoding: encoded, maximumChunkSize: 1 << 20, maximumTotal: 40_000)
        }
        var badBase = encoded
        badBase[64] = UInt8(ascii: "G")
        #expect(throws: ChunkPatchBatch.FormatError.self) { try ChunkPatchBatch(decoding: badBase, maximumChunkSize: 1 << 20, maximumTotal: 1 << 20) }
        // A patch that keeps more than its base has makes nothing.
        let greedy = ChunkPatch(hash: Self.hash(Self.base), base: Self.hash(Self.base), prefix: 10_000, suffix: 10_000, middle: [])
        #expect(throws: ChunkPatchBatch.FormatError.self) { try greedy.applied(to: Self.base) }
        #expect(greedy.made(from: Self.base) == nil)
    }

    @Test func newChunksArePairedWithTheOldChunksTheyReplace() {
        func refs(_ names: String) -> [ChunkReference] { names.map { ChunkReference(hash: String($0), size: 100) } }
        // One chunk changed, two chunks where there was one, a chunk gone, an insertion.
        #expect(ChunkPartners.of(old: refs("abcde"), new: refs("abXde")) == ["X": "c"])
        #expect(ChunkPartners.of(old: refs("abcde"), new: refs("abXYde")) == ["X": "c", "Y": "c"])
        #expect(ChunkPartners.of(old: refs("abcde"), new: refs("abXe")) == ["X": "c"])
        #expect(ChunkPartners.of(old: refs("abcde"), new: refs("XbcdY")) == ["X": "a", "Y": "e"])
        #expect(ChunkPartners.of(old: refs("abc"), new: refs("abXc")).isEmpty, "an insertion between kept chunks has no partner")
        #expect(ChunkPartners.of(old: [], new: refs("XY")).isEmpty)
        #expect(ChunkPartners.of(old: refs("abc"), new: refs("abcX")).isEmpty)
    }
}
