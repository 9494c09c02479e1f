import Foundation

// The sync protocol's JSON bodies (version 1). Dates are seconds since 1970 (a JSON number);
// chunk hashes are lowercase hexadecimal SHA-256; item and revision ids are opaque strings
// chosen by the client (items) or the server (revisions). See docs/SyncProtocol.md.

/// `POST /v1/sign-in`: an account's name and password, and what this device is called.
public struct SignInRequest: Codable, Sendable {
    /// The account's name.
    public var account: String
    /// The account's password.
    public var password: String
    /// A name for the device, shown with the versions it saves.
    public var deviceName: String
    /// The containers (`TEAMID.bundle.id`) this device's token may use; nil for all.
    public var containers: [String]?

    /// Creates a sign-in request.
    public init(account: String, password: String, deviceName: String, containers: [String]? = nil) {
        self.account = account
        self.password = password
        self.deviceName = deviceName
        self.containers = containers
    }
}

/// The answer to a sign-in: the device's identity and its bearer token (shown once).
public struct SignInResponse: Codable, Sendable {
    /// The device's id.
    public var deviceId: String
    /// The bearer token for every later request.
    public var token: String
    /// The account's stable, opaque identity (a client's `ubiquityIdentityToken`).
    public var identityToken: String

    /// Creates a value.
    public init(deviceId: String, token: String, identityToken: String) {
        self.deviceId = deviceId
        self.token = token
        self.identityToken = identityToken
    }
}

/// A chunk of a file: its SHA-256 and size.
public struct ChunkReference: Codable, Sendable, Hashable {
    /// Lowercase hexadecimal SHA-256 of the chunk's bytes.
    public var hash: String
    /// The chunk's size in bytes.
    public var size: Int64

    /// Creates a reference.
    public init(hash: String, size: Int64) {
        self.hash = hash
        self.size = size
    }
}

/// One file inside a package: its path (relative, `/`-separated) and chunks — or a folder with
/// nothing in it, whose path ends in `/` and which has no chunks (an app's package may hold an
/// empty folder it fills later; the other devices must find it too).
public struct ManifestMember: Codable, Sendable, Equatable {
    /// The member's path inside the package (ending in `/` for an empty folder).
    public var path: String
    /// Its chunks, in order.
    public var chunks: [ChunkReference]

    /// Creates a member.
    public init(path: String, chunks: [ChunkReference]) {
        self.path = path
        self.chunks = chunks
    }
}

/// What an item's contents are made of: a flat file's chunks, or a package's members.
public struct Manifest: Codable, Sendable, Equatable {
    /// A flat file's chunks, in order.
    public var chunks: [ChunkReference]?
    /// A package's members.
    public var members: [ManifestMember]?

    /// Creates a manifest.
    public init(chunks: [ChunkReference]? = nil, members: [ManifestMember]? = nil) {
        self.chunks = chunks
        self.members = members
    }

    /// Every chunk the manifest names.
    public var allChunks: [ChunkReference] { (chunks ?? []) + (members ?? []).flatMap(\.chunks) }
}

/// The kind of an item.
public enum ItemKind: String, Codable, Sendable {
    /// A flat file.
    case file
    /// A package (a directory presented as one document).
    case package
    /// A folder.
    case directory
}

/// `PUT /v1/containers/{container}/items/{item}`: a new revision of an item's metadata (and
/// manifest). Metadata is visible to other devices at once; the revision becomes downloadable
/// when every chunk it names has been uploaded.
public struct ItemUpdate: Codable, Sendable {
    /// The revision this one was made from (nil for a new item).
    public var baseRevision: String?
    /// The item's name in its folder.
    public var name: String
    /// The folder item's id, or nil for the container's top level.
    public var parent: String?
    /// File, package or directory.
    public var kind: ItemKind
    /// When the device last modified it (seconds since 1970).
    public var modificationDate: Double
    /// Its uniform type identifier, if known.
    public var type: String?
    /// Its contents (empty for a directory).
    public var manifest: Manifest
    /// True for a deletion (a tombstone revision).
    public var deleted: Bool?
    /// The device's id for this change (1…128 of `A–Z a–z 0–9 - _ .`). Sent again after a lost
    /// answer or a crash, the same change gets the same answer and is not committed twice.
    public var changeId: String?
    /// For a file: its chunk list as a difference from the `baseRevision`'s, instead of
    /// `manifest` (which is then empty). The server answers `409 deltaBaseUnknown` when it
    /// cannot apply it; the device then sends the whole list.
    public var manifestDelta: ChunkListDelta?
    /// For a flat file of at most ``maximumInlineBytes``: its bytes, which must be exactly the
    /// chunks its chunk list names, in order. In JSON: `text`, a string, when they are UTF-8
    /// (a third smaller than base64, and it compresses), `contents` in base64 otherwise. The server stores them as
    /// those chunks with the commit, so the revision is downloadable at once and no chunk
    /// request is needed. Answered `400 invalidContents` when they do not fit the chunk list.
    public var contents: Data?
    /// The item's sealed record, from a device of an account whose devices seal (docs/Encryption.md,
    /// "Sealed item records"): its name, type, date, sizes and content token, sealed to the
    /// container, the item and its folder. The rest of the update then says only what the server
    /// needs: ``name`` is the name-clash tag (32 lowercase hexadecimal digits), ``type`` is nil,
    /// ``modificationDate`` is 0 (the server orders concurrent edits by their arrival), the
    /// manifest's chunks are at their sealed sizes and a package's member paths are their
    /// positions.
    public var record: Data?

    /// The most bytes a file's ``contents`` (and ``ItemState/contents``) carry inline.
    public static let maximumInlineBytes = 16 << 10

    /// Creates an update.
    public init(baseRevision: String?, name: String, parent: String? = nil, kind: ItemKind, modificationDate: Double, type: String? = nil,
                manifest: Manifest, deleted: Bool? = nil, changeId: String? = nil) {
        self.changeId = changeId
        self.baseRevision = baseRevision
        self.name = name
        self.parent = parent
        self.kind = kind
        self.modificationDate = modificationDate
        self.type = type
        self.manifest = manifest
        self.deleted = deleted
    }
}

/// An item as the server knows it now.
public struct ItemState: Codable, Sendable, Equatable {
    /// The item's id.
    public var id: String
    /// The current revision.
    public var revision: String
    /// The current revision's metadata.
    public var name: String
    /// The folder item's id, or nil.
    public var parent: String?
    /// File, package or directory.
    public var kind: ItemKind
    /// Bytes of contents.
    public var size: Int64
    /// When it was last modified (seconds since 1970).
    public var modificationDate: Double
    /// Its uniform type identifier.
    public var type: String?
    /// Whether it is deleted (a tombstone).
    public var deleted: Bool
    /// Whether every chunk of the current revision is on the server (downloadable).
    public var uploaded: Bool
    /// The device that made the current revision.
    public var deviceName: String
    /// The container sequence at which it last changed.
    public var sequence: Int64
    /// The current revision's manifest.
    public var manifest: Manifest
    /// Unresolved conflict versions: revisions that lost the conflict rule.
    public var conflicts: [ConflictVersion]
    /// What names the contents (``manifest``'s token), sent in brief answers (`brief=true`),
    /// whose manifests are left out.
    public var digest: String?
    /// With `since=REVISION`: the current chunk list as a difference from that revision's
    /// (``manifest`` is then left out); nil when the server sent the whole manifest.
    public var manifestDelta: ChunkListDelta?
    /// The revision ``manifestDelta`` starts from.
    public var deltaBase: String?
    /// A small flat file's bytes, in pages of changes asked with `inline=N`: its whole
    /// contents (at most N bytes, at most ``ItemUpdate/maximumInlineBytes``), so the device
    /// needs no other request to download it. Left out for revisions the asking device made.
    /// In JSON: `text` when they are UTF-8, `contents` in base64 otherwise (as
    /// ``ItemUpdate/contents``).
    public var contents: Data?
    /// The current revision's sealed record (``ItemUpdate/record``), when its device sealed it:
    /// ``name``, ``type``, ``modificationDate``, ``size``, ``digest`` and the manifest's sizes
    /// are then what the server knows, and the truth is inside.
    public var record: Data?
    /// The account whose device made the current revision, when that is not the container's
    /// owner (a participant of a share it is in); absent for the owner's own devices.
    public var editor: String?

    /// Creates a value.
    public init(id: String, revision: String, name: String, parent: String? = nil, kind: ItemKind, size: Int64, modificationDate: Double, type: String? = nil, deleted: Bool, uploaded: Bool, deviceName: String, sequence: Int64, manifest: Manifest, conflicts: [ConflictVersion]) {
        self.id = id
        self.revision = revision
        self.name = name
        self.parent = parent
        self.kind = kind
        self.size = size
        self.modificationDate = modificationDate
        self.type = type
        self.deleted = deleted
        self.uploaded = uploaded
        self.deviceName = deviceName
        self.sequence = sequence
        self.manifest = manifest
        self.conflicts = conflicts
    }
}

/// A revision kept as a conflict version of an item.
public struct ConflictVersion: Codable, Sendable, Equatable {
    /// The revision's id.
    public var revision: String
    /// The device that made it.
    public var deviceName: String
    /// Its modification date (seconds since 1970).
    public var modificationDate: Double
    /// Bytes of contents.
    public var size: Int64
    /// Whether every chunk is on the server.
    public var uploaded: Bool
    /// Its manifest.
    public var manifest: Manifest
    /// What names its contents, in brief answers (whose manifests are left out).
    public var digest: String?
    /// Its sealed record (``ItemUpdate/record``), when its device sealed it.
    public var record: Data?
    /// Its folder, when that is not the item's current one (a sealed record is bound to it).
    public var parent: String?
    /// The account whose device made it, when that is not the container's owner (a
    /// participant of a share it is in); absent for the owner's own devices.
    public var editor: String?

    /// Creates a value.
    public init(revision: String, deviceName: String, modificationDate: Double, size: Int64, uploaded: Bool, manifest: Manifest) {
        self.revision = revision
        self.deviceName = deviceName
        self.modificationDate = modificationDate
        self.size = size
        self.uploaded = uploaded
        self.manifest = manifest
    }
}

/// The answer to an item update.
public struct CommitResponse: Codable, Sendable {
    /// The new revision's id.
    public var revision: String
    /// `current` if it is the item's current revision now, `conflict` if it lost the conflict
    /// rule and was kept as a conflict version.
    public var outcome: String
    /// The item afterwards.
    public var item: ItemState
    /// Chunks of the manifest the server lacks: upload these.
    public var missingChunks: [String]

    /// Creates a value.
    public init(revision: String, outcome: String, item: ItemState, missingChunks: [String]) {
        self.revision = revision
        self.outcome = outcome
        self.item = item
        self.missingChunks = missingChunks
    }
}

/// `GET /v1/containers/{container}/changes?since=N`: items changed after sequence N.
public struct ChangesResponse: Codable, Sendable {
    /// The container's sequence now (the next cursor, once `more` is false).
    public var sequence: Int64
    /// The changed items (their present state), in sequence order.
    public var items: [ItemState]
    /// Whether more changes follow (ask again from ``next``, or else the last item's sequence).
    public var more: Bool
    /// With `more`, where the next page starts when that is past the last item: through a
    /// share, the owner's changes outside it are left out, and a page may list none of the
    /// changes it passed over (or none at all). Nil: the last item's sequence.
    public var next: Int64?
    /// On a page a push brought (``PushEvent/signedCommits``): the place of the container's
    /// newest signed commit kept then. Nil: not said (a device reads them as usual).
    public var signedCommits: Int64?

    /// Creates a value.
    public init(sequence: Int64, items: [ItemState], more: Bool, next: Int64? = nil, signedCommits: Int64? = nil) {
        self.sequence = sequence
        self.items = items
        self.more = more
        self.next = next
        self.signedCommits = signedCommits
    }
}

/// `POST /v1/chunks/missing`: which of these chunks the server lacks.
public struct MissingChunksRequest: Codable, Sendable {
    /// Chunk hashes.
    public var hashes: [String]

    /// Creates a value.
    public init(hashes: [String]) {
        self.hashes = hashes
    }
}

/// The answer: the hashes the server lacks.
public struct MissingChunksResponse: Codable, Sendable {
    /// Chunk hashes to upload.
    public var missing: [String]

    /// Creates a value.
    public init(missing: [String]) {
        self.missing = missing
    }
}

/// `POST /v1/containers/{container}/items/{item}/resolve`: keep one revision, remove conflict versions.
public struct ResolveRequest: Codable, Sendable {
    /// The revision to make current (the current one, or a conflict version).
    public var keep: String
    /// Conflict versions to remove (resolved).
    public var remove: [String]

    /// Creates a value.
    public init(keep: String, remove: [String]) {
        self.keep = keep
        self.remove = remove
    }
}

/// An error answer: `{"error": {"code": …, "message": …}}`.
public struct ErrorResponse: Codable, Sendable {
    /// The error.
    public struct Body: Codable, Sendable {
        /// A stable machine-readable code.
        public var code: String
        /// What went wrong, for people.
        public var message: String
        /// For `missingChunks`: the hashes of the chunks the refused commit names that the
        /// account does not hold (upload them, then commit again); nil otherwise.
        public var missingChunks: [String]?

        /// Creates a value.
        public init(code: String, message: String, missingChunks: [String]? = nil) {
            self.code = code
            self.message = message
            self.missingChunks = missingChunks
        }
    }
    /// The error.
    public var error: Body

    /// Creates a value.
    public init(error: Body) {
        self.error = error
    }
}

/// What the server pushes to connected devices, as JSON text messages: first
/// `{"type":"connected"}` (from then on nothing is missed: catch up with `changes` now), then
/// `{"type":"changed","container":…,"sequence":…}` whenever a container moves on. Devices then
/// ask for the changes since their cursor.
public struct PushEvent: Codable, Sendable, Equatable {
    /// `connected`, `changed` (a container), `keyValueChanged` (a key-value store),
    /// `shareChanged` (a share the device's account owns or joined: ``container`` is the
    /// share's id) or `sharesChanged` (the account's shares or invitations changed).
    public var type: String
    /// The container (or key-value store) that changed.
    public var container: String?
    /// Its sequence now.
    public var sequence: Int64?
    /// With `changed`, when the change was small enough to send along: the container's
    /// sequence before it. ``items`` are then every item that changed after `since` up to
    /// ``sequence`` — the page of changes (`brief=true`) a device whose cursor is `since` would
    /// fetch, so it needs no request. Sent only on push connections that asked for them
    /// (`pages=gzip`), as a gzip-compressed binary message.
    public var since: Int64?
    /// The changed items (see ``since``), brief, with small files' bytes inline for a
    /// connection that asked for them (`inline=N`).
    public var items: [ItemState]?
    /// With a page (``since``): the place of the container's newest signed commit kept (0:
    /// none). A device that has read the signed commits up to there need not ask for more
    /// before it takes the page (docs/Encryption.md, "Signed commits").
    public var signedCommits: Int64?

    /// The first message on a push connection.
    public static let connected = PushEvent(type: "connected", container: nil, sequence: nil)

    /// Creates a value.
    public init(type: String, container: String? = nil, sequence: Int64? = nil, since: Int64? = nil, items: [ItemState]? = nil) {
        self.type = type
        self.container = container
        self.sequence = sequence
        self.since = since
        self.items = items
    }

    /// The most bytes of small files' contents a pushed page carries (more: the page is left
    /// out, and devices fetch it).
    public static let maximumPageContentBytes = 64 << 10
    /// The most items a pushed page lists.
    public static let maximumPageItems = 64
    /// The most bytes a push message takes as it is sent (a page compressed larger is left
    /// out); a device reads messages (and frames) up to this size.
    public static let maximumMessageBytes = 256 << 10
}

/// The account a request acts for: `GET /v1/account`.
public struct AccountResponse: Codable, Sendable, Equatable {
    /// The account's identity token (a client's `ubiquityIdentityToken`).
    public var identityToken: String
    /// The device's id.
    public var deviceId: String
    /// The device's name.
    public var deviceName: String
    /// Bytes counted against the quota (the sum of ``usage``'s parts).
    public var usedBytes: Int64
    /// Its quota.
    public var quotaBytes: Int64
    /// What the used bytes are made of, and the account's items (nil from servers before it).
    public var usage: AccountUsage?

    /// Creates an answer.
    public init(identityToken: String, deviceId: String, deviceName: String, usedBytes: Int64, quotaBytes: Int64, usage: AccountUsage? = nil) {
        self.identityToken = identityToken
        self.deviceId = deviceId
        self.deviceName = deviceName
        self.usedBytes = usedBytes
        self.quotaBytes = quotaBytes
        self.usage = usage
    }
}

/// What counts against an account's quota, part by part (``AccountResponse/usage``).
public struct AccountUsage: Codable, Sendable, Equatable {
    /// Bytes of file contents stored (each chunk once).
    public var chunkBytes: Int64
    /// Bytes of key-value stores (keys and values).
    public var keyValueBytes: Int64
    /// Bytes of revision records kept, current and past (a fixed amount each, names, chunk lists).
    public var metadataBytes: Int64
    /// Bytes committed revisions declare for chunks not uploaded yet (reserved).
    public var pendingBytes: Int64
    /// Items in all the account's containers.
    public var items: Int64

    /// Creates a breakdown.
    public init(chunkBytes: Int64, keyValueBytes: Int64, metadataBytes: Int64, pendingBytes: Int64, items: Int64) {
        self.chunkBytes = chunkBytes
        self.keyValueBytes = keyValueBytes
        self.metadataBytes = metadataBytes
        self.pendingBytes = pendingBytes
        self.items = items
    }
}

/// Inline contents in JSON: UTF-8 bytes as the string `text` (smaller than base64, and a
/// compressed body then compresses them too), other bytes as base64 `contents`. Either is read.
enum InlineContents {
    /// Writes `contents` under the key that fits them.
    static func encode<Key: CodingKey>(_ contents: Data?, text: Key, base64: Key, into container: inout KeyedEncodingContainer<Key>) throws {
        guard let contents else { return }
        if let string = String(validating: contents, as: UTF8.self), Data(string.utf8) == contents {
            try container.encode(string, forKey: text)
        } else {
            try container.encode(contents, forKey: base64)
        }
    }

    /// Reads contents sent either way (both at once is refused).
    static func decode<Key: CodingKey>(text: Key, base64: Key, from container: KeyedDecodingContainer<Key>) throws -> Data? {
        let string = try container.decodeIfPresent(String.self, forKey: text)
        let bytes = try container.decodeIfPresent(Data.self, forKey: base64)
        if string != nil, bytes != nil {
            throw DecodingError.dataCorruptedError(forKey: text, in: container, debugDescription: "contents sent both as text and as base64")
        }
        return string.map { Data($0.utf8) } ?? bytes
    }
}

extension ItemUpdate {
    private enum CodingKeys: String, CodingKey {
        case baseRevision, name, parent, kind, modificationDate, type, manifest, deleted, changeId, manifestDelta, contents, text, record
    }

    /// Reads an update (its contents as `text` or base64 `contents`).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(baseRevision: try container.decodeIfPresent(String.self, forKey: .baseRevision),
                  name: try container.decode(String.self, forKey: .name),
                  parent: try container.decodeIfPresent(String.self, forKey: .parent),
                  kind: try container.decode(ItemKind.self, forKey: .kind),
                  modificationDate: try container.decode(Double.self, forKey: .modificationDate),
                  type: try container.decodeIfPresent(String.self, forKey: .type),
                  manifest: try container.decode(Manifest.self, forKey: .manifest),
                  deleted: try container.decodeIfPresent(Bool.self, forKey: .deleted),
                  changeId: try container.decodeIfPresent(String.self, forKey: .changeId))
        manifestDelta = try container.decodeIfPresent(ChunkListDelta.self, forKey: .manifestDelta)
        contents = try InlineContents.decode(text: .text, base64: .contents, from: container)
        record = try container.decodeIfPresent(Data.self, forKey: .record)
    }

    /// Writes the update (UTF-8 contents as `text`).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(baseRevision, forKey: .baseRevision)
        try container.encode(name, forKey: .name)
        try container.encodeIfPresent(parent, forKey: .parent)
        try container.encode(kind, forKey: .kind)
        try container.encode(modificationDate, forKey: .modificationDate)
        try container.encodeIfPresent(type, forKey: .type)
        try container.encode(manifest, forKey: .manifest)
        try container.encodeIfPresent(deleted, forKey: .deleted)
        try container.encodeIfPresent(changeId, forKey: .changeId)
        try container.encodeIfPresent(manifestDelta, forKey: .manifestDelta)
        try InlineContents.encode(contents, text: .text, base64: .contents, into: &container)
        try container.encodeIfPresent(record, forKey: .record)
    }
}

extension ItemState {
    private enum CodingKeys: String, CodingKey {
        case id, revision, name, parent, kind, size, modificationDate, type, deleted, uploaded, deviceName, sequence, manifest, conflicts
        case digest, manifestDelta, deltaBase, contents, text, record, editor
    }

    /// Reads a state (its contents as `text` or base64 `contents`).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(id: try container.decode(String.self, forKey: .id),
                  revision: try container.decode(String.self, forKey: .revision),
                  name: try container.decode(String.self, forKey: .name),
                  parent: try container.decodeIfPresent(String.self, forKey: .parent),
                  kind: try container.decode(ItemKind.self, forKey: .kind),
                  size: try container.decode(Int64.self, forKey: .size),
                  modificationDate: try container.decode(Double.self, forKey: .modificationDate),
                  type: try container.decodeIfPresent(String.self, forKey: .type),
                  deleted: try container.decode(Bool.self, forKey: .deleted),
                  uploaded: try container.decode(Bool.self, forKey: .uploaded),
                  deviceName: try container.decode(String.self, forKey: .deviceName),
                  sequence: try container.decode(Int64.self, forKey: .sequence),
                  manifest: try container.decode(Manifest.self, forKey: .manifest),
                  conflicts: try container.decode([ConflictVersion].self, forKey: .conflicts))
        digest = try container.decodeIfPresent(String.self, forKey: .digest)
        manifestDelta = try container.decodeIfPresent(ChunkListDelta.self, forKey: .manifestDelta)
        deltaBase = try container.decodeIfPresent(String.self, forKey: .deltaBase)
        contents = try InlineContents.decode(text: .text, base64: .contents, from: container)
        record = try container.decodeIfPresent(Data.self, forKey: .record)
        editor = try container.decodeIfPresent(String.self, forKey: .editor)
    }

    /// Writes the state (UTF-8 contents as `text`).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(revision, forKey: .revision)
        try container.encode(name, forKey: .name)
        try container.encodeIfPresent(parent, forKey: .parent)
        try container.encode(kind, forKey: .kind)
        try container.encode(size, forKey: .size)
        try container.encode(modificationDate, forKey: .modificationDate)
        try container.encodeIfPresent(type, forKey: .type)
        try container.encode(deleted, forKey: .deleted)
        try container.encode(uploaded, forKey: .uploaded)
        try container.encode(deviceName, forKey: .deviceName)
        try container.encode(sequence, forKey: .sequence)
        try container.encode(manifest, forKey: .manifest)
        try container.encode(conflicts, forKey: .conflicts)
        try container.encodeIfPresent(digest, forKey: .digest)
        try container.encodeIfPresent(manifestDelta, forKey: .manifestDelta)
        try container.encodeIfPresent(deltaBase, forKey: .deltaBase)
        try InlineContents.encode(contents, text: .text, base64: .contents, into: &container)
        try container.encodeIfPresent(record, forKey: .record)
        try container.encodeIfPresent(editor, forKey: .editor)
    }
}
