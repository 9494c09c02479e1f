import Foundation
import HummingbirdTesting
import UbiquityTestSupport
import Testing
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityServer

/// Shares and their invitations on the server (issue 46, docs/Sharing.md), on both backends: an
/// owner shares an item and invites accounts by name; an invitation to a name with no account is
/// answered exactly like any other; participants accept, decline and leave; the owner changes
/// roles, removes participants and stops sharing; shares do not nest; invitations are limited.
@Suite struct ShareServerTests {
    let notes = "ABCDE12345.com.example.notes"

    /// Ada's laptop, a folder "Trip" with a note in it and a file beside it, and two more
    /// accounts, Bob and Cy, each signed in on a phone.
    private func setUp(_ server: TestServer, _ client: Client) async throws -> (ada: String, bob: String, cy: String) {
        _ = try await server.admin.createAccount(name: "bob", password: "correct horse")
        _ = try await server.admin.createAccount(name: "cy", password: "correct horse")
        let ada = try await client.signIn("ada", device: "laptop").token
        let folder = ItemUpdate(baseRevision: nil, name: "Trip", kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())
        _ = try await client.commit(notes, "trip", folder, token: ada)
        let note = ItemUpdate(baseRevision: nil, name: "Note.txt", parent: "trip", kind: .file, modificationDate: 1_800_000_000, manifest: Manifest(chunks: []))
        _ = try await client.commit(notes, "note", note, token: ada)
        let other = ItemUpdate(baseRevision: nil, name: "Other.txt", kind: .file, modificationDate: 1_800_000_000, manifest: Manifest(chunks: []))
        _ = try await client.commit(notes, "other", other, token: ada)
        return (ada, try await client.signIn("bob", device: "phone").token, try await client.signIn("cy", device: "phone").token)
    }

    /// Ada's "Trip" shared with Bob (read-write) and Cy (read-only), both having accepted.
    private func tripShared(_ client: Client, by ada: String, with bob: String, readOnly cy: String) async throws -> ShareInfo {
        let share = try await client.send(.post, "/v1/shares", token: ada, json: ShareCreateRequest(container: notes, item: "trip")).decode(ShareInfo.self)
        for (name, role, token) in [("bob", ShareRole.readWrite, bob), ("cy", .readOnly, cy)] {
            let invitation = try await client.send(.post, "/v1/shares/\(share.id)/participants", token: ada, json: ShareInviteRequest(name: name, role: role))
                .decode(ShareInvitationResponse.self)
            #expect(try await client.send(.post, "/v1/shares/invitations/\(invitation.id)/accept", token: token).status == .noContent)
        }
        return share
    }

    private func list(_ client: Client, _ token: String) async throws -> SharesResponse {
        try await client.send(.get, "/v1/shares", token: token).decode(SharesResponse.self)
    }

    @Test(arguments: Backend.all) func anOwnerSharesInvitesAndParticipantsAnswer(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let (ada, bob, cy) = try await setUp(server, client)
            // Sharing the folder: made once; sharing it again answers the same share.
            let made = try await client.send(.post, "/v1/shares", token: ada, json: ShareCreateRequest(container: notes, item: "trip"))
            let share = try made.decode(ShareInfo.self)
            #expect(share.owner == "ada" && share.item == "trip" && share.name == "Trip" && share.role == nil && share.participants == [], "\(String(buffer: made.body))")
            #expect(share.id.count == 32 && share.id.allSatisfy(\.isHexDigit))
            #expect(try await client.send(.post, "/v1/shares", token: ada, json: ShareCreateRequest(container: notes, item: "trip")).decode(ShareInfo.self).id == share.id)
            // Shares do not nest; an item that does not exist is not shared.
            #expect(try await client.send(.post, "/v1/shares", token: ada, json: ShareCreateRequest(container: notes, item: "note")).errorCode == "shareOverlaps")
            #expect(try await client.send(.post, "/v1/shares", token: ada, json: ShareCreateRequest(container: notes, item: "nothing")).status == .notFound)

            // Invitations: to Bob, and to a name no account has — answered alike.
            let participants = "/v1/shares/\(share.id)/participants"
            let askedFrom = Date().timeIntervalSince1970
            let toBob = try await client.send(.post, participants, token: ada, json: ShareInviteRequest(name: "bob", role: .readWrite))
            let toNobody = try await client.send(.post, participants, token: ada, json: ShareInviteRequest(name: "nobody", role: .readWrite))
            let askedUntil = Date().timeIntervalSince1970
            #expect(toBob.status == .created && toNobody.status == toBob.status)
            let bobsInvitation = try toBob.decode(ShareInvitationResponse.self), nobodys = try toNobody.decode(ShareInvitationResponse.self)
            func fields(_ answer: Client.Answer) throws -> Set<String> {
                Set((try JSONSerialization.jsonObject(with: Data(buffer: answer.body)) as? [String: Any] ?? [:]).keys)
            }
            #expect(try fields(toBob) == fields(toNobody) && fields(toBob) == ["id", "expires"])
            // Both expire a week from when they were asked for (a loaded machine may take seconds
            // between the two requests, so each is held to the time around the calls, not to the other).
            let week = InvitationLimits().lifetime
            #expect(bobsInvitation.id.count == nobodys.id.count)
            for expires in [bobsInvitation.expires, nobodys.expires] {
                #expect(expires >= askedFrom + week - 1 && expires <= askedUntil + week + 1, "\(expires) not a week after \(askedFrom)…\(askedUntil)")
            }
            // Invited again while unanswered: the same invitation. Oneself: refused.
            #expect(try await client.send(.post, participants, token: ada, json: ShareInviteRequest(name: "bob", role: .readWrite))
                .decode(ShareInvitationResponse.self) == bobsInvitation)
            #expect(try await client.send(.post, participants, token: ada, json: ShareInviteRequest(name: "ada", role: .readOnly)).errorCode == "ownShare")

            // Bob sees the invitation; Cy sees nothing and cannot take Bob's.
            let invited = try await list(client, bob)
            #expect(invited.invitations.map(\.id) == [share.id] && invited.joined.isEmpty && invited.owned.isEmpty)
            #expect(invited.invitations.first?.owner == "ada" && invited.invitations.first?.name == "Trip" && invited.invitations.first?.role == .readWrite)
            #expect(try await list(client, cy) == SharesResponse(owned: [], joined: [], invitations: []))
            #expect(try await client.send(.post, "/v1/shares/invitations/\(bobsInvitation.id)/accept", token: cy).status == .notFound)
            // Bob accepts: joined.
            #expect(try await client.send(.post, "/v1/shares/invitations/\(bobsInvitation.id)/accept", token: bob).status == .noContent)
            #expect(try await list(client, bob).joined.map(\.id) == [share.id])
            #expect(try await client.send(.post, "/v1/shares/invitations/\(bobsInvitation.id)/accept", token: bob).status == .notFound, "answered already")
            // The owner sees both invitations; the one nobody can answer waits as any unanswered one.
            let owned = try #require(try await list(client, ada).owned.first)
            #expect(owned.participants?.map(\.name) == ["bob", "nobody"] && owned.participants?.map(\.state) == [.accepted, .invited])

            // Only the owner changes who it is shared with: a participant is told so, anyone else
            // finds no such share.
            #expect(try await client.send(.post, participants, token: bob, json: ShareInviteRequest(name: "cy", role: .readOnly)).errorCode == "notOwner")
            #expect(try await client.send(.post, participants, token: cy, json: ShareInviteRequest(name: "cy", role: .readOnly)).status == .notFound)
            #expect(try await client.send(.delete, "/v1/shares/\(share.id)", token: bob).errorCode == "notOwner")
            // A role changed; Bob leaves, and may not leave twice.
            #expect(try await client.send(.patch, "\(participants)/\(bobsInvitation.id)", token: ada, json: ShareRoleRequest(role: .readOnly)).status == .noContent)
            #expect(try await list(client, bob).joined.first?.role == .readOnly)
            #expect(try await client.send(.post, "/v1/shares/\(share.id)/leave", token: bob).status == .noContent)
            #expect(try await list(client, bob).joined.isEmpty)
            #expect(try await client.send(.post, "/v1/shares/\(share.id)/leave", token: bob).status == .notFound)
            // Invited again: a new invitation, which Bob declines.
            let again = try await client.send(.post, participants, token: ada, json: ShareInviteRequest(name: "bob", role: .readWrite)).decode(ShareInvitationResponse.self)
            #expect(again.id != bobsInvitation.id)
            #expect(try await client.send(.post, "/v1/shares/invitations/\(again.id)/decline", token: bob).status == .noContent)
            #expect(try await list(client, bob) == SharesResponse(owned: [], joined: [], invitations: []))
            // The owner removes the unanswered invitation, then stops sharing.
            #expect(try await client.send(.delete, "\(participants)/\(nobodys.id)", token: ada).status == .noContent)
            #expect(try await list(client, ada).owned.first?.participants?.map(\.state) == [.left, .removed, .declined])
            #expect(try await client.send(.delete, "/v1/shares/\(share.id)", token: ada).status == .noContent)
            #expect(try await list(client, ada).owned.isEmpty)
            #expect(try await client.send(.delete, "/v1/shares/\(share.id)", token: ada).status == .notFound)
        }
    }

    /// What a share holds reaches its participants through it, and nothing else: the owner's
    /// container's changes inside the share only, the root at the top; an item outside answers
    /// as one that does not exist; a stranger, or a participant who left, finds no such share.
    @Test(arguments: Backend.all) func aParticipantReadsWhatIsInsideTheShareAndNothingElse(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let (ada, bob, cy) = try await setUp(server, client)
            let share = try await client.send(.post, "/v1/shares", token: ada, json: ShareCreateRequest(container: notes, item: "trip")).decode(ShareInfo.self)
            let invitation = try await client.send(.post, "/v1/shares/\(share.id)/participants", token: ada, json: ShareInviteRequest(name: "bob", role: .readWrite))
                .decode(ShareInvitationResponse.self)
            let address = "/v1/shares/\(share.id)"
            // Not before accepting.
            #expect(try await client.send(.get, "\(address)/changes", token: bob).status == .notFound)
            #expect(try await client.send(.post, "/v1/shares/invitations/\(invitation.id)/accept", token: bob).status == .noContent)

            let first = try await client.send(.get, "\(address)/changes", token: bob).decode(ChangesResponse.self)
            #expect(Set(first.items.map(\.id)) == ["trip", "note"] && !first.more)
            #expect(first.items.first { $0.id == "trip" }?.parent == nil && first.items.first { $0.id == "note" }?.parent == "trip")
            #expect(try await client.send(.get, "\(address)/items/note", token: bob).decode(ItemState.self).name == "Note.txt")
            // Outside the share, or no such item: the same answer.
            let outside = try await client.send(.get, "\(address)/items/other", token: bob), absent = try await client.send(.get, "\(address)/items/nothing", token: bob)
            #expect(outside.status == .notFound && absent.status == .notFound && String(buffer: outside.body) == String(buffer: absent.body))
            // A new item inside comes with the next page; one outside does not.
            let inside = ItemUpdate(baseRevision: nil, name: "Plan.txt", parent: "trip", kind: .file, modificationDate: 1_800_000_100, manifest: Manifest(chunks: []))
            _ = try await client.commit(notes, "plan", inside, token: ada)
            let beside = ItemUpdate(baseRevision: nil, name: "Beside.txt", kind: .file, modificationDate: 1_800_000_100, manifest: Manifest(chunks: []))
            _ = try await client.commit(notes, "beside", beside, token: ada)
            let next = try await client.send(.get, "\(address)/changes?since=\(first.sequence)", token: bob).decode(ChangesResponse.self)
            #expect(next.items.map(\.id) == ["plan"])
            // Page by page, one change at a time: a page of the owner's changes outside the share
            // lists nothing, and says where the next one starts; every page together lists what
            // is inside, once.
            var paged: [String] = [], cursor: Int64 = 0, pages = 0
            while pages < 50 {
                pages += 1
                let page = try await client.send(.get, "\(address)/changes?since=\(cursor)&limit=1", token: bob).decode(ChangesResponse.self)
                paged += page.items.map(\.id)
                guard page.more else { break }
                let following = try #require(page.next ?? page.items.last?.sequence, "a page with more to come says where it goes on")
                #expect(following > cursor)
                cursor = following
            }
            #expect(paged.sorted() == ["note", "plan", "trip"], "\(paged)")
            // The owner moves the note out of the share: to Bob it is gone, nothing of where it went;
            // moved back in, it is there again.
            let noteNow = try await client.send(.get, "/v1/containers/\(notes)/items/note", token: ada).decode(ItemState.self)
            let out = ItemUpdate(baseRevision: noteNow.revision, name: "Note.txt", kind: .file, modificationDate: 1_800_000_200, manifest: Manifest(chunks: []))
            let moved = try await client.commit(notes, "note", out, token: ada)
            let afterMove = try await client.send(.get, "\(address)/changes?since=\(next.sequence)", token: bob).decode(ChangesResponse.self)
            let gone = try #require(afterMove.items.first { $0.id == "note" }, "\(afterMove.items.map(\.id))")
            #expect(gone.deleted && gone.parent == nil && gone.name.isEmpty && gone.revision != moved.revision && afterMove.items.count == 1)
            #expect(try await client.send(.get, "\(address)/items/note", token: bob).status == .notFound)
            let back = ItemUpdate(baseRevision: moved.revision, name: "Note.txt", parent: "trip", kind: .file, modificationDate: 1_800_000_300, manifest: Manifest(chunks: []))
            _ = try await client.commit(notes, "note", back, token: ada)
            let returned = try await client.send(.get, "\(address)/changes?since=\(afterMove.sequence)", token: bob).decode(ChangesResponse.self)
            #expect(returned.items.map(\.id) == ["note"] && returned.items.first?.deleted == false && returned.items.first?.parent == "trip")
            // The owner reads it the same way; a stranger finds no such share, nor does Bob once he left.
            #expect(Set(try await client.send(.get, "\(address)/changes", token: ada).decode(ChangesResponse.self).items.filter { !$0.deleted }.map(\.id)) == ["trip", "note", "plan"])
            #expect(try await client.send(.get, "\(address)/changes", token: cy).status == .notFound)
            #expect(try await client.send(.post, "\(address)/leave", token: bob).status == .noContent)
            #expect(try await client.send(.get, "\(address)/changes", token: bob).status == .notFound)
            #expect(try await client.send(.get, "\(address)/items/note", token: bob).status == .notFound)
        }
    }

    /// Changes through a share: a read-write participant's go into the owner's container, inside
    /// the share only (nothing moved out, made beside it or reached outside it; its top item keeps
    /// its name and place); a read-only participant's are refused whole.
    @Test(arguments: Backend.all) func aParticipantChangesOnlyWhatIsInsideAndOnlyWithWriteAccess(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let (ada, bob, cy) = try await setUp(server, client)
            let share = try await tripShared(client, by: ada, with: bob, readOnly: cy)
            let commits = "/v1/shares/\(share.id)/commits"
            func commit(_ item: String, _ update: ItemUpdate, as token: String) async throws -> CommitResult {
                let answer = try await client.send(.post, commits, token: token, json: CommitBatchRequest(commits: [ItemCommit(item: item, update: update)]))
                return try #require(try answer.decode(CommitBatchResponse.self).results.first, "\(answer.status): \(String(buffer: answer.body))")
            }
            func file(_ name: String, in folder: String?, base: String? = nil) -> ItemUpdate {
                ItemUpdate(baseRevision: base, name: name, parent: folder, kind: .file, modificationDate: 1_800_000_500, manifest: Manifest(chunks: []))
            }
            // A new file inside, and an edit of one there: in Ada's container, made by Bob's phone.
            #expect(try await commit("bobs", file("From Bob.txt", in: "trip"), as: bob).commit?.outcome == "current")
            let kept = try await client.send(.get, "/v1/containers/\(notes)/items/bobs", token: ada).decode(ItemState.self)
            #expect(kept.name == "From Bob.txt" && kept.parent == "trip" && kept.deviceName == "phone")
            let note = try await client.send(.get, "/v1/containers/\(notes)/items/note", token: ada).decode(ItemState.self)
            #expect(try await commit("note", file("Note (Bob).txt", in: "trip", base: note.revision), as: bob).commit != nil)
            // Not out of the share, not beside it, nothing outside it (as if it did not exist).
            let renamed = try await client.send(.get, "/v1/containers/\(notes)/items/note", token: ada).decode(ItemState.self)
            #expect(try await commit("note", file("Note (Bob).txt", in: nil, base: renamed.revision), as: bob).error?.code == "outsideShare")
            #expect(try await commit("beside", file("Beside.txt", in: nil), as: bob).error?.code == "outsideShare")
            let other = try await client.send(.get, "/v1/containers/\(notes)/items/other", token: ada).decode(ItemState.self)
            #expect(try await commit("other", file("Taken.txt", in: "trip", base: other.revision), as: bob).error?.code == "notFound")
            // The top item keeps its owner's name and place (a participant's device names it as
            // it must at the top of its Documents; that name is not sent on), and is not deleted
            // through the share; shown, and sent, at the top.
            let trip = try await client.send(.get, "/v1/shares/\(share.id)/items/trip", token: bob).decode(ItemState.self)
            let folder = { (name: String) in ItemUpdate(baseRevision: trip.revision, name: name, kind: .directory, modificationDate: 1_800_000_600, manifest: Manifest()) }
            var deletion = folder("Trip")
            deletion.deleted = true
            #expect(try await commit("trip", deletion, as: bob).error?.code == "outsideShare")
            let top = try #require(try await commit("trip", folder("Trip (from ada)"), as: bob).commit?.item)
            #expect(top.parent == nil && top.name == "Trip")
            #expect(try await client.send(.get, "/v1/containers/\(notes)/items/trip", token: ada).decode(ItemState.self).name == "Trip")
            #expect(try await client.send(.get, "/v1/containers/\(notes)/items/other", token: ada).decode(ItemState.self).name == "Other.txt")
            #expect(try await client.send(.get, "/v1/containers/\(notes)/items/beside", token: ada).status == .notFound)
            // Read-only: refused whole, nothing changed.
            let refused = try await client.send(.post, commits, token: cy, json: CommitBatchRequest(commits: [ItemCommit(item: "cys", update: file("From Cy.txt", in: "trip"))]))
            #expect(refused.status == .forbidden && refused.errorCode == "readOnly", "\(String(buffer: refused.body))")
            #expect(try await client.send(.get, "/v1/containers/\(notes)/items/cys", token: ada).status == .notFound)
        }
    }

    /// Who made each revision: a participant's change is named with the participant's account
    /// (the current revision, a conflict version, an earlier revision and its contents, read by
    /// the owner or through the share); the owner's own are named with none.
    @Test(arguments: Backend.all) func eachRevisionNamesTheParticipantWhoMadeIt(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let (ada, bob, cy) = try await setUp(server, client)
            let share = try await tripShared(client, by: ada, with: bob, readOnly: cy)
            let (own, shared) = ("/v1/containers/\(notes)/items/note", "/v1/shares/\(share.id)/items/note")
            let before = try await client.send(.get, own, token: ada).decode(ItemState.self)
            #expect(before.editor == nil, "the owner's own revision names no one")
            func edit(_ base: String, at date: Double, as token: String, bytes: [UInt8] = []) async throws -> CommitResult {
                let chunks = bytes.isEmpty ? [] : [ChunkReference(hash: sha256(bytes), size: Int64(bytes.count))]
                let update = ItemUpdate(baseRevision: base, name: "Note.txt", parent: "trip", kind: .file, modificationDate: date, manifest: Manifest(chunks: chunks))
                let path = token == ada ? "/v1/containers/\(notes)/commits" : "/v1/shares/\(share.id)/commits"
                let answer = try await client.send(.post, path, token: token, json: CommitBatchRequest(commits: [ItemCommit(item: "note", update: update)]))
                return try #require(try answer.decode(CommitBatchResponse.self).results.first, "\(String(buffer: answer.body))")
            }
            let bobs = try #require(try await edit(before.revision, at: 1_800_000_100, as: bob).commit?.revision)
            for (path, token) in [(own, ada), (shared, bob), (shared, cy)] {
                let seen = try await client.send(.get, path, token: token).decode(ItemState.self)
                #expect(seen.revision == bobs && seen.editor == "bob", "\(path)")
            }
            let changes = try await client.send(.get, "/v1/containers/\(notes)/changes?since=0", token: ada).decode(ChangesResponse.self)
            #expect(changes.items.first { $0.id == "note" }?.editor == "bob")
            // Ada edits it again: hers names no one; Bob's is now an earlier revision, named.
            let adas = try #require(try await edit(bobs, at: 1_800_000_200, as: ada).commit?.revision)
            #expect(try await client.send(.get, own, token: ada).decode(ItemState.self).editor == nil)
            let earlier = try await client.send(.get, "\(shared)/revisions", token: bob).decode(ItemRevisionsResponse.self).revisions
            #expect(earlier.first { $0.revision == bobs }?.editor == "bob" && earlier.first { $0.revision == before.revision }?.editor == nil, "\(earlier)")
            let contents = try await client.send(.get, "\(own)/revisions/\(bobs)", token: ada).decode(RevisionContentsResponse.self)
            #expect(contents.editor == "bob")
            // Both change Ada's revision at once: whichever loses, each version names its maker.
            let (hers, his) = ([UInt8](randomBytes(100)), [UInt8](randomBytes(100)))
            for bytes in [hers, his] { #expect(try await client.upload(bytes, token: ada).status == .created) } // (the owner's account holds both)
            _ = try await edit(adas, at: 1_800_000_300, as: ada, bytes: hers)
            let late = try #require(try await edit(adas, at: 1_800_000_250, as: bob, bytes: his).commit?.revision)
            let both = try await client.send(.get, own, token: ada).decode(ItemState.self)
            let named = [(both.revision, both.editor)] + both.conflicts.map { ($0.revision, $0.editor) }
            #expect(both.conflicts.count == 1 && named.allSatisfy { ($0.0 == late) == ($0.1 == "bob") }, "\(named)")
        }
    }

    /// Chunks through a share: a participant reads only the chunks a revision inside the share
    /// names — any other chunk of the owner's is answered as absent, fetched or asked about —
    /// and what it sends is kept in the owner's account (a read-only participant sends nothing).
    @Test(arguments: Backend.all) func aParticipantReadsOnlyTheChunksInsideAndSendsToTheOwner(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let (ada, bob, cy) = try await setUp(server, client)
            let share = try await tripShared(client, by: ada, with: bob, readOnly: cy)
            let insideBytes = [UInt8](randomBytes(3_000)), outsideBytes = [UInt8](randomBytes(3_000)), absentBytes = [UInt8](randomBytes(3_000))
            var inside = fileUpdate("Inside.bin", [insideBytes])
            inside.parent = "trip"
            _ = try await client.commit(notes, "inside", inside, token: ada)
            _ = try await client.commit(notes, "outside", fileUpdate("Outside.bin", [outsideBytes]), token: ada)
            let (a, b, c) = (sha256(insideBytes), sha256(outsideBytes), sha256(absentBytes))
            let address = "/v1/shares/\(share.id)/chunks"

            // Read: the chunk inside; the owner's chunk outside answered as one nobody holds.
            for token in [bob, cy] {
                let fetched = try await client.send(.post, "\(address)/fetch", token: token, json: ChunkFetchRequest(hashes: [a]))
                #expect(fetched.status == .ok && (try? ChunkBatch(decoding: Array(Data(buffer: fetched.body)), maximumChunkSize: 1 << 20))?.chunks.first.map { Array($0.bytes) } == insideBytes)
            }
            let outside = try await client.send(.post, "\(address)/fetch", token: bob, json: ChunkFetchRequest(hashes: [b]))
            let absent = try await client.send(.post, "\(address)/fetch", token: bob, json: ChunkFetchRequest(hashes: [c]))
            #expect(outside.status == .notFound && absent.status == .notFound && outside.errorCode == absent.errorCode, "\(String(buffer: outside.body))")
            let missing = try await client.send(.post, "\(address)/missing", token: bob, json: MissingChunksRequest(hashes: [a, b, c])).decode(MissingChunksResponse.self)
            #expect(missing.missing == [b, c], "the owner's chunk outside the share is as missing as one nobody holds")

            // Sent by Bob through the share, committed there: kept in Ada's account, not Bob's.
            let bobsBytes = [UInt8](randomBytes(2_000)), d = sha256(bobsBytes)
            let batch = ChunkBatch([ChunkBatch.Chunk(hash: d, bytes: bobsBytes)]).encoded()
            #expect(try await client.send(.post, address, token: bob, raw: batch).status == .created)
            var bobs = ItemUpdate(baseRevision: nil, name: "From Bob.bin", parent: "trip", kind: .file, modificationDate: 1_800_000_700,
                                  manifest: Manifest(chunks: [ChunkReference(hash: d, size: 2_000)]))
            bobs.type = "public.data"
            let committed = try await client.send(.post, "/v1/shares/\(share.id)/commits", token: bob, json: CommitBatchRequest(commits: [ItemCommit(item: "bobs", update: bobs)]))
            #expect(try committed.decode(CommitBatchResponse.self).results.first?.commit?.outcome == "current", "\(String(buffer: committed.body))")
            #expect(try await server.storedChunk(d, of: "ada") == Data(bobsBytes))
            #expect(try await server.storedChunk(d, of: "bob") == nil)
            // Read-only: sends nothing.
            let refused = try await client.send(.post, address, token: cy, raw: ChunkBatch([ChunkBatch.Chunk(hash: c, bytes: absentBytes)]).encoded())
            #expect(refused.status == .forbidden && refused.errorCode == "readOnly")
            #expect(try await server.storedChunk(c, of: "ada") == nil)
        }
    }

    /// An account makes at most 50 invitations an hour, whether or not the names have accounts.
    @Test(arguments: Backend.all) func invitationsAreLimitedAlikeForEveryName(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let (ada, _, _) = try await setUp(server, client)
            let share = try await client.send(.post, "/v1/shares", token: ada, json: ShareCreateRequest(container: notes, item: "other")).decode(ShareInfo.self)
            let participants = "/v1/shares/\(share.id)/participants"
            for index in 0..<49 {
                #expect(try await client.send(.post, participants, token: ada, json: ShareInviteRequest(name: "someone \(index)", role: .readOnly)).status == .created)
            }
            #expect(try await client.send(.post, participants, token: ada, json: ShareInviteRequest(name: "bob", role: .readOnly)).status == .created)
            let absent = try await client.send(.post, participants, token: ada, json: ShareInviteRequest(name: "someone else", role: .readOnly))
            let present = try await client.send(.post, participants, token: ada, json: ShareInviteRequest(name: "cy", role: .readOnly))
            #expect(absent.status == .tooManyRequests && absent.errorCode == "tooManyInvitations")
            #expect(present.status == absent.status && String(buffer: present.body) == String(buffer: absent.body))
        }
    }

    /// Invitations expire unanswered (then they cannot be accepted), and an owner has at most so
    /// many unanswered at once (the database's rules, with small limits).
    @Test(arguments: Backend.all) func invitationsExpireAndThoseWaitingAreLimited(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            _ = try await setUp(server, client)
            let database = server.admin.database
            let accounts = try await database.accounts()
            let ada = try #require(accounts.first { $0.name == "ada" }).id, bob = try #require(accounts.first { $0.name == "bob" }).id
            let share = try await database.makeShare(accountId: ada, container: notes, item: "trip", id: "s1", now: 1_000)
            var limits = InvitationLimits()
            limits.pending = 2
            limits.lifetime = 100
            let toBob = try #require(try await database.invite(shareId: share.id, ownerId: ada, name: "bob", role: .readOnly, id: "p1", now: 1_000, limits: limits))
            #expect(toBob.accountId == bob)
            let absent = try #require(try await database.invite(shareId: share.id, ownerId: ada, name: "nobody", role: .readOnly, id: "p2", now: 1_000, limits: limits))
            #expect(absent.accountId == nil)
            #expect(try await database.invite(shareId: share.id, ownerId: ada, name: "cy", role: .readOnly, id: "p3", now: 1_010, limits: limits) == nil, "two waiting")
            // Past their lifetime they are expired: not accepted, and no longer counted as waiting.
            #expect(try await database.participations(accountId: bob).first?.participant.state(at: 1_101) == .expired)
            #expect(try await !database.updateParticipant(ParticipantMatch(id: "p1", participant: bob), from: [.invited], to: .accepted, role: nil, now: 1_101))
            #expect(try await database.invite(shareId: share.id, ownerId: ada, name: "cy", role: .readOnly, id: "p3", now: 1_101, limits: limits) != nil)
        }
    }

    /// An item sealed with the account's keys is shared sealed where the server is told to
    /// (`--sealed-shares`): the server names nothing of it and says so (its members' devices
    /// seal it with the share's keys: docs/Sharing.md, "Keys"); elsewhere refused.
    @Test(arguments: Backend.all, [false, true]) func aSealedItemIsSharedSealedWhereTheServerDoes(backend: Backend, sealedShares: Bool) async throws {
        let server = try await TestServer.withAccount("ada", on: backend, sealedShares: sealedShares); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let root = try await SealedKeyValueServerTests().setUpKeys(client, laptop)
            let records = try #require(ItemRecords.keyed(container: notes, rootKeys: [root], sealing: true))
            let folder = ItemUpdate(baseRevision: nil, name: "Trip", parent: nil, kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())
            let sealed = try records.sealed(folder, item: "trip", manifest: Manifest())
            #expect(try await client.send(.put, "/v1/containers/\(notes)/items/trip", token: laptop.token, json: sealed).status == .ok)
            let made = try await client.send(.post, "/v1/shares", token: laptop.token, json: ShareCreateRequest(container: notes, item: "trip"))
            guard sealedShares else {
                #expect(made.status == .conflict && made.errorCode == "sealedShare", "\(String(buffer: made.body))")
                #expect(try await client.send(.get, "/v1/shares", token: laptop.token).decode(SharesResponse.self).owned.isEmpty)
                return
            }
            let share = try made.decode(ShareInfo.self)
            #expect(share.sealed == true && share.name == nil, "\(share)")
            #expect(try await client.send(.get, "/v1/shares", token: laptop.token).decode(SharesResponse.self).owned.map(\.sealed) == [true])
        }
    }
}
