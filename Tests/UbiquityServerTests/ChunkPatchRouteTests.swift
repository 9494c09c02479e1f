import Foundation
import Hummingbird
import Testing
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityServer

/// Chunks as changes of chunks the account has: `POST /v1/chunks/signatures`, `POST
/// /v1/chunks/patches` (up) and `POST /v1/chunks/patches/fetch` (down).
@Suite struct ChunkPatchRouteTests {
    static let base = (0..<(16 << 10)).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 13) }
    static var edited: [UInt8] {
        var bytes = base
        bytes[5_000] ^= 0xff
        return bytes
    }

    @Test(arguments: Backend.all) func anEditedChunkTravelsAsAPatchBothWays(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let phone = try await client.signIn("ada", device: "phone")
            let base = Self.base, edited = Self.edited
            #expect(try await client.send(.post, "/v1/chunks", token: laptop.token, raw: ChunkBatch([.init(hash: sha256(base), bytes: base)]).encoded()).status == .created)

            // Up: the old chunk's signature, then only the blocks that differ.
            let answer = try await client.send(.post, "/v1/chunks/signatures", token: laptop.token, json: ChunkSignaturesRequest(hashes: [sha256(base)]))
            let signatures = try answer.decode(ChunkSignaturesResponse.self).signatures
            #expect(signatures == [ChunkSignature(of: base, hash: sha256(base))])
            let patch = try #require(ChunkPatch(making: edited, hash: sha256(edited), against: signatures[0]))
            #expect(patch.middle.count == ChunkSignature.standardBlockSize)
            let sent = try await client.send(.post, "/v1/chunks/patches", token: laptop.token, raw: ChunkPatchBatch([patch]).encoded())
            #expect(sent.status == .created, "\(String(buffer: sent.body))")
            #expect(try await server.storedChunk(sha256(edited), of: "ada") == Data(edited))

            // Down: the exact difference from the chunk the phone has.
            let fetched = try await client.send(.post, "/v1/chunks/patches/fetch", token: phone.token,
                                                json: ChunkPatchRequest(patches: [.init(hash: sha256(edited), base: sha256(base))]))
            #expect(fetched.status == .ok)
            let patches = try ChunkPatchBatch(decoding: Array(buffer: fetched.body), maximumChunkSize: 1 << 20, maximumTotal: 1 << 20).patches
            #expect(patches.count == 1 && patches[0].middle.count == 1 && patches[0].made(from: base) == edited)
        }
    }

    @Test(arguments: Backend.all) func aBadPatchStoresNothingAndAnotherAccountsChunkIsNoBase(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "bob", password: "correct horse", quotaBytes: 1 << 30)
        try await server.run { client in
            let ada = try await client.signIn("ada"), bob = try await client.signIn("bob")
            let base = Self.base, edited = Self.edited
            #expect(try await client.send(.post, "/v1/chunks", token: ada.token, raw: ChunkBatch([.init(hash: sha256(base), bytes: base)]).encoded()).status == .created)
            let exact = ChunkPatch(making: edited, hash: sha256(edited), from: base, baseHash: sha256(base))

            // A patch that does not make its chunk, or keeps more than its base has: refused, nothing stored.
            var wrong = exact
            wrong.middle = [0x11]
            var answer = try await client.send(.post, "/v1/chunks/patches", token: ada.token, raw: ChunkPatchBatch([exact, wrong]).encoded())
            #expect(answer.status == .badRequest && answer.errorCode == "hashMismatch")
            var greedy = exact
            greedy.prefix = base.count
            answer = try await client.send(.post, "/v1/chunks/patches", token: ada.token, raw: ChunkPatchBatch([greedy]).encoded())
            #expect(answer.status == .badRequest && answer.errorCode == "badPatch")
            #expect(try await server.storedChunk(sha256(edited), of: "ada") == nil)
            // Not a batch, or none at all.
            #expect(try await client.send(.post, "/v1/chunks/patches", token: ada.token, raw: Array(ChunkPatchBatch([exact]).encoded().dropLast())).errorCode == "badBatch")
            #expect(try await client.send(.post, "/v1/chunks/patches", token: ada.token, raw: []).errorCode == "badBatch")

            // Ada's chunk is nothing to Bob: no signature, no patch of it up or down (404 naming it).
            let notBobs = sha256(base)
            answer = try await client.send(.post, "/v1/chunks/signatures", token: bob.token, json: ChunkSignaturesRequest(hashes: [notBobs]))
            #expect(answer.status == .notFound && String(buffer: answer.body).contains(notBobs))
            answer = try await client.send(.post, "/v1/chunks/patches", token: bob.token, raw: ChunkPatchBatch([exact]).encoded())
            #expect(answer.status == .notFound)
            #expect(try await server.storedChunk(sha256(edited), of: "bob") == nil)
            #expect(try await client.send(.post, "/v1/chunks", token: bob.token, raw: ChunkBatch([.init(hash: sha256(edited), bytes: edited)]).encoded()).status == .created)
            answer = try await client.send(.post, "/v1/chunks/patches/fetch", token: bob.token, json: ChunkPatchRequest(patches: [.init(hash: sha256(edited), base: notBobs)]))
            #expect(answer.status == .notFound)

            // Malformed and out-of-range requests: clear errors; no token: 401.
            #expect(try await client.send(.post, "/v1/chunks/signatures", token: ada.token, json: ChunkSignaturesRequest(hashes: [])).errorCode == "tooMany")
            #expect(try await client.send(.post, "/v1/chunks/signatures", token: ada.token, json: ChunkSignaturesRequest(hashes: ["../x"])).errorCode == "invalidHash")
            let many = ChunkPatchRequest(patches: Array(repeating: .init(hash: sha256(base), base: sha256(base)), count: ChunkBatch.maximumCount + 1))
            #expect(try await client.send(.post, "/v1/chunks/patches/fetch", token: ada.token, json: many).errorCode == "tooMany")
            #expect(try await client.send(.post, "/v1/chunks/patches/fetch", json: ChunkPatchRequest(patches: [])).status == .unauthorized)
        }
    }
}

/// Patches carried by a commit batch (``CommitBatchRequest/patches``): the chunks are made and
/// stored before the commits, so a small edit of a large file goes up in one request; a patch
/// that cannot be made refuses the whole request and commits nothing (the device then sends
/// them the usual way); another account's chunk is no base.
@Suite struct CommitPatchTests {
    @Test(arguments: Backend.all) func aCommitCarriesItsPatches(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "bob", password: "correct horse", quotaBytes: 1 << 30)
        try await server.run { client in
            let ada = try await client.signIn("ada"), bob = try await client.signIn("bob")
            let base = ChunkPatchRouteTests.base, edited = ChunkPatchRouteTests.edited
            #expect(try await client.send(.post, "/v1/chunks", token: ada.token, raw: ChunkBatch([.init(hash: sha256(base), bytes: base)]).encoded()).status == .created)
            let created = try await client.commit(notes, "film", fileUpdate("Film.raw", [base]), token: ada.token)
            let patch = ChunkPatch(making: edited, hash: sha256(edited), from: base, baseHash: sha256(base))
            func commit(_ token: String, patches: [ChunkPatch], raw: Data? = nil) async throws -> Client.Answer {
                let edit = ItemCommit(item: "film", update: fileUpdate("Film.raw", [edited], base: created.revision, date: 1_800_000_100))
                return try await client.send(.post, "/v1/containers/\(notes)/commits?brief=true", token: token,
                                             json: CommitBatchRequest(commits: [edit], patches: raw ?? Data(ChunkPatchBatch(patches).encoded())))
            }

            // Bob cannot make Ada's chunk his base; a wrong patch, or too many bytes of them, refuse it all.
            #expect(try await commit(bob.token, patches: [patch]).status == .notFound)
            var wrong = patch
            wrong.middle = [0x11]
            #expect(try await commit(ada.token, patches: [wrong]).status == .badRequest)
            #expect(try await commit(ada.token, patches: [], raw: Data(count: CommitBatchRequest.maximumPatchBytes + 1)).errorCode == "badPatch")
            #expect(try await commit(ada.token, patches: [], raw: Data([1, 2, 3])).errorCode == "badPatch")
            #expect(try await server.storedChunk(sha256(edited), of: "ada") == nil)
            #expect(try await client.changes(notes, token: ada.token).items.first?.revision == created.revision, "nothing committed")

            // The right patch: the chunk made, the revision complete at once.
            let answer = try await commit(ada.token, patches: [patch])
            #expect(answer.status == .ok)
            let result = try #require(try answer.decode(CommitBatchResponse.self).results.first)
            #expect(result.error == nil && (result.commit?.missingChunks ?? []).isEmpty)
            #expect(try await server.storedChunk(sha256(edited), of: "ada") == Data(edited))
            let now = try #require(try await client.changes(notes, token: ada.token).items.first)
            #expect(now.revision != created.revision && now.uploaded)
        }
    }
}
