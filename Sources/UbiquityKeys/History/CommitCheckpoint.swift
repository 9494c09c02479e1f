import Crypto
import Foundation

/// One part of a checkpoint: what lets a container's older signed commits go (issue 45,
/// docs/Encryption.md "Checkpoints"). A device that has read every commit of a container signs
/// the state its ledger reached — each device's head, the escrow keys' chains, the closed terms
/// — and each item's latest signed outcome, as consecutive commits of its own chain: part 0
/// carries the ledger's state and the first outcomes, the others the rest, at most
/// ``CommitContent/maximumCount`` outcomes a part. Once the server keeps every part, and part
/// 0's heads were every device's last kept commit, it drops the commits before the checkpoint: a
/// device that reads from there takes the ledger's state from part 0 (``CommitLedger/adopt(_:part:roster:)``),
/// checked against what it knows, and the outcomes from all the parts.
///
/// A checkpoint signs nothing new: a device that reads it among other commits takes it as one
/// of its signer's commits, and its outcomes only where they are newer than those it holds.
public struct CheckpointPart: Sendable, Equatable {
    /// The format (a commit's content of format 1 is a batch's outcomes).
    public static let format: UInt8 = 2
    /// At most this many parts in one checkpoint (a million items, a thousand a part).
    public static let maximumParts: UInt32 = 1_024
    /// How many of each chain's latest commits part 0 remembers (a device that read some of them
    /// checks they are the ones it took) — fewer when many chains would make the state too long.
    public static let remembered = 64
    /// The most bytes of a part's content: under the server's limit for one commit's content
    /// (512 KiB), whatever the ledger's chains and the items' names.
    public static let maximumBytes = 448 << 10
    /// The most bytes of part 0's ledger state (the rest of the part is outcomes).
    static let maximumStateBytes = 256 << 10

    /// Its place among the checkpoint's parts (from 0).
    public var index: UInt32
    /// How many parts the checkpoint has.
    public var count: UInt32
    /// Part 0's: the ledger's state the checkpoint starts from (``CommitLedger/encoded(rememberingAtMost:)``,
    /// remembering the last ``remembered`` commits of each chain); nil in the other parts.
    public var ledger: Data?
    /// Items' latest signed outcomes (at most ``CommitContent/maximumCount``).
    public var outcomes: [CommitContent.Outcome]

    /// A part.
    public init(index: UInt32, count: UInt32, ledger: Data?, outcomes: [CommitContent.Outcome]) {
        self.index = index
        self.count = count
        self.ledger = ledger
        self.outcomes = outcomes
    }

    /// Whether it is the checkpoint's last part.
    public var isLast: Bool { index + 1 == count }

    /// The parts of a checkpoint of `ledger` and `outcomes` (the latest signed outcome of each
    /// item, any order): part 0 with the ledger's state, the outcomes in item order, each part
    /// with at most ``CommitContent/maximumCount`` of them and at most ``maximumBytes`` in all.
    /// - Throws: ``EncryptionError`` `.malformed` for more outcomes than ``maximumParts`` parts
    ///   hold, or a ledger of more chains than part 0 holds.
    public static func parts(of ledger: CommitLedger, outcomes: [CommitContent.Outcome]) throws -> [CheckpointPart] {
        var state = ledger.encoded(rememberingAtMost: remembered)
        for fewer in [16, 4, 0] where state.count > maximumStateBytes { state = ledger.encoded(rememberingAtMost: fewer) }
        guard state.count <= maximumStateBytes else { throw EncryptionError(.malformed, "a ledger of \(state.count) bytes is too long for a checkpoint") }
        var groups: [[CommitContent.Outcome]] = [[]]
        var bytes = 1 + 8 + 4 + state.count + 2
        for outcome in outcomes.sorted(by: { $0.item < $1.item }) {
            let size = 2 + outcome.item.utf8.count + 1 + (outcome.folder.map { 2 + $0.utf8.count } ?? 0) + 32 + 2 + outcome.revision.utf8.count + 1
                + (outcome.base.map { 2 + $0.utf8.count } ?? 0) + 2 + 8
            if groups[groups.count - 1].count == CommitContent.maximumCount || bytes + size > maximumBytes {
                groups.append([])
                bytes = 1 + 8 + 2
            }
            groups[groups.count - 1].append(outcome)
            bytes += size
        }
        guard groups.count <= Int(maximumParts) else {
            throw EncryptionError(.malformed, "a checkpoint of \(outcomes.count) items needs more than \(maximumParts) parts")
        }
        return groups.enumerated().map { index, group in
            CheckpointPart(index: UInt32(index), count: UInt32(groups.count), ledger: index == 0 ? state : nil, outcomes: group)
        }
    }

    /// The part as stored and sent (format 2): `format ‖ index (32-bit) ‖ count (32-bit) ‖ part 0
    /// only: the ledger's length (32-bit) and bytes ‖ outcomes as format 1 writes them`.
    public var encoded: Data {
        var writer = WireWriter()
        writer.append([Self.format])
        writer.append(number: index)
        writer.append(number: count)
        if index == 0 {
            let state = ledger ?? Data()
            writer.append(number: UInt32(state.count))
            writer.append(state)
        }
        CommitContent.append(outcomes, to: &writer)
        return Data(writer.bytes)
    }

    /// What a commit signs of it (``SignedCommit/contentHash``).
    public var hash: [UInt8] { Array(SHA256.hash(data: encoded)) }

    /// A part from its wire encoding (its ledger's state is read by the ledger that adopts it).
    /// - Throws: ``EncryptionError`` `.unsupportedFormat` for another format, `.malformed` for
    ///   bytes that are not a part (short, left over, its place past its count, more than
    ///   ``maximumParts`` parts, a ledger's state longer than 16 MiB).
    public init(encoded: some DataProtocol) throws {
        var reader = WireReader(encoded, what: "a checkpoint's part")
        let format = try reader.byte()
        guard format == Self.format else { throw EncryptionError(.unsupportedFormat, "a checkpoint's part of format \(format); this device reads format \(Self.format)") }
        index = try reader.number(UInt32.self)
        count = try reader.number(UInt32.self)
        guard count >= 1, count <= Self.maximumParts, index < count else {
            throw EncryptionError(.malformed, "a checkpoint's part \(index) of \(count)")
        }
        if index == 0 {
            let length = Int(try reader.number(UInt32.self))
            guard length <= 16 << 20 else { throw EncryptionError(.malformed, "a checkpoint's ledger of \(length) bytes") }
            ledger = Data(try reader.take(length))
        } else {
            ledger = nil
        }
        outcomes = try CommitContent.outcomes(from: &reader, what: "a checkpoint's part")
        try reader.finish()
    }
}

/// What a signed commit's content is: a batch's outcomes, or a part of a checkpoint.
public enum CommitPayload: Sendable, Equatable {
    /// A batch's outcomes (format 1; a closing commit's has none).
    case changes(CommitContent)
    /// A checkpoint's part (format 2).
    case checkpoint(CheckpointPart)

    /// A content from its wire encoding, by its format byte.
    /// - Throws: What ``CommitContent/init(encoded:)`` or ``CheckpointPart/init(encoded:)`` throw.
    public init(encoded: some DataProtocol) throws {
        let bytes = Data(encoded)
        if bytes.first == CheckpointPart.format {
            self = .checkpoint(try CheckpointPart(encoded: bytes))
        } else {
            self = .changes(try CommitContent(encoded: bytes))
        }
    }

    /// Its outcomes.
    public var outcomes: [CommitContent.Outcome] {
        switch self {
        case .changes(let content): content.outcomes
        case .checkpoint(let part): part.outcomes
        }
    }

    /// What a commit signs of it.
    public var hash: [UInt8] {
        switch self {
        case .changes(let content): content.hash
        case .checkpoint(let part): part.hash
        }
    }

    /// Its wire encoding.
    public var encoded: Data {
        switch self {
        case .changes(let content): content.encoded
        case .checkpoint(let part): part.encoded
        }
    }
}
