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

    /// An escrow key's chain as this ledger took it: the roster entry its last commit named,
    /// and where each of its terms began in it.
    struct EscrowChain: Sendable, Equatable {
        /// The roster entry its last accepted commit named (each names this one or a later).
        var rosterIndex: UInt64
        /// The first sequence accepted in each of its terms, by the term's first entry.
        var termStarts: [UInt64: UInt64]
    }

    /// The escrow keys' chains, by identifier.
    private(set) var escrowChains: [String: EscrowChain] = [:]

    /// The chains the account's devices closed: for each ended term (a removed device's, an
    /// escrow key's), the last sequence of its signer's chain a closing commit allows in it.
    /// A commit of that term past it is refused as a fork.
    public private(set) var closings: [Roster.EndedTerm: UInt64] = [:]

    /// An empty ledger of `container`.
    public init(container: String) { self.container = container }

    /// Puts back an escrow key's chain and the closings as a stored ledger kept them.
    mutating func restore(escrow: [String: EscrowChain], closings: [Roster.EndedTerm: UInt64]) {
        escrowChains = escrow
        self.closings = closings
    }

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
        // A key whose term ended (a removed device, an escrow key after the switch to Advanced
        // or after another escrow key) can still sign naming an entry from before the end: its
        // chain is closed where the closing commits say, and what it signs past that in the
        // closed term is a history the devices were never shown.
        for (ended, allowed) in closings where ended.signer == commit.device && commit.rosterHead.index < ended.until && commit.sequence > allowed {
            throw EncryptionError(.forked, "\(name) was signed in a term that ended at roster entry \(ended.until), past commit \(allowed) where the account's devices closed its chain")
        }
        let escrowTerm = roster.everyDevice[commit.device] == nil
            ? roster.escrowTerms[commit.device]?.first { $0.from <= commit.rosterHead.index && $0.until.map { commit.rosterHead.index < $0 } ?? true } : nil
        if escrowTerm != nil, let chain = escrowChains[commit.device], commit.rosterHead.index < chain.rosterIndex {
            throw EncryptionError(.forked, "\(name) names roster entry \(commit.rosterHead.index), earlier than the \(chain.rosterIndex) its commit before named")
        }
        for (other, saw) in commit.seen where other != commit.device {
            let mine = heads[other]?.sequence ?? 0
            guard saw.sequence <= mine else {
                throw EncryptionError(.withheld, "\(name) had seen commit \(saw.sequence) of device \(other); this device was shown only \(mine)")
            }
            if let known = recent[other]?[saw.sequence], known != saw.hash {
                throw EncryptionError(.forked, "\(name) saw another commit \(saw.sequence) of device \(other) than this device did: forked histories")
            }
        }
        var closed: [Roster.EndedTerm: UInt64] = [:]
        if commit.isClosing, roster.everyDevice[commit.device] != nil {
            for ended in roster.endedTerms where ended.until <= commit.rosterHead.index {
                let saw = commit.seen[ended.signer]?.sequence ?? 0, signed = lastSequence(of: ended, roster: roster)
                guard signed <= saw else {
                    throw EncryptionError(.forked, "\(name) closes the chain of \(ended.signer) at commit \(saw), but its commit \(signed) was signed in the term closed: forked histories")
                }
                closed[ended] = min(closings[ended] ?? saw, saw)
            }
        }
        closings.merge(closed) { $1 }
        if let term = escrowTerm {
            var chain = escrowChains[commit.device] ?? EscrowChain(rosterIndex: commit.rosterHead.index, termStarts: [:])
            chain.rosterIndex = commit.rosterHead.index
            if chain.termStarts[term.from] == nil { chain.termStarts[term.from] = commit.sequence }
            escrowChains[commit.device] = chain
        }
        heads[commit.device] = commit.head
        var hashes = recent[commit.device] ?? [:]
        hashes[commit.sequence] = commit.hash
        if commit.sequence > UInt64(Self.remembered) { hashes[commit.sequence - UInt64(Self.remembered)] = nil }
        recent[commit.device] = hashes
        return .accepted
    }

    /// The last commit this ledger accepted of `ended`'s signer in the term that ended (0:
    /// none). A device has one term; an escrow key's commits of a term are those from its
    /// start to the next term's (its commits name roster entries in order).
    func lastSequence(of ended: Roster.EndedTerm, roster: Roster) -> UInt64 {
        let head = heads[ended.signer]?.sequence ?? 0
        guard let chain = escrowChains[ended.signer], let term = roster.escrowTerms[ended.signer]?.first(where: { $0.until == ended.until }) else { return head }
        guard chain.termStarts[term.from] != nil else { return 0 }
        return chain.termStarts.filter { $0.key > term.from }.values.min().map { $0 - 1 } ?? head
    }

    /// The ended terms of `roster` up to its head that no closing commit this ledger took
    /// closes yet: a device holding the keys signs one (``CommitContent/closing``) once it has
    /// read the container's commits.
    public func unclosed(in roster: Roster) -> Set<Roster.EndedTerm> {
        roster.endedTerms.filter { closings[$0] == nil }
    }
}
