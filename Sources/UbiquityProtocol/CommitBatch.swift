import Foundation

/// One item's update in a ``CommitBatchRequest``.
public struct ItemCommit: Codable, Sendable {
    /// The item's id.
    public var item: String
    /// Its new revision's metadata (and manifest, or manifest delta).
    public var update: ItemUpdate

    /// Creates a value.
    public init(item: String, update: ItemUpdate) {
        self.item = item
        self.update = update
    }
}

/// `POST /v1/containers/{container}/commits`: many items' updates in one request, committed in
/// one transaction, with one push to the account's other devices. Each update is treated as
/// `PUT …/items/{item}` would treat it; one that the server refuses (a bad name, a delta whose
/// base is unknown) gets its error in its ``CommitResult`` and the others are committed.
public struct CommitBatchRequest: Codable, Sendable {
    /// The updates, each of a different item, in the order they are applied (a folder before
    /// what goes into it). At most ``maximumCount``.
    public var commits: [ItemCommit]
    /// Plaintext chunks as patches of chunks the account holds (a `POST /v1/chunks/patches`
    /// body, at most ``maximumPatchBytes``), made and stored before the commits: a small edit of
    /// a large file goes up in one request. The whole request is refused (400 `badPatch`, 404)
    /// when one cannot be made; the device then sends them the usual way.
    public var patches: Data?

    /// The most updates one batch carries.
    public static let maximumCount = 1_000

    /// The most bytes of patches a batch carries.
    public static let maximumPatchBytes = 64 << 10

    /// Creates a value.
    public init(commits: [ItemCommit], patches: Data? = nil) {
        self.commits = commits
        self.patches = patches
    }
}

/// One item's outcome in a ``CommitBatchResponse``: its commit, or why it was refused.
public struct CommitResult: Codable, Sendable {
    /// The item's id.
    public var item: String
    /// The commit's answer, as `PUT …/items/{item}` gives it; nil when refused (or answered
    /// by ``committed``).
    public var commit: CommitResponse?
    /// With `terse=true`: a commit that made the item exactly what the update said (its
    /// current revision, no conflict versions, every chunk on the server, the name, folder,
    /// kind, type and date sent) is answered by its new revision and sequence alone — the
    /// device knows the rest. Any other outcome comes as ``commit``.
    public var committed: CommittedRevision?
    /// Why the update was refused (nothing of it was committed); nil when committed.
    public var error: ErrorResponse.Body?

    /// Creates a value.
    public init(item: String, commit: CommitResponse? = nil, committed: CommittedRevision? = nil, error: ErrorResponse.Body? = nil) {
        self.item = item
        self.commit = commit
        self.committed = committed
        self.error = error
    }
}

/// A commit that made its item exactly what the update said: the new revision and the
/// container sequence it was made at (a ``CommitResult`` asked with `terse=true`).
public struct CommittedRevision: Codable, Sendable, Equatable {
    /// The new revision's id (the item's current revision).
    public var revision: String
    /// The container sequence at which the item changed.
    public var sequence: Int64

    /// Creates a value.
    public init(revision: String, sequence: Int64) {
        self.revision = revision
        self.sequence = sequence
    }
}

/// The answer to a ``CommitBatchRequest``: one result per update, in the order sent.
public struct CommitBatchResponse: Codable, Sendable {
    /// The results.
    public var results: [CommitResult]

    /// Creates a value.
    public init(results: [CommitResult]) {
        self.results = results
    }
}

/// `POST /v1/containers/{container}/fetch`: several items' present states, with their
/// manifests, in one request (what a device about to download many items asks).
public struct ItemsFetchRequest: Codable, Sendable {
    /// The items' ids; at most ``maximumCount``.
    public var ids: [String]

    /// The most items one request asks for.
    public static let maximumCount = 1_000

    /// Creates a value.
    public init(ids: [String]) {
        self.ids = ids
    }
}

/// The answer to an ``ItemsFetchRequest``: the items known, in the order asked (unknown ids
/// are left out).
public struct ItemsResponse: Codable, Sendable {
    /// The items.
    public var items: [ItemState]

    /// Creates a value.
    public init(items: [ItemState]) {
        self.items = items
    }
}
