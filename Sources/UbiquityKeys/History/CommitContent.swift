import Crypto
import Foundation

/// What a signed commit vouches for: the outcome of one batch of a device's changes as the
/// server answered it — for each item the batch changed, where it is, the hash of the sealed
/// record it now holds, its new revision and the one it was made from, and whether it is a
/// deletion. A commit is signed once the answer is in (a refused change is in no commit), so
/// every state a device is shown can be matched with the commit that made it, and a state no
/// commit names, or one a later commit replaced, is refused (docs/Encryption.md, "Signed
/// commits"). ``SignedCommit/contentHash`` is SHA-256 of ``encoded``.
public struct CommitContent: Sendable, Equatable {
    /// The format.
    public static let format: UInt8 = 1
    /// At most this many outcomes in one commit (a batch carries at most 1,000 changes).
    public static let maximumCount = 1_000

    /// One item's outcome.
    public struct Outcome: Sendable, Equatable, Hashable {
        /// The item's id.
        public var item: String
        /// Its folder's id (nil: the container's top).
        public var folder: String?
        /// SHA-256 of the sealed record it holds (32 bytes; a deletion's is its last record's).
        public var recordHash: [UInt8]
        /// The revision the change made.
        public var revision: String
        /// The revision it was made from (nil: a new item).
        public var base: String?
        /// Whether the change deleted the item.
        public var deleted: Bool
        /// Whether the server kept it as a conflict version (it lost the conflict rule to a
        /// revision made meanwhile), not as the item's current revision.
        public var conflict: Bool
        /// The container's sequence the server made it at: a page of changes that says it is
        /// complete up to this sequence or later must show the item at it or later.
        public var sequence: Int64

        /// An outcome.
        public init(item: String, folder: String?, recordHash: [UInt8], revision: String, base: String?, deleted: Bool, conflict: Bool = false, sequence: Int64) {
            self.item = item
            self.folder = folder
            self.recordHash = recordHash
            self.revision = revision
            self.base = base
            self.deleted = deleted
            self.conflict = conflict
            self.sequence = sequence
        }
    }

    /// A closing commit's content: no outcome. A device signs one in each container once it
    /// has read its commits after a term ended (a device removed, the escrow key replaced or
    /// gone with Advanced custody): the heads it names close the chains of that term
    /// (``CommitLedger/closings``). No batch makes it: every other commit changes something.
    public static let closing = CommitContent(outcomes: [])

    /// The hash of ``closing``.
    public static let closingHash = closing.hash

    /// The outcomes, one per item, in the order the batch applied them.
    public var outcomes: [Outcome]

    /// A commit's content.
    public init(outcomes: [Outcome]) {
        self.outcomes = outcomes
    }

    /// The content as stored and sent (format 1): `format ‖ count (16-bit) ‖ each: item ‖
    /// folder (a flag, then the id) ‖ record hash (32) ‖ revision ‖ base (a flag, then the
    /// revision) ‖ deleted (a byte) ‖ kept as a conflict version (a byte) ‖ the container's
    /// sequence (8)`, numbers big-endian, texts after a 16-bit length.
    public var encoded: Data {
        var writer = WireWriter()
        writer.append([Self.format])
        Self.append(outcomes, to: &writer)
        return Data(writer.bytes)
    }

    /// Writes `outcomes` as format 1 does: their count (16-bit), then each.
    static func append(_ outcomes: [Outcome], to writer: inout WireWriter) {
        writer.append(number: UInt16(outcomes.count))
        func optional(_ text: String?) {
            writer.append([text == nil ? 0 : 1])
            if let text { writer.append(string: text) }
        }
        for outcome in outcomes {
            writer.append(string: outcome.item)
            optional(outcome.folder)
            writer.append(outcome.recordHash)
            writer.append(string: outcome.revision)
            optional(outcome.base)
            writer.append([outcome.deleted ? 1 : 0, outcome.conflict ? 1 : 0])
            writer.append(number: outcome.sequence)
        }
    }

    /// Reads outcomes as ``append(_:to:)`` wrote them (`what` names the bytes in errors).
    static func outcomes(from reader: inout WireReader, what: String) throws -> [Outcome] {
        let count = Int(try reader.number(UInt16.self))
        guard count <= Self.maximumCount else { throw EncryptionError(.malformed, "\(what) names \(count) items, more than \(Self.maximumCount)") }
        func flag() throws -> Bool {
            switch try reader.byte() {
            case 0: return false
            case 1: return true
            default: throw EncryptionError(.malformed, "\(what) has a flag that is neither 0 nor 1")
            }
        }
        var outcomes: [Outcome] = []
        var items = Set<String>()
        for _ in 0..<count {
            let item = try reader.string()
            guard items.insert(item).inserted else { throw EncryptionError(.malformed, "\(what) names an item twice") }
            let folder = try flag() ? try reader.string() : nil
            let recordHash = try reader.take(32)
            let revision = try reader.string()
            let base = try flag() ? try reader.string() : nil
            let deleted = try flag(), conflict = try flag()
            outcomes.append(Outcome(item: item, folder: folder, recordHash: recordHash, revision: revision, base: base, deleted: deleted, conflict: conflict,
                                    sequence: try reader.number(Int64.self)))
        }
        return outcomes
    }

    /// The hash an outcome names of a sealed record (SHA-256 of its bytes; 32 zero bytes for
    /// none, a deletion that carried no record).
    public static func recordHash(of record: Data?) -> [UInt8] {
        record.map { Array(SHA256.hash(data: $0)) } ?? Array(repeating: 0, count: 32)
    }

    /// What a commit signs of it (``SignedCommit/contentHash``).
    public var hash: [UInt8] { Array(SHA256.hash(data: encoded)) }

    /// Content from its wire encoding.
    /// - Throws: ``EncryptionError`` `.unsupportedFormat` for another format, `.malformed` for
    ///   bytes that are not content (short, left over, more than ``maximumCount`` outcomes, an
    ///   item twice, a flag other than 0 or 1).
    public init(encoded: some DataProtocol) throws {
        var reader = WireReader(encoded, what: "a commit's content")
        let format = try reader.byte()
        guard format == Self.format else { throw EncryptionError(.unsupportedFormat, "a commit's content of format \(format); this device reads format \(Self.format)") }
        let outcomes = try Self.outcomes(from: &reader, what: "a commit's content")
        try reader.finish()
        self.init(outcomes: outcomes)
    }
}
