import Foundation
import Testing
import UbiquityKeys
import UbiquityProtocol
@testable import UbiquitySync

/// Sealed item records at the client's edge (issue 45): what the server is sent says nothing a
/// record holds, and what comes back opens to what the device made — or is refused when the
/// server moved, swapped or changed anything the record is bound to.
@Suite struct ItemRecordsTests {
    static let container = "ABCDE12345.com.example.notes"
    let root = AccountRootKey(epoch: 0)
    var records: ItemRecords { ItemRecords.keyed(container: Self.container, rootKeys: [root], sealing: true)! }

    func hash(_ n: Int) -> String { String(format: "%064x", n) }

    /// What the server answers for a commit it stored as sent (its date its own).
    func stored(_ update: ItemUpdate, item: String, revision: String = "r1") -> ItemState {
        let chunks = update.manifest.allChunks
        var state = ItemState(id: item, revision: revision, name: update.name, parent: update.parent, kind: update.kind, size: chunks.reduce(0) { $0 + $1.size },
                              modificationDate: 1_900_000_000, type: update.type, deleted: update.deleted ?? false, uploaded: true, deviceName: "laptop",
                              sequence: 7, manifest: update.manifest, conflicts: [])
        state.record = update.record
        return state
    }

    @Test func aFileAPackageAndAFolderGoAsTagsAndSealedSizesAndOpenAsTheyWereMade() throws {
        let file = Manifest(chunks: [ChunkReference(hash: hash(1), size: 70_000), ChunkReference(hash: hash(2), size: 1_234)])
        let package = Manifest(members: [ManifestMember(path: "Contents/Index.json", chunks: [ChunkReference(hash: hash(3), size: 99)]),
                                         ManifestMember(path: "Empty/", chunks: []),
                                         ManifestMember(path: "Data/Secret plans.txt", chunks: [ChunkReference(hash: hash(4), size: 5), ChunkReference(hash: hash(5), size: 6)])])
        for (kind, manifest, name) in [(ItemKind.file, file, "Trip to Café.txt"), (.package, package, "Budget.numbers"), (.directory, Manifest(), "Holidays")] {
            let update = ItemUpdate(baseRevision: nil, name: name, parent: "folder1", kind: kind, modificationDate: 1_800_000_123.5, type: "public.plain-text", manifest: manifest)
            let wire = try records.sealed(update, item: "item1", manifest: manifest)
            #expect(wire.name.count == 32 && wire.name.allSatisfy(\.isHexDigit) && wire.name == records.tag(name, parent: "folder1"))
            #expect(wire.type == nil && wire.modificationDate == 0 && wire.parent == "folder1" && wire.kind == kind)
            let encoded = String(decoding: try JSONEncoder().encode(wire), as: UTF8.self)
            for secret in [name, "Secret plans", "Contents", "public.plain-text", "70000", "1234"] {
                #expect(!encoded.contains(secret), "\(kind): \(secret) travels in the clear")
            }
            #expect(wire.manifest.allChunks.map(\.hash) == manifest.allChunks.map(\.hash))
            #expect(wire.manifest.allChunks.map(\.size) == manifest.allChunks.map { Int64(ChunkKeys.sealedSize(ofPlaintext: Int($0.size))) })
            #expect((wire.manifest.members ?? []).map(\.path) == (kind == .package ? ["0", "1/", "2"] : []))

            let opened = try records.opened(stored(wire, item: "item1"))
            #expect(opened.name == name && opened.type == "public.plain-text" && opened.modificationDate == 1_800_000_123.5)
            #expect(opened.manifest == (kind == .directory ? Manifest() : manifest) && opened.size == manifest.allChunks.reduce(0) { $0 + $1.size })
            #expect(opened.record == nil)
            // Bytes inline beside a sealed record (a server inlining sealed chunks) are never taken.
            var inlined = stored(wire, item: "item1")
            inlined.contents = Data("sealed bytes".utf8)
            #expect(try records.opened(inlined).contents == nil)
            // A brief answer (no manifest): the record's content token stands for it.
            var brief = stored(wire, item: "item1")
            brief.manifest = Manifest()
            brief.digest = ContentToken.of(wire.manifest, kind: kind).description
            #expect(try records.opened(brief).digest == ContentToken.of(manifest, kind: kind).description)
        }
    }

    @Test func aRecordMovedSwappedOrBesideAnotherChunkListIsRefused() throws {
        let manifest = Manifest(chunks: [ChunkReference(hash: hash(1), size: 500), ChunkReference(hash: hash(2), size: 600)])
        let update = ItemUpdate(baseRevision: nil, name: "Diary.txt", parent: "f", kind: .file, modificationDate: 1_800_000_000, manifest: manifest)
        let wire = try records.sealed(update, item: "a", manifest: manifest)
        let other = try records.sealed(ItemUpdate(baseRevision: nil, name: "Other.txt", parent: "f", kind: .file, modificationDate: 1, manifest: manifest),
                                       item: "b", manifest: manifest)
        func refused(_ state: ItemState, _ why: String) {
            #expect(throws: ItemRecordError.self, "\(why)") { try records.opened(state) }
        }
        var moved = stored(wire, item: "b")
        moved.name = wire.name
        refused(moved, "a record moved to another item")
        var otherFolder = stored(wire, item: "a")
        otherFolder.parent = "g"
        refused(otherFolder, "a record moved to another folder")
        var swapped = stored(wire, item: "a")
        swapped.record = other.record
        refused(swapped, "another item's record (its tag shown)")
        var renamed = stored(wire, item: "a")
        renamed.name = other.name
        refused(renamed, "another name's tag shown beside the record")
        var otherChunks = stored(wire, item: "a")
        otherChunks.manifest = Manifest(chunks: [ChunkReference(hash: hash(9), size: 633), wire.manifest.chunks![1]])
        refused(otherChunks, "another chunk list beside the record")
        var fewer = stored(wire, item: "a")
        fewer.manifest = Manifest(chunks: [wire.manifest.chunks![0]])
        refused(fewer, "a chunk list cut short")
        var flipped = stored(wire, item: "a")
        var bytes = [UInt8](wire.record!)
        bytes[bytes.count / 2] ^= 1
        flipped.record = Data(bytes)
        refused(flipped, "a changed record")
        let stranger = ItemRecords.keyed(container: Self.container, rootKeys: [AccountRootKey(epoch: 0)], sealing: true)!
        #expect(throws: ItemRecordError.self) { try stranger.opened(stored(wire, item: "a")) }
        let elsewhere = ItemRecords.keyed(container: "ABCDE12345.com.example.other", rootKeys: [root], sealing: true)!
        #expect(throws: ItemRecordError.self) { try elsewhere.opened(stored(wire, item: "a")) }
        // The truth opens.
        #expect(try records.opened(stored(wire, item: "a")).name == "Diary.txt")
    }

    @Test func conflictVersionsAndEarlierRevisionsOpenWithTheirOwnFolder() throws {
        let first = Manifest(chunks: [ChunkReference(hash: hash(1), size: 10)]), second = Manifest(chunks: [ChunkReference(hash: hash(2), size: 20)])
        let old = try records.sealed(ItemUpdate(baseRevision: nil, name: "Notes.txt", parent: "old", kind: .file, modificationDate: 100, manifest: first), item: "n", manifest: first)
        let new = try records.sealed(ItemUpdate(baseRevision: "r1", name: "Renamed.txt", parent: "new", kind: .file, modificationDate: 200, manifest: second), item: "n", manifest: second)
        var state = stored(new, item: "n", revision: "r2")
        var version = ConflictVersion(revision: "r1", deviceName: "phone", modificationDate: 5, size: 43, uploaded: true, manifest: old.manifest)
        version.record = old.record
        version.parent = "old"
        state.conflicts = [version]
        let opened = try records.opened(state)
        #expect(opened.name == "Renamed.txt" && opened.conflicts.first?.modificationDate == 100 && opened.conflicts.first?.size == 10)
        #expect(opened.conflicts.first?.manifest == first)
        state.conflicts[0].parent = nil // the server leaves its folder out: the current one's is not the one it is bound to
        #expect(throws: ItemRecordError.self) { try records.opened(state) }

        var revision = ItemRevision(revision: "r1", name: old.name, kind: .file, deviceName: "phone", size: 43, modificationDate: 5, created: 6, uploaded: true)
        revision.record = old.record
        revision.parent = "old"
        #expect(try records.opened(revision, item: "n").name == "Notes.txt")
        var contents = RevisionContentsResponse(revision: "r1", name: old.name, deviceName: "phone", size: 43, modificationDate: 5, kind: .file, manifest: old.manifest, uploaded: true)
        contents.record = old.record
        contents.parent = "old"
        #expect(try records.opened(contents, item: "n").manifest == first)
        #expect(throws: ItemRecordError.self) { try records.opened(contents, item: "m") }
    }

    /// Once the account's devices require everything sealed, a state, a conflict version or a
    /// revision served in plaintext is a downgrade — the server naming an item, or putting in
    /// one of its own — and refused; a deletion needs no record. Before, each is taken as it is
    /// (what the account stored before it had keys).
    @Test func plaintextServedOnceEverythingIsSealedIsRefusedAsADowngrade() throws {
        let manifest = Manifest(chunks: [ChunkReference(hash: hash(1), size: 10)])
        let sealed = try records.sealed(ItemUpdate(baseRevision: nil, name: "Notes.txt", parent: nil, kind: .file, modificationDate: 100, manifest: manifest),
                                        item: "n", manifest: manifest)
        var strict = records
        strict.sealedOnly = true
        let injected = stored(ItemUpdate(baseRevision: nil, name: "Injected", parent: nil, kind: .directory, modificationDate: 1, manifest: Manifest()), item: "x")
        var renamed = stored(sealed, item: "n")
        (renamed.record, renamed.name) = (nil, "Renamed by the server.txt")
        var version = ConflictVersion(revision: "r0", deviceName: "phone", modificationDate: 5, size: 10, uploaded: true, manifest: manifest)
        var withPlainVersion = stored(sealed, item: "n")
        withPlainVersion.conflicts = [version]
        let revision = ItemRevision(revision: "r0", name: "Old name.txt", kind: .file, deviceName: "phone", size: 10, modificationDate: 5, created: 6, uploaded: true)
        for state in [injected, renamed, withPlainVersion] {
            #expect(throws: ItemRecordError.self) { try strict.opened(state) }
            #expect(try records.opened(state).id == state.id, "taken before the account requires everything sealed")
        }
        #expect(throws: ItemRecordError.self) { try strict.opened(revision, item: "n") }
        #expect(try records.opened(revision, item: "n").name == "Old name.txt")
        // A deletion, and the sealed truth, are taken.
        var deleted = injected
        deleted.deleted = true
        #expect(try strict.opened(deleted).deleted)
        version.record = sealed.record
        withPlainVersion.conflicts = [version]
        #expect(try strict.opened(stored(sealed, item: "n")).name == "Notes.txt")
        #expect(try strict.opened(withPlainVersion).conflicts.count == 1)
    }

    @Test func aDeltaTravelsAtSealedSizesAndComesBackAtPlaintextOnes() throws {
        let old = (0..<6).map { ChunkReference(hash: hash($0), size: Int64(1_000 + $0)) }
        var new = old
        new[3] = ChunkReference(hash: hash(99), size: 4_321)
        let manifest = Manifest(chunks: new)
        var update = ItemUpdate(baseRevision: "r1", name: "Big.bin", kind: .file, modificationDate: 1, manifest: Manifest())
        update.manifestDelta = ChunkListDelta(from: old, to: new)
        let wire = try records.sealed(update, item: "big", manifest: manifest)
        #expect(wire.manifestDelta?.added.map(\.length) == [ChunkKeys.sealedSize(ofPlaintext: 4_321)] && wire.manifest == Manifest())
        var state = stored(wire, item: "big")
        state.manifest = Manifest()
        state.manifestDelta = wire.manifestDelta
        state.deltaBase = "r1"
        let opened = try records.opened(state)
        #expect(try opened.manifestDelta?.apply(to: old) == new)
        // The token the record names checks the list the device rebuilds from its own base.
        #expect(ContentToken.of(try opened.manifestDelta!.apply(to: old)) == ContentToken(try #require(try records.opened({ var brief = state; brief.digest = "x"; return brief }()).digest)))
    }

    @Test func namesClashAsTheServersRuleSaysAndTagsOutliveEpochs() throws {
        #expect(records.tag("Trip.TXT", parent: "f") == records.tag("trip.txt", parent: "f"))
        #expect(records.tag("Caf\u{E9}", parent: "f") == records.tag("Cafe\u{301}", parent: "f"))
        #expect(records.tag("Trip.txt", parent: "f") != records.tag("Trip.txt", parent: "g"))
        let later = ItemRecords.keyed(container: Self.container, rootKeys: [root, AccountRootKey(epoch: 1)], sealing: true)!
        #expect(later.tag("Trip.txt", parent: "f") == records.tag("Trip.txt", parent: "f"), "a new epoch renames nothing")
        // Sealed in the new epoch, opened by a holder of both; not by one of the first only.
        let manifest = Manifest(chunks: [ChunkReference(hash: hash(1), size: 10)])
        let wire = try later.sealed(ItemUpdate(baseRevision: nil, name: "Trip.txt", parent: "f", kind: .file, modificationDate: 1, manifest: manifest), item: "t", manifest: manifest)
        #expect(try later.opened(stored(wire, item: "t")).name == "Trip.txt")
        #expect(throws: ItemRecordError.self) { try records.opened(stored(wire, item: "t")) }
        // A device that only opens cannot seal.
        let reader = ItemRecords.keyed(container: Self.container, rootKeys: [root], sealing: false)!
        #expect(!reader.seals)
        #expect(throws: ItemRecordError.self) { try reader.sealed(ItemUpdate(baseRevision: nil, name: "x", kind: .directory, modificationDate: 1, manifest: Manifest()), item: "x", manifest: Manifest()) }
    }

    /// A listing reads name, size and date straight from a record's JSON when it is as this
    /// build writes it, and otherwise through the full decoder: either way what the full
    /// decoder reads, and the same refusals.
    @Test func aListingReadsWhatTheRecordSaysWhateverTheName() throws {
        let names = ["Trip.txt", "Caf\u{E9} cr\u{E8}me.txt", "\u{65E5}\u{672C}\u{8A9E}", "party \u{1F389}.png", "quote\"d", "back\\slash",
                     "tab\tname", "line\nbreak", "slash/ and : colon", " spaced ", String(repeating: "x", count: 255), "e\u{301}"]
        let members = Manifest(members: [ManifestMember(path: "Data/\"quoted\" [1].json", chunks: [ChunkReference(hash: hash(7), size: 12)]),
                                         ManifestMember(path: "Empty/", chunks: [])])
        for name in names {
            for (kind, manifest) in [(ItemKind.file, Manifest(chunks: [ChunkReference(hash: hash(1), size: 70_000)])), (.package, members), (.directory, Manifest())] {
                let update = ItemUpdate(baseRevision: nil, name: name, parent: "f", kind: kind, modificationDate: 1_800_000_123.25, type: kind == .file ? "public.data" : nil,
                                        manifest: manifest)
                let wire = try records.sealed(update, item: "i", manifest: manifest)
                let whole = try records.opened(stored(wire, item: "i"))
                let listed = try records.listed(try #require(wire.record), item: "i", parent: "f", shown: wire.name)
                #expect(listed.name == whole.name && listed.size == whole.size && listed.date == whole.modificationDate, "\(kind) \(name)")
                #expect(listed.name == name && listed.date == 1_800_000_123.25)
                // Moved or shown beside another name's tag: refused, as by the full decoder.
                #expect(throws: ItemRecordError.self) { try records.listed(try #require(wire.record), item: "other", parent: "f", shown: wire.name) }
                #expect(throws: ItemRecordError.self) { try records.listed(try #require(wire.record), item: "i", parent: "f", shown: records.tag("else", parent: "f")) }
            }
        }
        // The shortcut takes what this build writes and leaves the rest to the full decoder.
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        func json(_ name: String) throws -> Data {
            try encoder.encode(ItemRecord(format: 1, name: name, type: "public.data", date: 12.5, size: 42, contents: "token", sizes: Data([1, 2]),
                                          members: [ItemRecord.Member(path: "a/b", chunks: 2)]))
        }
        let plain = try #require(ItemRecord.listing(try json("Caf\u{E9}.txt")), "member paths and sizes escape their slashes: skipped")
        #expect(plain.format == 1 && plain.name == "Caf\u{E9}.txt" && plain.size == 42 && plain.date == 12.5)
        #expect(ItemRecord.listing(try json("a/b"))?.name == "a/b", "a slash in the name, escaped by the encoder")
        #expect(ItemRecord.listing(try json("quote\"d")) == nil, "an escaped name goes to the full decoder")
        for odd in [#"{}"#, #"{"n":"a"}"#, #"{"d":1,"n":"a","s":2,"v":1} "#, #" {"d":1,"n":"a","s":2,"v":1}"#, #"{"d":1,"n":"a","s":2.5,"v":1}"#,
                    #"{"d":1,"n":"a","s":2,"v":1,"x":true}"#, #"[1]"#, #"{"d":1,"n":"a","s":2,"v":"1"}"#, #"{"dd":1,"n":"a","s":2,"v":1}"#] {
            #expect(ItemRecord.listing(Data(odd.utf8)) == nil, "\(odd)")
        }
        #expect(ItemRecord.listing(Data(#"{"d":1,"n":""#.utf8) + Data([0xC3, 0x28]) + Data(#"","s":2,"v":1}"#.utf8)) == nil, "not UTF-8")
        #expect(ItemRecord.listing(Data(#"{"d":1,"n":"a","s":2,"v":1}"#.utf8))?.name == "a")
    }
}
