import Foundation

// Sharing with other accounts (issue 46, docs/Sharing.md): a share is one item of one of its
// owner's containers; its participants are invited, accept or decline, and may leave.

/// What a participant may do with a share.
public enum ShareRole: String, Codable, Sendable, CaseIterable {
    /// Reads what is shared; every change is refused.
    case readOnly
    /// Reads and changes what is shared (not moving items out of it).
    case readWrite
}

/// Where a participant stands.
public enum ShareParticipantState: String, Codable, Sendable {
    /// Invited, not answered yet (until the invitation expires).
    case invited
    /// Invited, and the invitation expired unanswered.
    case expired
    /// Accepted: the share is theirs to reach until they leave or are removed.
    case accepted
    /// Declined the invitation.
    case declined
    /// Left the share after accepting it.
    case left
    /// Removed by the owner.
    case removed
}

/// `POST /v1/shares`: share an item of one of the account's containers (the answer is the
/// share, made or as it was when the item is the root of one already).
public struct ShareCreateRequest: Codable, Sendable {
    /// The container the item is in.
    public var container: String
    /// The item shared: its root.
    public var item: String

    /// Creates a value.
    public init(container: String, item: String) {
        self.container = container
        self.item = item
    }
}

/// `POST /v1/shares/ID/participants`: invite an account by name. Answered alike whether or not
/// an account has that name (docs/Sharing.md: no account enumeration).
public struct ShareInviteRequest: Codable, Sendable {
    /// The account invited.
    public var name: String
    /// What it may do.
    public var role: ShareRole

    /// Creates a value.
    public init(name: String, role: ShareRole) {
        self.name = name
        self.role = role
    }
}

/// `PATCH /v1/shares/ID/participants/PID`: a participant's new role.
public struct ShareRoleRequest: Codable, Sendable {
    /// The new role.
    public var role: ShareRole

    /// Creates a value.
    public init(role: ShareRole) {
        self.role = role
    }
}

/// A participant as the share's owner sees it (one per invitation).
public struct ShareParticipantInfo: Codable, Sendable, Equatable {
    /// The invitation's id.
    public var id: String
    /// The name invited, as the owner typed it.
    public var name: String
    /// What they may do.
    public var role: ShareRole
    /// Where they stand (an invitation to a name with no account shows as any unanswered one).
    public var state: ShareParticipantState
    /// When they were invited (seconds since 1970).
    public var invited: Double
    /// When the invitation expires, if it is unanswered.
    public var expires: Double

    /// Creates a value.
    public init(id: String, name: String, role: ShareRole, state: ShareParticipantState, invited: Double, expires: Double) {
        self.id = id
        self.name = name
        self.role = role
        self.state = state
        self.invited = invited
        self.expires = expires
    }
}

/// A share as one of its accounts sees it.
public struct ShareInfo: Codable, Sendable, Equatable {
    /// The share's id.
    public var id: String
    /// Its owner's account name.
    public var owner: String
    /// The container its root is in.
    public var container: String
    /// Its root item.
    public var item: String
    /// The root's name when the server can tell it (nil when it is sealed).
    public var name: String?
    /// The share key's epoch.
    public var epoch: Int64
    /// The caller's role: nil for its owner.
    public var role: ShareRole?
    /// For a participant: their invitation's id (to accept, decline or leave by).
    public var invitation: String?
    /// For a participant: when their invitation expires, if unanswered.
    public var expires: Double?
    /// For its owner: every invitation, answered or not.
    public var participants: [ShareParticipantInfo]?
    /// Whether what it holds is sealed (its owner's account seals): its members' devices seal
    /// and open it with the share's keys (docs/Sharing.md, "Keys"). Absent: not sealed.
    public var sealed: Bool?

    /// Creates a value.
    public init(id: String, owner: String, container: String, item: String, name: String?, epoch: Int64, role: ShareRole?,
                invitation: String? = nil, expires: Double? = nil, participants: [ShareParticipantInfo]? = nil, sealed: Bool? = nil) {
        self.sealed = sealed
        self.id = id
        self.owner = owner
        self.container = container
        self.item = item
        self.name = name
        self.epoch = epoch
        self.role = role
        self.invitation = invitation
        self.expires = expires
        self.participants = participants
    }
}

/// `GET /v1/shares`: the shares the account owns, those it joined, and its unanswered
/// invitations.
public struct SharesResponse: Codable, Sendable, Equatable {
    /// Shares of its items.
    public var owned: [ShareInfo]
    /// Shares it accepted.
    public var joined: [ShareInfo]
    /// Invitations waiting for its answer.
    public var invitations: [ShareInfo]

    /// Creates a value.
    public init(owned: [ShareInfo], joined: [ShareInfo], invitations: [ShareInfo]) {
        self.owned = owned
        self.joined = joined
        self.invitations = invitations
    }
}

/// `POST /v1/shares/ID/participants`: the invitation made (or the one that was pending for
/// that name).
public struct ShareInvitationResponse: Codable, Sendable, Equatable {
    /// The invitation's id.
    public var id: String
    /// When it expires.
    public var expires: Double

    /// Creates a value.
    public init(id: String, expires: Double) {
        self.id = id
        self.expires = expires
    }
}
