import Foundation
import Hummingbird
import Testing
import UbiquityProtocol
@testable import UbiquityServer

/// Many items per request: `POST /v1/containers/{container}/commits` and `…/fetch`.
@Suite struct CommitBatchTests {
    /// `terse=true`: a commit that made its item exactly what the update said is answered by its
    /// revision and sequence alone; a rename by the server, a conflict and a deletion are
    /// answered in full.
    @Test func aCommitThatWentAsSentIsAnsweredTersely() async throws {
        let server = try await TestServer.withAccount("ada"); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let phone = try await client.signIn("ada", device: "phone")
            let shared = try await client.commit(notes, "shared", fileUpdate("shared.txt", [Array("v1".utf8)]), token: laptop.token)
            _ = try await client.commit(notes, "a-taken", fileUpdate("Taken.txt", []), token: laptop.token)
            let gone = try await client.commit(notes, "gone", fileUpdate("gone.txt", []), token: laptop.token)
            // The phone changes the shared file first: the laptop's edit from the same base loses.
            _ = try await client.commit(notes, "shared", fileUpdate("shared.txt", [Array("phone".utf8)], base: shared.revision), token: phone.token)
            let commits = [
                ItemCommit(item: "new", update: fileUpdate("new.txt", [Array("new".utf8)])),
                ItemCommit(item: "z-clash", update: fileUpdate("TAKEN.txt", [])), // a name the server changes (the greater id gives way)
                ItemCommit(item: "shared", update: fileUpdate("shared.txt", [Array("laptop".utf8)], base: shared.revision, date: 1_700_000_000)), // older: it loses
                ItemCommit(item: "gone", update: fileUpdate("gone.txt", [], base: gone.revision, deleted: true)),
            ]
            try await client.uploadKnownChunks(of: commits.map(\.update), token: laptop.token)
            let answer = try await client.send(.post, "/v1/containers/\(notes)/commits?brief=true&terse=true", token: laptop.token, json: CommitBatchRequest(commits: commits))
            #expect(answer.status == .ok, "\(String(buffer: answer.body))")
            let results = try answer.decode(CommitBatchResponse.self).results
            let fresh = try #require(results[0].committed)
            #expect(results[0].commit == nil)
            let state = try await client.changes(notes, token: phone.token).items.first { $0.id == "new" }
            #expect(state?.revision == fresh.revision && state?.sequence == fresh.sequence)
            #expect(results[1].committed == nil && results[1].commit?.item.name == "TAKEN 2.txt", "renamed: answered in full")
            #expect(results[2].committed == nil && results[2].commit?.outcome == "conflict", "a conflict: in full")
            #expect(results[3].committed == nil && results[3].commit?.item.deleted == true, "a deletion: in full \(String(describing: results[3].error))")
            // Without the word, every answer is whole.
            let plain = try await client.send(.post, "/v1/containers/\(notes)/commits?brief=true", token: laptop.token,
                                              json: CommitBatchRequest(commits: [ItemCommit(item: "other", update: fileUpdate("other.txt", []))]))
            #expect(try plain.decode(CommitBatchResponse.self).results.allSatisfy { $0.commit != nil && $0.committed == nil })
        }
    }

    @Test(arguments: Backend.all) func manyUpdatesCommitTogetherAndARefusedOneStopsNoOther(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let phone = try await client.signIn("ada", device: "phone")
            var commits = (0..<200).map { ItemCommit(item: "f\($0)", update: fileUpdate("file \($0).txt", [Array("file \($0)".utf8)])) }
            commits[7].update.name = "bad/name"                                   // refused on its own
            commits[8] = ItemCommit(item: "f9", update: fileUpdate("again.txt", []))  // the same item twice: the second is refused
            commits.append(ItemCommit(item: "clash", update: fileUpdate("FILE 3.txt", []))) // a name differing by case only
            try await client.uploadKnownChunks(of: commits.map(\.update), token: laptop.token)
            let answer = try await client.send(.post, "/v1/containers/\(notes)/commits?brief=true", token: laptop.token, json: CommitBatchRequest(commits: commits))
            #expect(answer.status == .ok, "\(String(buffer: answer.body))")
            let results = try answer.decode(CommitBatchResponse.self).results
            #expect(results.map(\.item) == commits.map(\.item), "one result per update, in order")
            #expect(results[7].error?.code == "invalidName" && results[7].commit == nil)
            #expect(results[9].error?.code == "duplicateItem" && results[9].commit == nil)
            #expect(results[8].commit?.item.name == "again.txt", "the first of the two is committed")
            // Names are settled within the batch as across requests: the greater id gives way.
            #expect(results[200].commit?.item.name == "FILE 3.txt")
            #expect(results.compactMap(\.commit).count == 199)
            #expect(results.compactMap(\.commit).allSatisfy { $0.item.manifest == Manifest() }, "brief answers")

            let changes = try await client.changes(notes, token: phone.token)
            #expect(changes.items.count == 199 && changes.sequence == 200, "199 commits and the server's rename")
            #expect(changes.items.first { $0.id == "f3" }?.name == "file 3 2.txt")

            // Several items with their manifests in one answer, unknown ids left out.
            let fetched = try await client.send(.post, "/v1/containers/\(notes)/fetch", token: phone.token, json: ItemsFetchRequest(ids: ["f0", "nope", "f199"]))
            let items = try fetched.decode(ItemsResponse.self).items
            #expect(items.map(\.id) == ["f0", "f199"] && items[0].manifest.chunks?.count == 1)

            // Bounds: nothing, or more than a batch carries, is refused whole.
            let empty = try await client.send(.post, "/v1/containers/\(notes)/commits", token: laptop.token, json: CommitBatchRequest(commits: []))
            #expect(empty.status == .badRequest && empty.errorCode == "tooMany")
            let tooMany = try await client.send(.post, "/v1/containers/\(notes)/fetch", token: phone.token,
                                                json: ItemsFetchRequest(ids: (0...ItemsFetchRequest.maximumCount).map { "f\($0)" }))
            #expect(tooMany.status == .badRequest && tooMany.errorCode == "tooMany")
            let stranger = try await client.send(.post, "/v1/containers/\(notes)/commits", json: CommitBatchRequest(commits: commits))
            #expect(stranger.status == .unauthorized)
        }
    }

    @Test(arguments: Backend.all) func aBatchIsOnePushToTheOtherDevicesAndNoneToItsOwn(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.server.makeApplication().test(.live) { raw in
            let client = Client(client: raw)
            let laptop = try await client.signIn("ada", device: "laptop")
            let phone = try await client.signIn("ada", device: "phone")
            let connected = Confirmations()
            async let phoneEvents = PushTests().listen(raw, token: phone.token) { events in
                if events.count == 1 { connected.mark("phone") }
                return events.contains { $0.type == "changed" && $0.sequence == 50 }
            }
            async let laptopEvents = PushTests().listen(raw, token: laptop.token) { events in
                if events.count == 1 { connected.mark("laptop") }
                return events.contains { $0.type == "changed" }
            }
            try await connected.wait(for: ["phone", "laptop"])
            let commits = (0..<50).map { ItemCommit(item: "f\($0)", update: fileUpdate("file \($0).txt", [])) }
            let answer = try await client.send(.post, "/v1/containers/\(notes)/commits", token: laptop.token, json: CommitBatchRequest(commits: commits))
            #expect(answer.status == .ok)
            _ = try await client.commit(notes, "p", fileUpdate("from the phone.txt", []), token: phone.token)
            #expect(try await phoneEvents == [.connected, PushEvent(type: "changed", container: notes, sequence: 50)], "one event for the batch")
            #expect(try await laptopEvents == [.connected, PushEvent(type: "changed", container: notes, sequence: 51)], "not told of its own batch")
        }
    }
}
