import Crypto
import Foundation

/// The account's root key in one epoch: 256 random bits from which every service key is
/// derived (HKDF-SHA256, each with its own label), so that no two services ever share a key.
///
/// A new epoch (a device removed, the custody changed) is a new root key: what is written
/// from then on is unreadable to whoever held only the older ones.
public struct AccountRootKey: Sendable {
    /// The epoch this key belongs to (0 for the account's first).
    public let epoch: UInt32
    let key: SecretKey

    /// A new random root key for `epoch`.
    /// - Parameter epoch: The epoch.
    public init(epoch: UInt32) {
        self.epoch = epoch
        key = SecretKey(SymmetricKey(size: .bits256))
    }

    /// A root key from its 32 bytes (unsealed from a device's copy or the escrow).
    /// - Throws: ``EncryptionError`` `.malformed` unless there are exactly 32 bytes.
    public init(epoch: UInt32, bytes: some ContiguousBytes) throws {
        let key = SymmetricKey(data: bytes)
        guard key.bitCount == 256 else { throw EncryptionError(.malformed, "an account root key is 32 bytes") }
        self.epoch = epoch
        self.key = SecretKey(key)
    }

    /// The key's bytes, to be sealed to a device or the escrow (never logged, never stored plain).
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try key.bytes.withUnsafeBytes(body)
    }

    /// The key of one service, for `purpose` within `scope` (a container, a store, a database).
    func derive(_ purpose: ServicePurpose, scope: String) -> SecretKey {
        Self.derive(purpose, scope: scope, from: key, salt: "ubiquity epoch", epoch: epoch)
    }

    /// HKDF-SHA256 of `key` for `purpose` within `scope`, salted with `salt` and `epoch` (each
    /// kind of root key its own salt: an account's, a share's).
    static func derive(_ purpose: ServicePurpose, scope: String, from key: SecretKey, salt label: String, epoch: UInt32) -> SecretKey {
        var info = Data("ubiquity/1/".utf8)
        info.append(contentsOf: Array(purpose.rawValue.utf8))
        info.append(0)
        info.append(contentsOf: Array(scope.utf8))
        var salt = Data(label.utf8)
        Swift.withUnsafeBytes(of: epoch.bigEndian) { salt.append(contentsOf: $0) }
        return SecretKey(HKDF<SHA256>.deriveKey(inputKeyMaterial: key.symmetric, salt: salt, info: info, outputByteCount: 32))
    }

    /// The keys of a container's chunks (identifiers, contents, cut points).
    /// - Parameter container: The container's identifier.
    public func chunkKeys(container: String) -> ChunkKeys {
        ChunkKeys(identifier: derive(.chunkIdentifier, scope: container), content: derive(.chunkContent, scope: container),
                  chunker: derive(.chunker, scope: container), epoch: epoch)
    }

    /// The key of a container's item records.
    /// - Parameter container: The container's identifier.
    public func recordKey(container: String) -> RecordKey {
        RecordKey(key: derive(.itemRecord, scope: container), nameTag: derive(.nameTag, scope: container), epoch: epoch)
    }

    /// The key of a database's change-log segments (a database in iCloud).
    /// - Parameters:
    ///   - container: The container's identifier.
    ///   - database: The database's name.
    public func databaseLogKey(container: String, database: String) -> DatabaseLogKey {
        DatabaseLogKey(key: derive(.databaseLog, scope: container + "\u{0}" + database), epoch: epoch)
    }

}

/// What a derived key is for: each its own label, never shared.
enum ServicePurpose: String {
    case chunkIdentifier = "chunk-id"
    case chunkContent = "chunk-content"
    case chunker = "chunker"
    case itemRecord = "item-record"
    case nameTag = "name-tag"
    case keyValueName = "kv-name"
    case keyValueValue = "kv-value"
    case databaseLog = "database-log"
    case sharingIdentity = "sharing-identity"
}
