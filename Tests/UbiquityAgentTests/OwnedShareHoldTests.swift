import Foundation
import Testing
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityAgent

/// What an owner's device sends into a sealed share it owns goes sealed with the share's keys
/// and cut by its chunker — never with the container's, which the share's other members do not
/// hold: an edit made while the share's keys are not on the device (just after a start, the
/// server not answering yet) is neither cut nor sent until they are, even on an engine started
/// again (found by `ubiquity-chaos --sealed-share`).
extension ContainerSyncTests {
    @Test func anEditInASealedShareWaitsForItsKeysAndGoesSealedWithThem() async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            try laptop.write("Trip/plan.txt", Data("dig, sow, water".utf8))
            try await laptop.sync.syncOnce()
            let trip = try #require(await laptop.sync.item(at: "Documents/Trip"))
            let key = ShareKey(share: "s1", epoch: 1)
            var shareCodec = try #require(ChunkCodec.shared([key]))
            shareCodec.records = ItemRecords.shared(container: notes, keys: [key])
            let shareRecords = try #require(shareCodec.records)

            // The server said the folder is a sealed share; its keys are not here (yet).
            await laptop.sync.setOwnedShareCodecs([:], sealedRoots: [trip])
            try laptop.write("Trip/new.txt", Data("bring boots".utf8))
            try await laptop.sync.syncOnce()
            var waiting = await laptop.sync.errors.values.joined(separator: "; ")
            #expect(waiting.contains("sealed share whose keys are not on this device"), "\(waiting)")
            func sent() async throws -> [ItemState] {
                try await laptop.client.changes(container: notes, since: 0).items.filter { (try? shareRecords.opened($0))?.name == "new.txt" }
            }
            func itemsOnServer() async throws -> Int { try await laptop.client.changes(container: notes, since: 0).items.count }
            #expect(try await itemsOnServer() == 2, "nothing of it went, sealed otherwise or in plaintext")

            // Started again (the server not asked yet): it still waits.
            let restarted = try await sealingDevice("laptop", base: base, dir: dir)
            try await restarted.sync.syncOnce()
            waiting = await restarted.sync.errors.values.joined(separator: "; ")
            #expect(waiting.contains("sealed share whose keys are not on this device"), "\(waiting)")
            #expect(try await itemsOnServer() == 2)

            // The keys come: it goes, its record sealed with the share's key and its contents cut
            // by the share's chunker (never by the container's: it was not cut before).
            #expect(await restarted.sync.setOwnedShareCodecs([trip: shareCodec], sealedRoots: [trip]))
            try await restarted.sync.syncOnce()
            for _ in 0..<3 where !(await restarted.sync.isIdle) { try await restarted.sync.syncOnce() }
            let left = await restarted.sync.errors
            #expect(left.isEmpty, "\(left)")
            let went = try #require(try await sent().first)
            let opened = try shareRecords.opened(went)
            #expect(opened.name == "new.txt")
            let cut = shareCodec.chunks(of: Data("bring boots".utf8)).map(\.hash)
            #expect(opened.manifest.allChunks.map(\.hash) == cut, "cut by the share's chunker: \(opened.manifest.allChunks) \(cut)")
        }
    }
}
