import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
import UbiquityKeys
import UbiquityProtocol
@testable import UbiquityServer

/// A container's sealed chunks on the server's own pages: a commit declares each sealed chunk at
/// its plaintext size (the server knows the sealed size that gives); under Standard the web
/// download and a public link open them with the escrow's keys; under Advanced they answer that
/// only the devices open the file — before any byte of it is sent.
@Suite struct SealedWebDownloadTests {
    @Test(arguments: Backend.all) func sealedFilesDownloadOnTheWebUnderStandardOnlyAndNeverAsCiphertext(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let signedIn = try await client.signIn("ada", device: "laptop")
            let sealedKeys = SealedKeyValueServerTests()
            let root = try await sealedKeys.setUpKeys(client, signedIn)
            let keys = root.chunkKeys(container: notes)
            let plaintext = Array("A sealed note, in two chunks of a file.".utf8)
            let pieces = [Array(plaintext[..<10]), Array(plaintext[10...])]
            let sealed = try pieces.map { try keys.seal($0) }
            let batch = ChunkBatch(sealed.map { ChunkBatch.Chunk(hash: $0.id.description, bytes: Array($0.body)) })
            let uploaded = try await client.send(.post, "/v1/chunks?sealed=1", token: signedIn.token, raw: batch.encoded())
            #expect(uploaded.status == .created, "\(String(buffer: uploaded.body))")

            // A size that is neither the plaintext's nor the sealed chunk's is refused.
            func update(sizes: [Int]) -> ItemUpdate {
                ItemUpdate(baseRevision: nil, name: "Note.txt", kind: .file, modificationDate: 1_800_000_000, type: "public.plain-text",
                           manifest: Manifest(chunks: zip(sealed, sizes).map { ChunkReference(hash: $0.id.description, size: Int64($1)) }), deleted: nil)
            }
            let wrong = try await client.put(notes, "note", update(sizes: pieces.map { $0.count + 1 }), token: signedIn.token)
            #expect(wrong.errorCode == "chunkSizeMismatch", "\(String(buffer: wrong.body))")
            let committed = try await client.put(notes, "note", update(sizes: pieces.map(\.count)), token: signedIn.token)
            #expect(committed.status == .ok, "\(String(buffer: committed.body))")
            let state = try committed.decode(CommitResponse.self).item
            #expect(state.size == Int64(plaintext.count) && state.uploaded)

            // Under Standard: the web page and a public link give the plaintext.
            let web = WebInterfaceTests()
            let (cookie, _, _) = try await web.webSignIn(client)
            let path = "/web/api/containers/\(notes)/items/note/download"
            let download = try await client.send(.get, path, headers: web.session(cookie))
            #expect(download.status == .ok && Array(buffer: download.body) == plaintext, "\(String(buffer: download.body))")
            let published = try await client.send(.post, "/v1/containers/\(notes)/items/note/links", token: signedIn.token, json: PublishRequest(seconds: 3_600))
            let link = try #require(try published.decode(PublishedLink.self).path)
            #expect(Array(buffer: try await client.send(.get, link).body) == plaintext)

            // Under Advanced the server holds no key: a clear refusal, no ciphertext.
            let directory = try await KeyDirectoryTests().directory(client, token: signedIn.token)
            let entries = try directory.roster.map { try RosterEntry(encoded: $0) }
            let advanced = try RosterEntry(.custody(.advanced), after: entries.last, signedBy: sealedKeys.laptop)
            let switched = try await KeyDirectoryTests().append(client, token: signedIn.token, after: entries.count, [advanced],
                                                                [try KeyDirectoryTests().envelope(AccountRootKey(epoch: 1), account: signedIn.identityToken,
                                                                                                  to: sealedKeys.laptop.publicKeys, from: sealedKeys.laptop)])
            #expect(switched.status == .ok, "\(String(buffer: switched.body))")
            let refused = try await client.send(.get, path, headers: web.session(cookie))
            #expect(refused.status == .conflict && refused.errorCode == "sealedOnDevices", "\(String(buffer: refused.body))")
            // The link made under Standard: its address carries no key (SealedLinkServerTests).
            let stopped = try await client.send(.get, link)
            #expect(stopped.status == .gone && stopped.errorCode == "linkNeedsKey", "\(String(buffer: stopped.body))")
            // And it takes no plaintext any more: a chunk, a batch, a file's bytes inline in a commit.
            let older = Array("what an older device would send".utf8)
            let single = try await client.upload(older, token: signedIn.token)
            #expect(single.status == .conflict && single.errorCode == "sealedOnly", "\(String(buffer: single.body))")
            let plainBatch = try await client.send(.post, "/v1/chunks", token: signedIn.token, raw: ChunkBatch([ChunkBatch.Chunk(hash: sha256(older), bytes: older)]).encoded())
            #expect(plainBatch.errorCode == "sealedOnly", "\(String(buffer: plainBatch.body))")
            var inline = fileUpdate("Inline.txt", [older])
            inline.contents = Data(older)
            let inlined = try await client.put(notes, "inline", inline, token: signedIn.token)
            #expect(inlined.errorCode == "sealedOnly", "\(String(buffer: inlined.body))")
            let next = try AccountRootKey(epoch: 1, bytes: [UInt8](repeating: 3, count: 32)).chunkKeys(container: notes).seal(older)
            let sealedStill = try await client.send(.post, "/v1/chunks?sealed=1", token: signedIn.token,
                                                    raw: ChunkBatch([ChunkBatch.Chunk(hash: next.id.description, bytes: Array(next.body))]).encoded())
            #expect(sealedStill.status == .created, "sealed chunks still go: \(String(buffer: sealedStill.body))")
        }
    }
}
