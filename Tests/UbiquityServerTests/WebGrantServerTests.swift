import Foundation
import HTTPTypes
import HummingbirdTesting
import UbiquityTestSupport
import UbiquitySync
import Testing
import UbiquityKeys
import UbiquityProtocol
@testable import UbiquityServer

/// The server's half of a browser let in under Advanced Data Protection: a browser's request
/// goes through the steps of a device's (answered, revealed) and only then takes a device's
/// grant; the grant lasts at most an hour and is the session's alone; sealed data is served to
/// a session only while a grant names its container.
@Suite struct WebGrantServerTests {
    let notes = "ABCDE12345.com.example.notes"

    @Test(arguments: Backend.all) func aBrowsersGrantIsKeptForItsSessionAndOpensOnlyItsContainersForAnHour(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let keyHolder = SealedKeyValueServerTests()
            let laptop = try await client.signIn("ada", device: "laptop")
            let root = try await keyHolder.setUpKeys(client, laptop)
            let records = try #require(ItemRecords.keyed(container: notes, rootKeys: [root], sealing: true))
            let contents = randomBytes(3_000)
            let (chunk, body) = try root.chunkKeys(container: notes).seal(contents)
            #expect(try await client.send(.put, "/v1/chunks/\(chunk)?sealed=1", token: laptop.token, raw: Array(body)).status == .created)
            let manifest = Manifest(chunks: [ChunkReference(hash: chunk.description, size: 3_000)])
            let file = ItemUpdate(baseRevision: nil, name: "Plan.txt", kind: .file, modificationDate: 1_800_000_100, manifest: manifest)
            _ = try await client.commit(notes, "plan", try records.sealed(file, item: "plan", manifest: manifest), token: laptop.token)

            let helper = WebInterfaceTests()
            let (cookie, csrf, _) = try await helper.webSignIn(client)
            let web = helper.session(cookie, csrf: csrf)
            let sealed = "/web/api/containers/\(notes)/sealed"
            // No grant yet: nothing sealed is served.
            #expect(try await client.send(.get, "/web/api/grant", headers: web).errorCode == "noGrant")
            let early = try await client.send(.get, "\(sealed)/changes", headers: web)
            #expect(early.status == .forbidden && early.errorCode == "noGrant")
            #expect(try await client.send(.post, "\(sealed)/bases", json: ChunkBasesRequest(hashes: []), headers: web).errorCode == "noGrant")

            // The browser asks (its keys and a commitment); the laptop answers; the browser reveals.
            let browser = DeviceKeys(), nonce = JoinCode.nonce()
            let commitment = JoinCode.commitment(to: nonce, joining: browser.publicKeys)
            let asked = try await client.send(.post, "/web/api/approval", json: WebApprovalCreate(signing: Data(browser.publicKeys.signing), agreement: Data(browser.publicKeys.agreement),
                                                                                                  commitment: Data(commitment)), headers: web)
            let request = try asked.decode(KeyRequestRecord.self)
            #expect(request.kind == KeyRequestRecord.browserKind)
            let expires = Date().timeIntervalSince1970 + 3_000
            let grant = WebGrantUpload(body: Data(repeating: 1, count: 200), signature: Data(repeating: 2, count: 64), containers: [notes], expires: expires)
            // Not before it is answered and revealed.
            #expect(try await client.send(.post, "/v1/keys/requests/\(request.id)/grant", token: laptop.token, json: grant).errorCode == "notPending")
            let laptopId = keyHolder.laptop.publicKeys.deviceIdentifier
            let answer = JoinCode.answerNonce(device: keyHolder.laptop, request: request.id, commitment: commitment)
            #expect(try await client.send(.post, "/v1/keys/requests/\(request.id)/answer", token: laptop.token,
                                          json: KeyRequestNonce(nonce: Data(answer), answerer: laptopId)).status == .ok)
            let state = try await client.send(.get, "/web/api/approval/\(request.id)", headers: web).decode(WebApprovalState.self)
            #expect(state.approver?.name == "laptop" && state.approver?.signing == Data(keyHolder.laptop.publicKeys.signing))
            #expect(try await client.send(.post, "/web/api/approval/\(request.id)/reveal", json: KeyRequestNonce(nonce: Data(nonce)), headers: web).status == .noContent)
            // More than an hour, or no container: refused.
            var long = grant
            long.expires = Date().timeIntervalSince1970 + 7_200
            #expect(try await client.send(.post, "/v1/keys/requests/\(request.id)/grant", token: laptop.token, json: long).errorCode == "invalidGrant")
            var none = grant
            none.containers = []
            #expect(try await client.send(.post, "/v1/keys/requests/\(request.id)/grant", token: laptop.token, json: none).errorCode == "invalidGrant")
            #expect(try await client.send(.post, "/v1/keys/requests/\(request.id)/grant", token: laptop.token, json: grant).status == .noContent)

            // The session gets it as the device sent it, and the container's sealed data with it.
            #expect(try await client.send(.get, "/web/api/grant", headers: web).decode(WebGrantUpload.self) == grant)
            let changes = try await client.send(.get, "\(sealed)/changes", headers: web).decode(ChangesResponse.self)
            #expect(changes.items.map(\.id) == ["plan"] && changes.items.first?.record != nil && changes.items.first?.name != "Plan.txt")
            let item = try await client.send(.get, "\(sealed)/items/plan", headers: web).decode(ItemState.self)
            #expect(item.manifest.chunks?.map(\.hash) == [chunk.description])
            let stored = try await client.send(.get, "\(sealed)/chunks/\(chunk.description)", headers: web)
            #expect(stored.status == .ok && Data(buffer: stored.body) == body)
            // Which chunks are patches (for a link the page seals): none here.
            let bases = try await client.send(.post, "\(sealed)/bases", json: ChunkBasesRequest(hashes: [chunk.description]), headers: web)
            #expect(bases.status == .ok && (try? bases.decode(ChunkBasesResponse.self).bases) == [:], "\(String(buffer: bases.body))")
            // Another container, or another session of the account: nothing.
            let other = try await client.send(.get, "/web/api/containers/ABCDE12345.com.example.other/sealed/changes", headers: web)
            #expect(other.status == .forbidden && other.errorCode == "noGrant")
            let (cookie2, csrf2, _) = try await helper.webSignIn(client)
            #expect(try await client.send(.get, "\(sealed)/changes", headers: helper.session(cookie2, csrf: csrf2)).errorCode == "noGrant")
            // The request is used up: no second grant by it.
            #expect(try await client.send(.post, "/v1/keys/requests/\(request.id)/grant", token: laptop.token, json: grant).errorCode == "notPending")
            // A device's request to join takes no grant.
            let joining = DeviceKeys(), joinNonce = JoinCode.nonce()
            let phone = try await client.signIn("ada", device: "phone")
            let join = try await client.send(.post, "/v1/keys/requests", token: phone.token,
                                             json: KeyRequestCreate(signing: Data(joining.publicKeys.signing), agreement: Data(joining.publicKeys.agreement), name: "phone",
                                                                    commitment: Data(JoinCode.commitment(to: joinNonce, joining: joining.publicKeys)))).decode(KeyRequestRecord.self)
            #expect(join.kind == nil)
            _ = try await client.send(.post, "/v1/keys/requests/\(join.id)/answer", token: laptop.token, json: KeyRequestNonce(nonce: Data(JoinCode.nonce()), answerer: laptopId))
            _ = try await client.send(.post, "/v1/keys/requests/\(join.id)/reveal", token: phone.token, json: KeyRequestNonce(nonce: Data(joinNonce)))
            #expect(try await client.send(.post, "/v1/keys/requests/\(join.id)/grant", token: laptop.token, json: grant).errorCode == "notPending")
        }
    }

    @Test(arguments: Backend.all) func aGrantEndsWhenItExpires(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let account = try #require(try await server.admin.database.accounts().first { $0.name == "ada" }).id
            let request = KeyRequestRecord(id: "r1", signing: Data(repeating: 1, count: 32), agreement: Data(repeating: 2, count: 32), name: "web browser",
                                           commitment: Data(repeating: 3, count: 32), created: Date().timeIntervalSince1970, kind: KeyRequestRecord.browserKind)
            let database = server.admin.database
            #expect(try await database.addKeyRequest(accountId: account, deviceId: "web-1", request: request, since: 0, limit: 8))
            #expect(try await database.answerKeyRequest(accountId: account, id: "r1", answerer: String(repeating: "a", count: 32), nonce: Data(repeating: 4, count: 32), since: 0))
            #expect(try await database.revealKeyRequest(accountId: account, id: "r1", deviceId: "web-1", nonce: Data(repeating: 5, count: 32), since: 0))
            let now = Date().timeIntervalSince1970
            let grant = WebGrantUpload(body: Data([1]), signature: Data(repeating: 2, count: 64), containers: [notes], expires: now + 60)
            #expect(try await database.keepWebGrant(accountId: account, id: "r1", grant: grant, since: 0))
            #expect(try await database.webGrant(accountId: account, deviceId: "web-1", now: now) == grant)
            #expect(try await database.webGrant(accountId: account, deviceId: "web-1", now: now + 61) == nil, "expired")
            #expect(try await database.webGrant(accountId: account, deviceId: "web-2", now: now) == nil, "another session's")
        }
    }

    /// Under Advanced the page makes changes of its own: only sealed ones (a record with each
    /// change but a deletion, no bytes inline), through its grant, and the commit of what they
    /// made signed with the browser's key, which a device let into the roster. The server keeps
    /// no commit of a key the roster never let in, nor of a session that has ended.
    @Test(arguments: Backend.all) func thePageCommitsOnlySealedChangesSignedByTheKeyTheRosterLetIn(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let page = try await advancedPage(client)
            let (keyHolder, directory, laptop, browser, root, session, web) = (page.keyHolder, page.directory, page.laptop, page.browser, page.root, page.session, page.web)
            var entries = page.entries
            let sealed = "/web/api/containers/\(notes)/sealed"
            let folder = ItemUpdate(baseRevision: nil, name: "From the page", kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())

            // The Devices page lists the browser let in, by whom and until when.
            let listed = try await client.send(.get, "/web/api/protection", headers: web).decode(WebProtectionResponse.self)
            #expect(listed.webSessions.map(\.id) == [browser.publicKeys.deviceIdentifier] && listed.webSessions.first?.approver == "laptop", "\(listed)")
            // A plaintext name, or bytes inline: refused whole.
            let plain = try await client.send(.post, "\(sealed)/commits", json: CommitBatchRequest(commits: [ItemCommit(item: "f1", update: folder)]), headers: web)
            #expect(plain.status == .badRequest && plain.errorCode == "notSealed", "\(String(buffer: plain.body))")
            // Sealed in the page (here with the keys a grant carries): committed as a device's change.
            let records = try #require(ItemRecords.keyed(container: notes, rootKeys: [root], sealing: true))
            let wire = try records.sealed(folder, item: "f1", manifest: Manifest())
            let made = try await client.send(.post, "\(sealed)/commits", json: CommitBatchRequest(commits: [ItemCommit(item: "f1", update: wire)]), headers: web)
            let result = try #require(try made.decode(CommitBatchResponse.self).results.first?.commit, "\(String(buffer: made.body))")
            #expect(result.item.record == wire.record && result.item.name != "From the page")

            // What it made, signed by the browser naming the entry that let it in: kept.
            let content = CommitContent(outcomes: [.init(item: "f1", folder: nil, recordHash: CommitContent.recordHash(of: wire.record), revision: result.revision,
                                                         base: nil, deleted: false, sequence: result.item.sequence)])
            func signed(_ keys: DeviceKeys, after previous: SignedCommit?) throws -> SignedCommit {
                try SignedCommit(container: notes, contentHash: content.hash, after: previous, rosterHead: session, seen: [:], signedBy: keys)
            }
            func keep(_ commit: SignedCommit) async throws -> Client.Answer {
                try await client.send(.post, "\(sealed)/signed-commits", json: SignedCommitsRequest(commits: [SignedCommitUpload(commit: commit.encoded, content: content.encoded)]), headers: web)
            }
            let first = try signed(browser, after: nil)
            #expect(try await keep(first).status == .ok)
            // A key the roster never let in: refused.
            #expect(try await keep(try signed(DeviceKeys(), after: nil)).errorCode == "invalidCommit")
            // The session ended: what its key signs after — even naming the entry that let it in — is not kept.
            entries.append(try RosterEntry(.endWebSession(identifier: browser.publicKeys.deviceIdentifier), after: entries.last, signedBy: keyHolder.laptop))
            #expect(try await directory.append(client, token: laptop.token, after: 4, [entries[4]]).status == .ok)
            #expect(try await client.send(.get, "/web/api/protection", headers: web).decode(WebProtectionResponse.self).webSessions.isEmpty, "ended: no longer listed")
            let late = try await keep(try signed(browser, after: first))
            #expect(late.errorCode == "invalidCommit" && String(buffer: late.body).contains("session has ended"), "\(String(buffer: late.body))")
        }
    }

    /// Under Advanced a conflict is resolved in the page as a device resolves one: the sealed
    /// route keeps the revision the page chose and says which was current, and the page signs
    /// what it made. Standard's routes change nothing under Advanced — the resolution, and a
    /// restore from Recently Deleted: they would have made a state nobody signed (which devices
    /// hold back), and the resolution answered an error after.
    @Test(arguments: Backend.all) func thePageResolvesAConflictUnderAdvancedAndSignsWhatItMade(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let page = try await advancedPage(client)
            let records = try #require(ItemRecords.keyed(container: notes, rootKeys: [page.root], sealing: true))
            func file(_ name: String, base: String?) throws -> ItemUpdate {
                try records.sealed(ItemUpdate(baseRevision: base, name: name, kind: .file, modificationDate: 1_800_000_200, manifest: Manifest(chunks: [])),
                                   item: "plan", manifest: Manifest(chunks: []))
            }
            let first = try await client.commit(notes, "plan", try file("Plan.txt", base: nil), token: page.laptop.token)
            let chosen = try await client.commit(notes, "plan", try file("Plan (chosen).txt", base: first.revision), token: page.laptop.token)
            try await Task.sleep(for: .milliseconds(20))
            let other = try await client.commit(notes, "plan", try file("Plan (other).txt", base: first.revision), token: page.laptop.token)
            #expect(other.item.conflicts.map(\.revision) == [chosen.revision])
            let sealed = "/web/api/containers/\(notes)/sealed"

            // Standard's route: refused before anything changes.
            let standard = try await client.send(.post, "/web/api/containers/\(notes)/items/plan/resolve", json: WebResolveRequest(keep: chosen.revision), headers: page.web)
            #expect(standard.status == .conflict && standard.errorCode == "sealedOnDevices", "\(String(buffer: standard.body))")
            let unchanged = try await client.send(.get, "\(sealed)/items/plan", headers: page.web).decode(ItemState.self)
            #expect(unchanged.revision == other.revision && unchanged.conflicts.map(\.revision) == [chosen.revision], "a resolution nobody signed")

            // The sealed route: a revision that is no version is refused; the conflict version wins.
            let stale = try await client.send(.post, "\(sealed)/items/plan/resolve", json: WebResolveRequest(keep: first.revision), headers: page.web)
            #expect(stale.status == .conflict && stale.errorCode == "notAVersion", "\(String(buffer: stale.body))")
            let answer = try await client.send(.post, "\(sealed)/items/plan/resolve", json: WebResolveRequest(keep: chosen.revision), headers: page.web)
            let resolution = try answer.decode(WebSealedResolution.self)
            #expect(resolution.replaced == other.revision && resolution.item.revision == chosen.revision && resolution.item.conflicts.isEmpty, "\(String(buffer: answer.body))")
            #expect(try records.opened(resolution.item).name == "Plan (chosen).txt")

            // What it made, signed by the browser: kept, and a device's ledger takes it.
            let content = CommitContent(outcomes: [.init(item: "plan", folder: nil, recordHash: CommitContent.recordHash(of: resolution.item.record), revision: resolution.item.revision,
                                                         base: resolution.replaced, deleted: false, sequence: resolution.item.sequence)])
            let commit = try SignedCommit(container: notes, contentHash: content.hash, after: nil, rosterHead: page.session, seen: [:], signedBy: page.browser)
            let kept = try await client.send(.post, "\(sealed)/signed-commits", json: SignedCommitsRequest(commits: [SignedCommitUpload(commit: commit.encoded, content: content.encoded)]),
                                             headers: page.web)
            #expect(kept.status == .ok, "\(String(buffer: kept.body))")
            let stored = try await client.send(.get, "/v1/containers/\(notes)/signed-commits", token: page.laptop.token).decode(SignedCommitsPage.self)
            let roster = try Roster.verify(try await page.directory.directory(client, token: page.laptop.token).roster.map { try RosterEntry(encoded: $0) })
            var ledger = CommitLedger(container: notes)
            for each in stored.commits { #expect(try ledger.accept(try SignedCommit(encoded: each.commit), roster: roster) == .accepted) }
            #expect(stored.commits.count == 1)

            // Recently Deleted, the same: a sealed item is restored on a device under Advanced;
            // the page's route refuses before restoring anything.
            let gone = try await client.commit(notes, "plan", try records.sealed(ItemUpdate(baseRevision: resolution.item.revision, name: "Plan (chosen).txt", kind: .file, modificationDate: 1_800_000_300,
                                                                                             manifest: Manifest(), deleted: true), item: "plan", manifest: Manifest()), token: page.laptop.token)
            #expect(gone.item.deleted)
            let deletedRevision = try #require(try await server.admin.recoverable(accountName: "ada").first { $0.item == "plan" && $0.revision == resolution.item.revision }).revision
            let restore = try await client.send(.post, "/web/api/deleted/restore", json: WebRestoreRequest(revisions: [deletedRevision]), headers: page.web)
            #expect(restore.status == .conflict && restore.errorCode == "sealedOnDevices", "\(String(buffer: restore.body))")
            #expect(try await client.send(.get, "\(sealed)/items/plan", headers: page.web).decode(ItemState.self).deleted, "nothing restored that nobody signed")
        }
    }

    /// An account under Advanced whose laptop let a browser's key in, and that browser's page
    /// session, granted `notes` (the grant's body is the device's business).
    struct AdvancedPage {
        let keyHolder: SealedKeyValueServerTests
        let directory: KeyDirectoryTests
        let laptop: SignInResponse
        let browser: DeviceKeys
        let root: AccountRootKey
        /// The roster entry that let the browser in.
        let session: RosterHead
        let entries: [RosterEntry]
        let web: HTTPFields
    }

    func advancedPage(_ client: Client) async throws -> AdvancedPage {
        let keyHolder = SealedKeyValueServerTests(), directory = KeyDirectoryTests()
        let laptop = try await client.signIn("ada", device: "laptop")
        _ = try await keyHolder.setUpKeys(client, laptop)
        // Advanced, then the laptop lets the browser's key in.
        let browser = DeviceKeys(), root = AccountRootKey(epoch: 1)
        var entries = try await directory.directory(client, token: laptop.token).roster.map { try RosterEntry(encoded: $0) }
        entries.append(try RosterEntry(.custody(.advanced), after: entries.last, signedBy: keyHolder.laptop))
        entries.append(try RosterEntry(.addWebSession(keys: browser.publicKeys, expires: UInt64(Date().timeIntervalSince1970) + 3_000), after: entries.last, signedBy: keyHolder.laptop))
        let appended = try await directory.append(client, token: laptop.token, after: 2, Array(entries.suffix(2)),
                                                  [try directory.envelope(root, account: laptop.identityToken, to: keyHolder.laptop.publicKeys, from: keyHolder.laptop)])
        #expect(appended.status == .ok, "\(String(buffer: appended.body))")
        let helper = WebInterfaceTests()
        let (cookie, csrf, _) = try await helper.webSignIn(client)
        let web = helper.session(cookie, csrf: csrf)
        // No grant yet: the page commits nothing.
        let folder = ItemUpdate(baseRevision: nil, name: "From the page", kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())
        #expect(try await client.send(.post, "/web/api/containers/\(notes)/sealed/commits", json: CommitBatchRequest(commits: [ItemCommit(item: "f1", update: folder)]), headers: web).errorCode == "noGrant")
        let nonce = JoinCode.nonce(), commitment = JoinCode.commitment(to: nonce, joining: browser.publicKeys)
        let request = try await client.send(.post, "/web/api/approval", json: WebApprovalCreate(signing: Data(browser.publicKeys.signing), agreement: Data(browser.publicKeys.agreement),
                                                                                                commitment: Data(commitment)), headers: web).decode(KeyRequestRecord.self)
        let answer = JoinCode.answerNonce(device: keyHolder.laptop, request: request.id, commitment: commitment)
        _ = try await client.send(.post, "/v1/keys/requests/\(request.id)/answer", token: laptop.token,
                                  json: KeyRequestNonce(nonce: Data(answer), answerer: keyHolder.laptop.publicKeys.deviceIdentifier))
        _ = try await client.send(.post, "/web/api/approval/\(request.id)/reveal", json: KeyRequestNonce(nonce: Data(nonce)), headers: web)
        let grant = WebGrantUpload(body: Data(repeating: 1, count: 200), signature: Data(repeating: 2, count: 64), containers: [notes], expires: Date().timeIntervalSince1970 + 3_000)
        #expect(try await client.send(.post, "/v1/keys/requests/\(request.id)/grant", token: laptop.token, json: grant).status == .noContent)
        return AdvancedPage(keyHolder: keyHolder, directory: directory, laptop: laptop, browser: browser, root: root,
                            session: RosterHead(index: 3, hash: entries[3].hash), entries: entries, web: web)
    }
}
