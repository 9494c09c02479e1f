import Foundation
import HTTPTypes
import Testing
import UbiquityTestSupport
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityServer

/// Sealed patches on the server (issue 45): a device's sealed patch of a chunk is kept in place
/// of the chunk it makes, with the chunk it changes; it goes out as stored to a device that asks
/// for patches (a header names its base) and to no other; the base outlives the revisions that
/// named it while a patch needs it; patches go no deeper than the server allows.
@Suite struct SealedPatchServerTests {
    /// A sealed patch making `made` from `base` (plaintexts), as a device makes it.
    func sealedPatch(_ made: Data, from base: Data, keys: ChunkKeys) throws -> (made: String, base: String, body: Data) {
        let prints = base.withUnsafeBytes { BlockPrints(of: $0) }
        let patch = made.withUnsafeBytes { PatchBody(making: $0, against: prints) }
        let (madeId, baseId) = (keys.identifier(of: made), keys.identifier(of: base))
        return (madeId.description, baseId.description, try keys.sealPatch(patch.encoded, making: madeId, from: baseId))
    }

    func batch(_ patches: [(made: String, base: String, body: Data)]) -> [UInt8] {
        ChunkPatchBatch(patches.map { ChunkPatch(hash: $0.made, base: $0.base, prefix: 0, suffix: 0, middle: [UInt8]($0.body)) }).encoded()
    }

    @Test(arguments: Backend.all) func aSealedPatchStandsInForItsChunkAndItsBaseOutlivesItsRevision(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let keys = try await SealedKeyValueServerTests().setUpKeys(client, laptop).chunkKeys(container: notes)
            let original = randomBytes(100_000)
            var edited = original
            edited[50_000] ^= 0xff
            let (baseId, baseBody) = try keys.seal(original)
            let base = baseId.description
            #expect(try await client.send(.put, "/v1/chunks/\(base)?sealed=1", token: laptop.token, raw: Array(baseBody)).status == .created)
            let first = try await client.commit(notes, "doc", ItemUpdate(baseRevision: nil, name: "Doc.bin", kind: .file, modificationDate: 1_800_000_000, type: nil,
                                                                         manifest: Manifest(chunks: [ChunkReference(hash: base, size: Int64(original.count))])), token: laptop.token)

            let patch = try sealedPatch(edited, from: original, keys: keys)
            #expect(patch.body.count < 4_000, "a 1-byte edit's sealed patch is a few KiB: \(patch.body.count)")
            // Refused: unsealed, keeping bytes of its base, of a base the account lacks, its own base.
            let plainPatch = ChunkPatchBatch([ChunkPatch(hash: patch.made, base: base, prefix: 10, suffix: 0, middle: [1, 2, 3])]).encoded()
            #expect(try await client.send(.post, "/v1/chunks/patches?sealed=1", token: laptop.token, raw: plainPatch).errorCode == "badPatch")
            let unknownBase = String(repeating: "ab", count: 32)
            #expect(try await client.send(.post, "/v1/chunks/patches?sealed=1", token: laptop.token, raw: batch([(patch.made, unknownBase, patch.body)])).status == .notFound)
            #expect(try await client.send(.post, "/v1/chunks/patches?sealed=1", token: laptop.token, raw: batch([(base, base, patch.body)])).errorCode == "badPatch")
            #expect(try await client.send(.post, "/v1/chunks/patches?sealed=1", token: laptop.token, raw: batch([patch])).status == .created)

            // The commit naming the made chunk at its plaintext size completes at once.
            let second = try await client.commit(notes, "doc", ItemUpdate(baseRevision: first.revision, name: "Doc.bin", kind: .file, modificationDate: 1_800_000_100, type: nil,
                                                                          manifest: Manifest(chunks: [ChunkReference(hash: patch.made, size: Int64(edited.count))])), token: laptop.token)
            #expect(second.item.uploaded)
            // Under Standard the web page makes it too, with the escrow's keys.
            let web = WebInterfaceTests()
            let (cookie, _, _) = try await web.webSignIn(client)
            let download = try await client.send(.get, "/web/api/containers/\(notes)/items/doc/download", headers: web.session(cookie))
            #expect(download.status == .ok && Data(buffer: download.body) == edited, "\(download.status)")

            // A device that does not take patches is told so; one that does gets it as stored.
            let plainFetch = try await client.send(.post, "/v1/chunks/fetch", token: laptop.token, json: ChunkFetchRequest(hashes: [patch.made]))
            #expect(plainFetch.status == .conflict && plainFetch.errorCode == "storedAsPatch")
            #expect(try await client.send(.get, "/v1/chunks/\(patch.made)", token: laptop.token).errorCode == "storedAsPatch")
            let fetched = try await client.send(.post, "/v1/chunks/fetch", token: laptop.token, json: ChunkFetchRequest(hashes: [base, patch.made], patches: true))
            #expect(fetched.status == .ok)
            let header = try #require(fetched.headers[HTTPField.Name(ChunkFetchRequest.basesHeader)!])
            #expect(ChunkFetchRequest.bases(inHeader: header) == [patch.made: base])
            let frames = try Array(buffer: fetched.body).withUnsafeBytes { try ChunkBatch.frames(in: $0, maximumChunkSize: 1 << 24) }
            let bodyBytes = Array(buffer: fetched.body)
            #expect(frames.map(\.hash) == [base, patch.made])
            let opened = try keys.openPatch(Data(bodyBytes[frames[1].bytes]), making: try #require(ChunkIdentifier(hex: patch.made)), from: baseId)
            let decoded = try #require(PatchBody(decoding: opened))
            #expect(decoded.applied(to: UnsafeRawBufferPointer(start: nil, count: 0)) == nil, "a patch keeps bytes of its base: nothing is made from no base")
            let rebuilt = original.withUnsafeBytes { decoded.applied(to: $0) }
            #expect(rebuilt.map { Data($0) } == edited)

            // Forty days on, the first revision is gone; the chunk the patch changes is not.
            let collected = try await server.admin.collectGarbage(now: Date().addingTimeInterval(40 * 86_400))
            #expect(collected.revisions >= 1)
            let missing = try await client.send(.post, "/v1/chunks/missing", token: laptop.token, json: MissingChunksRequest(hashes: [base, patch.made]))
            #expect(try missing.decode(MissingChunksResponse.self).missing.isEmpty, "the base is kept while a patch needs it")
            // A device limited to the container may read it too (to make the chunk it names).
            let watch = try await client.signIn("ada", device: "watch", containers: [notes])
            #expect(try await client.send(.post, "/v1/chunks/fetch", token: watch.token, json: ChunkFetchRequest(hashes: [base], patches: true)).status == .ok)

            // Patches of patches, to the depth the server allows, then no deeper.
            var previous = (plain: edited, id: patch.made)
            for depth in 2...(SyncServices.maximumPatchDepth + 1) {
                var next = previous.plain
                next[depth * 1_000] ^= 0xff
                let deeper = try sealedPatch(next, from: previous.plain, keys: keys)
                let answer = try await client.send(.post, "/v1/chunks/patches?sealed=1", token: laptop.token, raw: batch([deeper]))
                if depth <= SyncServices.maximumPatchDepth {
                    #expect(answer.status == .created, "depth \(depth): \(String(buffer: answer.body))")
                } else {
                    #expect(answer.status == .conflict && answer.errorCode == "patchTooDeep", "depth \(depth)")
                }
                previous = (next, deeper.made)
            }
        }
    }
}
