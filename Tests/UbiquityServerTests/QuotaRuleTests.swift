import Foundation
import Testing
import UbiquityProtocol
@testable import UbiquityServer

/// The quota holds what an account can make the server keep, however it goes about it: a
/// commit names only chunks the account holds (stored, so counted: once each), declared sizes
/// must be the chunks' own, every revision kept costs its record, and an account holds a
/// bounded number of items. Each attack tried on loopback against both databases.
@Suite struct QuotaRuleTests {
    /// `count` chunks of `size` bytes no other test uses.
    static func chunks(_ count: Int, size: Int) -> [[UInt8]] {
        (0..<count).map { _ in (0..<size).map { _ in UInt8.random(in: 0...255) } }
    }

    @Test(arguments: Backend.all) func commitsNameOnlyChunksTheAccountHoldsAndTheQuotaHoldsThose(backend: Backend) async throws {
        let server = try await TestServer(backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ada", password: "correct horse", quotaBytes: 15_000)
        let chunks = Self.chunks(4, size: 6_000)
        try await server.run { client in
            let ada = try await client.signIn("ada")
            // 24 KB declared, nothing uploaded, again and again: refused, naming what the account
            // does not hold; nothing is kept or counted.
            for attempt in 0..<50 {
                let greedy = try await client.put(notes, "greedy-\(attempt)", fileUpdate("Greedy \(attempt).bin", chunks), token: ada.token)
                #expect(greedy.status == .conflict && greedy.errorCode == "missingChunks")
                #expect(try greedy.decode(ErrorResponse.self).error.missingChunks == chunks.map { sha256($0) }.sorted())
            }
            #expect(try await client.changes(notes, token: ada.token).items.isEmpty, "nothing of it was kept")
            var usage = try await client.usage(token: ada.token)
            #expect(usage.used == 0 && usage.parts.items == 0 && usage.parts.pendingBytes == 0)

            // One chunk uploaded, then named by two items: stored and counted once.
            _ = try await client.commit(notes, "one", fileUpdate("One.bin", [chunks[0]]), token: ada.token)
            _ = try await client.commit(notes, "same", fileUpdate("Same.bin", [chunks[0]]), token: ada.token)
            usage = try await client.usage(token: ada.token)
            #expect(usage.parts.chunkBytes == 6_000 && usage.parts.pendingBytes == 0 && usage.parts.items == 2)
            #expect(usage.used == 6_000 + usage.parts.metadataBytes && usage.parts.metadataBytes > 2 * RevisionCost.record)
            #expect(try await client.changes(notes, token: ada.token).items.allSatisfy(\.uploaded))

            // Uploads past the quota are refused; so is a commit naming what they would have stored.
            #expect(try await client.upload(chunks[1], token: ada.token).status == .created)
            #expect(try await client.upload(chunks[2], token: ada.token).status.code == 507)
            let over = try await client.put(notes, "over", fileUpdate("Over.bin", [chunks[1], chunks[2]]), token: ada.token)
            #expect(over.status == .conflict && (try? over.decode(ErrorResponse.self).error.missingChunks) == [sha256(chunks[2])])

            // Over the quota (the operator lowered it), contents and renames are refused, but a
            // delete goes: it is how room is made.
            #expect(try await server.admin.setQuota(ofAccount: "ada", bytes: 1_000))
            let one = try #require(try await client.changes(notes, token: ada.token).items.first { $0.id == "one" })
            let renamed = try await client.put(notes, "one", fileUpdate("Renamed.bin", [chunks[0]], base: one.revision, date: 1_800_000_100), token: ada.token)
            #expect(renamed.status.code == 507 && renamed.errorCode == "quotaExceeded")
            let deleted = try await client.put(notes, "one", fileUpdate("One.bin", [], base: one.revision, date: 1_800_000_200, deleted: true), token: ada.token)
            #expect(deleted.status == .ok, "\(String(buffer: deleted.body))")
        }
    }

    @Test(arguments: Backend.all) func declaredSizesMustBeTheChunksOwn(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        let chunks = Self.chunks(3, size: 100)
        @Sendable func update(_ name: String, _ declared: [(bytes: [UInt8], size: Int64)]) -> ItemUpdate {
            var update = fileUpdate(name, [])
            update.manifest = Manifest(chunks: declared.map { ChunkReference(hash: sha256($0.bytes), size: $0.size) })
            return update
        }
        try await server.run { client in
            let ada = try await client.signIn("ada")
            #expect(try await client.upload(chunks[0], token: ada.token).status == .created)
            // A stored chunk declared larger (to inflate an item) or smaller (to slip under the quota).
            for size: Int64 in [101, 1] {
                let lie = try await client.put(notes, "lie-\(size)", update("Lie.bin", [(chunks[0], size)]), token: ada.token)
                #expect(lie.status == .badRequest && lie.errorCode == "chunkSizeMismatch" && String(buffer: lie.body).contains(sha256(chunks[0])))
            }
            // One chunk at two sizes in one manifest.
            #expect(try await client.upload(chunks[1], token: ada.token).status == .created)
            let twice = try await client.put(notes, "twice", update("Twice.bin", [(chunks[1], 100), (chunks[1], 5)]), token: ada.token)
            #expect(twice.status == .badRequest && twice.errorCode == "chunkSizeMismatch")
            // A chunk the account does not hold, at any size: not named at all.
            let other = try await client.put(notes, "other", update("Other.bin", [(chunks[2], 1)]), token: ada.token)
            #expect(other.status == .conflict && other.errorCode == "missingChunks")
            // In a batch, the liar alone is refused.
            let batch = try await client.send(.post, "/v1/containers/\(notes)/commits", token: ada.token, json: CommitBatchRequest(commits: [
                ItemCommit(item: "honest", update: update("Honest.bin", [(chunks[0], 100)])),
                ItemCommit(item: "liar", update: update("Liar.bin", [(chunks[0], 7)])),
            ])).decode(CommitBatchResponse.self)
            #expect(batch.results[0].commit != nil && batch.results[1].error?.code == "chunkSizeMismatch")
            let names = Set(try await client.changes(notes, token: ada.token).items.map(\.name))
            #expect(names == ["Honest.bin"])
        }
    }

    @Test(arguments: Backend.all) func anAccountHoldsABoundedNumberOfItems(backend: Backend) async throws {
        var limits = AccountLimits()
        limits.maximumItems = 3
        let server = try await TestServer.withAccount("ada", on: backend, accountLimits: limits); defer { server.remove() }
        try await server.run { client in
            let ada = try await client.signIn("ada")
            var revisions: [String: String] = [:]
            for item in ["a", "b"] { revisions[item] = try await client.commit(notes, item, fileUpdate("\(item).txt", []), token: ada.token).revision }
            // A batch that would make four: the third item goes in, the fourth is refused alone.
            let batch = try await client.send(.post, "/v1/containers/\(notes)/commits", token: ada.token, json: CommitBatchRequest(commits: [
                ItemCommit(item: "c", update: fileUpdate("c.txt", [])),
                ItemCommit(item: "d", update: fileUpdate("d.txt", [])),
            ])).decode(CommitBatchResponse.self)
            #expect(batch.results[0].commit != nil && batch.results[1].error?.code == "tooManyItems")
            // Another container counts too; edits of items it has still go.
            let elsewhere = try await client.put("ABCDE12345.com.example.photos", "e", fileUpdate("e.txt", []), token: ada.token)
            #expect(elsewhere.status.code == 507 && elsewhere.errorCode == "tooManyItems")
            let edit = try await client.put(notes, "a", fileUpdate("a renamed.txt", [], base: revisions["a"], date: 1_800_000_100), token: ada.token)
            #expect(edit.status == .ok)
            #expect(try await client.usage(token: ada.token).parts.items == 3)
        }
    }

    @Test(arguments: Backend.all) func revisionsKeptCountUntilTheyAreCollected(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let ada = try await client.signIn("ada")
            var base: String?
            var costs: [Int64] = []
            for round in 0..<5 {
                let name = "Renamed \(round).txt"
                base = try await client.commit(notes, "doc", fileUpdate(name, [], base: base, date: 1_800_000_000 + Double(round)), token: ada.token).revision
                costs.append(RevisionCost.record + Int64(name.utf8.count) + Int64(try PreparedCommit.stored(Manifest(chunks: [])).count))
            }
            #expect(try await client.usage(token: ada.token).parts.metadataBytes == costs.reduce(0, +), "every revision kept is counted")
        }
        let collected = try await server.admin.collectGarbage(now: Date().addingTimeInterval(40 * 86_400))
        #expect(collected.revisions == 4)
        try await server.run { client in
            let ada = try await client.signIn("ada")
            let kept = RevisionCost.record + Int64("Renamed 4.txt".utf8.count) + Int64(try PreparedCommit.stored(Manifest(chunks: [])).count)
            #expect(try await client.usage(token: ada.token).parts.metadataBytes == kept, "collected revisions no longer count")
        }
    }
}
