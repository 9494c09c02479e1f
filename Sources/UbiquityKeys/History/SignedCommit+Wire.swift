import Foundation

extension SignedCommit {
    /// At most this many other devices' heads in one commit (a roster holds far fewer; more is
    /// refused before anything is kept).
    public static let maximumSeen = 1_024

    /// The commit as stored and sent (format 1): `format ‖ container ‖ device ‖ sequence ‖
    /// previous (32) ‖ content hash (32) ‖ roster head (index, hash (32)) ‖ count of heads seen
    /// (16-bit) ‖ each: device ‖ sequence ‖ hash (32), by device ‖ signature (64)`, numbers
    /// big-endian, texts after a 16-bit length. The server keeps these bytes as they came and
    /// serves them so; a device reads them back with ``init(encoded:)`` and checks them with
    /// ``CommitLedger/accept(_:roster:)``.
    public var encoded: Data {
        var writer = WireWriter()
        writer.append([Self.format])
        writer.append(string: container)
        writer.append(string: device)
        writer.append(number: sequence)
        writer.append(previous)
        writer.append(contentHash)
        writer.append(number: rosterHead.index)
        writer.append(rosterHead.hash)
        writer.append(number: UInt16(seen.count))
        for (other, head) in seen.sorted(by: { $0.key < $1.key }) {
            writer.append(string: other)
            writer.append(number: head.sequence)
            writer.append(head.hash)
        }
        writer.append(signature)
        return Data(writer.bytes)
    }

    /// A commit from its wire encoding (its signature and place are checked by the ledger).
    /// - Throws: ``EncryptionError`` `.unsupportedFormat` for another format, `.malformed` for
    ///   bytes that are not a commit (short, left over, a device's heads twice or out of order,
    ///   more than ``maximumSeen`` of them).
    public init(encoded: some DataProtocol) throws {
        var reader = WireReader(encoded, what: "a signed commit")
        let format = try reader.byte()
        guard format == Self.format else { throw EncryptionError(.unsupportedFormat, "a signed commit of format \(format); this device reads format \(Self.format)") }
        let container = try reader.string()
        let device = try reader.string()
        let sequence = try reader.number(UInt64.self)
        let previous = try reader.take(32)
        let contentHash = try reader.take(32)
        let rosterHead = RosterHead(index: try reader.number(UInt64.self), hash: try reader.take(32))
        let count = Int(try reader.number(UInt16.self))
        guard count <= Self.maximumSeen else { throw EncryptionError(.malformed, "a signed commit names \(count) devices' heads, more than \(Self.maximumSeen)") }
        var seen: [String: CommitHead] = [:]
        var last: String?
        for _ in 0..<count {
            let other = try reader.string()
            // In order and once each: one encoding per commit, so its hash is its bytes'.
            guard last.map({ $0 < other }) ?? true else { throw EncryptionError(.malformed, "a signed commit names a device's head twice or out of order") }
            last = other
            seen[other] = CommitHead(sequence: try reader.number(UInt64.self), hash: try reader.take(32))
        }
        let signature = try reader.take(64)
        try reader.finish()
        self.init(container: container, device: device, sequence: sequence, previous: previous, contentHash: contentHash,
                  rosterHead: rosterHead, seen: seen, signature: signature)
    }
}
