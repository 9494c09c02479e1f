import Foundation
import HummingbirdTesting
import Testing
import UbiquityProtocol
import UbiquityTestSupport
@testable import UbiquityServer

/// What every commit reads of its account and seldom changes, kept in memory per generation
/// (``AccountFacts``, issue 49): the database moves the generation at every change of it, and a
/// fact kept from before a change is never used after it.
@Suite struct AccountFactsTests {
    let notes = "ABCDE12345.com.example.notes"

    /// Each change of a roster entry, a key envelope or a share moves the account's generation,
    /// as its device's token reads it; a commit does not.
    @Test(arguments: Backend.all) func everyChangeOfWhatIsKeptMovesTheGeneration(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let ada = try await client.signIn("ada", device: "laptop")
            let database = server.server.services.database
            func generation() async throws -> Int64 {
                try #require(try await database.device(tokenHash: DeviceAuthMiddleware.hash(ada.token))?.generation)
            }
            var last = try await generation()
            func expectMoved(_ what: String, _ moved: Bool = true) async throws {
                let now = try await generation()
                #expect((now > last) == moved, "\(what): \(last) → \(now)")
                last = now
            }
            let folder = ItemUpdate(baseRevision: nil, name: "Trip", kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())
            _ = try await client.commit(notes, "trip", folder, token: ada.token)
            try await expectMoved("a commit", false)
            let share = try await client.send(.post, "/v1/shares", token: ada.token, json: ShareCreateRequest(container: notes, item: "trip")).decode(ShareInfo.self)
            try await expectMoved("a share made")
            #expect(try await client.send(.delete, "/v1/shares/\(share.id)", token: ada.token).status == .noContent)
            try await expectMoved("a share stopped")
            let account = try #require(try await database.device(tokenHash: DeviceAuthMiddleware.hash(ada.token))?.accountId)
            #expect(try await database.appendKeys(accountId: account, after: 0, entries: [Data("entry".utf8)], envelopes: [], envelopeLimit: 100, check: { _ in false }))
            try await expectMoved("a roster entry")
            let envelope = KeyEnvelopeRecord(epoch: 0, recipient: "escrow", sender: "laptop", body: Data("sealed".utf8))
            #expect(try await database.appendKeys(accountId: account, after: 1, entries: [Data("next".utf8)], envelopes: [envelope], envelopeLimit: 100, check: { _ in false }))
            try await expectMoved("a roster entry and an envelope")
        }
    }

    /// Ada's commits keep her account's facts (no share yet); then she shares the folder and Bob
    /// accepts: her next change inside it reaches Bob's device. Kept without the generation, the
    /// facts said she owned no share, and Bob never heard.
    @Test(arguments: Backend.all) func aShareMadeAfterTheFactsWereKeptIsToldOfTheNextChange(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "bob", password: "correct horse")
        try await server.server.makeApplication().test(.live) { raw in
            let client = Client(client: raw)
            let ada = try await client.signIn("ada", device: "laptop"), bob = try await client.signIn("bob", device: "phone")
            let folder = ItemUpdate(baseRevision: nil, name: "Trip", kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())
            _ = try await client.commit(notes, "trip", folder, token: ada.token)
            var note = fileUpdate("Note.txt", [])
            note.parent = "trip"
            var made = try await client.commit(notes, "note", note, token: ada.token)
            #expect(server.server.services.accountFacts.count == 1, "the commits kept Ada's facts")

            let share = try await client.send(.post, "/v1/shares", token: ada.token, json: ShareCreateRequest(container: notes, item: "trip")).decode(ShareInfo.self)
            let invitation = try await client.send(.post, "/v1/shares/\(share.id)/participants", token: ada.token, json: ShareInviteRequest(name: "bob", role: .readWrite))
                .decode(ShareInvitationResponse.self)
            #expect(try await client.send(.post, "/v1/shares/invitations/\(invitation.id)/accept", token: bob.token).status == .noContent)
            let connected = Confirmations()
            async let heard = PushTests().listen(raw, token: bob.token) { events in
                if events.count == 1 { connected.mark("bob") }
                return events.contains { $0.type == "shareChanged" }
            }
            try await connected.wait(for: ["bob"])
            note.baseRevision = made.revision
            note.modificationDate += 1
            made = try await client.commit(notes, "note", note, token: ada.token)
            #expect(try await heard.contains(PushEvent(type: "shareChanged", container: share.id, sequence: made.item.sequence)))
        }
    }
}
