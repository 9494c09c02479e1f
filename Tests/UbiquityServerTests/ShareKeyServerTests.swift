import Foundation
import HummingbirdTesting
import Testing
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityServer

/// The keys of sharing on the server (issue 46, docs/Sharing.md "Keys"), on both backends:
/// each account's sharing identity published once (a compare-and-swap), shown to no account it
/// shares nothing with; each share's key envelopes kept for its members only, the owner's first;
/// a new epoch when someone who held the key leaves or is removed.
@Suite struct ShareKeyServerTests {
    let notes = "ABCDE12345.com.example.notes"

    /// A publication of a new identity (random keys; the sealed bytes are opaque to the server).
    private func identity(replacing: Data? = nil) -> (SharingIdentityPublishRequest, DevicePublicKeys) {
        let keys = DeviceKeys().publicKeys
        return (SharingIdentityPublishRequest(signing: Data(keys.signing), agreement: Data(keys.agreement), sealed: Data((0..<97).map { _ in UInt8.random(in: 0...255) }),
                                              replacing: replacing), keys)
    }

    /// Ada's laptop with a folder "Trip"; Bob, Cy and Dan each on a phone.
    private func setUp(_ server: TestServer, _ client: Client) async throws -> (ada: String, bob: String, cy: String, dan: String) {
        for name in ["bob", "cy", "dan"] { _ = try await server.admin.createAccount(name: name, password: "correct horse") }
        let ada = try await client.signIn("ada", device: "laptop").token
        let folder = ItemUpdate(baseRevision: nil, name: "Trip", kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())
        _ = try await client.commit(notes, "trip", folder, token: ada)
        return (ada, try await client.signIn("bob", device: "phone").token, try await client.signIn("cy", device: "phone").token,
                try await client.signIn("dan", device: "phone").token)
    }

    private func share(_ client: Client, by ada: String, with people: [(String, String)]) async throws -> ShareInfo {
        let share = try await client.send(.post, "/v1/shares", token: ada, json: ShareCreateRequest(container: notes, item: "trip")).decode(ShareInfo.self)
        for (name, token) in people {
            let invitation = try await client.send(.post, "/v1/shares/\(share.id)/participants", token: ada, json: ShareInviteRequest(name: name, role: .readWrite))
                .decode(ShareInvitationResponse.self)
            #expect(try await client.send(.post, "/v1/shares/invitations/\(invitation.id)/accept", token: token).status == .noContent)
        }
        return share
    }

    @Test(arguments: Backend.all) func anIdentityIsPublishedOnceAndShownOnlyToAccountsSharedWith(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let (ada, bob, cy, _) = try await setUp(server, client)
            #expect(try await client.send(.get, "/v1/sharing/identity", token: ada).errorCode == "noIdentity")
            let (first, adaKeys) = identity()
            let published = try await client.send(.put, "/v1/sharing/identity", token: ada, json: first).decode(SharingIdentityRecord.self)
            #expect(published == SharingIdentityRecord(account: "ada", signing: first.signing, agreement: first.agreement, sealed: first.sealed))
            #expect(try await client.send(.get, "/v1/sharing/identity", token: ada).decode(SharingIdentityRecord.self) == published)
            // Another device publishing its own over it, unseen: refused (the first stands); in
            // place of the one it read: taken.
            let (rival, _) = identity()
            #expect(try await client.send(.put, "/v1/sharing/identity", token: ada, json: rival).errorCode == "identityChanged")
            let (stale, _) = identity(replacing: Data(repeating: 7, count: 32))
            #expect(try await client.send(.put, "/v1/sharing/identity", token: ada, json: stale).errorCode == "identityChanged")
            #expect(try await client.send(.get, "/v1/sharing/identity", token: ada).decode(SharingIdentityRecord.self) == published)
            // Malformed: not two 32-byte keys, sealed keys too large or empty.
            for bad in [SharingIdentityPublishRequest(signing: Data(count: 31), agreement: first.agreement, sealed: first.sealed),
                        SharingIdentityPublishRequest(signing: first.signing, agreement: first.agreement, sealed: Data(count: 513)),
                        SharingIdentityPublishRequest(signing: first.signing, agreement: first.agreement, sealed: Data())] {
                #expect(try await client.send(.put, "/v1/sharing/identity", token: ada, json: bad).errorCode == "badIdentity")
            }
            // A token limited to one container does not publish the account's identity.
            let limited = try await client.signIn("cy", device: "watch", containers: [notes]).token
            #expect(try await client.send(.put, "/v1/sharing/identity", token: limited, json: identity().0).errorCode == "limitedToken")
            for token in [bob, cy] { _ = try await client.send(.put, "/v1/sharing/identity", token: token, json: identity().0) }

            // Nobody's identity is shown to an account it shares nothing with: an unrelated
            // account, a name no account has and one without an identity are answered alike.
            let absent = try await client.send(.get, "/v1/sharing/identities/nobody", token: ada)
            let unrelated = try await client.send(.get, "/v1/sharing/identities/bob", token: ada)
            let withoutIdentity = try await client.send(.get, "/v1/sharing/identities/dan", token: ada)
            #expect(absent.status == .notFound && unrelated.status == .notFound && withoutIdentity.status == .notFound)
            #expect(String(buffer: absent.body) == String(buffer: unrelated.body) && String(buffer: unrelated.body) == String(buffer: withoutIdentity.body))

            // Invited: Bob reads his inviter's identity (he knows her name from the invitation);
            // Ada reads nothing of Bob's until he accepts (an invitation tells her nothing).
            let share = try await client.send(.post, "/v1/shares", token: ada, json: ShareCreateRequest(container: notes, item: "trip")).decode(ShareInfo.self)
            let invitation = try await client.send(.post, "/v1/shares/\(share.id)/participants", token: ada, json: ShareInviteRequest(name: "bob", role: .readWrite))
                .decode(ShareInvitationResponse.self)
            let adaAsBobSees = try await client.send(.get, "/v1/sharing/identities/ada", token: bob).decode(SharingIdentityRecord.self)
            #expect(adaAsBobSees == SharingIdentityRecord(account: "ada", signing: Data(adaKeys.signing), agreement: Data(adaKeys.agreement)), "no sealed keys to others")
            #expect(try await client.send(.get, "/v1/sharing/identities/bob", token: ada).status == .notFound)
            #expect(try await client.send(.post, "/v1/shares/invitations/\(invitation.id)/accept", token: bob).status == .noContent)
            let bobAsAdaSees = try await client.send(.get, "/v1/sharing/identities/bob", token: ada).decode(SharingIdentityRecord.self)
            #expect(bobAsAdaSees.account == "bob" && bobAsAdaSees.sealed == nil)
            // Cy, in nothing: neither.
            #expect(try await client.send(.get, "/v1/sharing/identities/ada", token: cy).status == .notFound)
            #expect(try await client.send(.get, "/v1/sharing/identities/bob", token: cy).status == .notFound)
        }
    }

    @Test(arguments: Backend.all) func aSharesKeysAreKeptForItsMembersAndAnEpochEndsWithEachWhoLeaves(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let (ada, bob, cy, dan) = try await setUp(server, client)
            let share = try await share(client, by: ada, with: [("bob", bob), ("cy", cy)])
            let keys = "/v1/shares/\(share.id)/keys"
            let before = try await client.send(.get, keys, token: ada).decode(ShareKeysResponse.self)
            #expect(before.epoch == 1 && before.owner == "ada" && before.envelopes.isEmpty && Set(before.waiting ?? []) == ["bob", "cy"], "\(before)")
            func envelope(_ account: String, _ fill: UInt8, epoch: Int64 = 1) -> ShareKeyEnvelopeRecord {
                ShareKeyEnvelopeRecord(account: account, epoch: epoch, envelope: Data(repeating: fill, count: 85))
            }
            // The epoch's key is its owner's envelope: that first; only the current epoch; only
            // to people who accepted; no more than one per account; only the owner keeps them.
            #expect(try await client.send(.put, keys, token: ada, json: ShareKeysPublishRequest(epoch: 1, envelopes: [envelope("bob", 2)])).errorCode == "ownerKeyFirst")
            #expect(try await client.send(.put, keys, token: ada, json: ShareKeysPublishRequest(epoch: 2, envelopes: [envelope("ada", 1, epoch: 2)])).errorCode == "staleEpoch")
            #expect(try await client.send(.put, keys, token: ada, json: ShareKeysPublishRequest(epoch: 1, envelopes: [envelope("ada", 1), envelope("dan", 4)])).errorCode == "notAccepted")
            #expect(try await client.send(.put, keys, token: ada, json: ShareKeysPublishRequest(epoch: 1, envelopes: [envelope("ada", 1), envelope("ada", 1)])).errorCode == "badEnvelopes")
            #expect(try await client.send(.put, keys, token: ada, json: ShareKeysPublishRequest(epoch: 1, envelopes: [envelope("ada", 1, epoch: 2)])).errorCode == "badEnvelopes")
            #expect(try await client.send(.put, keys, token: ada, json: ShareKeysPublishRequest(epoch: 1, envelopes: [])).errorCode == "badEnvelopes")
            #expect(try await client.send(.put, keys, token: bob, json: ShareKeysPublishRequest(epoch: 1, envelopes: [envelope("bob", 2)])).errorCode == "notOwner")
            #expect(try await client.send(.put, keys, token: dan, json: ShareKeysPublishRequest(epoch: 1, envelopes: [envelope("dan", 2)])).status == .notFound)

            let kept = try await client.send(.put, keys, token: ada, json: ShareKeysPublishRequest(epoch: 1, envelopes: [envelope("ada", 1), envelope("bob", 2)]))
                .decode(ShareKeysResponse.self)
            #expect(kept.envelopes == [envelope("ada", 1)] && kept.waiting == ["cy"], "\(kept)")
            // Another device of Ada's with another key for the epoch: refused, the first stands;
            // with the one that stands, it seals to Cy.
            #expect(try await client.send(.put, keys, token: ada, json: ShareKeysPublishRequest(epoch: 1, envelopes: [envelope("ada", 9)])).errorCode == "shareKeyExists")
            let all = try await client.send(.put, keys, token: ada, json: ShareKeysPublishRequest(epoch: 1, envelopes: [envelope("ada", 1), envelope("cy", 3)]))
                .decode(ShareKeysResponse.self)
            #expect(all.waiting == [] && all.envelopes == [envelope("ada", 1)])
            // Each member reads its own envelope only; anyone else is answered as for no share.
            #expect(try await client.send(.get, keys, token: bob).decode(ShareKeysResponse.self) == ShareKeysResponse(share: share.id, epoch: 1, owner: "ada", envelopes: [envelope("bob", 2)]))
            #expect(try await client.send(.get, keys, token: cy).decode(ShareKeysResponse.self).envelopes == [envelope("cy", 3)])
            #expect(try await client.send(.get, keys, token: dan).status == .notFound)

            // Cy removed: a new epoch, which Bob waits for; Cy reads nothing more.
            let cyInvitation = try #require(try await client.send(.get, "/v1/shares", token: ada).decode(SharesResponse.self).owned.first?.participants?.first { $0.name == "cy" })
            #expect(try await client.send(.delete, "/v1/shares/\(share.id)/participants/\(cyInvitation.id)", token: ada).status == .noContent)
            let afterCy = try await client.send(.get, keys, token: ada).decode(ShareKeysResponse.self)
            #expect(afterCy.epoch == 2 && afterCy.waiting == ["bob"], "\(afterCy)")
            #expect(try await client.send(.get, keys, token: cy).status == .notFound)
            _ = try await client.send(.put, keys, token: ada, json: ShareKeysPublishRequest(epoch: 2, envelopes: [envelope("ada", 5, epoch: 2), envelope("bob", 6, epoch: 2)]))
            #expect(try await client.send(.get, keys, token: bob).decode(ShareKeysResponse.self).envelopes == [envelope("bob", 2), envelope("bob", 6, epoch: 2)])
            // An earlier epoch's key to a participant (one who joins reads what was sealed before);
            // never the owner's earlier one again.
            #expect(try await client.send(.put, keys, token: ada, json: ShareKeysPublishRequest(epoch: 2, envelopes: [envelope("bob", 7, epoch: 1)])).status == .ok)
            #expect(try await client.send(.get, keys, token: bob).decode(ShareKeysResponse.self).envelopes == [envelope("bob", 7), envelope("bob", 6, epoch: 2)])
            #expect(try await client.send(.put, keys, token: ada, json: ShareKeysPublishRequest(epoch: 2, envelopes: [envelope("ada", 8, epoch: 1)])).errorCode == "badEnvelopes")
            #expect(try await client.send(.get, keys, token: ada).decode(ShareKeysResponse.self).envelopes == [envelope("ada", 1), envelope("ada", 5, epoch: 2)])
            // Removing someone who never accepted held no key: no new epoch.
            let toDan = try await client.send(.post, "/v1/shares/\(share.id)/participants", token: ada, json: ShareInviteRequest(name: "dan", role: .readOnly))
                .decode(ShareInvitationResponse.self)
            #expect(try await client.send(.delete, "/v1/shares/\(share.id)/participants/\(toDan.id)", token: ada).status == .noContent)
            #expect(try await client.send(.get, keys, token: ada).decode(ShareKeysResponse.self).epoch == 2)
            // Bob leaves: another epoch.
            #expect(try await client.send(.post, "/v1/shares/\(share.id)/leave", token: bob).status == .noContent)
            #expect(try await client.send(.get, keys, token: ada).decode(ShareKeysResponse.self).epoch == 3)
            // Sharing stopped: the keys go with the share.
            #expect(try await client.send(.delete, "/v1/shares/\(share.id)", token: ada).status == .noContent)
            #expect(try await client.send(.get, keys, token: ada).status == .notFound)
            let adaId = try #require(try await server.admin.accounts().first { $0.name == "ada" }?.id)
            #expect(try await server.admin.storage.database.shareKeyEnvelopes(shareId: share.id, accountId: adaId).isEmpty)
        }
    }
}
