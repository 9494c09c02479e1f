import Foundation
import Testing
import UbiquityTestSupport
import UbiquityProtocol
@testable import UbiquityAgent

/// A file that holds its item's contents on the server, though its chunk list was cut
/// elsewhere — by a device that does not seal, or sealed in place by the server — is that item
/// (found by `ubiquity-chaos` with sealed contents on: an agent stopped after putting a download
/// in place and before recording it took the file for a new item on its return, and it landed
/// as "Large 2.txt").
extension ContainerSyncTests {
    @Test func aDownloadPutInPlaceButNotRecordedIsTheItemThoughCutElsewhere() async throws {
        try await withServer { base, dir in
            // The laptop holds the keys but sends in plaintext (its chunker is not the phone's).
            let laptop = try await keyedDevice("laptop", base: base, dir: dir, chunks: .reading)
            let phone = try await keyedDevice("phone", base: base, dir: dir, chunks: .sealing, greedy: false)
            var large = Data()
            while large.count < 1_500_000 { large.append(Data("line \(UInt64.random(in: 0...UInt64.max))\n".utf8)) }
            let note = Data("a note from the laptop".utf8), other = Data("the laptop's other file".utf8)
            let page = Data("the package's page".utf8), picture = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
            try laptop.write("Large.txt", large)
            try laptop.write("Note.txt", note)
            try laptop.write("Other.txt", other)
            try laptop.write("Sketch.pages/Index.xml", page)
            try laptop.write("Sketch.pages/Data/Picture.bin", picture)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(phone.exists(".Large.txt.icloud") && !phone.exists("Large.txt"), "listed, not downloaded")
            let items = try await laptop.client.changes(container: notes, since: 0).items.filter { !$0.deleted }.count

            // Downloads the phone's agent put in place and was stopped before recording: the
            // files are there, their records are not. And at a listed file's place, other bytes
            // of its size (not that item: they must not be taken for it).
            try phone.write("Large.txt", large)
            try phone.write("Note.txt", note)
            try phone.write("Sketch.pages/Index.xml", page)
            try phone.write("Sketch.pages/Data/Picture.bin", picture)
            let mine = Data(String(repeating: "p", count: other.count).utf8)
            try phone.write("Other.txt", mine)
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()

            for name in ["Large 2.txt", "Note 2.txt", "Sketch 2.pages"] {
                #expect(!phone.exists(name) && !laptop.exists(name), "\(name): the file is its item, not a new one")
            }
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Large.txt")) == large)
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Sketch.pages/Data/Picture.bin")) == picture)
            #expect(!phone.exists(".Large.txt.icloud") && !phone.exists(".Note.txt.icloud"), "their placeholders went")
            // The phone's other bytes are a new item (renamed on the phone first, its name
            // taken: another round sends it), and both are kept on both devices.
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            let after = try await laptop.client.changes(container: notes, since: 0).items.filter { !$0.deleted }.count
            #expect(after == items + 1, "one item more: the phone's other file (\(items) → \(after))")
            let kept = try FileManager.default.contentsOfDirectory(atPath: laptop.documents.path).filter { $0.hasPrefix("Other") }
                .map { try Data(contentsOf: laptop.documents.appendingPathComponent($0)) }
            #expect(Set(kept) == [other, mine], "\(kept.count) Other files on the laptop")

            // A recorded file whose newer revision's download was put in place, and the agent
            // stopped before recording it: its record still names the older revision, its
            // state knows the newer. The phone's store is put back as it was between.
            let recorded = try #require(try AgentStore(path: dir + "/phone.sqlite").files(of: notes)["Documents/Note.txt"])
            let edited = Data("the laptop's second note".utf8)
            try laptop.write("Note.txt", edited)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Note.txt")) == edited)
            let store = try AgentStore(path: dir + "/phone.sqlite")
            let state = try #require(try store.state(of: notes))
            #expect(state.remote[recorded.item]?.revision != recorded.revision)
            try await store.record(notes, state: state, touched: [], changed: false, upsert: [recorded])
            let restarted = try await keyedDevice("phone", base: base, dir: dir, chunks: .sealing, greedy: false)
            let revision = try await laptop.client.items(container: notes, ids: [recorded.item]).first?.revision
            try await restarted.sync.syncOnce()
            let now = try #require(try await laptop.client.items(container: notes, ids: [recorded.item]).first)
            #expect(now.revision == revision && now.conflicts.isEmpty, "nothing sent: the file is the server's revision")
            #expect(try AgentStore(path: dir + "/phone.sqlite").files(of: notes)["Documents/Note.txt"]?.revision == revision)
        }
    }

    /// Found by `ubiquity-chaos --sealed-share` under the whole suite's load: a participant's
    /// write made as its access ended was deleted with the share's folder. The file's record
    /// named an older revision than the one the device knew (its download not recorded yet), so
    /// the look before the folder went had to ask the server whether the bytes were that
    /// revision's — and the server, which no longer let the account in, could not be asked: the
    /// file was left unsettled, not counted as a change, and the folder taken for having none.
    /// A file the look cannot settle counts as unsent.
    @Test func aFileTheLookCannotSettleCountsAsUnsent() async throws {
        try await withServer { base, dir in
            let laptop = try await keyedDevice("laptop", base: base, dir: dir, chunks: .plain)
            let phone = try await keyedDevice("phone", base: base, dir: dir, chunks: .plain)
            // The newer revision's download put in place and not recorded, then the person's
            // own words written over it; and the server out of reach.
            _ = try await downloadLeftUnrecorded("Note.txt", first: Data("the first note".utf8), second: Data("the laptop's second note".utf8),
                                                 laptop: laptop, phone: phone, dir: dir)
            try phone.write("Note.txt", Data("the phone's own words".utf8))
            let cutOff = try await keyedDevice("phone", base: URL(string: "http://127.0.0.1:1")!, dir: dir, chunks: .plain)
            #expect(await cutOff.sync.holdsUnsentChanges(), "the person's words would go with the folder")
        }
    }

    /// Found by `ubiquity-chaos` (CI's profile, seed 11, twice): a file whose bytes were still
    /// its item's revision as this device knew it, cut elsewhere (by a device that does not
    /// seal), looked changed — an app saved the same bytes again — after another device had
    /// moved the item. Taken for an edit made here, it went on its stale base, won as the newer
    /// change, and the move was undone on every device (and the mover's later edits with it).
    /// Bytes that are a known revision's are that revision, not an edit.
    @Test func unchangedBytesCutElsewhereAreNotAnEditOnAStaleBase() async throws {
        try await withServer { base, dir in
            let laptop = try await keyedDevice("laptop", base: base, dir: dir, chunks: .reading)
            let phone = try await keyedDevice("phone", base: base, dir: dir, chunks: .sealing)
            let words = Data("the laptop's note, cut in plaintext".utf8)
            let item = try await noteOnBoth(words, laptop: laptop, phone: phone)
            #expect(phone.read("Note.txt") == String(decoding: words, as: UTF8.self))

            // The laptop moves it; the phone has not heard when its app saves the same bytes.
            try FileManager.default.moveItem(at: laptop.documents.appendingPathComponent("Note.txt"), to: laptop.documents.appendingPathComponent("Moved.txt"))
            try await laptop.sync.syncOnce()
            let moved = try #require(try await laptop.client.items(container: notes, ids: [item]).first)
            #expect(moved.name == "Moved.txt")
            try await Task.sleep(for: .milliseconds(20)) // (a later modification time)
            try phone.write("Note.txt", words)
            // (Its push connection has just come up: it has said nothing of the move yet.)
            await phone.sync.notePushes(live: true)
            try await phone.sync.syncOnce()

            let now = try #require(try await laptop.client.items(container: notes, ids: [item]).first)
            #expect(now.revision == moved.revision && now.conflicts.isEmpty, "nothing sent: the phone's file was the revision it knew")
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            #expect(phone.read("Moved.txt") == String(decoding: words, as: UTF8.self) && !phone.exists("Note.txt"), "the move stands on the phone")
            #expect(laptop.exists("Moved.txt") && !laptop.exists("Note.txt"), "and on the laptop")

            // Bytes of the same size that are not the revision the phone knows are its edit,
            // sent though the laptop has moved the item again: kept, with the laptop's move.
            try FileManager.default.moveItem(at: laptop.documents.appendingPathComponent("Moved.txt"), to: laptop.documents.appendingPathComponent("Final.txt"))
            try await laptop.sync.syncOnce()
            let edit = Data(String(repeating: "e", count: words.count).utf8)
            try phone.write("Moved.txt", edit)
            try await phone.sync.syncOnce()
            try await phone.sync.syncOnce()
            let after = try #require(try await laptop.client.items(container: notes, ids: [item]).first)
            #expect(after.conflicts.count == 1, "the phone's edit and the laptop's move are both kept: \(after.conflicts.count) conflict versions")
            try await laptop.sync.syncOnce()
            let shown = ["Moved.txt", "Final.txt"].compactMap { laptop.read($0) }
            #expect(shown.contains(String(decoding: edit, as: UTF8.self)), "the phone's edit is the laptop's file: \(shown)")
        }
    }

    /// The same when the file is a download put in place and not recorded (the agent stopped
    /// between), and the server has moved on from that revision since: the bytes are the
    /// revision this device knew, checked against its list, and the move made since stands.
    @Test func aDownloadNotRecordedIsNotAnEditOnceTheServerMovedOn() async throws {
        try await withServer { base, dir in
            let laptop = try await keyedDevice("laptop", base: base, dir: dir, chunks: .reading)
            let phone = try await keyedDevice("phone", base: base, dir: dir, chunks: .sealing)
            // The second revision's download in place, its record not; and the laptop moves the
            // item meanwhile.
            let second = Data("the laptop's second note, longer".utf8)
            let recorded = try await downloadLeftUnrecorded("Note.txt", first: Data("the laptop's first note".utf8), second: second,
                                                            laptop: laptop, phone: phone, dir: dir)
            #expect(phone.read("Note.txt") == String(decoding: second, as: UTF8.self))
            try FileManager.default.moveItem(at: laptop.documents.appendingPathComponent("Note.txt"), to: laptop.documents.appendingPathComponent("Moved.txt"))
            try await laptop.sync.syncOnce()
            let moved = try #require(try await laptop.client.items(container: notes, ids: [recorded.item]).first)

            let restarted = try await keyedDevice("phone", base: base, dir: dir, chunks: .sealing)
            try await restarted.sync.syncOnce()
            let now = try #require(try await laptop.client.items(container: notes, ids: [recorded.item]).first)
            #expect(now.revision == moved.revision && now.conflicts.isEmpty, "nothing sent: the file was the revision the phone knew")
            try await restarted.sync.syncOnce()
            #expect(restarted.read("Moved.txt") == String(decoding: second, as: UTF8.self) && !restarted.exists("Note.txt"), "the move stands")
        }
    }

    /// And when the other device deleted the item: bytes that are still the revision this
    /// device knew do not bring it back (an edit made here would, and would be kept).
    @Test func unchangedBytesCutElsewhereDoNotUndoADelete() async throws {
        try await withServer { base, dir in
            let laptop = try await keyedDevice("laptop", base: base, dir: dir, chunks: .reading)
            let phone = try await keyedDevice("phone", base: base, dir: dir, chunks: .sealing)
            let words = Data("the laptop's note, deleted soon".utf8)
            let item = try await noteOnBoth(words, laptop: laptop, phone: phone)
            try FileManager.default.removeItem(at: laptop.documents.appendingPathComponent("Note.txt"))
            try await laptop.sync.syncOnce()
            try await Task.sleep(for: .milliseconds(20)) // (a later modification time)
            try phone.write("Note.txt", words)
            try await phone.sync.syncOnce()
            try await phone.sync.syncOnce()
            let now = try #require(try await laptop.client.items(container: notes, ids: [item]).first)
            #expect(now.deleted && now.conflicts.isEmpty, "the delete stands")
            #expect(!phone.exists("Note.txt"), "and the phone's copy of the deleted revision went")
        }
    }

    /// The laptop writes `first` at `name` and the phone brings it down, then `second`, brought
    /// down too — and the phone's store is put back to its record of `first`: the second's
    /// download in place, not recorded (the agent stopped between). Returns that record.
    func downloadLeftUnrecorded(_ name: String, first: Data, second: Data, laptop: Device, phone: Device, dir: String) async throws -> AgentStore.File {
        try laptop.write(name, first)
        try await laptop.sync.syncOnce()
        try await phone.sync.syncOnce()
        let recorded = try #require(try AgentStore(path: dir + "/phone.sqlite").files(of: notes)["Documents/" + name])
        try laptop.write(name, second)
        try await laptop.sync.syncOnce()
        try await phone.sync.syncOnce()
        let store = try AgentStore(path: dir + "/phone.sqlite")
        let state = try #require(try store.state(of: notes))
        try await store.record(notes, state: state, touched: [], changed: false, upsert: [recorded])
        return recorded
    }

    /// The laptop writes `words` as Note.txt and both devices sync; returns the item's id.
    func noteOnBoth(_ words: Data, laptop: Device, phone: Device) async throws -> String {
        try laptop.write("Note.txt", words)
        try await laptop.sync.syncOnce()
        try await phone.sync.syncOnce()
        return try #require(try await laptop.client.changes(container: notes, since: 0).items.first { $0.name == "Note.txt" }?.id)
    }
}
