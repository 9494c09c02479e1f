import Crypto
import Foundation

/// An account root key sealed to one holder — a device, or under Standard the server's escrow
/// key — by HPKE (RFC 9180, X25519, HKDF-SHA256, AES-256-GCM) in authenticated mode: only the
/// recipient opens it, and it proves which key sealed it.
///
/// Format 1: `01 ‖ epoch (4) ‖ encapsulated key (32) ‖ ciphertext ‖ tag`; the HPKE info binds
/// the label, format, account, epoch, recipient and sender, so an envelope cannot be moved to
/// another account, epoch or holder.
public enum KeyEnvelope {
    /// The format this build writes.
    public static let format: UInt8 = 1
    static var suite: HPKE.Ciphersuite { HPKE.Ciphersuite(kem: .Curve25519_HKDF_SHA256, kdf: .HKDF_SHA256, aead: .AES_GCM_256) }

    static func info(account: String, epoch: UInt32, recipient: DevicePublicKeys, sender: DevicePublicKeys) -> Data {
        var binding = Binding("root key envelope", format: format, epoch: epoch)
        binding.append(account)
        binding.append(recipient.deviceIdentifier)
        binding.append(sender.deviceIdentifier)
        return Data(binding.bytes)
    }

    /// Seals `root` to `recipient`, from `sender`.
    /// - Throws: What HPKE throws (a malformed recipient key).
    public static func seal(_ root: AccountRootKey, account: String, to recipient: DevicePublicKeys, from sender: DeviceKeys) throws -> Data {
        let recipientKey = try Curve25519.KeyAgreement.PublicKey(rawRepresentation: recipient.agreement)
        var context = try HPKE.Sender(recipientKey: recipientKey, ciphersuite: suite,
                                      info: info(account: account, epoch: root.epoch, recipient: recipient, sender: sender.publicKeys),
                                      authenticatedBy: sender.agreementKey)
        let ciphertext = try root.withUnsafeBytes { try context.seal(Array($0)) }
        var envelope = Data(SealedHeader(format: format, epoch: root.epoch).bytes)
        envelope.append(context.encapsulatedKey)
        envelope.append(ciphertext)
        return envelope
    }

    /// Opens an envelope sealed to `recipient` by `sender` (whose public keys come from the roster).
    /// - Throws: ``EncryptionError``: `.unsupportedFormat`, `.malformed`, `.authenticationFailed`
    ///   (changed, sealed by another key, to another holder, account or epoch).
    public static func open(_ envelope: some DataProtocol, account: String, recipient: DeviceKeys, sender: DevicePublicKeys) throws -> AccountRootKey {
        let bytes = Array(envelope)
        let header = try SealedHeader(bytes)
        guard header.format == format else { throw EncryptionError(.unsupportedFormat, "a root key envelope is in format \(header.format)") }
        guard bytes.count > SealedHeader.size + 32 + 16 else { throw EncryptionError(.malformed, "a root key envelope is truncated") }
        do {
            let senderKey = try Curve25519.KeyAgreement.PublicKey(rawRepresentation: sender.agreement)
            var context = try HPKE.Recipient(privateKey: recipient.agreementKey, ciphersuite: suite,
                                             info: info(account: account, epoch: header.epoch, recipient: recipient.publicKeys, sender: sender),
                                             encapsulatedKey: Data(bytes[SealedHeader.size..<(SealedHeader.size + 32)]), authenticatedBy: senderKey)
            let key = try context.open(bytes[(SealedHeader.size + 32)...])
            return try AccountRootKey(epoch: header.epoch, bytes: key)
        } catch {
            throw EncryptionError(.authenticationFailed, "the root key envelope of epoch \(header.epoch) does not open: changed, or not sealed by that device to this one for this account")
        }
    }
}

/// The recovery key: 256 random bits the person writes down, the one way back into an
/// Advanced account when every device is lost. Shown as 13 groups of 4 characters (Crockford
/// base32) ending in a check group, so that a mistyped key is caught before it is used.
public struct RecoveryKey: Sendable, Equatable {
    static let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ")

    let secret: SecretKey

    /// A new random recovery key.
    public init() { secret = SecretKey(SymmetricKey(size: .bits256)) }

    public static func == (lhs: RecoveryKey, rhs: RecoveryKey) -> Bool { lhs.secret.bytes == rhs.secret.bytes }

    /// The key as the person writes it down: `XXXX-XXXX-…`, the last group a check.
    public var text: String {
        var bits = secret.bytes.flatMap { byte in (0..<8).reversed().map { (byte >> $0) & 1 } }
        bits.append(contentsOf: [0, 0, 0, 0]) // 256 bits to 52 characters of 5
        var characters: [Character] = stride(from: 0, to: bits.count, by: 5).map { start in
            Self.alphabet[Int(bits[start..<start + 5].reduce(0) { $0 << 1 | $1 })]
        }
        let check = Array(SHA256.hash(data: secret.bytes)).prefix(4).map { Self.alphabet[Int($0 & 31)] }
        characters.append(contentsOf: check)
        return stride(from: 0, to: characters.count, by: 4).map { String(characters[$0..<min($0 + 4, characters.count)]) }.joined(separator: "-")
    }

    /// A recovery key as written down (case, spaces and dashes ignored; O read as 0, I and L as 1).
    /// - Throws: ``EncryptionError`` `.malformed` for a key of the wrong length, with a
    ///   character that is not in the alphabet, or whose check group does not match (a typo).
    public init(text: String) throws {
        let cleaned = text.uppercased().filter { !" -\t\n".contains($0) }.map { character -> Character in
            switch character { case "O": return "0"; case "I", "L": return "1"; default: return character }
        }
        guard cleaned.count == 56 else { throw EncryptionError(.malformed, "a recovery key has 56 characters (14 groups of 4)") }
        var bits: [UInt8] = []
        for character in cleaned.prefix(52) {
            guard let value = Self.alphabet.firstIndex(of: character) else { throw EncryptionError(.malformed, "“\(character)” is not a character of a recovery key") }
            bits.append(contentsOf: (0..<5).reversed().map { UInt8((value >> $0) & 1) })
        }
        let bytes = stride(from: 0, to: 256, by: 8).map { start in bits[start..<start + 8].reduce(UInt8(0)) { $0 << 1 | $1 } }
        let check = Array(SHA256.hash(data: bytes)).prefix(4).map { Self.alphabet[Int($0 & 31)] }
        guard Array(cleaned.suffix(4)) == check, bits[256...].allSatisfy({ $0 == 0 }) else {
            throw EncryptionError(.malformed, "the recovery key does not check out: a character is mistyped")
        }
        secret = SecretKey(SymmetricKey(data: bytes))
    }

    /// The key pair the recovery key stands for in the roster (derived from it for `account`):
    /// it signs the entry that adds a device let in by the recovery key.
    public func deviceKeys(account: String) -> DeviceKeys {
        func derive(_ label: String) -> [UInt8] {
            HKDF<SHA256>.deriveKey(inputKeyMaterial: secret.symmetric, info: Array("ubiquity recovery \(label) \(account)".utf8), outputByteCount: 32)
                .withUnsafeBytes { Array($0) }
        }
        return DeviceKeys(signing: derive("signing"), agreement: derive("agreement"))
    }
}
