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

    /// The most updates one batch carries.
    public static let maximumCount = 1_000

    /// Creates a value.
    public init(commits: [ItemCommit]) {
        self.commits = commits
    }
}

/// One item's outcome in a ``CommitBatchResponse``: its commit, or why it was refused.
public struct CommitResult: Codable, Sendable {
    /// The item's id.
    public var item: String
    /// The commit's answer, as `PUT …/items/{item}` gives it; nil when refused.
    public var commit: CommitResponse?
    /// Why the update was refused (nothing of it was committed); nil when committed.
    public var error: ErrorResponse.Body?

    /// Creates a value.
    public init(item: String, commit: CommitResponse? = nil, error: ErrorResponse.Body? = nil) {
        self.item = item
        self.commit = commit
        self.error = error
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
