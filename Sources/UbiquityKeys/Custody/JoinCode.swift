import Crypto
import Foundation

/// The short code that joins a device to an account: shown on the new device and compared on
/// one already in the roster, it is derived from both devices' public keys and two nonces, so a
/// server that relays them cannot put a key of its own in between without the codes differing.
///
/// The new device first sends only a commitment to its nonce; the existing device answers with
/// its own nonce; then the new device reveals its nonce. The server has to choose any key it
/// substitutes before it learns the new device's nonce, so it cannot search for a key whose
/// code matches (a 8-digit code then holds against one guess in 10⁸).
public enum JoinCode {
    /// A new random nonce (32 bytes).
    public static func nonce() -> [UInt8] {
        SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }
    }

    /// The commitment the new device sends before revealing `nonce`.
    public static func commitment(to nonce: [UInt8], joining: DevicePublicKeys) -> [UInt8] {
        var binding = Binding("join commitment", format: 1, epoch: 0)
        binding.append(nonce)
        binding.append(joining.signing)
        binding.append(joining.agreement)
        return Array(SHA256.hash(data: binding.bytes))
    }

    /// The code both devices show: eight digits, `1234 5678`.
    /// - Parameters:
    ///   - existing: The device already in the roster.
    ///   - joining: The new device.
    ///   - existingNonce: The existing device's nonce.
    ///   - joiningNonce: The new device's revealed nonce.
    ///   - commitment: What the new device committed to first.
    /// - Throws: ``EncryptionError`` `.authenticationFailed` when the revealed nonce (or key) is
    ///   not the one committed to.
    public static func code(existing: DevicePublicKeys, joining: DevicePublicKeys, existingNonce: [UInt8], joiningNonce: [UInt8], commitment: [UInt8]) throws -> String {
        guard Self.commitment(to: joiningNonce, joining: joining) == commitment else {
            throw EncryptionError(.authenticationFailed, "the new device's nonce or keys are not those it committed to")
        }
        var binding = Binding("join code", format: 1, epoch: 0)
        for field in [existing.signing, existing.agreement, joining.signing, joining.agreement, existingNonce, joiningNonce] { binding.append(field) }
        let digest = Array(SHA256.hash(data: binding.bytes))
        let number = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 100_000_000
        let digits = String(format: "%08llu", number)
        return digits.prefix(4) + " " + digits.suffix(4)
    }

    /// The existing device's nonce for the request `request` (which committed to `commitment`):
    /// derived from the device's own secret, so it is unpredictable to anyone else, new for each
    /// request, and worked out again when the person types the code (nothing to keep meanwhile).
    public static func answerNonce(device: DeviceKeys, request: String, commitment: [UInt8]) -> [UInt8] {
        let secret = HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: device.privateBytes.signing),
                                            info: Array("ubiquity join answer".utf8), outputByteCount: 32)
        var binding = Binding("join answer", format: 1, epoch: 0)
        binding.append(request)
        binding.append(commitment)
        return Array(HMAC<SHA256>.authenticationCode(for: binding.bytes, using: secret))
    }
}
