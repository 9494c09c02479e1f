import Foundation
import Hummingbird
import Testing
import UbiquityProtocol
@testable import UbiquityServer

/// Small files' bytes inside commits and pages of changes (`ItemUpdate.contents`,
/// `ItemState.contents`, `changes?inline=N`).
@Suite struct InlineContentsTests {
    @Test(arguments: Backend.all) func smallFilesGoUpWithTheirCommitAndComeDownWithThePage(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let phone = try await client.signIn("ada", device: "phone")
            let two = [Array("first chunk ".utf8), Array("second chunk".utf8)]
            func inline(_ name: String, _ chunks: [[UInt8]], contents: [UInt8]? = nil) -> ItemUpdate {
                var update = fileUpdate(name, chunks)
                update.contents = Data(contents ?? chunks.flatMap { $0 })
                return update
            }
            var commits = [
                ItemCommit(item: "one", update: inline("one.txt", [Array("hello".utf8)])),
                ItemCommit(item: "two", update: inline("two.txt", two)),                                         // several chunks, in order
                ItemCommit(item: "wrong", update: inline("wrong.txt", two, contents: Array("second chunkfirst chunk ".utf8))),
                ItemCommit(item: "short", update: inline("short.txt", two, contents: Array("first chunk ".utf8))),
                ItemCommit(item: "big", update: inline("big.bin", [[UInt8](repeating: 7, count: ItemUpdate.maximumInlineBytes + 1)])),
                ItemCommit(item: "empty", update: inline("empty.txt", [])),
            ]
            var folder = ItemUpdate(baseRevision: nil, name: "Folder", kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())
            folder.contents = Data("x".utf8)
            commits.append(ItemCommit(item: "folder", update: folder))
            let answer = try await client.send(.post, "/v1/containers/\(notes)/commits?brief=true", token: laptop.token, json: CommitBatchRequest(commits: commits))
            #expect(answer.status == .ok, "\(String(buffer: answer.body))")
            let results = try answer.decode(CommitBatchResponse.self).results
            for refused in [2, 3, 4, 6] {
                #expect(results[refused].error?.code == "invalidContents" && results[refused].commit == nil, "\(results[refused].item)")
            }
            for committed in [0, 1, 5] {
                // Stored with the commit: downloadable at once, nothing left to upload.
                #expect(results[committed].commit?.missingChunks == [] && results[committed].commit?.item.uploaded == true, "\(results[committed].item)")
            }
            // Their chunks are the account's, as if uploaded.
            let chunk = try await client.send(.get, "/v1/chunks/\(sha256(two[1]))", token: phone.token)
            #expect(chunk.status == .ok && Array(buffer: chunk.body) == two[1])

            // The other device's page carries the bytes; without inline=N, or for the device
            // that made them, it does not.
            let page = try await client.send(.get, "/v1/containers/\(notes)/changes?since=0&brief=true&inline=\(ItemUpdate.maximumInlineBytes)", token: phone.token)
                .decode(ChangesResponse.self)
            let byId = Dictionary(uniqueKeysWithValues: page.items.map { ($0.id, $0) })
            #expect(byId["one"]?.contents == Data("hello".utf8))
            #expect(byId["two"]?.contents == Data(two.flatMap { $0 }))
            #expect(byId["empty"]?.contents == Data())
            #expect(try await client.changes(notes, token: phone.token).items.allSatisfy { $0.contents == nil })
            let own = try await client.send(.get, "/v1/containers/\(notes)/changes?since=0&inline=100", token: laptop.token).decode(ChangesResponse.self)
            #expect(own.items.allSatisfy { $0.contents == nil }, "its own revisions' bytes are not sent back")
            let limited = try await client.send(.get, "/v1/containers/\(notes)/changes?since=0&inline=5", token: phone.token).decode(ChangesResponse.self)
            #expect(limited.items.first { $0.id == "one" }?.contents != nil && limited.items.first { $0.id == "two" }?.contents == nil, "at most N bytes a file")
            let tooLarge = try await client.send(.get, "/v1/containers/\(notes)/changes?since=0&inline=\(ItemUpdate.maximumInlineBytes + 1)", token: phone.token)
            #expect(tooLarge.status == .badRequest && tooLarge.errorCode == "invalidInline")

            // One item's update on its own: the same rules.
            let put = try await client.put(notes, "three", inline("three.txt", [Array("three".utf8)]), token: phone.token)
            #expect(put.status == .ok)
            #expect(try put.decode(CommitResponse.self).item.uploaded)
            let bad = try await client.put(notes, "four", inline("four.txt", [Array("four".utf8)], contents: Array("FOUR".utf8)), token: phone.token)
            #expect(bad.status == .badRequest && bad.errorCode == "invalidContents")
        }
    }

    @Test(arguments: Backend.all) func inlineContentsCountAgainstTheQuota(backend: Backend) async throws {
        let server = try await TestServer(backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ada", password: "correct horse", quotaBytes: 1_000)
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            var update = fileUpdate("big.bin", [[UInt8](repeating: 1, count: 2_000)])
            update.contents = Data(repeating: 1, count: 2_000)
            let answer = try await client.send(.post, "/v1/containers/\(notes)/commits", token: laptop.token,
                                               json: CommitBatchRequest(commits: [ItemCommit(item: "big", update: update)]))
            #expect(answer.status.code == 507 && answer.errorCode == "quotaExceeded")
            #expect(try await client.changes(notes, token: laptop.token).items.isEmpty, "nothing committed")
        }
    }
}
