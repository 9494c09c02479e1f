import Foundation
import NIOCore
import NIOHTTP1
import UbiquityProtocol

// Sharing with other accounts (docs/Sharing.md): the requests of `ubiquity share`, `ubiquity
// shares` and the agent.
extension SyncClient {
    /// The account's shares, those it joined and its invitations (of the containers this device may use).
    package func shares() async throws -> SharesResponse {
        try await json(.GET, "v1/shares")
    }

    /// Shares `item` of `container` (or answers the share it is the root of already).
    package func makeShare(container: String, item: String) async throws -> ShareInfo {
        try await json(.POST, "v1/shares", body: ShareCreateRequest(container: container, item: item))
    }

    /// Invites the account named `name` to `share` (answered alike whether or not one has the name).
    package func invite(_ name: String, to share: String, role: ShareRole) async throws -> ShareInvitationResponse {
        let body = try await send(.POST, "v1/shares/\(share)/participants", body: try JSONEncoder().encode(ShareInviteRequest(name: name, role: role)), expecting: [.created])
        do {
            return try JSONDecoder().decode(ShareInvitationResponse.self, from: Data(body.readableBytesView))
        } catch {
            throw SyncClientError(status: 201, code: "badAnswer", message: "the server's answer to an invitation is not what the protocol says: \(error)")
        }
    }

    /// Changes a participant's role (the owner's).
    package func setRole(_ role: ShareRole, of participant: String, in share: String) async throws {
        _ = try await send(.PATCH, "v1/shares/\(share)/participants/\(participant)", body: try JSONEncoder().encode(ShareRoleRequest(role: role)), expecting: [.noContent])
    }

    /// Removes a participant from a share (the owner's).
    package func remove(_ participant: String, from share: String) async throws {
        _ = try await send(.DELETE, "v1/shares/\(share)/participants/\(participant)", body: nil, expecting: [.noContent])
    }

    /// Stops sharing (the owner's): every participant's access ends.
    package func stopSharing(_ share: String) async throws {
        _ = try await send(.DELETE, "v1/shares/\(share)", body: nil, expecting: [.noContent])
    }

    /// Accepts (or declines) an invitation.
    package func answer(invitation: String, accept: Bool) async throws {
        _ = try await send(.POST, "v1/shares/invitations/\(invitation)/\(accept ? "accept" : "decline")", body: nil, expecting: [.noContent])
    }

    /// Leaves a share joined.
    package func leave(_ share: String) async throws {
        _ = try await send(.POST, "v1/shares/\(share)/leave", body: nil, expecting: [.noContent])
    }

    /// This account's sharing identity, with its private keys sealed (404 `noIdentity`: none yet).
    package func sharingIdentity() async throws -> SharingIdentityRecord {
        try await json(.GET, "v1/sharing/identity")
    }

    /// Publishes this account's sharing identity (409 `identityChanged`: another device's stands).
    package func publishSharingIdentity(_ request: SharingIdentityPublishRequest) async throws -> SharingIdentityRecord {
        try await json(.PUT, "v1/sharing/identity", body: request)
    }

    /// The sharing identity of an account this one shares with (404 for any other name).
    package func sharingIdentity(of name: String) async throws -> SharingIdentityRecord {
        try await json(.GET, "v1/sharing/identities/\(name.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? name)")
    }

    /// The share's key envelopes sealed to this account, and to its owner who waits for one.
    package func shareKeys(_ share: String) async throws -> ShareKeysResponse {
        try await json(.GET, "v1/shares/\(share)/keys")
    }

    /// Keeps envelopes of the share's current epoch's key (its owner's).
    package func publishShareKeys(_ share: String, _ request: ShareKeysPublishRequest) async throws -> ShareKeysResponse {
        try await json(.PUT, "v1/shares/\(share)/keys", body: request)
    }
}

/// A share one of the account's devices keeps (docs/Sharing.md, "On a participant's devices"):
/// its id, its top item, and the name this device shows that item by at the top of the
/// container's `Documents` (the owner's name for it, or that with a suffix when it clashes).
package struct ShareScope: Sendable, Hashable {
    /// The share's id.
    package var id: String
    /// Its top item.
    package var root: String
    /// The name it is shown by here.
    package var name: String
    /// Its owner's account name.
    package var owner: String

    /// A scope.
    package init(id: String, root: String, name: String, owner: String) {
        self.id = id
        self.root = root
        self.name = name
        self.owner = owner
    }

    /// An item as this device shows it: the top item under ``name`` (a sealed one once its
    /// record is opened: its name is a tag the record is checked against).
    package func seen(_ item: ItemState) -> ItemState {
        guard item.id == root, item.record == nil else { return item }
        var shown = item
        if !shown.deleted { shown.name = name }
        return shown
    }
}
