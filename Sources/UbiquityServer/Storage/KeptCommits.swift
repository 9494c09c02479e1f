import Foundation
import UbiquityProtocol

/// A device's signed commit as the server keeps it (issue 45): the fields it checks the chain
/// by, and the bytes as sent. What the commit says is checked by the devices that read it.
struct KeptCommit: Sendable, Equatable {
    /// The signing device's identifier (its keys', as the roster names it).
    var device: String
    /// Its place in that device's chain (from 1).
    var sequence: Int64
    /// The hash of the device's commit before it (32 zero bytes for the first).
    var previous: Data
    /// Its own hash (which the device's next commit names).
    var hash: Data
    /// The signed commit's bytes.
    var body: Data
    /// Its content's bytes.
    var content: Data

    /// The bytes it takes.
    var size: Int64 { Int64(body.count + content.count) }

    /// The most bytes of commits one container keeps (devices that sign every batch reach it
    /// after some millions of batches; dropping the commits no current state needs is to come).
    static let containerBudget: Int64 = 256 << 20

    /// Where it goes, given the commit already kept at its place of its device's chain (its
    /// position and hash) and the device's last kept commit: nil when it is the next one (to be
    /// kept after the container's last), else the answer without keeping anything.
    func placement(existing: (position: Int64, hash: Data)?, last: (sequence: Int64, hash: Data)?) -> KeptCommitPlacement? {
        if let existing { return existing.hash == hash ? .alreadyKept(existing.position) : .forked }
        let expected = (last?.sequence ?? 0) + 1
        guard sequence == expected else { return .outOfOrder(expected: expected) }
        guard previous == (last?.hash ?? Data(count: 32)) else { return .forked }
        return nil
    }
}

/// What became of a commit sent to be kept.
enum KeptCommitPlacement: Sendable, Equatable {
    /// Kept at this position of the container's record.
    case kept(Int64)
    /// The same commit was kept before, at this position.
    case alreadyKept(Int64)
    /// Another commit is kept at its place, or it does not follow the one before it.
    case forked
    /// The device's chain has a gap before it: this is the sequence expected.
    case outOfOrder(expected: Int64)
    /// The container keeps ``KeptCommit/containerBudget`` bytes of commits already.
    case overBudget
    /// The account's roster has moved past the entry the commit was to be kept at (an escrow
    /// commit: the roster may have turned Advanced, after which the escrow signs nothing).
    case rosterMoved
}
