import Foundation

/// A sealed copy of the account's root key for one holder in one epoch, as the server keeps it
/// (it cannot open those sealed to devices or the recovery key; under Standard it opens its own).
public struct KeyEnvelopeRecord: Codable, Sendable, Equatable {
    /// The root key's epoch.
    public var epoch: Int64
    /// Who can open it: a device's identifier, `escrow`, or `recovery`.
    public var recipient: String
    /// The device (or `escrow`) that sealed it.
    public var sender: String
    /// The sealed bytes.
    public var body: Data

    /// The recipient that stands for the server's escrow key.
    public static let escrowRecipient = "escrow"
    /// The recipient that stands for the account's recovery key.
    public static let recoveryRecipient = "recovery"

    /// Creates a record.
    public init(epoch: Int64, recipient: String, sender: String, body: Data) {
        self.epoch = epoch
        self.recipient = recipient
        self.sender = sender
        self.body = body
    }
}

/// The server's escrow key: what a device seals the root key to under Standard custody.
public struct EscrowPublicKeys: Codable, Sendable, Equatable {
    /// Its Ed25519 public key (it signs the entries that add devices by password).
    public var signing: Data
    /// Its X25519 public key.
    public var agreement: Data

    /// Creates a value.
    public init(signing: Data, agreement: Data) {
        self.signing = signing
        self.agreement = agreement
    }
}

/// `GET /v1/keys`: the account's roster (every entry, encoded, in order), the envelopes for the
/// asking holder, and the server's escrow key (nil when it has none).
public struct KeyDirectoryResponse: Codable, Sendable, Equatable {
    /// The roster's entries (each `RosterEntry.encoded`), from the genesis on; empty for an
    /// account no device has set up.
    public var roster: [Data]
    /// Envelopes whose recipient was asked for (every epoch's).
    public var envelopes: [KeyEnvelopeRecord]
    /// The server's escrow key.
    public var escrow: EscrowPublicKeys?

    /// Creates a value.
    public init(roster: [Data], envelopes: [KeyEnvelopeRecord], escrow: EscrowPublicKeys?) {
        self.roster = roster
        self.envelopes = envelopes
        self.escrow = escrow
    }
}

/// `POST /v1/keys/roster`: entries a device appends after the `after` entries it saw, with the
/// envelopes that go with them (a new epoch's root key sealed to every holder), all or nothing.
public struct RosterAppendRequest: Codable, Sendable, Equatable {
    /// How many entries the device saw (the new ones go from there).
    public var after: Int
    /// The new entries, encoded.
    public var entries: [Data]
    /// Envelopes to keep (replacing any for the same epoch and recipient).
    public var envelopes: [KeyEnvelopeRecord]

    /// Creates a value.
    public init(after: Int, entries: [Data], envelopes: [KeyEnvelopeRecord]) {
        self.after = after
        self.entries = entries
        self.envelopes = envelopes
    }
}

/// `POST /v1/keys/join`: a device signed in by password asks to join an account under Standard
/// custody; the server's escrow key adds it to the roster and seals it the root key.
public struct JoinRequest: Codable, Sendable, Equatable {
    /// The device's Ed25519 public key.
    public var signing: Data
    /// The device's X25519 public key.
    public var agreement: Data
    /// Its name in the roster.
    public var name: String

    /// Creates a value.
    public init(signing: Data, agreement: Data, name: String) {
        self.signing = signing
        self.agreement = agreement
        self.name = name
    }
}

/// `POST /v1/keys/requests`: a device signed in by password asks the account's devices to let
/// it in (joining by a code): its keys and a commitment to a nonce it reveals later.
public struct KeyRequestCreate: Codable, Sendable, Equatable {
    /// The device's Ed25519 public key.
    public var signing: Data
    /// The device's X25519 public key.
    public var agreement: Data
    /// Its name in the roster.
    public var name: String
    /// SHA-256 commitment to its nonce and keys (32 bytes).
    public var commitment: Data

    /// Creates a value.
    public init(signing: Data, agreement: Data, name: String, commitment: Data) {
        self.signing = signing
        self.agreement = agreement
        self.name = name
        self.commitment = commitment
    }
}

/// A pending request to join, as the server keeps it (for ten minutes).
public struct KeyRequestRecord: Codable, Sendable, Equatable {
    /// The request's id.
    public var id: String
    /// The new device's Ed25519 public key.
    public var signing: Data
    /// The new device's X25519 public key.
    public var agreement: Data
    /// Its name.
    public var name: String
    /// Its commitment.
    public var commitment: Data
    /// When it was made (seconds since 1970).
    public var created: Double
    /// The roster device that answered it, if one has.
    public var answerer: String?
    /// That device's nonce.
    public var answerNonce: Data?
    /// The new device's nonce, once revealed (after the answer).
    public var revealNonce: Data?
    /// What asks: nil for a device that joins the roster, ``browserKind`` for a browser that
    /// asks for the keys of the account's containers under Advanced Data Protection (approved,
    /// it gets a ``WebGrantUpload``, and joins nothing).
    public var kind: String?

    /// ``kind`` of a browser's request.
    public static let browserKind = "browser"

    /// Creates a value.
    public init(id: String, signing: Data, agreement: Data, name: String, commitment: Data, created: Double,
                answerer: String? = nil, answerNonce: Data? = nil, revealNonce: Data? = nil, kind: String? = nil) {
        self.id = id
        self.signing = signing
        self.agreement = agreement
        self.name = name
        self.commitment = commitment
        self.created = created
        self.answerer = answerer
        self.answerNonce = answerNonce
        self.revealNonce = revealNonce
        self.kind = kind
    }
}

/// `POST /v1/keys/requests/ID/grant`: a device's answer to a browser it approved — the keys of
/// the containers it allows, sealed to the browser and signed (`WebGrant`), which the server
/// keeps for the browser's session until `expires`.
public struct WebGrantUpload: Codable, Sendable, Equatable {
    /// The sealed grant.
    public var body: Data
    /// The device's signature of it.
    public var signature: Data
    /// The containers it opens (what the server serves the session, sealed).
    public var containers: [String]
    /// Until when (seconds since 1970; at most an hour from now).
    public var expires: Double

    /// Creates a value.
    public init(body: Data, signature: Data, containers: [String], expires: Double) {
        self.body = body
        self.signature = signature
        self.containers = containers
        self.expires = expires
    }
}

/// `GET /v1/keys/requests`: the account's pending requests to join.
public struct KeyRequestsResponse: Codable, Sendable, Equatable {
    /// The requests, oldest first.
    public var requests: [KeyRequestRecord]

    /// Creates a value.
    public init(requests: [KeyRequestRecord]) { self.requests = requests }
}

/// `POST /v1/keys/requests/ID/answer` (with the answering device's identifier) and
/// `…/reveal` (without): a nonce of 32 bytes.
public struct KeyRequestNonce: Codable, Sendable, Equatable {
    /// The nonce.
    public var nonce: Data
    /// The answering device's identifier in the roster (answers only).
    public var answerer: String?

    /// Creates a value.
    public init(nonce: Data, answerer: String? = nil) {
        self.nonce = nonce
        self.answerer = answerer
    }
}

/// `GET /v1/containers`: the account's containers (those this device may use), by identifier —
/// what `ubiquity devices approve` gives a browser the keys of unless told which.
public struct ContainerListResponse: Codable, Sendable, Equatable {
    /// The containers' identifiers, sorted.
    public var containers: [String]

    /// Creates a value.
    public init(containers: [String]) { self.containers = containers }
}

/// `POST /v1/keys/seal-in-place`: what the server sealed in place of the account's data with its
/// escrow's keys — every revision it still held in plaintext, however young — just before a
/// device turns Advanced Data Protection on (after which the server holds no key to do it).
public struct SealNowResponse: Codable, Sendable, Equatable {
    /// Revisions sealed in place.
    public var revisions: Int
    /// Chunks sealed.
    public var chunks: Int
    /// Revisions left in plaintext (a chunk they name is missing or damaged).
    public var left: Int

    /// Creates a value.
    public init(revisions: Int, chunks: Int, left: Int) {
        self.revisions = revisions
        self.chunks = chunks
        self.left = left
    }
}
