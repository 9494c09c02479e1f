import Foundation
import Testing
import UbiquityClient
import UbiquityProtocol
import UbiquitySync
import UbiquityTestSupport
@testable import UbiquityAgent

/// A small edit of a large file written into the other device's copy in place (the same file,
/// only the changed ranges written), after a journal of them; staged as before when the copy
/// has another name too (a hard link), or the edit changes the size. A journal a killed agent
/// left is settled when the container opens again: undone if the store did not record the write.
extension ContainerSyncTests {
    static func inode(_ url: URL) throws -> UInt64 {
        try #require(try FileManager.default.attributesOfItem(atPath: url.path)[.systemFileNumber] as? UInt64)
    }

    @Test func aSmallEditOfALargeFileIsWrittenInPlace() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            var bytes = randomBytes(6 << 20)
            try laptop.write("Film.mov", bytes)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            let film = phone.documents.appendingPathComponent("Film.mov")
            let first = try Self.inode(film)

            // One byte, then a few in two places: written where they are, the file the same file.
            bytes[3 << 20] ^= 0x5a
            try laptop.write("Film.mov", bytes)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: film) == bytes)
            #expect(try Self.inode(film) == first, "written in place")
            for place in [100, 5 << 20] { bytes[place] ^= 0xff }
            try laptop.write("Film.mov", bytes)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: film) == bytes && Self.inode(film) == first)
            let journals = try FileManager.default.contentsOfDirectory(atPath: phone.documents.deletingLastPathComponent().path).filter { $0.hasPrefix(".ubiquity-inplace-") }
            #expect(journals.isEmpty, "each journal goes once its write is recorded: \(journals)")

            // The phone's own next edit goes up as usual (its record is of what is in place).
            bytes[4 << 20] ^= 0x11
            try phone.write("Film.mov", bytes)
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            #expect(try Data(contentsOf: laptop.documents.appendingPathComponent("Film.mov")) == bytes)

            // A copy with another name too (a hard link) is staged: the other name keeps what it had.
            let linked = URL(fileURLWithPath: dir).appendingPathComponent("linked.mov")
            try FileManager.default.linkItem(at: film, to: linked)
            let before = try Data(contentsOf: linked)
            bytes[2 << 20] ^= 0x22
            try laptop.write("Film.mov", bytes)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: film) == bytes && Self.inode(film) != first, "staged: a new file")
            #expect(try Data(contentsOf: linked) == before, "the other name is untouched")

            // An edit that changes the size is staged too.
            let now = try Self.inode(film)
            bytes.insert(contentsOf: Data("inserted".utf8), at: 1 << 20)
            try laptop.write("Film.mov", bytes)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: film) == bytes && Self.inode(film) != now)
        }
    }

    /// A journal a killed agent left: the store did not record the write, so the ranges it
    /// names get their old bytes back (here half written: one range new, one a mix by pages);
    /// one the store did record is kept. Either way the journal goes, and a journal of another
    /// engine's is not this one's to settle.
    @Test func aWriteInPlaceCutShortIsUndoneWhenTheContainerOpensAgain() async throws {
        try await withServer { base, dir in
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            let original = randomBytes(6 << 20)
            try phone.write("Film.mov", original)
            try await phone.sync.syncOnce()
            let film = phone.documents.appendingPathComponent("Film.mov")
            let root = phone.documents.deletingLastPathComponent()
            let recorded = try #require(await phone.sync.files["Documents/Film.mov"])

            func journal(after: String, named name: String) throws -> [Materialiser.InPlaceJournal.Write] {
                let writes = [(4_096 * 10, 8_192), (3 << 20, 12_288)].map { offset, length in
                    Materialiser.InPlaceJournal.Write(offset: offset, old: original[offset..<offset + length], new: randomBytes(length))
                }
                let journal = Materialiser.InPlaceJournal(format: 1, path: "Documents/Film.mov", after: after, writes: writes)
                try JSONEncoder().encode(journal).write(to: root.appendingPathComponent(name))
                return writes
            }
            // Cut short: the first range written whole, the second's first page only.
            let ours = Materialiser.inPlaceJournalPrefix(of: "ABCDE12345.com.example.notes") + "cut"
            let writes = try journal(after: "some-other-contents", named: ours)
            var torn = original
            torn.replaceSubrange(writes[0].offset..<writes[0].offset + writes[0].new.count, with: writes[0].new)
            torn.replaceSubrange(writes[1].offset..<writes[1].offset + 4_096, with: writes[1].new.prefix(4_096))
            try torn.write(to: film)
            let others = Materialiser.inPlaceJournalPrefix(of: "ABCDE12345.com.example.notes#share") + "theirs"
            _ = try journal(after: "x", named: others)
            _ = try await device("phone", base: base, dir: dir, greedy: true)
            #expect(try Data(contentsOf: film) == original, "undone: the old revision again")
            #expect(!FileManager.default.fileExists(atPath: root.appendingPathComponent(ours).path))
            #expect(FileManager.default.fileExists(atPath: root.appendingPathComponent(others).path), "another engine's journal stays")
            try FileManager.default.removeItem(at: root.appendingPathComponent(others))

            // Recorded: what is in place stays.
            let kept = try journal(after: recorded.content.description, named: ours)
            var written = original
            for write in kept { written.replaceSubrange(write.offset..<write.offset + write.new.count, with: write.new) }
            try written.write(to: film)
            _ = try await device("phone", base: base, dir: dir, greedy: true)
            #expect(try Data(contentsOf: film) == written)
            #expect(!FileManager.default.fileExists(atPath: root.appendingPathComponent(ours).path))
        }
    }
}
