import Crypto

/// A secret key's bytes, made into a `SymmetricKey` where it is used (swift-crypto's key is not
/// `Sendable` here; its bytes are). Never printed: its description hides the bytes.
struct SecretKey: Sendable, CustomStringConvertible {
    let bytes: [UInt8]

    init(_ key: SymmetricKey) { bytes = key.withUnsafeBytes { Array($0) } }

    var symmetric: SymmetricKey { SymmetricKey(data: bytes) }

    var description: String { "SecretKey(\(bytes.count * 8) bits)" }
}
