import Foundation

extension CommitLedger {
    /// Takes in a checkpoint's first part, read where the server dropped the commits before it:
    /// the ledger's state it signs becomes this ledger's, then the commit itself is accepted as
    /// its signer's next. What this ledger already knows must agree with it.
    ///
    /// Refused: a commit that does not verify against `roster` (as ``accept(_:roster:)``); a
    /// checkpoint signed by an escrow key or a browser's session (`badSignature`: only a device
    /// vouches for the history it read); a state that does not open (`malformed`), is of another
    /// container, or whose signer's head is not the commit before this one (`forked`); a state
    /// that leaves out a device this ledger knows or stops short of one's head (`replayed`: an
    /// older checkpoint served again), or names another commit than the one this ledger took at
    /// a place both remember (`forked`: each part 0 remembers the last ``CheckpointPart/remembered``
    /// commits of every chain).
    /// - Parameters:
    ///   - commit: The signed commit whose content is `part`.
    ///   - part: Its content: a checkpoint's part 0.
    ///   - roster: The account's roster, verified.
    /// - Throws: ``EncryptionError`` naming the rule.
    public mutating func adopt(_ commit: SignedCommit, part: CheckpointPart, roster: Roster) throws {
        try commit.verify(container: container, roster: roster)
        let name = "checkpoint \(commit.sequence) of device \(commit.device)"
        guard roster.everyDevice[commit.device] != nil else {
            throw EncryptionError(.badSignature, "\(name) is not signed by a device of the roster (only a device vouches for the commits it read)")
        }
        guard commit.contentHash == part.hash, part.index == 0, let state = part.ledger else {
            throw EncryptionError(.malformed, "\(name) is not the first part of a checkpoint")
        }
        let start = try CommitLedger(encoded: state, container: container)
        let own = start.heads[commit.device] ?? CommitHead(sequence: 0, hash: Array(repeating: 0, count: 32))
        guard own.sequence + 1 == commit.sequence, own.hash == commit.previous else {
            throw EncryptionError(.forked, "\(name) does not follow its signer's head in the state it signs")
        }
        for (device, mine) in heads {
            guard let theirs = start.heads[device], theirs.sequence >= mine.sequence else {
                throw EncryptionError(.replayed, "\(name) stops short of commit \(mine.sequence) of device \(device), which this device accepted: an older checkpoint")
            }
            // (Where both remember a commit of the chain, it is the same one.)
            for (sequence, hash) in start.recent[device] ?? [:] where recent[device]?[sequence].map({ $0 != hash }) ?? false {
                throw EncryptionError(.forked, "\(name) names another commit \(sequence) of device \(device) than this device accepted: forked histories")
            }
        }
        var adopted = self
        for (device, head) in start.heads where head.sequence > heads[device]?.sequence ?? 0 {
            adopted.restore(device: device, head: head, recent: start.recent[device] ?? [:])
        }
        var escrows = escrowChains
        for (key, chain) in start.escrowChains {
            guard let mine = escrows[key] else {
                escrows[key] = chain
                continue
            }
            escrows[key] = EscrowChain(rosterIndex: max(mine.rosterIndex, chain.rosterIndex), termStarts: mine.termStarts.merging(chain.termStarts) { min($0, $1) })
        }
        adopted.restore(escrow: escrows, closings: closings.merging(start.closings) { min($0, $1) })
        try adopted.accept(commit, roster: roster)
        self = adopted
    }
}
