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
    /// What it is of a checkpoint, when its content is a checkpoint's part.
    var checkpoint: CheckpointFacts?

    /// A checkpoint's part as the server reads it (docs/Encryption.md "Checkpoints").
    struct CheckpointFacts: Sendable, Equatable {
        /// Its place among the parts, and their number.
        var index: Int64
        var count: Int64
        /// Part 0's: each device's head as the checkpoint names it.
        var heads: [String: Head]?
    }

    /// A device's last commit: its sequence and hash.
    struct Head: Sendable, Equatable {
        var sequence: Int64
        var hash: Data
    }

    /// Whether a checkpoint's part 0 naming `heads` was signed with the history the server
    /// keeps: every device with kept commits named at its last one, and no other.
    static func headsMatch(_ heads: [String: Head], kept: [String: Head]) -> Bool {
        heads == kept
    }

    /// The bytes it takes.
    var size: Int64 { Int64(body.count + content.count) }

    /// The most bytes of commits one container keeps past its last checkpoint's (devices that
    /// sign every batch reach it after some millions of batches without one; the server asks for
    /// a checkpoint long before: ``AccountLimits/checkpointAfterBytes``).
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

/// A container's last complete checkpoint, as the server keeps it: the commits before
/// ``start`` are dropped (but each device's last, which its chain goes on from).
struct CommitCheckpoint: Sendable, Equatable {
    /// The position of its part 0.
    var start: Int64
    /// The container's bytes of commits before it (dropped).
    var before: Int64
    /// Its bytes, from part 0 to its last part.
    var size: Int64

    /// The bytes a container keeps whose newest commit's running total is `total`, past
    /// `checkpoint` (nil: none yet).
    static func kept(total: Int64, since checkpoint: CommitCheckpoint?) -> Int64 { total - (checkpoint?.before ?? 0) }

    /// Whether a container keeping `kept` bytes past `checkpoint` has room for more.
    static func fits(_ kept: Int64, since checkpoint: CommitCheckpoint?) -> Bool { kept <= KeptCommit.containerBudget + (checkpoint?.size ?? 0) }

    /// Whether a new checkpoint is due: `kept` bytes past `checkpoint`, more than `after` past it
    /// and twice its own size (a checkpoint of many items is large: not signed again at once).
    static func isDue(kept: Int64, since checkpoint: CommitCheckpoint?, after: Int64) -> Bool {
        kept > after + 2 * (checkpoint?.size ?? 0)
    }
}
