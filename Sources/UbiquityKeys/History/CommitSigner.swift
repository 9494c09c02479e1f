/// What a device signs its commits with — its keys and the roster head it has pinned (a commit
/// names the roster as its device saw it) — and checks the others' with: the roster, when it
/// was read with the keys.
public struct CommitSigner: Sendable {
    /// The device's keys.
    public let keys: DeviceKeys
    /// The roster head the device accepted last.
    public let rosterHead: RosterHead
    /// The roster of that head, verified (nil: not read this time).
    public let roster: Roster?

    /// A signer.
    public init(keys: DeviceKeys, rosterHead: RosterHead, roster: Roster? = nil) {
        self.keys = keys
        self.rosterHead = rosterHead
        self.roster = roster
    }

    /// The device's identifier in the roster.
    public var device: String { keys.publicKeys.deviceIdentifier }

    /// The commit of `content` in `container` after `previous` (this device's last commit
    /// there; nil for its first), naming the heads of the other devices it has `seen`.
    /// - Throws: What signing throws.
    public func sign(_ content: CommitContent, container: String, after previous: SignedCommit?, seen: [String: CommitHead] = [:]) throws -> SignedCommit {
        try SignedCommit(container: container, contentHash: content.hash, after: previous, rosterHead: rosterHead, seen: seen, signedBy: keys)
    }

    /// The commit of a checkpoint's `part` (``CheckpointPart``), as ``sign(_:container:after:seen:)``.
    /// - Throws: What signing throws.
    public func sign(_ part: CheckpointPart, container: String, after previous: SignedCommit?, seen: [String: CommitHead] = [:]) throws -> SignedCommit {
        try SignedCommit(container: container, contentHash: part.hash, after: previous, rosterHead: rosterHead, seen: seen, signedBy: keys)
    }
}
