import Foundation

// The keys of sharing (issue 46, docs/Sharing.md "Keys"): each account's sharing identity, and
// each share's key sealed to its members' identities. The server keeps them and cannot open
// them: it holds no account's root key under Advanced Data Protection.

/// An account's sharing identity as the server publishes it: the public keys (32 bytes each)
/// and, to the account's own devices only, the private keys sealed under its root key.
public struct SharingIdentityRecord: Codable, Sendable, Equatable {
    /// The account's name.
    public var account: String
    /// The Ed25519 public key.
    public var signing: Data
    /// The X25519 public key.
    public var agreement: Data
    /// The private keys, sealed under the account's root key (`SealedSharingIdentity`): only in
    /// the answer to the account's own devices.
    public var sealed: Data?

    /// Creates a value.
    public init(account: String, signing: Data, agreement: Data, sealed: Data? = nil) {
        self.account = account
        self.signing = signing
        self.agreement = agreement
        self.sealed = sealed
    }
}

/// `PUT /v1/sharing/identity`: publish the account's sharing identity — the first, or in place
/// of the one whose signing key is `replacing` (a compare-and-swap: two devices never publish
/// two identities, one over the other's).
public struct SharingIdentityPublishRequest: Codable, Sendable {
    /// The Ed25519 public key.
    public var signing: Data
    /// The X25519 public key.
    public var agreement: Data
    /// The private keys, sealed under the account's root key.
    public var sealed: Data
    /// The signing key of the identity this replaces; nil when there is none yet.
    public var replacing: Data?

    /// Creates a value.
    public init(signing: Data, agreement: Data, sealed: Data, replacing: Data? = nil) {
        self.signing = signing
        self.agreement = agreement
        self.sealed = sealed
        self.replacing = replacing
    }
}

/// One share key envelope: the share's key of one epoch sealed by the owner's sharing identity
/// to one account's (`ShareKeyEnvelope`).
public struct ShareKeyEnvelopeRecord: Codable, Sendable, Equatable {
    /// The account it is sealed to (the owner's own, or a participant's).
    public var account: String
    /// The share epoch of the key.
    public var epoch: Int64
    /// The envelope.
    public var envelope: Data

    /// Creates a value.
    public init(account: String, epoch: Int64, envelope: Data) {
        self.account = account
        self.epoch = epoch
        self.envelope = envelope
    }
}

/// `PUT /v1/shares/ID/keys` (its owner): envelopes of the share's key of the share's current
/// epoch. The owner's own envelope is the epoch's key: the first one stored stands (another is
/// answered 409 `shareKeyExists`, with the one that stands to seal again), and a participant's
/// comes only once it is there.
public struct ShareKeysPublishRequest: Codable, Sendable {
    /// The epoch (the share's current one).
    public var epoch: Int64
    /// The envelopes, each to the owner's account or to a participant who accepted.
    public var envelopes: [ShareKeyEnvelopeRecord]

    /// Creates a value.
    public init(epoch: Int64, envelopes: [ShareKeyEnvelopeRecord]) {
        self.epoch = epoch
        self.envelopes = envelopes
    }
}

/// `GET /v1/shares/ID/keys`: the share's key envelopes sealed to the caller's account, every
/// epoch's, and (to its owner) who is still waiting for the current epoch's.
public struct ShareKeysResponse: Codable, Sendable, Equatable {
    /// The share.
    public var share: String
    /// The share's current epoch.
    public var epoch: Int64
    /// The owner's account name.
    public var owner: String
    /// The envelopes sealed to the caller's account, oldest epoch first.
    public var envelopes: [ShareKeyEnvelopeRecord]
    /// To the owner: the participants who accepted and have no envelope of the current epoch.
    public var waiting: [String]?

    /// Creates a value.
    public init(share: String, epoch: Int64, owner: String, envelopes: [ShareKeyEnvelopeRecord], waiting: [String]? = nil) {
        self.share = share
        self.epoch = epoch
        self.owner = owner
        self.envelopes = envelopes
        self.waiting = waiting
    }
}
