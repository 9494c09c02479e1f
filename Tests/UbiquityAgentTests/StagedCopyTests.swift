import Foundation
import NIOCore
import Testing
import UbiquityProtocol
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

extension StagedCopyTests {
    /// An upload reads a file's chunks without hashing them again while the file is as the
    /// scan recorded it; written to since, its chunks are checked, and one that changed is
    /// never sent under its old hash.
    @Test func uploadsTrustOnlyAnUnchangedFile() throws {
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("upload-read-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let contents = noise(1 << 20, seed: 9)
        let file = folder.appendingPathComponent("Track.wav")
        try contents.write(to: file)
        let recorded = try #require(LocalScanner(root: folder).fingerprint(of: "Track.wav"))
        let chunks = ContentChunker.standard.chunks(of: contents)
        #expect(chunks.count > 4)

        // As recorded: every chunk's bytes, framed into the batch body, trusted throughout.
        var trusted: LocalFingerprint? = recorded
        let handle = try FileHandle(forReadingFrom: file)
        defer { try? handle.close() }
        var body = ByteBuffer()
        for chunk in chunks { #expect(try Uploader.read(chunk, from: handle, trusting: &trusted, into: &body)) }
        #expect(trusted == recorded)
        let batch = try ChunkBatch(decoding: Array(buffer: body), maximumChunkSize: 1 << 20)
        #expect(batch.chunks.map(\.hash) == chunks.map(\.hash) && Data(batch.chunks.flatMap(\.bytes)) == contents)

        // Written to (one byte in the last chunk, the size kept): no longer trusted; the
        // chunks that still hash right are read, the changed one is not, and leaves the body
        // as it was.
        let writer = try FileHandle(forWritingTo: file)
        try writer.seek(toOffset: UInt64(chunks.last!.offset + 10))
        try writer.write(contentsOf: Data([contents[chunks.last!.offset + 10] ^ 0xff]))
        try writer.close()
        body.clear()
        #expect(try Uploader.read(chunks[0], from: handle, trusting: &trusted, into: &body))
        #expect(trusted == nil)
        let before = body
        #expect(try !Uploader.read(chunks.last!, from: handle, trusting: &trusted, into: &body))
        #expect(body == before)

        // Cut shorter since: a chunk past the new end is not read either.
        let cutter = try FileHandle(forWritingTo: file)
        try cutter.truncate(atOffset: UInt64(chunks[2].offset + 1))
        try cutter.close()
        #expect(try !Uploader.read(chunks[3], from: handle, trusting: &trusted, into: &body))
        #expect(body == before)
    }
}
