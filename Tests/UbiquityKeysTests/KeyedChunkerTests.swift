import CUbiquityCut
import Crypto
import Foundation
import Testing
@testable import UbiquityKeys

/// The keyed chunker cuts where a pseudorandom function says: alike on every device, to sizes
/// within bounds, moving few chunks on an edit, and unpredictable to whoever lacks the key —
/// also to an attacker who has recovered what the published attacks recover.
@Suite struct KeyedChunkerTests {
    /// A fixed key, so each run cuts alike (the figures below hold for it; over many random keys
    /// the edits moved at most three chunks).
    let keys = try! AccountRootKey(epoch: 1, bytes: [UInt8](repeating: 7, count: 32)).chunkKeys(container: "A.com.example.notes")

    /// `count` bytes from a seeded generator (SplitMix64), the same on every run.
    static func bytes(_ count: Int, seed: UInt64) -> Data {
        var state = seed
        var bytes = [UInt8](repeating: 0, count: count)
        for index in 0..<count {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            bytes[index] = UInt8(truncatingIfNeeded: z ^ (z >> 31))
        }
        return Data(bytes)
    }

    @Test func theCipherIsAES128() {
        // FIPS 197, appendix C.1.
        let key: [UInt8] = Array(0..<16)
        let plaintext: [UInt8] = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]
        var roundKeys = [UInt8](repeating: 0, count: 176), output = [UInt8](repeating: 0, count: 16)
        ubq_cut_expand_key(key, &roundKeys)
        ubq_cut_encipher_block(roundKeys, plaintext, &output)
        #expect(output == [0x69, 0xc4, 0xe0, 0xd8, 0x6a, 0x7b, 0x04, 0x30, 0xd8, 0xcd, 0xb7, 0x80, 0x70, 0xb4, 0xc5, 0x5a])
    }

    @Test func theProcessorsInstructionsAndThePortableCipherCutAlike() {
        let data = Self.bytes(3 << 20, seed: 7)
        let sizes = KeyedChunker.Sizes(minimum: 2048, average: 4096, maximum: 16384)
        let fast = KeyedChunker(key: keys.chunker, sizes: sizes).boundaries(of: data)
        let portable = KeyedChunker(key: keys.chunker, sizes: sizes, decision: .portableCipher).boundaries(of: data)
        let narrow = KeyedChunker(key: keys.chunker, sizes: sizes, decision: .narrowCipher).boundaries(of: data)
        #expect(fast.count > 500)
        #expect(fast == portable, "AES instructions here: \(KeyedChunker.usesAESInstructions), 512-bit: \(KeyedChunker.usesWideAESInstructions)")
        #expect(narrow == portable)
    }

    @Test func chunksStayWithinTheirSizesAndAverageNearTheTarget() {
        for (sizes, count) in [(KeyedChunker.Sizes.standard, 6 << 20), (.large, 24 << 20)] {
            let data = Self.bytes(count, seed: 11)
            let ends = KeyedChunker(keys: keys, sizes: sizes).boundaries(of: data)
            let lengths = zip(ends, [0] + ends).map { $0 - $1 }
            #expect(ends.last == count)
            #expect(lengths.dropLast().allSatisfy { $0 >= sizes.minimum && $0 <= sizes.maximum })
            let mean = Double(count) / Double(ends.count)
            // Sizes past the minimum are geometric (standard deviation average − minimum): the
            // mean of n of them lies within four standard errors of the target.
            let tolerance = 4 * Double(sizes.average - sizes.minimum) / Double(ends.count).squareRoot()
            #expect(abs(mean - Double(sizes.average)) < tolerance, "mean \(mean) for \(sizes)")
            let forced = lengths.dropLast().filter { $0 == sizes.maximum }.count
            #expect(Double(forced) < Double(lengths.count) * 0.03, "\(forced) of \(lengths.count) cut at the maximum")
        }
        // Short data is one chunk; empty data none.
        let chunker = KeyedChunker(keys: keys, sizes: .standard)
        #expect(chunker.boundaries(of: Self.bytes(4 << 10, seed: 1)) == [4 << 10])
        #expect(chunker.boundaries(of: Data()) == [])
    }

    /// The chunks of `data` as (offset, length) pairs' contents, for comparing two versions.
    func chunks(_ data: Data, _ chunker: KeyedChunker) -> Set<Data> {
        let ends = chunker.boundaries(of: data)
        return Set(zip([0] + ends, ends).map { data[$0..<$1] })
    }

    @Test func anEditMovesOnlyTheChunksAroundIt() {
        let chunker = KeyedChunker(keys: keys, sizes: .standard)
        let original = Self.bytes(4 << 20, seed: 21)
        let before = chunks(original, chunker)
        var edits: [(String, Data)] = []
        var inserted = original
        inserted.insert(0x41, at: 2 << 20)
        edits.append(("1 byte inserted", inserted))
        var changed = original
        changed[3 << 20] ^= 0xFF
        edits.append(("1 byte changed", changed))
        var removed = original
        removed.removeSubrange((1 << 20)..<((1 << 20) + 100))
        edits.append(("100 bytes removed", removed))
        var spliced = original
        spliced.insert(contentsOf: Self.bytes(5000, seed: 99), at: 1 << 20)
        edits.append(("5,000 bytes inserted", spliced))
        for (name, edited) in edits {
            let new = chunks(edited, chunker).subtracting(before)
            #expect(new.count <= 3, "\(name): \(new.count) new chunks of \(before.count)")
        }
    }

    @Test func theCutPointsDependOnTheKey() {
        let data = Self.bytes(4 << 20, seed: 5)
        let mine = Set(KeyedChunker(keys: keys, sizes: .standard).boundaries(of: data).dropLast())
        let other = AccountRootKey(epoch: 1).chunkKeys(container: "A.com.example.notes")
        let theirs = Set(KeyedChunker(keys: other, sizes: .standard).boundaries(of: data).dropLast())
        // Two independent chunkings share a cut point only by chance (about one in 4,000 places).
        #expect(mine.intersection(theirs).count < mine.count / 20, "\(mine.intersection(theirs).count) of \(mine.count) shared")
    }

    /// The published attack on keyed chunkers: from a known file's chunk sizes, recover the
    /// chunker's secret table, then recognise any known file by the sizes it would be cut to.
    /// Grant the attacker the table outright: against a chunker that decides by the keyed gear
    /// hash alone they predict every cut of a file they know (and so fingerprint it); against
    /// this one, whose decision is a cipher of that hash, no better than chance.
    @Test func anAttackerWhoRecoveredTheTableCannotPredictTheCuts() {
        let known = Self.bytes(4 << 20, seed: 33)
        let sizes = KeyedChunker.Sizes.standard
        // The attacker's prediction: the table's gear hash decides.
        let predicted = Set(KeyedChunker(key: keys.chunker, sizes: sizes, decision: .gearAlone).boundaries(of: known).dropLast())

        // Unprotected (the decision of keyed gear chunkers): every cut predicted, the file recognised.
        let unprotected = Set(KeyedChunker(key: keys.chunker, sizes: sizes, decision: .gearAlone).boundaries(of: known).dropLast())
        #expect(unprotected == predicted)

        // This chunker: the cuts the server sees match the prediction at chance.
        let actual = Set(KeyedChunker(keys: keys, sizes: sizes).boundaries(of: known).dropLast())
        #expect(actual.count > 200)
        #expect(actual.intersection(predicted).count < actual.count / 20, "\(actual.intersection(predicted).count) of \(actual.count) predicted")
        // And the sizes, the attacker's fingerprint, differ from the predicted sizes.
        func lengths(_ ends: Set<Int>) -> [Int] { let sorted = ends.sorted(); return zip(sorted, [0] + sorted).map { $0 - $1 } }
        #expect(lengths(actual) != lengths(predicted))
    }
}

/// The block prints of sealed patches (``BlockMAC``).
@Suite struct BlockMACTests {
    static func blocks(_ data: [UInt8], size: Int) -> [[UInt8]] {
        stride(from: 0, to: data.count - size + 1, by: size).map { Array(data[$0..<($0 + size)]) }
    }

    static func prints(_ mac: BlockMAC, _ blocks: [[UInt8]]) -> [UInt64] {
        // Pointers to each block, alive for the call.
        func nest(_ index: Int, _ pointers: [UnsafeRawBufferPointer]) -> [UInt64] {
            index == blocks.count ? mac.prints(of: pointers) : blocks[index].withUnsafeBytes { nest(index + 1, pointers + [$0]) }
        }
        return nest(0, [])
    }

    @Test func theProcessorsInstructionsAndThePortableCipherPrintAlikeAsCBCMAC() {
        let key = SymmetricKey(size: .bits128)
        let data = Array(KeyedChunkerTests.bytes(2048 * 19, seed: 3))
        let blocks = Self.blocks(data, size: 2048)
        let fast = Self.prints(BlockMAC(key: key), blocks)
        let portable = Self.prints(BlockMAC(key: key, portable: true), blocks)
        #expect(fast == portable)
        // CBC-MAC, chained here, over the block cipher checked against FIPS 197 above.
        var roundKeys = [UInt8](repeating: 0, count: 176)
        key.withUnsafeBytes { ubq_cut_expand_key(Array($0), &roundKeys) }
        let expected: [UInt64] = blocks.map { block in
            var state = [UInt8](repeating: 0, count: 16)
            for offset in stride(from: 0, to: block.count, by: 16) {
                let input = zip(state, block[offset..<(offset + 16)]).map { $0 ^ $1 }
                ubq_cut_encipher_block(roundKeys, input, &state)
            }
            return state.prefix(8).reversed().reduce(0) { $0 << 8 | UInt64($1) }
        }
        #expect(fast == expected)
    }

    /// However many blocks at once — fewer than a group, a group and some, several groups —
    /// the processor's 512-bit and 128-bit instructions print as the portable cipher does.
    @Test func everyGroupSizePrintsAlike() {
        let key = SymmetricKey(size: .bits128)
        let data = Array(KeyedChunkerTests.bytes(2048 * 40, seed: 11))
        let blocks = Self.blocks(data, size: 2048)
        for count in [1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40] {
            let some = Array(blocks.prefix(count))
            #expect(Self.prints(BlockMAC(key: key), some) == Self.prints(BlockMAC(key: key, portable: true), some), "\(count) blocks")
        }
    }

    @Test func printsDependOnTheKeyAndOnEveryByte() {
        let data = Array(KeyedChunkerTests.bytes(2048 * 3, seed: 5))
        var changed = data
        changed[2048 + 777] ^= 1
        let mac = BlockMAC(key: SymmetricKey(size: .bits128))
        let before = Self.prints(mac, Self.blocks(data, size: 2048)), after = Self.prints(mac, Self.blocks(changed, size: 2048))
        #expect(before[0] == after[0] && before[2] == after[2])
        #expect(before[1] != after[1])
        #expect(Self.prints(BlockMAC(key: SymmetricKey(size: .bits128)), Self.blocks(data, size: 2048)) != before)
    }
}
