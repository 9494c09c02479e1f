import Foundation
import UbiquityProtocol

/// A share as stored (docs/Sharing.md).
package struct StoredShare: Sendable, Equatable {
    /// Its id (128 random bits, hexadecimal).
    package var id: String
    /// Its owner's account.
    package var accountId: Int64
    /// Its owner's account name.
    package var owner: String
    /// The container its root is in.
    package var container: String
    /// Its root item.
    package var item: String
    /// The share key's epoch.
    package var epoch: Int64
    /// When it was made.
    package var created: Double
}

/// An invitation to a share, answered or not, as stored.
package struct StoredParticipant: Sendable, Equatable {
    /// The invitation's id.
    package var id: String
    /// The share.
    package var shareId: String
    /// The account invited; nil when no account has the name (never delivered: docs/Sharing.md).
    package var accountId: Int64?
    /// The name invited.
    package var name: String
    /// What the participant may do.
    package var role: ShareRole
    /// Where the participant stands as stored (an unanswered invitation past `expires` is
    /// ``ShareParticipantState/expired`` to whoever asks: ``state(at:)``).
    package var state: ShareParticipantState
    /// When the invitation was made.
    package var invited: Double
    /// When it expires unanswered.
    package var expires: Double

    /// Where the participant stands at `now`.
    package func state(at now: Double) -> ShareParticipantState {
        state == .invited && expires <= now ? .expired : state
    }
}

/// Which invitation an update of ``SyncDatabase/updateParticipant(_:from:to:role:now:)`` is for,
/// and who may make it.
package struct ParticipantMatch: Sendable {
    /// The invitation's id (nil: the one of `participant` in `share`).
    package var id: String?
    /// The share it is to.
    package var share: String?
    /// The participant's own account, when the participant answers or leaves.
    package var participant: Int64?
    /// The owner's account, when the owner changes or removes a participant.
    package var owner: Int64?

    /// A match.
    package init(id: String? = nil, share: String? = nil, participant: Int64? = nil, owner: Int64? = nil) {
        self.id = id
        self.share = share
        self.participant = participant
        self.owner = owner
    }
}

/// The limits on the invitations one account makes (docs/Sharing.md).
package struct InvitationLimits: Sendable, Equatable {
    /// At most this many invitations an hour. Default 50.
    package var perHour = 50
    /// At most this many unanswered invitations that have not expired. Default 500.
    package var pending = 500
    /// How long an invitation waits for its answer. Default 7 days.
    package var lifetime: Double = 7 * 86_400

    /// The default limits.
    package init() {}
}

/// An account's sharing identity as stored: public keys and the private keys sealed under its
/// root key (the server opens nothing of it).
package struct StoredSharingIdentity: Sendable, Equatable {
    /// The Ed25519 public key.
    package var signing: Data
    /// The X25519 public key.
    package var agreement: Data
    /// The private keys, sealed.
    package var sealed: Data

    /// An identity.
    package init(signing: Data, agreement: Data, sealed: Data) {
        self.signing = signing
        self.agreement = agreement
        self.sealed = sealed
    }
}

/// What ``SyncDatabase/keepShareKeyEnvelopes(shareId:ownerId:epoch:envelopes:)`` did.
package enum ShareKeyKeeping: Sendable, Equatable {
    /// Kept.
    case kept
    /// The epoch is not the share's current one (or there is no such share of the owner's).
    case staleEpoch(current: Int64?)
    /// The owner's envelope of this epoch is another one: the epoch's key stands (it is given
    /// back, to seal the others with).
    case ownerKeyDiffers(standing: Data)
    /// No envelope to the owner of this epoch yet, and none given.
    case ownerKeyMissing
}
