import Crypto
import Foundation

/// An account's sharing identity's private keys as the server keeps them for the account's
/// devices (docs/Sharing.md, "Keys"): sealed with a key derived from the account's root key
/// (AES-256-GCM), bound to the account's name and to the public keys published beside them.
///
/// Every device of the account opens it — a device let in later holds every epoch's root key —
/// and a device that opens it knows the published keys are its account's own: the server
/// cannot swap the keys it publishes to the account's own devices, only to others (which the
/// ``SafetyCode`` shows).
///
/// Format 1: `01 ‖ epoch (4) ‖ nonce (12) ‖ AES-256-GCM(signing private ‖ agreement private) ‖ tag`.
public enum SealedSharingIdentity {
    /// The format this build writes.
    public static let format: UInt8 = 1
    /// The size of what ``seal(_:account:under:)`` makes.
    public static let size = SealedHeader.size + 12 + 64 + 16

    private static func binding(account: String, keys: DevicePublicKeys, epoch: UInt32) -> [UInt8] {
        var binding = Binding("sharing identity", format: format, epoch: epoch)
        binding.append(account)
        binding.append(keys.signing)
        binding.append(keys.agreement)
        return binding.bytes
    }

    private static func key(_ root: AccountRootKey, account: String) -> SecretKey {
        root.derive(.sharingIdentity, scope: account)
    }

    /// Seals `identity`'s private keys under `root`, for `account`.
    /// - Parameters:
    ///   - identity: The identity's private keys.
    ///   - account: The account's name.
    ///   - root: The root key to seal under (the newest the device holds).
    /// - Throws: What AES-GCM throws (nothing in practice).
    public static func seal(_ identity: DeviceKeys, account: String, under root: AccountRootKey) throws -> Data {
        let (signing, agreement) = identity.privateBytes
        return try Sealing.seal(signing + agreement, key: key(root, account: account),
                                binding: binding(account: account, keys: identity.publicKeys, epoch: root.epoch),
                                header: SealedHeader(format: format, epoch: root.epoch))
    }

    /// The epoch `sealed` was sealed in.
    /// - Throws: ``EncryptionError`` `.malformed` when it is shorter than its header.
    public static func epoch(of sealed: some DataProtocol) throws -> UInt32 {
        try SealedHeader(Array(sealed)).epoch
    }

    /// Opens what ``seal(_:account:under:)`` made.
    /// - Parameters:
    ///   - sealed: The sealed keys, as the server gave them.
    ///   - account: This account's name.
    ///   - published: The public keys the server publishes beside them.
    ///   - rootKeys: The root keys this device holds.
    /// - Returns: The identity's private keys, whose public half is `published`.
    /// - Throws: ``EncryptionError``: `.unsupportedFormat`; `.malformed`; `.authenticationFailed`
    ///   when it does not open with the root key of its epoch, for this account and these
    ///   public keys (changed, another account's, or the published keys swapped); `.keyUnavailable`
    ///   without its epoch's root key.
    public static func open(_ sealed: some DataProtocol, account: String, published: DevicePublicKeys, rootKeys: [AccountRootKey]) throws -> DeviceKeys {
        let bytes = Array(sealed)
        let header = try SealedHeader(bytes)
        guard header.format == format else { throw EncryptionError(.unsupportedFormat, "a sealed sharing identity is in format \(header.format)") }
        guard bytes.count == size else { throw EncryptionError(.malformed, "a sealed sharing identity is \(size) bytes") }
        guard let root = rootKeys.first(where: { $0.epoch == header.epoch }) else {
            throw EncryptionError(.keyUnavailable, "the sharing identity is sealed in epoch \(header.epoch), whose root key this device does not hold")
        }
        guard let plain = Sealing.open(bytes, at: SealedHeader.size, key: key(root, account: account),
                                       binding: binding(account: account, keys: published, epoch: header.epoch)), plain.count == 64 else {
            throw EncryptionError(.authenticationFailed, "the sharing identity does not open: changed, another account's, or its published keys are not the ones sealed")
        }
        let keys = DeviceKeys(signing: Array(plain[0..<32]), agreement: Array(plain[32..<64]))
        guard keys.publicKeys == published else {
            throw EncryptionError(.authenticationFailed, "the sharing identity's published keys are not the ones sealed")
        }
        return keys
    }
}
