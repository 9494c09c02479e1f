import Foundation
import UbiquityProtocol
import Testing
import UbiquityTestSupport
@testable import UbiquitySync


func randomData(_ count: Int, seed: UInt64) -> Data {
    var generator = SeededGenerator(seed: seed)
    var data = Data(count: count)
    data.withUnsafeMutableBytes { bytes in
        let words = bytes.bindMemory(to: UInt64.self)
        for index in words.indices { words[index] = generator.next() }
    }
    return data
}

/// Bytes that must travel to turn `old` into `new`: the chunks the other side lacks, plus the
/// chunk-list delta as JSON.
func bytesMoved(from old: [ContentChunk], to new: [ContentChunk]) throws -> (chunks: Int, delta: Int) {
    let delta = ChunkListDelta(from: old, to: new)
    let known = Set(old.map(\.hash))
    let chunkBytes = delta.added.filter { !known.contains($0.hash) }.reduce(0) { $0 + $1.length }
    return (chunkBytes, try JSONEncoder().encode(delta).count)
}

@Suite struct ContentChunkerTests {
    let chunker = ContentChunker.standard

    @Test func chunksAreDeterministicBoundedAndCoverTheFile() throws {
        let data = randomData(4 << 20, seed: 1)
        let chunks = chunker.chunks(of: data)
        #expect(chunks == chunker.chunks(of: data))
        #expect(chunks.reduce(0) { $0 + $1.length } == data.count)
        #expect(zip(chunks, chunks.dropFirst()).allSatisfy { $0.offset + $0.length == $1.offset }, "no gaps, no overlaps")
        for chunk in chunks.dropLast() {
            #expect(chunk.length >= chunker.minimumSize && chunk.length <= chunker.maximumSize)
        }
        let mean = Double(data.count) / Double(chunks.count)
        #expect(mean > Double(chunker.averageSize) * 0.6 && mean < Double(chunker.averageSize) * 1.6, "mean chunk \(mean) bytes")
        #expect(ContentChunker.hash(UnsafeRawBufferPointer(start: nil, count: 0)) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(chunker.chunks(of: Data()).isEmpty)
        #expect(chunker.chunks(of: Data([1, 2, 3])).map(\.length) == [3])
    }

    /// The gear hash written the plain way, one byte a step: the cutter (two bytes a step, raw
    /// pointers) must find the same cut points, so every device and every version agree.
    @Test(arguments: [ContentChunker.standard, .large, ContentChunker(minimumSize: 63, averageSize: 256, maximumSize: 1_001)])
    func cutPointsAreThoseOfTheGearHashByteByByte(chunker: ContentChunker) {
        func reference(_ bytes: [UInt8], from start: Int) -> Int {
            let remaining = bytes.count - start
            guard remaining > chunker.minimumSize else { return remaining }
            var fingerprint: UInt64 = 0
            for index in chunker.minimumSize..<min(chunker.maximumSize, remaining) {
                fingerprint = (fingerprint << 1) &+ ContentChunker.gear[Int(bytes[start + index])]
                let mask = index < min(chunker.averageSize, remaining) ? chunker.strictMask : chunker.looseMask
                if fingerprint & mask == 0 { return index + 1 }
            }
            return min(chunker.maximumSize, remaining)
        }
        let bytes = [UInt8](randomData(3 << 20, seed: 11)) + [UInt8](repeating: 7, count: 100_000) + [UInt8](randomData(12_345, seed: 12))
        var start = 0, cuts = 0
        bytes.withUnsafeBytes { raw in
            while start < bytes.count {
                let length = chunker.cut(raw, from: start)
                #expect(length == reference(bytes, from: start), "at \(start)")
                start += length
                cuts += 1
            }
        }
        #expect(cuts > 10)
    }

    @Test func aFileIsCutTheSameWayStreamedAsInMemory() throws {
        let data = randomData(3 << 20 + 12_345, seed: 2)
        let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("chunker-\(UUID().uuidString)")
        try data.write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        #expect(try chunker.chunks(ofFileAt: url) == chunker.chunks(of: data))
        // Sizes around the windows the file is read in (cut in one, hashed while the next is read).
        let window = 1 << 20
        for size in [100_000, window - 1, window, window + 1, 2 * window + chunker.maximumSize, 2 * window - chunker.maximumSize] {
            let bytes = randomData(size, seed: UInt64(size))
            try bytes.write(to: url)
            #expect(try chunker.chunks(ofFileAt: url) == chunker.chunks(of: bytes), "\(size) bytes")
        }
        let empty = url.appendingPathExtension("empty")
        try Data().write(to: empty)
        defer { try? FileManager.default.removeItem(at: empty) }
        #expect(try chunker.chunks(ofFileAt: empty).isEmpty)
        #expect(throws: (any Error).self) { try chunker.chunks(ofFileAt: url.appendingPathExtension("missing")) }
    }

    /// Overwrites, insertions and deletions anywhere: the chunks after the edit are the old
    /// ones, and what travels (new chunks + the delta) stays within 64 KiB.
    @Test(arguments: 0..<4) func smallEditsMoveOnlyTheChunksAroundThem(seed: UInt64) throws {
        let original = randomData(8 << 20, seed: 100 + seed)
        let before = chunker.chunks(of: original)
        var generator = SeededGenerator(seed: seed)
        for round in 0..<6 {
            var edited = original
            let at = Int.random(in: 0..<original.count, using: &generator)
            switch round % 3 {
            case 0: edited[at] ^= 0xFF
            case 1: edited.insert(UInt8.random(in: 0...255, using: &generator), at: at)
            default: edited.remove(at: at)
            }
            let after = chunker.chunks(of: edited)
            let moved = try bytesMoved(from: before, to: after)
            #expect(moved.chunks + moved.delta <= 64 << 10, "edit \(round % 3) at \(at): \(moved.chunks) chunk bytes + \(moved.delta) delta bytes")
            #expect(try ChunkListDelta(from: before, to: after).apply(to: before) == after)
        }
    }

    /// SYSTEM.md's figure: a 1-byte edit in a 64 MiB file, cut as every device cuts it (a large
    /// file's chunks), moves at most 16 KiB each way — the chunk list as a difference and each
    /// changed chunk as a patch of the one it replaces: up, the old chunk's block signature
    /// down and the blocks that differ up; down, the exact patch.
    @Test func aOneByteEditInSixtyFourMebibytesMovesAtMostSixteenKibibytesEachWay() async throws {
        // (Cut on a thread of its own: seconds of work in a debug build.)
        let (old, new, before, after) = try await onBackgroundThread {
            let old = [UInt8](randomData(64 << 20, seed: 64))
            var new = old
            new[40_000_000] &+= 1
            return (old, new, ContentChunker.chunks(of: Data(old)), ContentChunker.chunks(of: Data(new)))
        }
        #expect(before.count > 256 && before.count < 1_024, "a large file's chunks: \(before.count)")
        let delta = try JSONEncoder().encode(ChunkListDelta(from: before, to: after)).count
        let partners = ChunkPartners.of(old: before.map(\.reference), new: after.map(\.reference))
        let oldChunks = Dictionary(before.map { ($0.hash, $0) }, uniquingKeysWith: { first, _ in first })
        var up = delta, down = delta, patched = 0
        for chunk in after where oldChunks[chunk.hash] == nil {
            let target = Array(new[chunk.offset..<(chunk.offset + chunk.length)])
            guard let partner = partners[chunk.hash].flatMap({ oldChunks[$0] }) else {
                up += chunk.length
                down += chunk.length
                continue
            }
            let base = Array(old[partner.offset..<(partner.offset + partner.length)])
            let signature = ChunkSignature(of: base, hash: partner.hash)
            let upPatch = try #require(ChunkPatch(making: target, hash: chunk.hash, against: signature))
            let downPatch = ChunkPatch(making: target, hash: chunk.hash, from: base, baseHash: partner.hash)
            #expect(upPatch.made(from: base) == target && downPatch.made(from: base) == target)
            up += signature.front.count + signature.back.count + ChunkPatchBatch.framing + upPatch.middle.count
            down += ChunkPatchBatch.framing + downPatch.middle.count
            patched += 1
        }
        #expect(patched >= 1)
        #expect(up <= 16 << 10 && down <= 16 << 10, "up \(up) bytes, down \(down) bytes")
        #expect(delta < 1_024, "the chunk list travels as a difference, not \(after.count) hashes")
    }

    /// The sizes follow the file's size alone, the same on every device: under 8 MiB the
    /// standard ones, from it a large file's, eight times larger; a file is cut the same way
    /// read from disk as in memory on both sides of the line.
    @Test func aFilesChunkSizesFollowItsSize() async throws {
        #expect(ContentChunker.forFile(ofSize: ContentChunker.largeFileSize - 1).averageSize == 16 << 10)
        #expect(ContentChunker.forFile(ofSize: ContentChunker.largeFileSize).averageSize == 128 << 10)
        #expect(ContentChunker.large.minimumSize > ContentChunker.standard.maximumSize, "a list's chunks tell which sizes cut it")
        let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("chunker-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: url) }
        for (size, chunker) in [(ContentChunker.largeFileSize - 1, ContentChunker.standard), (ContentChunker.largeFileSize, .large), (9 << 20 + 77, .large)] {
            // (Cut on a thread of its own: a second of work in a debug build.)
            let (chunks, byTheSizes, fromDisk) = try await onBackgroundThread {
                let data = randomData(size, seed: UInt64(size))
                try data.write(to: url)
                return (ContentChunker.chunks(of: data), chunker.chunks(of: data), try ContentChunker.chunks(ofFileAt: url))
            }
            #expect(chunks == byTheSizes, "\(size) bytes")
            #expect(fromDisk == chunks, "\(size) bytes from disk")
            let mean = Double(size) / Double(chunks.count)
            #expect(mean > Double(chunker.averageSize) * 0.6 && mean < Double(chunker.averageSize) * 1.6, "mean chunk \(mean) bytes")
            for chunk in chunks.dropLast() { #expect(chunk.length >= chunker.minimumSize && chunk.length <= chunker.maximumSize) }
        }
        // A file that was another size when opened (it grew or shrank as it was read) is cut
        // again with the sizes for what was read: the list any device makes of those bytes.
        for (size, before) in [(9 << 20, 1 << 20), (1 << 20, 9 << 20)] {
            let (read, inMemory) = try await onBackgroundThread {
                let data = randomData(size, seed: UInt64(size) + 1)
                try data.write(to: url)
                return (try ContentChunker.chunks(ofFileAt: url, sizeWhenOpened: before), ContentChunker.chunks(of: data))
            }
            #expect(read == inMemory, "\(size) bytes, \(before) when opened")
        }
    }

    @Test func deltasRebuildTheListAndRefuseTheWrongOne() throws {
        let a = chunker.chunks(of: randomData(1 << 20, seed: 7))
        let b = Array(a[10...]) + Array(a[0..<5]) + [ContentChunk(offset: 0, length: 3, hash: String(repeating: "a", count: 64))]
        let delta = ChunkListDelta(from: a, to: b)
        #expect(try delta.apply(to: a) == (try ChunkListDelta(from: [], to: b).apply(to: [])))
        #expect(delta.operations.count == 3, "two runs and one new chunk: \(delta.operations)")
        #expect(delta.added.map(\.length) == [3])
        let decoded = try JSONDecoder().decode(ChunkListDelta.self, from: try JSONEncoder().encode(delta))
        #expect(decoded == delta)
        #expect(throws: DeltaError.self) { try delta.apply(to: Array(a.prefix(4))) }
    }
}
