import Foundation
import Testing
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityServer

/// A large folder's page under Standard opens every sealed record once and keeps what it read
/// (issue 45: a 10,000-item folder's first page within 100 ms): what is kept is found only by
/// the whole record and everything it is bound to, so a record the database moved, or shows
/// beside another name's tag, is opened and refused again, and nothing is read without keys.
@Suite struct OpenedRecordCacheTests {
    static let container = "ABCDE12345.com.example.notes"
    let root = AccountRootKey(epoch: 0)
    var records: ItemRecords { ItemRecords.keyed(container: Self.container, rootKeys: [root], sealing: true)! }

    /// A folder's entry as the database lists it: the tag, the sealed record, sealed sizes.
    func entry(_ id: String, named name: String, in folder: String = "folder1", size: Int64 = 10) throws -> FolderEntry {
        let manifest = size == 0 ? Manifest(chunks: []) : Manifest(chunks: [ChunkReference(hash: String(repeating: "a", count: 64), size: size)])
        let update = ItemUpdate(baseRevision: nil, name: name, parent: folder, kind: .file, modificationDate: 1_800_000_000, manifest: manifest)
        let wire = try records.sealed(update, item: id, manifest: manifest)
        return FolderEntry(id: id, name: wire.name, kind: .file, size: 300, modificationDate: 0, deviceName: "laptop", uploaded: true, conflicts: 0,
                           record: wire.record)
    }

    func web(_ records: ItemRecords?, _ cache: OpenedRecordCache) -> WebRecords {
        WebRecords(records: records, account: 1, container: Self.container, cache: cache)
    }

    @Test func aFolderIsOpenedOnceAndReadFromWhatWasKeptAfter() async throws {
        let cache = OpenedRecordCache()
        let entries = try [entry("i1", named: "Beta.txt", size: 5), entry("i2", named: "alpha.txt", size: 7)]
        let opened = try await web(records, cache).open(entries, in: "folder1")
        #expect(opened.map(\.name) == ["Beta.txt", "alpha.txt"] && opened.map(\.size) == [5, 7] && opened.allSatisfy { $0.record == nil })
        #expect(opened.allSatisfy { $0.modificationDate == 1_800_000_000 })
        #expect(cache.count == 2)
        // Kept: read again without opening (a key that opens nothing still lists them).
        let stranger = ItemRecords.keyed(container: Self.container, rootKeys: [AccountRootKey(epoch: 0)], sealing: true)!
        #expect(try await web(stranger, cache).open(entries, in: "folder1").map(\.name) == ["Beta.txt", "alpha.txt"])
    }

    @Test func aRecordMovedOrShownBesideAnotherTagIsOpenedAgainAndRefused() async throws {
        let cache = OpenedRecordCache()
        let beta = try entry("i1", named: "Beta.txt"), alpha = try entry("i2", named: "alpha.txt")
        _ = try await web(records, cache).open([beta, alpha], in: "folder1")

        // The database moves Beta's record to another item, or to another folder.
        var moved = beta
        moved.id = "i3"
        await #expect(throws: SyncError.self) { try await web(records, cache).open([moved], in: "folder1") }
        await #expect(throws: SyncError.self) { try await web(records, cache).open([beta], in: "folder2") }
        // …or shows it beside alpha's tag (the page would list the wrong name for it).
        var swapped = beta
        swapped.name = alpha.name
        await #expect(throws: SyncError.self) { try await web(records, cache).open([swapped], in: "folder1") }
        // The record itself changed.
        var changed = beta
        var bytes = try #require(beta.record)
        bytes[bytes.count - 1] ^= 1
        changed.record = bytes
        await #expect(throws: SyncError.self) { try await web(records, cache).open([changed], in: "folder1") }
        #expect(cache.count == 2, "nothing refused is kept")
    }

    @Test func withoutKeysNothingIsReadEvenWhatWasKept() async throws {
        let cache = OpenedRecordCache()
        let entries = try [entry("i1", named: "Beta.txt")]
        _ = try await web(records, cache).open(entries, in: "folder1")
        // Under Advanced the server holds no key: the page says so, whatever it read before.
        await #expect { try await web(nil, cache).open(entries, in: "folder1") } throws: { error in
            (error as? SyncError)?.code == "sealedOnDevices"
        }
    }

    @Test func aLargeFolderIsOpenedOnEveryCoreEachEntryItsOwnName() async throws {
        let cache = OpenedRecordCache()
        let entries = try (0..<1_100).map { try entry("item-\($0)", named: "Photo \($0).jpg", size: Int64($0 + 1)) }
        let opened = try await web(records, cache).open(entries, in: "folder1")
        #expect(opened.map(\.id) == entries.map(\.id))
        #expect(opened.enumerated().allSatisfy { index, entry in entry.name == "Photo \(index).jpg" && entry.size == Int64(index + 1) })
        #expect(cache.count == 1_100)
    }

    @Test func theCacheIsBounded() async throws {
        let cache = OpenedRecordCache(capacity: 3)
        let entries = try (0..<5).map { try entry("item-\($0)", named: "n\($0)") }
        _ = try await web(records, cache).open(entries, in: "folder1")
        #expect(cache.count == 3)
        // The oldest went first: the newest are still read without a key that opens them.
        let stranger = ItemRecords.keyed(container: Self.container, rootKeys: [AccountRootKey(epoch: 0)], sealing: true)!
        #expect(try await web(stranger, cache).open(Array(entries.suffix(3)), in: "folder1").map(\.name) == ["n2", "n3", "n4"])
        await #expect(throws: SyncError.self) { try await web(stranger, cache).open([entries[0]], in: "folder1") }
    }
}
