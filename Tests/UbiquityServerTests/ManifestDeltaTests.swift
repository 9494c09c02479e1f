import Foundation
import Testing
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityServer

/// Chunk lists as differences on the wire, both ways, and brief answers (tokens, not manifests).
@Suite struct ManifestDeltaTests {
    @Test(arguments: Backend.all) func chunkListsTravelAsDifferences(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let phone = try await client.signIn("ada", device: "phone")
            let parts: [[UInt8]] = (0..<6).map { Array("part \($0) ".utf8) }
            let created = try await client.commit(notes, "film", fileUpdate("Film.raw", parts), token: laptop.token)
            for part in parts { _ = try await client.upload(part, token: laptop.token) }

            // Up: the fourth part changed, sent as copy 0..<3, add, copy 4..<6.
            let changed = Array("part three, longer".utf8)
            _ = try await client.upload(changed, token: laptop.token)
            var update = fileUpdate("Film.raw", [], base: created.revision, date: 1_800_000_100)
            update.manifest = Manifest()
            update.manifestDelta = ChunkListDelta(operations: [.copy(from: 0, count: 3), .add(hash: sha256(changed), length: changed.count), .copy(from: 4, count: 2)])
            let edited = try await client.put(notes, "film", update, token: laptop.token)
            #expect(edited.status == .ok)
            let answer = try edited.decode(CommitResponse.self)
            let expected = parts[0..<3].map { ChunkReference(hash: sha256($0), size: Int64($0.count)) } + [ChunkReference(hash: sha256(changed), size: Int64(changed.count))]
                + parts[4...].map { ChunkReference(hash: sha256($0), size: Int64($0.count)) }
            #expect(answer.item.manifest.chunks == expected && answer.missingChunks.isEmpty)

            // Down: a device with the first revision gets the difference, not the list.
            let since = try await client.send(.get, "/v1/containers/\(notes)/items/film?since=\(created.revision)", token: phone.token).decode(ItemState.self)
            #expect(since.deltaBase == created.revision && since.manifest.chunks == nil)
            #expect(try since.manifestDelta?.apply(to: parts.map { ChunkReference(hash: sha256($0), size: Int64($0.count)) }) == expected)

            // Brief answers carry the token instead of the manifest.
            let brief = try await client.send(.get, "/v1/containers/\(notes)/changes?since=0&brief=true", token: phone.token).decode(ChangesResponse.self)
            #expect(brief.items.count == 1 && brief.items[0].manifest.chunks == nil && brief.items[0].digest?.count == 64)

            // A delta that does not fit its base, or names an unknown base, changes nothing: the device is told to send the list.
            update.baseRevision = answer.revision
            update.manifestDelta = ChunkListDelta(operations: [.copy(from: 5, count: 9)])
            let misfit = try await client.put(notes, "film", update, token: laptop.token)
            #expect(misfit.status == .conflict && misfit.errorCode == "deltaBaseUnknown")
            update.baseRevision = "no-such-revision"
            update.manifestDelta = ChunkListDelta(operations: [.copy(from: 0, count: 1)])
            let unknown = try await client.put(notes, "film", update, token: laptop.token)
            #expect(unknown.status == .conflict && unknown.errorCode == "deltaBaseUnknown")
            let huge = ChunkListDelta(operations: Array(repeating: .copy(from: 0, count: 6), count: 20_000))
            update.baseRevision = answer.revision
            update.manifestDelta = huge
            #expect(try await client.put(notes, "film", update, token: laptop.token).errorCode == "deltaBaseUnknown", "a delta that would grow past any manifest is refused")
            let now = try await client.changes(notes, token: phone.token)
            #expect(now.items.first?.revision == answer.revision)
        }
    }

    /// A small edit of a large file: the server looks up and records only what changed (the
    /// base's chunks are known stored when it is complete), with the same answers as for a
    /// whole list — only the new chunk is missing (the commit refused, naming it, until it is
    /// uploaded), and the same change sent again is answered from what was recorded.
    @Test(arguments: Backend.all) func aSmallEditOfALargeListRecordsItsChunks(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let parts: [[UInt8]] = (0..<300).map { Array("part \($0) of a long film".utf8) }
            let created = try await client.commit(notes, "film", fileUpdate("Film.raw", parts), token: laptop.token)
            #expect(created.missingChunks.isEmpty && created.item.uploaded)

            let changed = Array("part 150, recut".utf8)
            var update = fileUpdate("Film.raw", [], base: created.revision, date: 1_800_000_100)
            update.manifest = Manifest()
            update.manifestDelta = ChunkListDelta(operations: [.copy(from: 0, count: 150), .add(hash: sha256(changed), length: changed.count), .copy(from: 151, count: 149)])
            update.changeId = "recut-1"
            let early = try await client.put(notes, "film", update, token: laptop.token)
            #expect(early.status == .conflict && (try? early.decode(ErrorResponse.self).error.missingChunks) == [sha256(changed)], "only the new chunk is looked for")
            _ = try await client.upload(changed, token: laptop.token)
            let edited = try await client.commit(notes, "film", update, token: laptop.token)
            #expect(edited.missingChunks.isEmpty && edited.item.uploaded)
            let again = try await client.commit(notes, "film", update, token: laptop.token)
            #expect(again.revision == edited.revision && again.missingChunks.isEmpty, "the recorded chunks are the edit's")
            let state = try await client.send(.get, "/v1/containers/\(notes)/items/film", token: laptop.token).decode(ItemState.self)
            #expect(state.revision == edited.revision && state.uploaded && state.manifest.chunks?.count == 300)
            #expect(state.manifest.chunks?[150].hash == sha256(changed) && state.manifest.chunks?[151].hash == sha256(parts[151]))

            // From that complete revision, dropping a part and taking back the old one: nothing missing.
            update.baseRevision = edited.revision
            update.manifestDelta = ChunkListDelta(operations: [.copy(from: 0, count: 10), .copy(from: 11, count: 139),
                                                               .add(hash: sha256(parts[150]), length: parts[150].count), .copy(from: 151, count: 149)])
            update.changeId = "recut-2"
            let restored = try await client.commit(notes, "film", update, token: laptop.token)
            #expect(restored.missingChunks.isEmpty && restored.item.uploaded)
            let repeated = try await client.commit(notes, "film", update, token: laptop.token)
            #expect(repeated.revision == restored.revision && repeated.missingChunks.isEmpty)
        }
    }
}

/// Manifests as stored: a flat file's written directly, read back as `JSONEncoder`'s would be.
@Suite struct StoredManifestTests {
    @Test func aStoredManifestReadsBackAsItWas() throws {
        let flat = Manifest(chunks: (0..<500).map { ChunkReference(hash: sha256(Array("chunk \($0)".utf8)), size: Int64($0) * 1_000 + 7) })
        let package = Manifest(members: [ManifestMember(path: "Text.txt", chunks: Array(flat.chunks!.prefix(3)))])
        for manifest in [flat, Manifest(chunks: []), package, Manifest(), Manifest(chunks: [ChunkReference(hash: "not \"hex\"", size: 1)])] {
            #expect(try JSONDecoder().decode(Manifest.self, from: PreparedCommit.stored(manifest)) == manifest)
        }
        #expect(String(decoding: try PreparedCommit.stored(Manifest(chunks: [ChunkReference(hash: "ab", size: 3)])), as: UTF8.self) == #"{"chunks":[{"hash":"ab","size":3}]}"#)
    }
}

/// A small edit's chunk-list difference is pushed along with its change: a device whose copy is
/// the base needs not ask for it. Only a commit as a difference that made its revision current
/// carries one; a whole list does not (the device asks, as before).
@Suite struct PushedDeltaTests {
    @Test(arguments: Backend.all) func aSmallEditsDifferenceComesWithItsPush(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.server.makeApplication().test(.live) { raw in
            let client = Client(client: raw)
            let laptop = try await client.signIn("ada", device: "laptop")
            let phone = try await client.signIn("ada", device: "phone")
            let parts: [[UInt8]] = (0..<6).map { Array("film part \($0) ".utf8) }
            for part in parts { _ = try await client.upload(part, token: laptop.token) }
            let created = try await client.commit(notes, "film", fileUpdate("Film.raw", parts), token: laptop.token)
            let changed = Array("film part three, edited".utf8)
            _ = try await client.upload(changed, token: laptop.token)

            let connected = Confirmations()
            async let heard = PushTests().listen(raw, token: phone.token, query: "?pages=gzip") { events in
                if events.count == 1 { connected.mark("phone") }
                return events.filter { $0.type == "changed" }.count == 2
            }
            try await connected.wait(for: ["phone"])
            // The edit as a difference from the first revision, then a whole list.
            var edit = fileUpdate("Film.raw", [], base: created.revision, date: 1_800_000_100)
            edit.manifestDelta = ChunkListDelta(operations: [.copy(from: 0, count: 3), .add(hash: sha256(changed), length: changed.count), .copy(from: 4, count: 2)])
            let edited = try await client.send(.post, "/v1/containers/\(notes)/commits?brief=true", token: laptop.token,
                                               json: CommitBatchRequest(commits: [ItemCommit(item: "film", update: edit)])).decode(CommitBatchResponse.self)
            let revision = try #require(edited.results.first?.commit?.revision ?? edited.results.first?.committed?.revision)
            let whole = fileUpdate("Film.raw", parts, base: revision, date: 1_800_000_200)
            #expect(try await client.send(.post, "/v1/containers/\(notes)/commits?brief=true", token: laptop.token,
                                          json: CommitBatchRequest(commits: [ItemCommit(item: "film", update: whole)])).status == .ok)

            let pages = try await heard.filter { $0.type == "changed" }
            let first = try #require(pages.first?.items?.first)
            #expect(first.deltaBase == created.revision && first.revision == revision)
            let old = parts.map { ChunkReference(hash: sha256($0), size: Int64($0.count)) }
            let rebuilt = try #require(try first.manifestDelta?.apply(to: old))
            #expect(ContentToken.of(rebuilt).description == first.digest, "the difference makes the contents the page names")
            let second = try #require(pages.last?.items?.first)
            #expect(second.manifestDelta == nil && second.deltaBase == nil, "a whole list is asked for, as before")
            #expect(pages.allSatisfy { $0.signedCommits == 0 }, "where the signed commits end goes along (none kept: 0)")
        }
    }
}
