import Crypto
import Foundation

/// A shared item's key in one epoch (docs/Sharing.md, "Keys"): 256 random bits from which the
/// share's service keys are derived as a container's are from the account's root key — with a
/// salt of their own and the share's id as their scope, so that no key of a share is ever a
/// key of an account, of a container or of another share. Everything inside a shared item is
/// sealed with them: a participant holds the share's keys, never the owner's.
///
/// Removing a participant starts a new epoch (a new random key): what is written from then on
/// is unreadable to whoever held only the older ones.
public struct ShareKey: Sendable {
    /// The share's id (what the server calls it).
    public let share: String
    /// The epoch this key belongs to (0 for the share's first).
    public let epoch: UInt32
    let key: SecretKey

    /// A new random key of `share` for `epoch`.
    /// - Parameters:
    ///   - share: The share's id.
    ///   - epoch: The epoch.
    public init(share: String, epoch: UInt32) {
        self.share = share
        self.epoch = epoch
        key = SecretKey(SymmetricKey(size: .bits256))
    }

    /// A share key from its 32 bytes (opened from an envelope).
    /// - Throws: ``EncryptionError`` `.malformed` unless there are exactly 32 bytes.
    init(share: String, epoch: UInt32, bytes: [UInt8]) throws {
        guard bytes.count == 32 else { throw EncryptionError(.malformed, "a share key is 32 bytes") }
        self.share = share
        self.epoch = epoch
        key = SecretKey(SymmetricKey(data: bytes))
    }

    private func derive(_ purpose: ServicePurpose) -> SecretKey {
        AccountRootKey.derive(purpose, scope: share, from: key, salt: "ubiquity share epoch", epoch: epoch)
    }

    /// The keys of the share's chunks (identifiers, contents, cut points).
    public var chunkKeys: ChunkKeys {
        ChunkKeys(identifier: derive(.chunkIdentifier), content: derive(.chunkContent), chunker: derive(.chunker), epoch: epoch)
    }

    /// The key of the share's item records.
    public var recordKey: RecordKey {
        RecordKey(key: derive(.itemRecord), nameTag: derive(.nameTag), epoch: epoch)
    }
}

/// A share key sealed by its owner's sharing identity to one participant's (HPKE, RFC 9180:
/// X25519, HKDF-SHA256, AES-256-GCM, in authenticated mode): only that account opens it, and it
/// proves which account sealed it.
///
/// Format 1: `01 ‖ epoch (4) ‖ encapsulated key (32) ‖ ciphertext ‖ tag`; the HPKE info binds
/// the label, format, share, epoch, both accounts' names and both identities' keys, so an
/// envelope cannot be moved to another share, epoch, account or key.
public enum ShareKeyEnvelope {
    /// The format this build writes.
    public static let format: UInt8 = 1

    static func info(share: String, epoch: UInt32, owner: SharingIdentity, participant: SharingIdentity) -> Data {
        var binding = Binding("share key envelope", format: format, epoch: epoch)
        binding.append(share)
        for identity in [owner, participant] {
            binding.append(identity.account)
            binding.append(identity.keys.signing)
            binding.append(identity.keys.agreement)
        }
        return Data(binding.bytes)
    }

    /// Seals `key` to `participant`, from the owner's identity.
    /// - Parameters:
    ///   - key: The share key.
    ///   - participant: The participant's sharing identity (pinned: see ``IdentityPins``).
    ///   - owner: The owner's account name and its identity's private keys.
    /// - Throws: What HPKE throws (a malformed key).
    public static func seal(_ key: ShareKey, to participant: SharingIdentity, from owner: (account: String, keys: DeviceKeys)) throws -> Data {
        let ownerIdentity = SharingIdentity(account: owner.account, keys: owner.keys.publicKeys)
        let recipient = try Curve25519.KeyAgreement.PublicKey(rawRepresentation: participant.keys.agreement)
        var context = try HPKE.Sender(recipientKey: recipient, ciphersuite: KeyEnvelope.suite,
                                      info: info(share: key.share, epoch: key.epoch, owner: ownerIdentity, participant: participant),
                                      authenticatedBy: owner.keys.agreementKey)
        let ciphertext = try context.seal(key.key.bytes)
        var envelope = Data(SealedHeader(format: format, epoch: key.epoch).bytes)
        envelope.append(context.encapsulatedKey)
        envelope.append(ciphertext)
        return envelope
    }

    /// Opens an envelope of `share` sealed to this account's identity by `owner`'s.
    /// - Parameters:
    ///   - envelope: The envelope, as the server gave it.
    ///   - share: The share's id.
    ///   - owner: The owner's sharing identity (pinned: see ``IdentityPins``).
    ///   - participant: This account's name and its identity's private keys.
    /// - Throws: ``EncryptionError``: `.unsupportedFormat`, `.malformed`, `.authenticationFailed`
    ///   (changed, sealed by another identity, to another account, share or epoch).
    public static func open(_ envelope: some DataProtocol, share: String, owner: SharingIdentity, participant: (account: String, keys: DeviceKeys)) throws -> ShareKey {
        let bytes = Array(envelope)
        let header = try SealedHeader(bytes)
        guard header.format == format else { throw EncryptionError(.unsupportedFormat, "a share key envelope is in format \(header.format)") }
        guard bytes.count > SealedHeader.size + 32 + 16 else { throw EncryptionError(.malformed, "a share key envelope is truncated") }
        let recipient = SharingIdentity(account: participant.account, keys: participant.keys.publicKeys)
        do {
            let sender = try Curve25519.KeyAgreement.PublicKey(rawRepresentation: owner.keys.agreement)
            var context = try HPKE.Recipient(privateKey: participant.keys.agreementKey, ciphersuite: KeyEnvelope.suite,
                                             info: info(share: share, epoch: header.epoch, owner: owner, participant: recipient),
                                             encapsulatedKey: Data(bytes[SealedHeader.size..<(SealedHeader.size + 32)]), authenticatedBy: sender)
            return try ShareKey(share: share, epoch: header.epoch, bytes: Array(try context.open(bytes[(SealedHeader.size + 32)...])))
        } catch {
            throw EncryptionError(.authenticationFailed,
                                  "the share key envelope of epoch \(header.epoch) does not open: changed, or not sealed by the owner's identity to this account's for this share")
        }
    }
}
