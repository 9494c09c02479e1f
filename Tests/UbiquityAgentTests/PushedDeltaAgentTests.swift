import Foundation
import Testing
import UbiquityClient
import UbiquityProtocol
import UbiquitySync
import UbiquityTestSupport
@testable import UbiquityAgent

/// A small edit of a large file whose chunk-list difference came with its push: the device
/// rebuilds the list from its own copy's and asks only for what changed (one request, where it
/// asked for the difference first); a difference that does not make the contents the page
/// names is not believed (the device asks for the list, and the file arrives right).
extension ContainerSyncTests {
    @Test func aDifferenceThatCameWithItsPushSavesARequest() async throws {
        try await withServer { base, dir in
            let (laptop, phone) = try await greedyPairWithPushes(base: base, dir: dir)
            func requests() -> Int { phone.client.traffic.snapshot.requests }
            var bytes = randomBytes(3 << 20)
            try laptop.write("Film.mov", bytes)
            try await laptop.sync.syncOnce()
            await phone.sync.noteRemoteChange(upTo: await laptop.sync.cursor)
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Film.mov")) == bytes)
            let item = try #require(try await phone.client.changes(container: notes, since: 0).items.first { $0.name == "Film.mov" })

            /// Edits a byte, and pushes the phone the page of it: with the server's difference from
            /// the phone's revision (`pushed`), a made-up one (`lying`), or none.
            func edit(at place: Int, pushing difference: (ItemState) -> ChunkListDelta?) async throws -> Int {
                let revision = try await phone.client.item(container: notes, id: item.id).revision
                bytes[place] ^= 0x5a
                try laptop.write("Film.mov", bytes)
                try await laptop.sync.syncOnce()
                let since = await phone.sync.cursor
                var page = try await phone.client.changes(container: notes, since: since, brief: true, inline: ItemUpdate.maximumInlineBytes)
                let told = try await phone.client.item(container: notes, id: item.id, since: revision)
                if let index = page.items.firstIndex(where: { $0.id == item.id }), let delta = difference(told) {
                    page.items[index].manifestDelta = delta
                    page.items[index].deltaBase = revision
                }
                let before = requests()
                await phone.sync.noteRemoteChange(upTo: page.sequence)
                await phone.sync.notePushedPage(page, since: since)
                try await phone.sync.syncOnce()
                #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Film.mov")) == bytes)
                return requests() - before
            }
            let asked = try await edit(at: 1 << 20) { _ in nil }
            let pushed = try await edit(at: 2 << 20) { $0.manifestDelta }
            #expect(pushed == asked - 1, "the difference pushed along saves asking for it: \(pushed) requests, \(asked) without")
            let lying = try await edit(at: 1 << 19) { _ in ChunkListDelta(operations: [.copy(from: 0, count: 2)]) }
            #expect(lying == asked, "a difference that does not make the page's contents is not believed: \(lying) requests")
        }
    }
}

/// A small edit of a large file goes up in two requests: the old chunk's block signatures, and
/// the commit carrying the patch (it used to be three: the patch went on its own first).
extension ContainerSyncTests {
    @Test func aSmallEditGoesUpWithItsPatchInItsCommit() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            var bytes = randomBytes(3 << 20)
            try laptop.write("Film.mov", bytes)
            try await laptop.sync.syncOnce()
            bytes[1 << 20] ^= 0x5a
            try laptop.write("Film.mov", bytes)
            let before = laptop.client.traffic.snapshot
            try await laptop.sync.syncOnce()
            let after = laptop.client.traffic.snapshot
            #expect(after.requests - before.requests == 2, "signatures, then the commit with the patch: \(after.requests - before.requests) requests")
            #expect(after.sent - before.sent < 8 << 10, "a patch, not the chunk: \(after.sent - before.sent) bytes sent")
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Film.mov")) == bytes)

            // Edited again at the same place: the signature of the chunk it made is known here.
            bytes[(1 << 20) + 1] ^= 0x5a
            try laptop.write("Film.mov", bytes)
            let again = laptop.client.traffic.snapshot.requests
            try await laptop.sync.syncOnce()
            #expect(laptop.client.traffic.snapshot.requests - again == 1, "the commit with the patch alone")
            // And the phone, which made that chunk from a patch, edits it back the same way.
            bytes[(1 << 20) + 2] ^= 0x5a
            try await phone.sync.syncOnce()
            try phone.write("Film.mov", bytes)
            let phoneBefore = phone.client.traffic.snapshot
            try await phone.sync.syncOnce()
            let phoneAfter = phone.client.traffic.snapshot
            #expect(phoneAfter.requests - phoneBefore.requests == 1 && phoneAfter.sent - phoneBefore.sent < 8 << 10,
                    "\(phoneAfter.requests - phoneBefore.requests) requests, \(phoneAfter.sent - phoneBefore.sent) bytes")
            try await laptop.sync.syncOnce()
            #expect(try Data(contentsOf: laptop.documents.appendingPathComponent("Film.mov")) == bytes)
        }
    }
}
