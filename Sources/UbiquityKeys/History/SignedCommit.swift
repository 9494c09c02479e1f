import Crypto
import Foundation

/// Where a device's history stood: the sequence number and hash of one of its commits.
public struct CommitHead: Hashable, Sendable {
    /// The device's commit count at that point (its first commit is 1).
    public var sequence: UInt64
    /// That commit's hash.
    public var hash: [UInt8]

    /// A head.
    public init(sequence: UInt64, hash: [UInt8]) {
        self.sequence = sequence
        self.hash = hash
    }
}

/// A device's commit, signed: each device's commits form a chain of their own (sequence
/// numbers without gaps, each naming the one before), and each names the roster head and the
/// other devices' heads its device had seen — so that a server that drops, replays, reorders or
/// forks commits, or hides one device's from another, is caught when the heads meet.
public struct SignedCommit: Sendable, Equatable {
    /// The format.
    public static let format: UInt8 = 1

    /// The container.
    public let container: String
    /// The device that made it.
    public let device: String
    /// Its place in its device's chain.
    public let sequence: UInt64
    /// The hash of its device's previous commit (32 zero bytes for the first).
    public let previous: [UInt8]
    /// SHA-256 of what it commits (the sealed records and chunk lists).
    public let contentHash: [UInt8]
    /// The roster as its device saw it.
    public let rosterHead: RosterHead
    /// The other devices' heads its device had seen.
    public let seen: [String: CommitHead]
    /// The device's Ed25519 signature over ``signedBytes``.
    public let signature: [UInt8]

    /// What is signed.
    public var signedBytes: [UInt8] {
        Self.signedBytes(container: container, device: device, sequence: sequence, previous: previous, contentHash: contentHash,
                         rosterHead: rosterHead, seen: seen)
    }

    static func signedBytes(container: String, device: String, sequence: UInt64, previous: [UInt8], contentHash: [UInt8],
                            rosterHead: RosterHead, seen: [String: CommitHead]) -> [UInt8] {
        var binding = Binding("commit", format: Self.format, epoch: 0)
        binding.append(container)
        binding.append(device)
        binding.append(sequence)
        binding.append(previous)
        binding.append(contentHash)
        binding.append(rosterHead.index)
        binding.append(rosterHead.hash)
        binding.append(UInt64(seen.count))
        for (other, head) in seen.sorted(by: { $0.key < $1.key }) {
            binding.append(other)
            binding.append(head.sequence)
            binding.append(head.hash)
        }
        return binding.bytes
    }

    /// The commit's hash, which its device's next commit names.
    public var hash: [UInt8] { Array(SHA256.hash(data: signedBytes + signature)) }

    /// Whether it is a closing commit (its content is ``CommitContent/closing``).
    public var isClosing: Bool { contentHash == CommitContent.closingHash }

    /// Its head (sequence and hash).
    public var head: CommitHead { CommitHead(sequence: sequence, hash: hash) }

    /// Checks what can be checked of the commit on its own: it is of `container`, signed by a
    /// device of `roster` before that device was removed, naming no roster entry past the
    /// roster's head (its place in its device's chain is the ledger's to check, or the server's).
    /// - Throws: ``EncryptionError`` `.authenticationFailed` (another container), `.badSignature`,
    ///   `.rosterNotExtended` (the roster is behind the commit: fetch it again).
    public func verify(container: String, roster: Roster) throws {
        let name = "commit \(sequence) of device \(device)"
        guard self.container == container else { throw EncryptionError(.authenticationFailed, "\(name) belongs to another container") }
        // (First: a device that joined after this roster's head signs commits naming a later one.)
        guard rosterHead.index <= roster.head.index else {
            throw EncryptionError(.rosterNotExtended, "\(name) names roster entry \(rosterHead.index), past this device's roster: fetch the roster again")
        }
        // A device of the roster, the escrow while it was one (under Standard the escrow signs
        // what the server makes for the web page: docs/Encryption.md "Signed commits"), or a
        // browser a device let in, in its session (under Advanced the page signs its changes).
        guard let keys = roster.everyDevice[device] ?? roster.escrowKeys(device, at: rosterHead.index) ?? roster.webSessionKeys(device, at: rosterHead.index),
              keys.isValidSignature(signature, for: signedBytes) else {
            throw EncryptionError(.badSignature, "\(name) is not signed by a device of the roster, nor by its escrow or a browser's session at the roster entry it names")
        }
        if let removal = roster.removedAt[device], rosterHead.index >= removal {
            throw EncryptionError(.badSignature, "\(name) was made after its device was removed")
        }
    }

    /// A commit as read back (checked by ``CommitLedger/accept(_:roster:)``).
    public init(container: String, device: String, sequence: UInt64, previous: [UInt8], contentHash: [UInt8],
                rosterHead: RosterHead, seen: [String: CommitHead], signature: [UInt8]) {
        self.container = container
        self.device = device
        self.sequence = sequence
        self.previous = previous
        self.contentHash = contentHash
        self.rosterHead = rosterHead
        self.seen = seen
        self.signature = signature
    }

    /// A new commit of `keys`' device after `previous` (its own last commit, nil for its first).
    /// - Throws: What signing throws.
    public init(container: String, contentHash: [UInt8], after previous: SignedCommit?, rosterHead: RosterHead,
                seen: [String: CommitHead], signedBy keys: DeviceKeys) throws {
        self.container = container
        device = keys.publicKeys.deviceIdentifier
        sequence = (previous?.sequence ?? 0) + 1
        self.previous = previous?.hash ?? Array(repeating: 0, count: 32)
        self.contentHash = contentHash
        self.rosterHead = rosterHead
        self.seen = seen
        signature = try keys.sign(Self.signedBytes(container: container, device: device, sequence: sequence, previous: self.previous,
                                                   contentHash: contentHash, rosterHead: rosterHead, seen: seen))
    }
}
