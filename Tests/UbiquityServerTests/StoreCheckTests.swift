import Foundation
import Testing
import UbiquityProtocol
@testable import UbiquityServer

/// `ubiquity fsck` on a store damaged on purpose, every kind of damage at once: found, repaired,
/// clean afterwards, and the damaged item repaired by a new upload.
@Suite struct StoreCheckTests {
    @Test(arguments: Backend.all)
    func aDamagedStoreIsFoundAndRepaired(backend: Backend) async throws {
        let server = try await TestServer(backend); defer { server.remove() }
        let account = try await server.admin.createAccount(name: "ann", password: "correct horse")
        let contents = (0..<5).map { index in (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* (index + 3) &+ index) } }
        let (damaged, missing, unlisted, lost, orphan) = (contents[0], contents[1], contents[2], contents[3], contents[4])
        try await server.run { client in
            let laptop = try await client.signIn("ann")
            for (index, bytes) in [damaged, missing, unlisted, lost].enumerated() {
                #expect(try await client.upload(bytes, token: laptop.token).status == .created)
                #expect(try await client.commit(notes, "item\(index)", fileUpdate("Item \(index).txt", [bytes]), token: laptop.token).item.uploaded)
            }
        }
        // The damage: a flipped byte; bytes gone; a record gone (bytes still there); both gone;
        // bytes nothing records.
        try await server.damage(sha256(damaged), of: "ann")
        try await server.admin.storage.chunks.remove(hash: sha256(missing), account: account.id)
        try await server.unlist(sha256(unlisted), of: "ann")
        try await server.unlist(sha256(lost), of: "ann")
        try await server.admin.storage.chunks.remove(hash: sha256(lost), account: account.id)
        try await server.admin.storage.chunks.store([ChunkBatch.Chunk(hash: sha256(orphan), bytes: orphan)], account: account.id)

        let later = Date().addingTimeInterval(7_200) // the orphan is past its hour
        let found = try await server.admin.checkStore(repair: false, now: later)
        #expect(found.damaged.map(\.hash) == [sha256(damaged)])
        #expect(found.missing.map(\.hash) == [sha256(missing)])
        #expect(found.unreferenced.map(\.hash) == [sha256(orphan)])
        #expect(Set(found.unlisted.map(\.hash)) == [sha256(unlisted), sha256(lost)])
        #expect(found.chunksChecked == 1 && !found.isClean && !found.repaired)
        // Reporting changed nothing.
        #expect(try await server.admin.checkStore(repair: false, now: later).damaged.count == 1)

        let repaired = try await server.admin.checkStore(repair: true, now: later)
        #expect(repaired.repaired && repaired.damaged.count == 1 && repaired.unlisted.count == 2)
        let after = try await server.admin.checkStore(repair: false, now: later)
        #expect(after.isClean, "\(after)")
        #expect(after.chunksChecked == 1) // the re-recorded one; the others are gone

        try await server.run { client in
            let laptop = try await client.signIn("ann", device: "phone")
            let uploaded = Dictionary(uniqueKeysWithValues: try await client.changes(notes, token: laptop.token).items.map { ($0.name, $0.uploaded) })
            #expect(uploaded == ["Item 0.txt": false, "Item 1.txt": false, "Item 2.txt": true, "Item 3.txt": false])
            // A device sends the damaged one again: the item is whole.
            #expect(try await client.upload(damaged, token: laptop.token).status == .created)
            let again = try await client.changes(notes, token: laptop.token).items.first { $0.name == "Item 0.txt" }
            #expect(again?.uploaded == true)
        }
        let kept = server.admin.storage.chunks is FileChunkStore
            ? try FileManager.default.contentsOfDirectory(atPath: server.directory + "/chunks/quarantine") : []
        #expect(backend == .postgres || kept.count == 1)
    }
}
