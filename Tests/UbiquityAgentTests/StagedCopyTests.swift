import Foundation
import Testing
import UbiquitySync
@testable import UbiquityAgent

/// A download that shares most of its chunks with the local copy takes them from it by
/// in-kernel copy, unhashed — only while that copy is as recorded.
@Suite struct StagedCopyTests {
    func noise(_ count: Int, seed: UInt64) -> Data {
        var state = seed, data = Data(count: count)
        for index in data.indices {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            data[index] = UInt8(truncatingIfNeeded: state >> 33)
        }
        return data
    }

    @Test func sharedChunksAreCopiedFromAnUnchangedFileOnly() throws {
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("staged-copy-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let old = noise(3 << 20, seed: 7)
        var new = old
        new[new.count / 2] ^= 0xff
        new.append(contentsOf: noise(100_000, seed: 8))
        let local = folder.appendingPathComponent("Film.raw")
        try old.write(to: local)
        let oldChunks = ContentChunker.standard.chunks(of: old), newChunks = ContentChunker.standard.chunks(of: new)
        let scanner = LocalScanner(root: folder)
        let recorded = try #require(scanner.fingerprint(of: "Film.raw"))

        // As recorded: everything shared is copied, in place, and only that.
        let staged = folder.appendingPathComponent(".staged")
        let writer = try StagedWriter(at: staged, members: [LocalMember(path: "", chunks: newChunks)], kind: .file)
        let copied = try Materialiser.copyUnchanged(from: local, recorded: recorded, chunks: oldChunks, into: writer)
        let shared = Set(oldChunks.map(\.hash)).intersection(newChunks.map(\.hash))
        #expect(copied == shared && shared.count >= newChunks.count - 10 && shared.count < newChunks.count)
        for chunk in newChunks where !copied.contains(chunk.hash) {
            new.withUnsafeBytes { try? writer.write(Array($0[chunk.offset..<(chunk.offset + chunk.length)]), hash: chunk.hash) }
        }
        try writer.finish()
        writer.close()
        #expect(try Data(contentsOf: staged) == new)

        // Written to since it was recorded (same size, same bytes even): nothing is taken from it.
        let handle = try FileHandle(forWritingTo: local)
        try handle.seek(toOffset: 0)
        try handle.write(contentsOf: old.prefix(1))
        try handle.close()
        let second = try StagedWriter(at: folder.appendingPathComponent(".staged-2"), members: [LocalMember(path: "", chunks: newChunks)], kind: .file)
        defer { second.close() }
        #expect(try Materialiser.copyUnchanged(from: local, recorded: recorded, chunks: oldChunks, into: second).isEmpty)
        // Gone: nothing either.
        try FileManager.default.removeItem(at: local)
        #expect(try Materialiser.copyUnchanged(from: local, recorded: recorded, chunks: oldChunks, into: second).isEmpty)
    }
}
