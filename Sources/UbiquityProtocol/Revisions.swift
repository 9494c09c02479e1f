import Foundation

/// An earlier revision of an item that the server still keeps (for its retention, 30 days by
/// default): what a device lists as a version whose contents are not on it
/// (`NSFileVersion.getNonlocalVersionsOfItem(at:completionHandler:)`).
public struct ItemRevision: Codable, Sendable, Equatable {
    /// The revision's id.
    public var revision: String
    /// The item's name in that revision (its last path component).
    public var name: String
    /// File or package.
    public var kind: ItemKind
    /// The device that made it.
    public var deviceName: String
    /// Bytes of contents.
    public var size: Int64
    /// Its modification date (seconds since 1970).
    public var modificationDate: Double
    /// When it was committed (seconds since 1970).
    public var created: Double
    /// Whether every chunk is on the server (it can be downloaded).
    public var uploaded: Bool
    /// Its sealed record (``ItemUpdate/record``), when its device sealed it: ``name``,
    /// ``size`` and ``modificationDate`` are then what the server knows, the truth inside.
    public var record: Data?
    /// Its folder (a sealed record is bound to it).
    public var parent: String?
    /// The account whose device made it, when that is not the container's owner (a
    /// participant of a share it is in); absent for the owner's own devices.
    public var editor: String?

    /// Creates a value.
    public init(revision: String, name: String, kind: ItemKind, deviceName: String, size: Int64, modificationDate: Double, created: Double, uploaded: Bool) {
        self.revision = revision
        self.name = name
        self.kind = kind
        self.deviceName = deviceName
        self.size = size
        self.modificationDate = modificationDate
        self.created = created
        self.uploaded = uploaded
    }
}

/// `GET /v1/containers/C/items/I/revisions`: the item's earlier revisions, newest first.
public struct ItemRevisionsResponse: Codable, Sendable, Equatable {
    /// The revisions, newest first (at most ``maximumCount``).
    public var revisions: [ItemRevision]

    /// How many revisions one answer lists at most (the newest).
    public static let maximumCount = 500

    /// Creates a value.
    public init(revisions: [ItemRevision]) { self.revisions = revisions }
}

/// `GET /v1/containers/C/items/I/revisions/R`: one revision's manifest, to download its contents,
/// with what a device keeps of it as a version.
public struct RevisionContentsResponse: Codable, Sendable, Equatable {
    /// The revision's id.
    public var revision: String
    /// The item's name in that revision.
    public var name: String
    /// The device that made it.
    public var deviceName: String
    /// Bytes of contents.
    public var size: Int64
    /// Its modification date (seconds since 1970).
    public var modificationDate: Double
    /// File or package.
    public var kind: ItemKind
    /// Its manifest (its chunks are fetched as any others).
    public var manifest: Manifest
    /// Whether every chunk is on the server.
    public var uploaded: Bool
    /// Its sealed record (``ItemUpdate/record``), when its device sealed it.
    public var record: Data?
    /// Its folder (a sealed record is bound to it).
    public var parent: String?
    /// The account whose device made it, when that is not the container's owner (a
    /// participant of a share it is in); absent for the owner's own devices.
    public var editor: String?

    /// Creates a value.
    public init(revision: String, name: String, deviceName: String, size: Int64, modificationDate: Double, kind: ItemKind, manifest: Manifest, uploaded: Bool) {
        self.revision = revision
        self.name = name
        self.deviceName = deviceName
        self.size = size
        self.modificationDate = modificationDate
        self.kind = kind
        self.manifest = manifest
        self.uploaded = uploaded
    }
}

/// `POST /v1/containers/{container}/items/{item}/links`: publish the item's current revision
/// (a flat file, uploaded) as a link anyone can download it from until it expires
/// (`FileManager.url(forPublishingUbiquitousItemAt:expiration:)`).
public struct PublishRequest: Codable, Sendable, Equatable {
    /// How long the link should last, in seconds (at most ``PublishedLink/longestLifetime``; absent: that).
    public var seconds: Double?
    /// Under Advanced Data Protection: the revision the device sealed ``manifest`` for (the
    /// item's current one, else 409 `revisionMoved`).
    public var revision: String?
    /// Under Advanced Data Protection: the link's sealed manifest (`LinkManifest`, base64 in
    /// JSON), which the link's page opens with the key in the address's fragment.
    public var manifest: Data?

    /// Creates a request.
    public init(seconds: Double? = nil, revision: String? = nil, manifest: Data? = nil) {
        self.seconds = seconds
        self.revision = revision
        self.manifest = manifest
    }
}

/// `POST /v1/chunks/bases`: which of an account's chunks the server keeps as sealed patches,
/// and of which chunks (a device publishing a link under Advanced names their keys too).
public struct ChunkBasesRequest: Codable, Sendable, Equatable {
    /// Chunk names (at most ``ChunkBatch/maximumCount``).
    public var hashes: [String]

    /// Creates a request.
    public init(hashes: [String]) {
        self.hashes = hashes
    }
}

/// The answer to ``ChunkBasesRequest``: each chunk asked for, and each base found, that is
/// kept as a sealed patch, mapped to its base — down to chunks kept whole.
public struct ChunkBasesResponse: Codable, Sendable, Equatable {
    /// Chunk name → the name of the chunk its sealed patch changes.
    public var bases: [String: String]

    /// Creates a value.
    public init(bases: [String: String]) {
        self.bases = bases
    }
}

/// A published link: the revision current when it was published, downloadable by anyone who
/// has the link until it expires or is revoked.
public struct PublishedLink: Codable, Sendable, Equatable {
    /// The link's id (to list and revoke it; not the secret part of its address).
    public var id: String
    /// Its address on the server: `/l/` and an unguessable token (256 random bits). Given only
    /// when the link is made; lists leave it out.
    public var path: String?
    /// The item's container.
    public var container: String
    /// The item's id.
    public var item: String
    /// The revision it serves.
    public var revision: String
    /// The item's name when published.
    public var name: String
    /// When it was published (seconds since 1970).
    public var created: Double
    /// When it stops working (seconds since 1970).
    public var expires: Double
    /// Whether a device sealed the file's keys into it (Advanced Data Protection): its page
    /// opens the file with the key in the address's fragment, which the server never sees.
    public var sealed: Bool?
    /// Whether it stopped working because its account turned Advanced Data Protection on after
    /// it was made (a link the server opened with the escrow's keys, its address carrying no
    /// key: it answers 410 `linkNeedsKey`). Said in lists only.
    public var stopped: Bool?

    /// The longest a link lasts: 30 days (the server keeps a replaced revision that long).
    public static let longestLifetime: Double = 30 * 86_400

    /// Creates a value.
    public init(id: String, path: String?, container: String, item: String, revision: String, name: String, created: Double, expires: Double, sealed: Bool? = nil) {
        self.sealed = sealed
        self.id = id
        self.path = path
        self.container = container
        self.item = item
        self.revision = revision
        self.name = name
        self.created = created
        self.expires = expires
    }
}
