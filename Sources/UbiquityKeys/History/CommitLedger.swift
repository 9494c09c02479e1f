/// What one device knows of a container's history: each device's chain as far as it has
/// accepted it. A pure state machine: the agent feeds it the commits the server serves and
/// takes in only those it accepts.
public struct CommitLedger: Sendable, Equatable {
    /// How many of each device's latest commit hashes are kept to check other devices' views of it.
    public static let remembered = 4_096

    /// The container.
    public let container: String
    /// Each device's last accepted commit.
    public private(set) var heads: [String: CommitHead] = [:]
    /// Recent hashes of each device's chain, by sequence (to compare other devices' views).
    private(set) var recent: [String: [UInt64: [UInt8]]] = [:]

    /// An empty ledger of `container`.
    public init(container: String) { self.container = container }

    /// Puts back a device's chain as a stored ledger kept it (``init(encoded:container:)``).
    mutating func restore(device: String, head: CommitHead, recent hashes: [UInt64: [UInt8]]) {
        heads[device] = head
        var hashes = hashes
        hashes[head.sequence] = head.hash
        recent[device] = hashes
    }

    /// What happened to a commit offered to the ledger.
    public enum Outcome: Sendable, Equatable {
        /// New, and now part of the history.
        case accepted
        /// Already accepted (the same commit served again): nothing changes.
        case alreadyKnown
    }

    /// Takes in `commit` if it extends its device's chain and agrees with everything known.
    ///
    /// Refused: another container's commit (`authenticationFailed`); a signer that was never in
    /// the roster, a signature that does not verify, or a device removed before the roster head
    /// the commit names (`badSignature`); a roster head the device pinned cannot be later than
    /// the roster this device has (`rosterNotExtended`); an older commit that differs from the
    /// one accepted at its place, or another commit at the next place (`forked`); a gap in the
    /// device's sequence (`withheld`: the server kept commits back); and a commit whose device
    /// had seen another device's head this device was never shown (`withheld`) or that differs
    /// from the one this device knows at that place (`forked`).
    /// - Parameters:
    ///   - commit: The commit the server served.
    ///   - roster: The account's roster, verified.
    /// - Throws: ``EncryptionError`` naming the device, the sequence and the rule.
    @discardableResult
    public mutating func accept(_ commit: SignedCommit, roster: Roster) throws -> Outcome {
        try commit.verify(container: container, roster: roster)
        let name = "commit \(commit.sequence) of device \(commit.device)"
        let head = heads[commit.device] ?? CommitHead(sequence: 0, hash: Array(repeating: 0, count: 32))
        if commit.sequence <= head.sequence {
            guard let known = recent[commit.device]?[commit.sequence] else {
                throw EncryptionError(.replayed, "\(name) is older than what is remembered of its device")
            }
            guard known == commit.hash else { throw EncryptionError(.forked, "\(name) differs from the commit accepted at that place: a forked history") }
            return .alreadyKnown
        }
        guard commit.sequence == head.sequence + 1 else {
            throw EncryptionError(.withheld, "\(name) follows commit \(head.sequence): commits \(head.sequence + 1)–\(commit.sequence - 1) were kept back")
        }
        guard commit.previous == head.hash else { throw EncryptionError(.forked, "\(name) does not follow the commit accepted before it: a forked history") }
        for (other, saw) in commit.seen where other != commit.device {
            let mine = heads[other]?.sequence ?? 0
            guard saw.sequence <= mine else {
                throw EncryptionError(.withheld, "\(name) had seen commit \(saw.sequence) of device \(other); this device was shown only \(mine)")
            }
            if let known = recent[other]?[saw.sequence], known != saw.hash {
                throw EncryptionError(.forked, "\(name) saw another commit \(saw.sequence) of device \(other) than this device did: forked histories")
            }
        }
        heads[commit.device] = commit.head
        var hashes = recent[commit.device] ?? [:]
        hashes[commit.sequence] = commit.hash
        if commit.sequence > UInt64(Self.remembered) { hashes[commit.sequence - UInt64(Self.remembered)] = nil }
        recent[commit.device] = hashes
        return .accepted
    }
}
