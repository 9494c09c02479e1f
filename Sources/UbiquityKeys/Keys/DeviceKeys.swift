import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A device's public keys: what the roster records of it and what others seal to.
public struct DevicePublicKeys: Hashable, Sendable {
    /// Its Ed25519 signing key (32 bytes).
    public let signing: [UInt8]
    /// Its X25519 agreement key (32 bytes).
    public let agreement: [UInt8]

    /// Public keys from their bytes.
    /// - Throws: ``EncryptionError`` `.malformed` unless each is a valid 32-byte key.
    public init(signing: [UInt8], agreement: [UInt8]) throws {
        guard (try? Curve25519.Signing.PublicKey(rawRepresentation: signing)) != nil,
              (try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: agreement)) != nil else {
            throw EncryptionError(.malformed, "a device's public keys are two 32-byte Curve25519 keys")
        }
        self.signing = signing
        self.agreement = agreement
    }

    /// The device's identifier: the first 16 bytes of SHA-256 over both keys, in hexadecimal.
    /// A roster entry naming a device by another identifier than its keys' is refused.
    public var deviceIdentifier: String {
        SHA256.hash(data: Array("ubiquity device".utf8) + signing + agreement).prefix(16).map { String(format: "%02x", $0) }.joined()
    }

    /// Whether `signature` is this device's over `message`.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        guard let key = try? Curve25519.Signing.PublicKey(rawRepresentation: signing) else { return false }
        return key.isValidSignature(signature, for: message)
    }
}

/// A device's private keys: Ed25519 to sign its commits and roster entries, X25519 to receive
/// keys sealed to it (HPKE). Kept in a file of the device's own (0600, a format version inside).
public struct DeviceKeys: Sendable {
    /// The file's format.
    public static let fileFormat = 1

    private let signingBytes: [UInt8]
    private let agreementBytes: [UInt8]
    // Both are valid private keys by construction (made here, or checked when read).
    var signingKey: Curve25519.Signing.PrivateKey { try! Curve25519.Signing.PrivateKey(rawRepresentation: signingBytes) }
    var agreementKey: Curve25519.KeyAgreement.PrivateKey { try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: agreementBytes) }

    /// Keys from their 32-byte private halves (any 32 bytes make valid Curve25519 keys).
    init(signing: [UInt8], agreement: [UInt8]) {
        precondition(signing.count == 32 && agreement.count == 32)
        signingBytes = signing
        agreementBytes = agreement
    }

    /// The private halves, for the keyring's file.
    var privateBytes: (signing: [UInt8], agreement: [UInt8]) { (signingBytes, agreementBytes) }

    /// New random keys.
    public init() {
        signingBytes = Array(Curve25519.Signing.PrivateKey().rawRepresentation)
        agreementBytes = Array(Curve25519.KeyAgreement.PrivateKey().rawRepresentation)
    }

    /// The public half.
    public var publicKeys: DevicePublicKeys {
        // Both are valid keys by construction.
        try! DevicePublicKeys(signing: Array(signingKey.publicKey.rawRepresentation), agreement: Array(agreementKey.publicKey.rawRepresentation))
    }

    /// Signs `message`.
    /// - Throws: What the signer throws (nothing in practice).
    public func sign(_ message: [UInt8]) throws -> [UInt8] {
        Array(try signingKey.signature(for: message))
    }

    private struct File: Codable {
        var format: Int
        var signing: Data
        var agreement: Data
    }

    /// Writes the keys to `url` (mode 0600, replaced atomically, on disk before this returns:
    /// the file and its folder are synced).
    /// - Throws: What writing throws.
    public func write(to url: URL) throws {
        try PrivateFile.write(try JSONEncoder().encode(File(format: Self.fileFormat, signing: signingKey.rawRepresentation, agreement: agreementKey.rawRepresentation)), to: url)
    }

    /// Reads the keys written by ``write(to:)``.
    /// - Throws: ``EncryptionError`` `.keyFileUnusable`: missing, readable by others, another
    ///   format, or damaged.
    public init(contentsOf url: URL) throws {
        let data = try PrivateFile.read(url, what: "device keys")
        guard let file = try? JSONDecoder().decode(File.self, from: data) else {
            throw EncryptionError(.keyFileUnusable, "the device keys at \(url.path) are damaged")
        }
        guard file.format == Self.fileFormat else { throw EncryptionError(.keyFileUnusable, "the device keys at \(url.path) are in format \(file.format)") }
        guard (try? Curve25519.Signing.PrivateKey(rawRepresentation: file.signing)) != nil,
              (try? Curve25519.KeyAgreement.PrivateKey(rawRepresentation: file.agreement)) != nil else {
            throw EncryptionError(.keyFileUnusable, "the device keys at \(url.path) are damaged")
        }
        signingBytes = Array(file.signing)
        agreementBytes = Array(file.agreement)
    }
}
