import Foundation
import Testing
import UbiquityTestSupport
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityServer

/// Sealed item records on the server (issue 45), both backends: an update with a record says
/// nothing the record holds and is refused if it does; the record is kept as it came and goes
/// back beside the item, its conflict versions and its earlier revisions, and opens on a device
/// to what was made; two sealed names that clash are refused, never renamed by the server (it
/// cannot: the name is a tag); the server orders concurrent sealed edits by their arrival.
@Suite struct SealedRecordServerTests {
    @Test(arguments: Backend.all) func aSealedRecordIsKeptAsItCameAndOpensOnADevice(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let root = try await SealedKeyValueServerTests().setUpKeys(client, laptop)
            let records = try #require(ItemRecords.keyed(container: notes, rootKeys: [root], sealing: true))
            let keys = root.chunkKeys(container: notes)
            let contents = randomBytes(3_000)
            let (id, body) = try keys.seal(contents)
            #expect(try await client.send(.put, "/v1/chunks/\(id)?sealed=1", token: laptop.token, raw: Array(body)).status == .created)
            // A chunk stored in plaintext before the account sealed: declared at its sealed size too.
            let old = [UInt8](randomBytes(2_000))
            #expect(try await client.upload(old, token: laptop.token).status == .created)
            let manifest = Manifest(chunks: [ChunkReference(hash: id.description, size: 3_000), ChunkReference(hash: sha256(old), size: 2_000)])
            let plain = ItemUpdate(baseRevision: nil, name: "Secret Plans.txt", parent: nil, kind: .file, modificationDate: 1_800_000_000,
                                   type: "public.plain-text", manifest: manifest)
            let wire = try records.sealed(plain, item: "plans", manifest: manifest)

            // What the record holds is refused beside it.
            for (why, bad) in [("a name", { var u = wire; u.name = "Secret Plans.txt"; return u }()),
                               ("a type", { var u = wire; u.type = "public.plain-text"; return u }()),
                               ("a date", { var u = wire; u.modificationDate = 1_800_000_000; return u }()),
                               ("an empty record", { var u = wire; u.record = Data(); return u }())] {
                let answer = try await client.put(notes, "plans", bad, token: laptop.token)
                #expect(answer.status == .badRequest && answer.errorCode == "invalidRecord", "\(why): \(answer.status)")
            }
            let before = Date().timeIntervalSince1970
            let committed = try await client.commit(notes, "plans", wire, token: laptop.token)
            #expect(committed.item.uploaded && committed.item.record == wire.record && committed.item.name == wire.name)
            #expect(committed.item.modificationDate >= before - 1, "the server's own time stands for the date it cannot read")
            #expect(committed.item.size == Int64(ChunkKeys.sealedSize(ofPlaintext: 3_000) + ChunkKeys.sealedSize(ofPlaintext: 2_000)))

            // Another device gets it back (changes, fetch, the item) and opens it.
            let phone = try await client.signIn("ada", device: "phone")
            let changed = try await client.changes(notes, token: phone.token)
            let item = try #require(changed.items.first)
            let opened = try records.opened(item)
            #expect(opened.name == "Secret Plans.txt" && opened.type == "public.plain-text" && opened.modificationDate == 1_800_000_000)
            #expect(opened.manifest == manifest && opened.size == 5_000)
            let fetched = try await client.send(.post, "/v1/containers/\(notes)/fetch", token: phone.token, json: ["ids": ["plans"]])
            struct Fetched: Decodable { var items: [ItemState] }
            #expect(try records.opened(try #require(try fetched.decode(Fetched.self).items.first)).manifest == manifest)
            let brief = try await client.send(.get, "/v1/containers/\(notes)/changes?since=0&brief=true", token: phone.token).decode(ChangesResponse.self)
            #expect(try records.opened(try #require(brief.items.first)).digest == ContentToken.of(manifest, kind: .file).description)

            // A terse answer for the device that sent exactly this.
            let edited = Manifest(chunks: [ChunkReference(hash: sha256(old), size: 2_000)])
            let second = try records.sealed(ItemUpdate(baseRevision: committed.revision, name: "Secret Plans.txt", parent: nil, kind: .file,
                                                       modificationDate: 1_800_000_500, type: "public.plain-text", manifest: edited), item: "plans", manifest: edited)
            let batch = try await client.send(.post, "/v1/containers/\(notes)/commits?brief=true&terse=true", token: laptop.token,
                                              json: CommitBatchRequest(commits: [ItemCommit(item: "plans", update: second)]))
            let result = try #require(try batch.decode(CommitBatchResponse.self).results.first)
            #expect(result.committed != nil, "a sealed commit the server kept as sent is answered tersely")

            // The earlier revision, listed and fetched, opens to what it was.
            let listed = try await client.send(.get, "/v1/containers/\(notes)/items/plans/revisions", token: phone.token).decode(ItemRevisionsResponse.self)
            let earlier = try #require(listed.revisions.first)
            #expect(try records.opened(earlier, item: "plans").name == "Secret Plans.txt")
            let earlierContents = try await client.send(.get, "/v1/containers/\(notes)/items/plans/revisions/\(earlier.revision)", token: phone.token)
                .decode(RevisionContentsResponse.self)
            #expect(try records.opened(earlierContents, item: "plans").manifest == manifest)
        }
    }

    @Test(arguments: Backend.all) func sealedNamesThatClashAreRefusedAndConcurrentEditsKeepBoth(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let phone = try await client.signIn("ada", device: "phone")
            let root = try await SealedKeyValueServerTests().setUpKeys(client, laptop)
            let records = try #require(ItemRecords.keyed(container: notes, rootKeys: [root], sealing: true))
            // Records are bound to their item: these are sealed for each (empty files).
            func sealed(_ name: String, item: String, base: String? = nil) throws -> ItemUpdate {
                try records.sealed(ItemUpdate(baseRevision: base, name: name, parent: nil, kind: .file, modificationDate: 1, manifest: Manifest(chunks: [])),
                                   item: item, manifest: Manifest(chunks: []))
            }
            let first = try await client.commit(notes, "aaa", try sealed("Trips", item: "aaa"), token: laptop.token)
            // The same name in another case, from another item (either order of ids): refused, nothing renamed.
            for other in ["zzz", "000"] {
                let clash = try await client.put(notes, other, try sealed("TRIPS", item: other), token: phone.token)
                #expect(clash.status == .conflict && clash.errorCode == "nameTaken", "\(other): \(clash.status)")
            }
            let changes = try await client.changes(notes, token: phone.token)
            #expect(changes.items.map(\.id) == ["aaa"] && changes.items.first?.revision == first.revision, "the first item stays as it was")
            #expect(try records.opened(try #require(changes.items.first)).name == "Trips")
            // Another name goes.
            #expect(try await client.put(notes, "zzz", try sealed("Trips 2", item: "zzz"), token: phone.token).status == .ok)

            // Two devices edit the same revision: the later arrival is current, the other a
            // conflict version carrying its own record.
            let fromLaptop = try await client.commit(notes, "aaa", try sealed("Trips (laptop)", item: "aaa", base: first.revision), token: laptop.token)
            try await Task.sleep(for: .milliseconds(20))
            let fromPhone = try await client.commit(notes, "aaa", try sealed("Trips (phone)", item: "aaa", base: first.revision), token: phone.token)
            #expect(fromPhone.outcome == "current" && fromLaptop.outcome == "current")
            let state = try records.opened(fromPhone.item)
            #expect(state.name == "Trips (phone)" && state.conflicts.count == 1)
            // The answer carries the conflict version's record (read with the item's other
            // revisions before the commit): without it the device would take its sealed sizes
            // for the file's.
            #expect(fromPhone.item.conflicts.count == 1 && fromPhone.item.conflicts.allSatisfy { $0.record != nil })
            // A third edit of that base, arriving last, is current: both others are conflict
            // versions in the answer, each with its record.
            let third = try await client.commit(notes, "aaa", try sealed("Trips (tablet)", item: "aaa", base: first.revision), token: laptop.token)
            #expect(third.item.conflicts.count == 2 && third.item.conflicts.allSatisfy { $0.record != nil })
            #expect(try records.opened(third.item).name == "Trips (tablet)")
        }
    }

    /// The web interface under Standard opens sealed records with the escrow's keys — names in
    /// listings, crumbs, downloads, versions and Recently Deleted — and seals the records of
    /// what it changes, so a device opens them and the database holds no name; under Advanced
    /// a page that would have to read a name answers 409 `sealedOnDevices`.
    @Test(arguments: Backend.all) func theWebOpensAndSealsRecordsUnderStandardOnly(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let keyHolder = SealedKeyValueServerTests()
            let laptop = try await client.signIn("ada", device: "laptop")
            let root = try await keyHolder.setUpKeys(client, laptop)
            let records = try #require(ItemRecords.keyed(container: notes, rootKeys: [root], sealing: true))
            let contents = randomBytes(3_000)
            let (chunk, body) = try root.chunkKeys(container: notes).seal(contents)
            #expect(try await client.send(.put, "/v1/chunks/\(chunk)?sealed=1", token: laptop.token, raw: Array(body)).status == .created)
            let marker = "Secret\(UUID().uuidString.prefix(6))"
            let folder = ItemUpdate(baseRevision: nil, name: "Trips \(marker)", kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())
            _ = try await client.commit(notes, "trips", try records.sealed(folder, item: "trips", manifest: Manifest()), token: laptop.token)
            let manifest = Manifest(chunks: [ChunkReference(hash: chunk.description, size: 3_000)])
            let file = ItemUpdate(baseRevision: nil, name: "Plan \(marker).txt", parent: "trips", kind: .file, modificationDate: 1_800_000_100, manifest: manifest)
            _ = try await client.commit(notes, "plan", try records.sealed(file, item: "plan", manifest: manifest), token: laptop.token)

            let helper = WebInterfaceTests()
            let (cookie, csrf, _) = try await helper.webSignIn(client)
            let web = helper.session(cookie, csrf: csrf)
            let api = "/web/api/containers/\(notes)"
            let top = try await client.send(.get, "\(api)/folder", headers: web).decode(WebFolderResponse.self)
            #expect(top.items.map(\.name) == ["Trips \(marker)"])
            let inside = try await client.send(.get, "\(api)/folder?parent=trips", headers: web).decode(WebFolderResponse.self)
            #expect(inside.items.map(\.name) == ["Plan \(marker).txt"] && inside.items.first?.size == 3_000 && inside.items.first?.modificationDate == 1_800_000_100)
            #expect(inside.path.map(\.name) == ["Trips \(marker)"])
            let download = try await client.send(.get, "\(api)/items/plan/download", headers: web)
            #expect(download.status == .ok && Data(buffer: download.body) == contents)
            #expect(download.headers[.contentDisposition]?.contains("Plan") == true, "\(download.headers)")
            // A public link keeps the tag; its page and the list of links show the name.
            let published = try await client.send(.post, "/v1/containers/\(notes)/items/plan/links", token: laptop.token, json: PublishRequest(seconds: 3_600))
            let link = try published.decode(PublishedLink.self)
            #expect(!link.name.contains(marker))
            let fromLink = try await client.send(.get, try #require(link.path))
            #expect(Data(buffer: fromLink.body) == contents && fromLink.headers[.contentDisposition]?.contains("Plan") == true)
            let listedLinks = try await client.send(.get, "/web/api/links", headers: web).decode(PublishedLinksResponse.self)
            #expect(listedLinks.links.map(\.name) == ["Plan \(marker).txt"])

            // What the web changes is sealed: the device opens the new name; the server sees a tag.
            let moved = try await client.send(.post, "\(api)/items/plan/move", json: WebMoveRequest(name: "Renamed \(marker).txt"), headers: web)
            #expect(moved.status == .ok && (try? moved.decode(WebItem.self).name) == "Renamed \(marker).txt", "\(String(buffer: moved.body))")
            let made = try await client.send(.post, "\(api)/folders", json: WebFolderRequest(name: "Web \(marker)"), headers: web)
            #expect(made.status == .ok, "\(String(buffer: made.body))")
            // A file uploaded through the page: cut, named and sealed with the escrow's keys.
            let uploaded = Array("\(marker) uploaded through the page, ".utf8) + [UInt8](randomBytes(40_000))
            let part = try await client.send(.post, "/web/api/parts?fileSize=\(uploaded.count)&container=\(notes)", raw: uploaded, headers: web)
            let chunks = try part.decode(WebPartResponse.self).chunks
            #expect(chunks.reduce(0) { $0 + $1.size } == Int64(uploaded.count) && !chunks.contains { $0.hash == sha256(uploaded) })
            let uploadedFile = try await client.send(.post, "\(api)/files", json: WebFileRequest(name: "Upload \(marker).bin", parent: "trips", chunks: chunks), headers: web)
            #expect(uploadedFile.status == .ok, "\(String(buffer: uploadedFile.body))")
            let uploadedId = try uploadedFile.decode(WebItem.self).id
            let fromWeb = try await client.send(.get, "\(api)/items/\(uploadedId)/download", headers: web)
            #expect(Array(buffer: fromWeb.body) == uploaded)
            // A device opens the record and every chunk with its own keys.
            let state = try records.opened(try #require(try await client.changes(notes, token: laptop.token).items.first { $0.id == uploadedId }))
            #expect(state.name == "Upload \(marker).bin" && state.size == Int64(uploaded.count))
            var rebuilt: [UInt8] = []
            for chunk in try #require(state.manifest.chunks) {
                let sealedBytes = try await client.send(.get, "/v1/chunks/\(chunk.hash)", token: laptop.token)
                let id = try #require(ChunkIdentifier(hex: chunk.hash))
                rebuilt += try root.chunkKeys(container: notes).open(Data(buffer: sealedBytes.body), as: id)
            }
            #expect(rebuilt == uploaded)
            let seen = try await client.changes(notes, token: laptop.token)
            for item in seen.items {
                #expect(item.record != nil && !item.name.contains(marker), "\(item.id) is sealed")
            }
            #expect(Set(try seen.items.map { try records.opened($0).name }) == ["Trips \(marker)", "Renamed \(marker).txt", "Web \(marker)", "Upload \(marker).bin"])
            // A name that clashes with a sealed one (another case) is refused, not renamed.
            let clash = try await client.send(.post, "\(api)/folders", json: WebFolderRequest(name: "trips \(marker.lowercased())"), headers: web)
            #expect(clash.status == .conflict && clash.errorCode == "nameTaken", "\(String(buffer: clash.body))")
            let versions = try await client.send(.get, "\(api)/items/plan/versions", headers: web).decode(WebVersionsResponse.self)
            #expect(versions.item.name == "Renamed \(marker).txt" && versions.earlier.first?.size == 3_000)
            #expect(try await client.send(.delete, "\(api)/items/plan", headers: web).status == .noContent)
            let deleted = try await client.send(.get, "/web/api/deleted", headers: web).decode(WebDeletedResponse.self)
            #expect(deleted.items.map(\.name) == ["Renamed \(marker).txt"])
            // `ubiquity recover` with the escrow's key file shows the names; without it, the tags.
            let escrow = try EscrowKey.loadOrCreate(at: URL(fileURLWithPath: server.directory + "/escrow.key")).key
            // What the page changed is signed by the escrow, as a device signs what it changes: a
            // device's ledger takes the escrow's chain (the roster names it the escrow under
            // Standard), and each commit names the page's changes as the server made them.
            let kept = try await client.send(.get, "/v1/containers/\(notes)/signed-commits?after=0", token: laptop.token).decode(SignedCommitsPage.self)
            let roster = try Roster.verify(try await KeyDirectoryTests().directory(client, token: laptop.token).roster.map { try RosterEntry(encoded: $0) })
            var ledger = CommitLedger(container: notes)
            var signed: [String: CommitContent.Outcome] = [:]
            for stored in kept.commits {
                let commit = try SignedCommit(encoded: stored.commit), content = try CommitContent(encoded: stored.content)
                #expect(commit.device == escrow.keys.publicKeys.deviceIdentifier && content.hash == commit.contentHash)
                #expect(try ledger.accept(commit, roster: roster) == .accepted)
                for outcome in content.outcomes { signed[outcome.item] = outcome }
            }
            let madeId = try made.decode(WebItem.self).id
            #expect(kept.commits.count == 4 && Set(signed.keys) == ["plan", madeId, uploadedId], "\(kept.commits.count) commits")
            #expect(signed["plan"]?.deleted == true && signed[uploadedId]?.base == nil && signed[madeId]?.folder == nil)
            struct Fetched: Decodable { var items: [ItemState] }
            let states = try await client.send(.post, "/v1/containers/\(notes)/fetch", token: laptop.token, json: ["ids": Array(signed.keys)]).decode(Fetched.self).items
            #expect(states.count == signed.count)
            for state in states {
                let outcome = try #require(signed[state.id])
                #expect(state.revision == outcome.revision && state.sequence == outcome.sequence && state.deleted == outcome.deleted, "\(state.id)")
                if !state.deleted { #expect(CommitContent.recordHash(of: state.record) == outcome.recordHash, "\(state.id)") }
            }
            let recovered = try await server.admin.recoverable(accountName: "ada", escrow: escrow).filter { $0.item == "plan" }
            #expect(!recovered.isEmpty && recovered.allSatisfy { $0.record == nil && $0.name.contains(marker) }, "\(recovered.map(\.name))")
            #expect(recovered.contains { $0.name == "Renamed \(marker).txt" && $0.itemDeleted })
            let unopened = try await server.admin.recoverable(accountName: "ada").filter { $0.item == "plan" }
            #expect(!unopened.isEmpty && unopened.allSatisfy { $0.record != nil && !$0.name.contains(marker) })

            // A conflict resolved on the page and an item restored from Recently Deleted are
            // signed by the escrow too, each naming the state the server made.
            let phone = try await client.signIn("ada", device: "phone")
            let uploadedNow = try #require(states.first { $0.id == uploadedId })
            func edit(_ name: String) throws -> ItemUpdate {
                try records.sealed(ItemUpdate(baseRevision: uploadedNow.revision, name: name, parent: "trips", kind: .file, modificationDate: 1_800_000_200,
                                              manifest: Manifest(chunks: [])), item: uploadedId, manifest: Manifest(chunks: []))
            }
            let fromLaptop = try await client.commit(notes, uploadedId, try edit("Upload \(marker) (laptop).bin"), token: laptop.token)
            try await Task.sleep(for: .milliseconds(20))
            let fromPhone = try await client.commit(notes, uploadedId, try edit("Upload \(marker) (phone).bin"), token: phone.token)
            #expect(fromPhone.item.conflicts.map(\.revision) == [fromLaptop.revision])
            let resolved = try await client.send(.post, "\(api)/items/\(uploadedId)/resolve", json: WebResolveRequest(keep: fromLaptop.revision), headers: web)
            #expect(resolved.status == .ok, "\(String(buffer: resolved.body))")
            let deletedRevision = try #require(deleted.items.first?.revision)
            let restored = try await client.send(.post, "/web/api/deleted/restore", json: WebRestoreRequest(revisions: [deletedRevision]), headers: web)
            #expect(restored.status == .noContent, "\(String(buffer: restored.body))")
            let more = try await client.send(.get, "/v1/containers/\(notes)/signed-commits?after=\(try #require(kept.commits.last).position)", token: laptop.token)
                .decode(SignedCommitsPage.self)
            #expect(more.commits.count == 2, "the resolution's and the restore's")
            var afterPage: [String: CommitContent.Outcome] = [:]
            for stored in more.commits {
                let commit = try SignedCommit(encoded: stored.commit), content = try CommitContent(encoded: stored.content)
                #expect(try ledger.accept(commit, roster: roster) == .accepted)
                for outcome in content.outcomes { afterPage[outcome.item] = outcome }
            }
            let now = try await client.send(.post, "/v1/containers/\(notes)/fetch", token: laptop.token, json: ["ids": [uploadedId, "plan"]]).decode(Fetched.self).items
            for state in now {
                let outcome = try #require(afterPage[state.id])
                #expect(state.revision == outcome.revision && state.sequence == outcome.sequence && !state.deleted && !outcome.deleted, "\(state.id)")
                #expect(CommitContent.recordHash(of: state.record) == outcome.recordHash, "\(state.id)")
            }
            #expect(afterPage[uploadedId]?.revision == fromLaptop.revision && afterPage[uploadedId]?.base == fromPhone.revision)
            #expect(afterPage["plan"]?.base == signed["plan"]?.revision, "restored from its deletion")
            // `ubiquity recover --restore` on the server machine, with the escrow's key file:
            // signed the same way.
            let first = try #require(recovered.first { $0.name == "Plan \(marker).txt" }?.revision)
            #expect(try await server.admin.restore(accountName: "ada", revision: first, escrow: escrow))
            let byAdmin = try await client.send(.get, "/v1/containers/\(notes)/signed-commits?after=\(try #require(more.commits.last).position)", token: laptop.token)
                .decode(SignedCommitsPage.self)
            let adminStored = try #require(byAdmin.commits.first)
            let adminCommit = try SignedCommit(encoded: adminStored.commit)
            #expect(byAdmin.commits.count == 1)
            #expect(try ledger.accept(adminCommit, roster: roster) == .accepted)
            let adminOutcome = try #require(try CommitContent(encoded: adminStored.content).outcomes.first)
            let planStates = try await client.send(.post, "/v1/containers/\(notes)/fetch", token: laptop.token, json: ["ids": ["plan"]]).decode(Fetched.self).items
            let planNow = try #require(planStates.first)
            #expect(adminOutcome.item == "plan" && adminOutcome.revision == planNow.revision && adminOutcome.sequence == planNow.sequence)
            #expect(adminOutcome.base == afterPage["plan"]?.revision && adminOutcome.recordHash == CommitContent.recordHash(of: planNow.record))

            // The server's files hold none of the names.
            if backend == .sqlite {
                #expect(try await onBackgroundThread { Self.files(under: server.directory, contain: marker) } == [])
            }

            // Under Advanced the server holds no key: a listing that would need one is refused.
            let directory = try await KeyDirectoryTests().directory(client, token: laptop.token)
            let entries = try directory.roster.map { try RosterEntry(encoded: $0) }
            let advanced = try RosterEntry(.custody(.advanced), after: entries.last, signedBy: keyHolder.laptop)
            let switched = try await KeyDirectoryTests().append(client, token: laptop.token, after: entries.count, [advanced],
                                                                [try KeyDirectoryTests().envelope(AccountRootKey(epoch: 1), account: laptop.identityToken,
                                                                                                  to: keyHolder.laptop.publicKeys, from: keyHolder.laptop)])
            #expect(switched.status == .ok, "\(String(buffer: switched.body))")
            let shut = try await client.send(.get, "\(api)/folder", headers: web)
            #expect(shut.status == .conflict && shut.errorCode == "sealedOnDevices", "\(String(buffer: shut.body))")
            // And a name in plaintext is kept no more (a device of an older build): 409 sealedOnly,
            // alone or in a batch; a sealed one, and a deletion, go.
            let plain = ItemUpdate(baseRevision: nil, name: "Plain \(marker).txt", kind: .directory, modificationDate: 1_800_000_300, manifest: Manifest())
            let refusedPut = try await client.send(.put, "/v1/containers/\(notes)/items/plain", token: laptop.token, json: plain)
            #expect(refusedPut.status == .conflict && refusedPut.errorCode == "sealedOnly", "\(String(buffer: refusedPut.body))")
            let refusedBatch = try await client.send(.post, "/v1/containers/\(notes)/commits", token: laptop.token,
                                                     json: CommitBatchRequest(commits: [ItemCommit(item: "plain", update: plain)]))
            #expect(refusedBatch.status == .conflict && refusedBatch.errorCode == "sealedOnly")
            let sealedFolder = try records.sealed(plain, item: "sealed-after", manifest: Manifest())
            #expect(try await client.send(.put, "/v1/containers/\(notes)/items/sealed-after", token: laptop.token, json: sealedFolder).status == .ok)
            if backend == .sqlite {
                #expect(try await onBackgroundThread { Self.files(under: server.directory, contain: "Plain \(marker)") } == [])
            }
        }
    }

    /// The files under `directory` whose bytes contain `marker`.
    static func files(under directory: String, contain marker: String) -> [String] {
        guard let listed = FileManager.default.enumerator(atPath: directory) else { return ["cannot list \(directory)"] }
        return listed.compactMap { $0 as? String }.filter { path in
            (try? Data(contentsOf: URL(fileURLWithPath: directory).appendingPathComponent(path)))?.range(of: Data(marker.utf8)) != nil
        }
    }
}
