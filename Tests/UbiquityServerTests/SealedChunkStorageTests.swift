import Foundation
import Testing
import UbiquityKeys
import UbiquityProtocol
@testable import UbiquityServer

/// Sealed chunks on the server (an encrypted account's: named by a keyed MAC of a plaintext the
/// server never sees): taken without being checked against their names, the SHA-256 of their
/// bytes kept instead — so a damaged one is still never served, is found by `fsck`, and is
/// repaired by a device sending it again (sealing is deterministic: the same bytes).
@Suite struct SealedChunkStorageTests {
    @Test(arguments: Backend.all) func sealedChunksAreKeptByTheirDigestAndADamagedOneIsFoundAndRepaired(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        let plaintext = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) })
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let other = try await ChunkKeys.sealed(plaintext)
            // No keys yet: nothing sealed is taken.
            let early = try await client.send(.put, "/v1/chunks/\(other.id)?sealed=1", token: laptop.token, raw: Array(other.body))
            #expect(early.status == .conflict && early.errorCode == "noKeys")

            let root = try await SealedKeyValueServerTests().setUpKeys(client, laptop)
            let keys = root.chunkKeys(container: notes)
            let (id, body) = try keys.seal(plaintext)
            let name = id.description
            #expect(try await client.send(.put, "/v1/chunks/\(name)?sealed=2", token: laptop.token, raw: Array(body)).errorCode == "invalidSealed")
            // Unflagged, its name is checked as a hash of its bytes: refused.
            #expect(try await client.send(.put, "/v1/chunks/\(name)", token: laptop.token, raw: Array(body)).errorCode == "hashMismatch")
            #expect(try await client.send(.put, "/v1/chunks/\(name)?sealed=1", token: laptop.token, raw: Array(body)).status == .created)
            let update = ItemUpdate(baseRevision: nil, name: "Sealed.bin", kind: .file, modificationDate: 1_800_000_000, type: "public.data",
                                    manifest: Manifest(chunks: [ChunkReference(hash: name, size: Int64(body.count))]))
            let committed = try await client.commit(notes, "sealed", update, token: laptop.token)
            #expect(committed.item.uploaded)

            // Served as stored; the device opens it.
            let fetched = try await client.send(.get, "/v1/chunks/\(name)", token: laptop.token)
            #expect(fetched.status == .ok)
            #expect(try keys.open(Data(buffer: fetched.body), as: id) == plaintext)
            let report = try await server.admin.checkStore(repair: false)
            #expect(report.damaged.isEmpty && report.chunksChecked >= 1, "a sound sealed chunk is sound to fsck")

            // Damaged where it is kept: fsck finds it; no route serves it; sent again, it is back.
            try await server.damage(name, of: "ada")
            #expect(try await server.admin.checkStore(repair: false).damaged.map(\.hash) == [name])
            #expect(try await client.send(.get, "/v1/chunks/\(name)", token: laptop.token).status == .notFound)
            let missing = try await client.send(.post, "/v1/chunks/missing", token: laptop.token, json: MissingChunksRequest(hashes: [name]))
            #expect(try missing.decode(MissingChunksResponse.self).missing == [name])
            #expect(try await client.send(.post, "/v1/chunks?sealed=1", token: laptop.token, raw: ChunkBatch([.init(hash: name, bytes: Array(try keys.seal(plaintext).body))]).encoded()).status == .created)
            let again = try await client.send(.get, "/v1/chunks/\(name)", token: laptop.token)
            #expect(again.status == .ok && Data(buffer: again.body) == body, "the same bytes: sealing is deterministic")
            #expect(try await server.admin.checkStore(repair: false).damaged.isEmpty)
        }
    }
}

extension ChunkKeys {
    /// `plaintext` sealed under a throwaway account's keys.
    static func sealed(_ plaintext: Data) async throws -> (id: String, body: Data) {
        let (id, body) = try AccountRootKey(epoch: 0).chunkKeys(container: notes).seal(plaintext)
        return (id.description, body)
    }
}
