import Foundation
import Testing
import UbiquityTestSupport
@testable import UbiquitySync

/// The cut of an edited file guided by its chunks before the edit: always the list a whole cut
/// gives, for every kind of edit, and guided (not cut whole) where little changed.
@Suite struct GuidedCutTests {
    /// An edit of a file's bytes, and whether the guide is expected to be used for it.
    struct Edit: CustomTestStringConvertible, Sendable {
        let name: String
        let guided: Bool
        let apply: @Sendable (inout Data) -> Void
        var testDescription: String { name }
    }

    static let edits: [Edit] = [
        Edit(name: "one byte in the middle", guided: true) { $0[$0.count / 2] ^= 0x5a },
        Edit(name: "the first byte", guided: true) { $0[0] ^= 1 },
        Edit(name: "the last byte", guided: true) { $0[$0.count - 1] ^= 1 },
        Edit(name: "bytes in three places", guided: true) { data in
            for place in [data.count / 5, data.count / 2, data.count - 70_000] { data[place] ^= 0xff }
        },
        Edit(name: "100 bytes inserted at a third", guided: true) { $0.insert(contentsOf: randomData(100, seed: 9), at: $0.count / 3) },
        Edit(name: "5,000 bytes removed at two thirds", guided: true) { $0.removeSubrange(($0.count * 2 / 3)..<($0.count * 2 / 3 + 5_000)) },
        Edit(name: "appended to", guided: true) { $0.append(randomData(300_000, seed: 10)) },
        Edit(name: "truncated", guided: true) { $0.removeLast(123_457) },
        Edit(name: "a run of zeros written over (largest chunks)", guided: true) { data in
            data.replaceSubrange((data.count / 4)..<(data.count / 4 + 300_000), with: Data(count: 300_000))
        },
        Edit(name: "all new", guided: false) { $0 = randomData($0.count, seed: 11) },
    ]

    @Test(arguments: edits, [3 << 20, 20 << 20])
    func aGuidedCutIsTheWholeCut(edit: Edit, size: Int) throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("guided-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = dir.appendingPathComponent("file.bin")
        // Random bytes with a run of zeros in them (cut at the largest size) and a repeated stretch.
        var data = randomData(size, seed: UInt64(size))
        data.replaceSubrange((size / 8)..<(size / 8 + 600_000), with: Data(count: 600_000))
        data.replaceSubrange((size * 5 / 8)..<(size * 5 / 8 + 200_000), with: data[(size / 2)..<(size / 2 + 200_000)])
        try data.write(to: url)
        let before = try ContentChunker.chunks(ofFileAt: url)
        edit.apply(&data)
        try data.write(to: url)

        let whole = try ContentChunker.chunks(ofFileAt: url)
        let guided = try ContentChunker.guidedChunks(ofFileAt: url, guidedBy: before, choosing: ContentChunker.forFile(ofSize:))
        if edit.guided {
            let same = guided == whole // (the lists themselves are too long to print)
            #expect(same, "\(edit.name): \(guided?.count ?? -1) chunks guided, \(whole.count) whole")
        } else {
            #expect(guided == nil, "\(edit.name): cut whole, the guide finding too little")
        }
        let either = try ContentChunker.chunks(ofFileAt: url, guidedBy: before, choosing: ContentChunker.forFile(ofSize:)) == whole
        #expect(either, "\(edit.name): the list is the whole cut's either way")
    }

    /// A guide cut by another chunker (the file crossed the large-file size) is not used; a
    /// guide from a file of other contents altogether still gives the right list.
    @Test func aGuideOfAnotherChunkerOrOtherContentsCutsWhole() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("guided-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = dir.appendingPathComponent("file.bin")
        var data = randomData(ContentChunker.largeFileSize - 1_000, seed: 21)
        try data.write(to: url)
        let small = try ContentChunker.chunks(ofFileAt: url)
        data.append(randomData(2_000, seed: 22))
        try data.write(to: url)
        #expect(try ContentChunker.guidedChunks(ofFileAt: url, guidedBy: small, choosing: ContentChunker.forFile(ofSize:)) == nil)
        #expect(try ContentChunker.chunks(ofFileAt: url, guidedBy: small, choosing: ContentChunker.forFile(ofSize:)) == ContentChunker.chunks(ofFileAt: url))

        let other = ContentChunker.large.chunks(of: randomData(ContentChunker.largeFileSize + 5_000, seed: 23))
        #expect(try ContentChunker.chunks(ofFileAt: url, guidedBy: other, choosing: ContentChunker.forFile(ofSize:)) == ContentChunker.chunks(ofFileAt: url))
    }
}
