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
        let data = try JSONEncoder().encode(File(format: Self.fileFormat, signing: signingKey.rawRepresentation, agreement: agreementKey.rawRepresentation))
        let folder = url.deletingLastPathComponent()
        let temporary = folder.appendingPathComponent(".\(url.lastPathComponent).\(UUID().uuidString)")
        let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw EncryptionError(.keyFileUnusable, "cannot write the keys at \(url.path): \(String(cString: strerror(errno)))") }
        let written = data.withUnsafeBytes { Foundation.write(descriptor, $0.baseAddress, $0.count) }
        let synced = fsync(descriptor) == 0
        close(descriptor)
        guard written == data.count, synced else {
            try? FileManager.default.removeItem(at: temporary) // what is left of a failed write
            throw EncryptionError(.keyFileUnusable, "cannot write the keys at \(url.path)")
        }
        guard rename(temporary.path, url.path) == 0 else {
            let reason = String(cString: strerror(errno))
            try? FileManager.default.removeItem(at: temporary) // what is left of a failed write
            throw EncryptionError(.keyFileUnusable, "cannot put the device's keys in place at \(url.path): \(reason)")
        }
        let directory = open(folder.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory) // the rename on disk too
            close(directory)
        }
    }

    /// Reads the keys written by ``write(to:)``.
    /// - Throws: ``EncryptionError`` `.keyFileUnusable`: missing, readable by others, another
    ///   format, or damaged.
    public init(contentsOf url: URL) throws {
        let attributes = try? FileManager.default.attributesOfItem(atPath: url.path)
        guard let mode = attributes?[.posixPermissions] as? Int else { throw EncryptionError(.keyFileUnusable, "no device keys at \(url.path)") }
        guard mode & 0o077 == 0 else { throw EncryptionError(.keyFileUnusable, "the device keys at \(url.path) are readable by others (mode \(String(mode, radix: 8))): not used") }
        guard let data = try? Data(contentsOf: url), let file = try? JSONDecoder().decode(File.self, from: data) else {
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
