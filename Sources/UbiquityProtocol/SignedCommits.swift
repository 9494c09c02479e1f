import Foundation

/// A device's signed commit as it sends it (issue 45, docs/Encryption.md "Signed commits"):
/// the commit's bytes (`SignedCommit.encoded`) and its content's (`CommitContent.encoded`),
/// base64 in JSON.
public struct SignedCommitUpload: Codable, Sendable, Equatable {
    /// The signed commit.
    public var commit: Data
    /// What it vouches for (its SHA-256 is the commit's content hash).
    public var content: Data

    /// Creates a value.
    public init(commit: Data, content: Data) {
        self.commit = commit
        self.content = content
    }
}

/// `POST /v1/containers/{container}/signed-commits`: commits of this device's chain, oldest
/// first, at most ``maximumCount``.
public struct SignedCommitsRequest: Codable, Sendable {
    /// The commits.
    public var commits: [SignedCommitUpload]

    /// The most commits one request carries.
    public static let maximumCount = 16
    /// The largest commit or content kept, in bytes (a content of 1,000 outcomes with long ids
    /// stays well below).
    public static let maximumBytes = 512 << 10

    /// Creates a value.
    public init(commits: [SignedCommitUpload]) {
        self.commits = commits
    }
}

/// The answer to a ``SignedCommitsRequest``: where each commit is kept, in the order sent. A
/// commit already kept is answered as the first time.
public struct SignedCommitsResponse: Codable, Sendable {
    /// The commits' places in the container's record of commits, in the order sent.
    public var positions: [Int64]

    /// Creates a value.
    public init(positions: [Int64]) {
        self.positions = positions
    }
}

/// A kept commit, as `GET /v1/containers/{container}/signed-commits?after=N` serves it.
public struct StoredSignedCommit: Codable, Sendable, Equatable {
    /// Its place in the container's record, in the order commits arrived (from 1).
    public var position: Int64
    /// The signed commit, as its device sent it.
    public var commit: Data
    /// Its content, as sent.
    public var content: Data

    /// Creates a value.
    public init(position: Int64, commit: Data, content: Data) {
        self.position = position
        self.commit = commit
        self.content = content
    }
}

/// A page of a container's signed commits.
public struct SignedCommitsPage: Codable, Sendable {
    /// The commits after the place asked for, in arrival order.
    public var commits: [StoredSignedCommit]
    /// Whether there are more after the last.
    public var more: Bool
    /// Where the page starts instead, when the commits after the place asked for were dropped:
    /// the first part of the checkpoint that replaced them (docs/Encryption.md "Checkpoints").
    /// The reader takes the history's state from it before anything after it.
    public var checkpoint: Int64?
    /// Whether the container keeps enough commits since its last checkpoint that a device
    /// which has read them all should sign a new one.
    public var checkpointDue: Bool?

    /// The most commits one page holds.
    public static let maximumCount = 256

    /// Creates a value.
    public init(commits: [StoredSignedCommit], more: Bool, checkpoint: Int64? = nil, checkpointDue: Bool? = nil) {
        self.commits = commits
        self.more = more
        self.checkpoint = checkpoint
        self.checkpointDue = checkpointDue
    }
}
