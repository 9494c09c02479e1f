import Foundation
import Logging
import Testing
import UbiquityTestSupport
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityServer

/// Sealing in place (issue 45's upgrade), both backends: what an account stored in plaintext
/// before it had keys — files, an earlier revision, a folder, a package, a deletion, a conflict
/// version — is sealed by the server with the escrow's keys, without a device sending anything;
/// a device opens every record and every sealed chunk to what was there, the plaintext chunks are
/// gone, and a device that still holds the plaintext manifest of a sealed revision keeps
/// working (its delta against it is refused, its whole manifest taken). Resumable: stopped
/// midway, what is done stays readable and the next run finishes.
@Suite struct SealInPlaceTests {
    /// In every name (never in any content).
    static let nameMarker = "Zebulon"
    /// In every chunk's contents.
    static let contentMarker = Array("QUOKKA-CONTENT".utf8)

    /// A chunk of `count` bytes holding the content marker.
    static func chunk(_ count: Int) -> [UInt8] { contentMarker + [UInt8](randomBytes(count)) }

    /// What the plaintext history holds: each item's name and chunks as written.
    struct History {
        var chunks: [[UInt8]] = []
        var names: [String: String] = [:]
        var revisions = 0
        var plan: (first: String, second: String) = ("", "")
    }

    /// An account's history written in plaintext by two devices before the account had keys.
    static func writeHistory(_ client: Client, laptop: String, phone: String) async throws -> History {
        var history = History()
        func file(_ item: String, _ name: String, _ chunks: [[UInt8]], base: String? = nil, parent: String? = nil, deleted: Bool? = nil,
                  token: String) async throws -> CommitResponse {
            var update = fileUpdate(name, chunks, base: base, deleted: deleted)
            update.parent = parent
            history.chunks += chunks
            history.names[item] = name
            history.revisions += 1
            return try await client.commit(notes, item, update, token: token)
        }
        let (a, b, c) = (chunk(4_000), chunk(3_000), chunk(2_500))
        let first = try await file("plan", "Plan \(nameMarker).txt", [a, b], token: laptop)
        let second = try await file("plan", "Plan \(nameMarker).txt", [a, c], base: first.revision, token: laptop)
        history.plan = (first.revision, second.revision)
        let folder = ItemUpdate(baseRevision: nil, name: "Folder \(nameMarker)", kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())
        _ = try await client.commit(notes, "dir", folder, token: laptop)
        (history.names["dir"], history.revisions) = (folder.name, history.revisions + 1)
        _ = try await file("inner", "Inner \(nameMarker).txt", [chunk(1_000)], parent: "dir", token: laptop)
        let member = chunk(1_500)
        knownChunks.withLock { $0[sha256(member)] = member }
        let package = ItemUpdate(baseRevision: nil, name: "Diary \(nameMarker).pkg", kind: .package, modificationDate: 1_800_000_000,
                                 manifest: Manifest(members: [ManifestMember(path: "Notes \(nameMarker).txt", chunks: [ChunkReference(hash: sha256(member), size: Int64(member.count))]),
                                                              ManifestMember(path: "Media/", chunks: [])]))
        _ = try await client.commit(notes, "pkg", package, token: laptop)
        (history.names["pkg"], history.revisions, history.chunks) = (package.name, history.revisions + 1, history.chunks + [member])
        let gone = try await file("gone", "Gone \(nameMarker).txt", [chunk(800)], token: laptop)
        _ = try await file("gone", "Gone \(nameMarker).txt", [], base: gone.revision, deleted: true, token: laptop)
        // Two devices edit one revision: a conflict version.
        let shared = try await file("shared", "Shared \(nameMarker).txt", [chunk(600)], token: laptop)
        _ = try await file("shared", "Shared \(nameMarker).txt", [chunk(700)], base: shared.revision, token: laptop)
        try await Task.sleep(for: .milliseconds(20))
        _ = try await file("shared", "Shared \(nameMarker).txt", [chunk(900)], base: shared.revision, token: phone)
        return history
    }

    /// The account's keys set up by the laptop (`holder`'s device keys) under Standard, and the
    /// server's escrow key.
    static func keys(_ client: Client, _ laptop: SignInResponse, server: TestServer,
                     holder: SealedKeyValueServerTests = SealedKeyValueServerTests()) async throws -> (root: AccountRootKey, escrow: EscrowKey) {
        let root = try await holder.setUpKeys(client, laptop)
        return (root, try EscrowKey.loadOrCreate(at: URL(fileURLWithPath: server.directory + "/escrow.key")).key)
    }

    /// Every item of the container as a device that holds `root` opens it — its record and its
    /// chunks, each fetched and opened (or, unsealed, checked against its SHA-256) — to the
    /// chunk bytes it lists: item → (name, chunks; conflict versions' after).
    static func read(_ client: Client, token: String, root: AccountRootKey) async throws -> [String: (name: String, sealed: Bool, chunks: [[UInt8]])] {
        let records = try #require(ItemRecords.keyed(container: notes, rootKeys: [root], sealing: false))
        let codec = try #require(ChunkCodec.reading(container: notes, rootKeys: [root]))
        var read: [String: (name: String, sealed: Bool, chunks: [[UInt8]])] = [:]
        for state in try await client.changes(notes, token: token).items {
            let opened = try records.opened(state)
            var chunks: [[UInt8]] = []
            for reference in opened.manifest.allChunks + opened.conflicts.flatMap(\.manifest.allChunks) {
                let answer = try await client.send(.get, "/v1/chunks/\(reference.hash)", token: token)
                #expect(answer.status == .ok, "chunk \(reference.hash) of \(state.id)")
                let body = [UInt8](buffer: answer.body)
                let plain = try body.withUnsafeBytes { try codec.open($0, as: reference.hash) }
                #expect(Int64(plain.count) == reference.size, "a chunk keeps its plaintext size in the record")
                chunks.append([UInt8](plain))
            }
            read[state.id] = (opened.name, state.record != nil && state.conflicts.allSatisfy { $0.record != nil }, chunks)
        }
        return read
    }

    @Test(arguments: Backend.all) func oldRevisionsAreSealedInPlaceAndEveryDeviceStillReadsThem(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop"), phone = try await client.signIn("ada", device: "phone")
            let history = try await Self.writeHistory(client, laptop: laptop.token, phone: phone.token)
            // A large file: the server keeps its list decoded (the base of the next edit).
            let parts = (0..<300).map { _ in Self.chunk(50) }
            let large = try await client.commit(notes, "large", fileUpdate("Large \(Self.nameMarker).bin", parts), token: laptop.token)
            let (root, escrow) = try await Self.keys(client, laptop, server: server)
            let before = try await Self.read(client, token: phone.token, root: root)
            #expect(before.values.allSatisfy { !$0.sealed })

            let report = try await server.admin.sealInPlace(escrow: escrow, settle: 0)
            #expect(report.accounts == 1 && report.revisions == history.revisions + 1 && report.left == 0 && report.problems.isEmpty, "\(report)")
            #expect(report.removed == Set((history.chunks + parts).map(sha256)).count, "every plaintext chunk went: \(report)")
            for chunk in history.chunks + parts { #expect(try await server.storedChunk(sha256(chunk), of: "ada") == nil) }

            // Another process (an instance on the same database, or `ubiquity seal-in-place` beside
            // a running server) sealed it: this one still keeps the old list. It is not served (its
            // content token is not the row's), and not taken for what the account stores: an edit
            // from the old list, its chunks not sent, is asked for them.
            let oldList = Manifest(chunks: parts.map { ChunkReference(hash: sha256($0), size: Int64($0.count)) })
            ManifestCache.shared.remember(oldList, of: large.revision, digest: ContentToken.of(oldList, kind: .file).description)
            let stale = fileUpdate("Large \(Self.nameMarker).bin", parts + [Self.chunk(60)], base: large.revision)
            let asked = try await client.put(notes, "large", stale, token: laptop.token)
            #expect(asked.errorCode == "missingChunks", "\(asked.status) \(String(buffer: asked.body).prefix(200))")

            // A device that joins now reads the very same files, sealed.
            let tablet = try await client.signIn("ada", device: "tablet")
            let after = try await Self.read(client, token: tablet.token, root: root)
            #expect(Set(after.keys) == Set(before.keys) && after["large"]?.chunks == parts)
            for (item, was) in before {
                let now = try #require(after[item])
                #expect(now.sealed && now.name == was.name && now.chunks == was.chunks, "\(item)")
            }
            let records = try #require(ItemRecords.keyed(container: notes, rootKeys: [root], sealing: false))
            let states = try await client.changes(notes, token: tablet.token).items
            let package = try records.opened(try #require(states.first { $0.id == "pkg" }))
            #expect(package.manifest.members?.map(\.path) == ["Notes \(Self.nameMarker).txt", "Media/"], "a package's members are named in its record")
            #expect(try records.opened(try #require(states.first { $0.id == "gone" })).deleted, "a deletion stays one")
            #expect(states.allSatisfy { !$0.name.contains(Self.nameMarker) && $0.type == nil }, "the server shows tags only")

            // The earlier revision opens to what it was, and Recently Deleted lists sealed names.
            let listed = try await client.send(.get, "/v1/containers/\(notes)/items/plan/revisions", token: tablet.token).decode(ItemRevisionsResponse.self)
            let earlier = try #require(listed.revisions.first { $0.revision == history.plan.first })
            #expect(earlier.record != nil)
            #expect(try records.opened(earlier, item: "plan").name == "Plan \(Self.nameMarker).txt")
            let recoverable = try await server.admin.recoverable(accountName: "ada")
            #expect(!recoverable.isEmpty && recoverable.allSatisfy { $0.record != nil && !$0.name.contains(Self.nameMarker) })
            #expect(try await server.admin.recoverable(accountName: "ada", escrow: escrow).contains { $0.name == "Gone \(Self.nameMarker).txt" })

            // The laptop still holds the plaintext list of the revision it wrote: its delta
            // against it is refused (the server's list changed), the whole list taken — its
            // plaintext chunk sent again — and nothing is lost. No delta is served against it.
            let served = try await client.send(.get, "/v1/containers/\(notes)/items/plan?since=\(history.plan.second)", token: laptop.token).decode(ItemState.self)
            #expect(served.manifestDelta == nil && served.deltaBase == nil, "a revision sealed in place is no delta base")
            let (kept, added) = (history.chunks[0], Self.chunk(1_200))
            var edit = fileUpdate("Plan \(Self.nameMarker).txt", [kept, added], base: history.plan.second)
            edit.manifestDelta = ChunkListDelta(operations: [.copy(from: 0, count: 1), .add(hash: sha256(added), length: added.count)])
            edit.manifest = Manifest()
            try await client.uploadKnownChunks(of: [edit], token: laptop.token)
            let refused = try await client.put(notes, "plan", edit, token: laptop.token)
            #expect(refused.status == .conflict && refused.errorCode == "deltaBaseUnknown", "\(String(buffer: refused.body))")
            let whole = try await client.commit(notes, "plan", fileUpdate("Plan \(Self.nameMarker).txt", [kept, added], base: history.plan.second), token: laptop.token)
            #expect(whole.outcome == "current" && whole.item.conflicts.isEmpty)
            #expect(try await Self.read(client, token: tablet.token, root: root)["plan"]?.chunks == [kept, added])

            // The next run seals that one too; then there is nothing left to do.
            let again = try await server.admin.sealInPlace(escrow: escrow, settle: 0)
            #expect(again.revisions == 1 && again.left == 0, "\(again)")
            #expect(try await server.admin.sealInPlace(escrow: escrow, settle: 0).revisions == 0)
            #expect(try await Self.read(client, token: tablet.token, root: root)["plan"].map { $0.sealed && $0.chunks == [kept, added] } == true)

            // The data directory holds no name, no content and no plaintext chunk's hash.
            if backend == .sqlite {
                let hashes = Set((history.chunks + [added]).map(sha256))
                let found = try await onBackgroundThread {
                    SealedRecordServerTests.files(under: server.directory, contain: Self.nameMarker)
                        + SealedRecordServerTests.files(under: server.directory, contain: String(decoding: Self.contentMarker, as: UTF8.self))
                        + hashes.flatMap { SealedRecordServerTests.files(under: server.directory, contain: $0) }
                }
                #expect(found.isEmpty, "\(found)")
            }
        }
    }

    /// Stopped after its first batch, a run leaves every revision readable — the sealed ones and
    /// the rest — and the next run finishes; accounts under Advanced are left to their devices.
    @Test(arguments: Backend.all) func aRunStoppedMidwayLosesNothingAndTheNextOneFinishes(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop"), phone = try await client.signIn("ada", device: "phone")
            let history = try await Self.writeHistory(client, laptop: laptop.token, phone: phone.token)
            let keyHolder = SealedKeyValueServerTests()
            let (root, escrow) = try await Self.keys(client, laptop, server: server, holder: keyHolder)
            let before = try await Self.read(client, token: phone.token, root: root)

            var sealing = SealInPlace(database: server.admin.database, chunks: server.admin.storage.chunks, escrow: ServerEscrow(key: escrow),
                                      logger: Logger(label: "test"))
            (sealing.settle, sealing.batch) = (0, 2)
            let (batches, heard) = AsyncStream.makeStream(of: Int.self)
            let stopped = Task { [sealing] in try await sealing.run { heard.yield($0.revisions) } }
            var iterator = batches.makeAsyncIterator()
            _ = await iterator.next()
            stopped.cancel()
            #expect(await (try? stopped.value) == nil, "the run stops when cancelled")
            let midway = try await Self.read(client, token: phone.token, root: root)
            let sealedSoFar = midway.values.filter(\.sealed).count
            #expect(sealedSoFar > 0 && sealedSoFar < before.count, "stopped midway: \(sealedSoFar) of \(before.count) items sealed")
            for (item, was) in before { #expect(midway[item].map { $0.name == was.name && $0.chunks == was.chunks } == true, "\(item)") }

            let rest = try await sealing.run()
            #expect(rest.revisions > 0 && rest.revisions < history.revisions && rest.left == 0, "\(rest)")
            let after = try await Self.read(client, token: phone.token, root: root)
            for (item, was) in before { #expect(after[item].map { $0.sealed && $0.name == was.name && $0.chunks == was.chunks } == true, "\(item)") }

            // A round finds only accounts with something to seal: none now.
            let idle = try await sealing.run()
            #expect(idle.accounts == 0 && idle.skipped == 0 && idle.revisions == 0, "\(idle)")

            // Under Advanced the server holds no key: what is left unsealed is not touched.
            let late = try await client.commit(notes, "late", fileUpdate("Late.txt", [Array("written in plaintext before the switch".utf8)]), token: laptop.token)
            let directory = KeyDirectoryTests()
            let entries = try (try await directory.directory(client, token: laptop.token)).roster.map { try RosterEntry(encoded: $0) }
            let advanced = try RosterEntry(.custody(.advanced), after: entries.last, signedBy: keyHolder.laptop)
            let switched = try await directory.append(client, token: laptop.token, after: entries.count, [advanced],
                                                      [try directory.envelope(AccountRootKey(epoch: 1), account: laptop.identityToken,
                                                                              to: keyHolder.laptop.publicKeys, from: keyHolder.laptop)])
            #expect(switched.status == .ok, "\(String(buffer: switched.body))")
            let skipped = try await sealing.run()
            #expect(skipped.accounts == 0 && skipped.skipped == 1 && skipped.revisions == 0, "\(skipped)")
            #expect(try await client.changes(notes, token: phone.token).items.first { $0.id == "late" }.map { $0.record == nil && $0.revision == late.revision } == true)
        }
    }
}
