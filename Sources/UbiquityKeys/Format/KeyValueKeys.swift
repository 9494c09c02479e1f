import Crypto
import Foundation

/// A key-value store's keys: each key's name as the server sees it (a keyed tag), and its values
/// and removals sealed on the device.
///
/// Names are tagged with the account's first epoch, so that a new epoch does not rename every
/// key (whoever held that first key can test a guessed name, never read a value). Values and
/// removals are sealed with the newest epoch's key this device holds and opened with the key of
/// the epoch they were sealed in.
///
/// Sealed change (format 1): `01 ‖ epoch (4) ‖ version (8) ‖ nonce (12) ‖ AES-256-GCM(value key,
/// padded payload) ‖ tag (16)`, where the payload is `kind (1: a value, 0: a removal) ‖ key
/// length (2) ‖ key ‖ value`, padded (Padmé, at least 64 bytes), and the associated data binds the
/// format, epoch, store, stored name and version: a value cannot be moved to another key, store
/// or version, and a removal cannot be forged.
public struct KeyValueKeys: Sendable {
    /// The format this build writes.
    public static let format: UInt8 = 1
    /// The most a sealed removal takes (a tag, the key and the seal): the server refuses longer ones.
    public static let maximumSealedRemoval = 256
    /// The least a sealed change takes: its header, version and seal around the smallest padding.
    public static let minimumSealedSize = SealedHeader.size + 8 + 12 + 64 + 16

    /// What a sealed change says, once opened.
    public struct Opened: Sendable, Equatable {
        /// The key, as the app named it.
        public var key: String
        /// The value's bytes, or nil for a removal.
        public var value: Data?
        /// The change's version (the bits of its timestamp: later changes have higher versions).
        public var version: UInt64
    }

    let store: String
    let naming: SecretKey
    let values: [UInt32: SecretKey]
    /// The epoch this device seals in (the newest it holds).
    public let epoch: UInt32

    /// The keys of `store` from the account's root keys this device holds.
    /// - Parameters:
    ///   - store: The store's identifier.
    ///   - rootKeys: The root keys held, of any epochs; the first epoch's is needed for names.
    /// - Throws: ``EncryptionError`` `.malformed` without the first epoch's root key or any key.
    public init(store: String, rootKeys: [AccountRootKey]) throws {
        guard let first = rootKeys.first(where: { $0.epoch == 0 }), let newest = rootKeys.map(\.epoch).max() else {
            throw EncryptionError(.malformed, "the key-value keys need the account's first root key")
        }
        self.store = store
        naming = first.derive(.keyValueName, scope: store)
        values = Dictionary(rootKeys.map { ($0.epoch, $0.derive(.keyValueValue, scope: store)) }, uniquingKeysWith: { first, _ in first })
        epoch = newest
    }

    /// The epoch a sealed change says it was sealed in (nil: too short to say).
    public static func epoch(of sealed: some DataProtocol) -> UInt32? {
        try? SealedHeader(Array(sealed.prefix(SealedHeader.size))).epoch
    }

    /// Whether these keys open changes sealed in `epoch`.
    public func holds(epoch: UInt32) -> Bool { values[epoch] != nil }

    /// The name the server sees for `key`: 43 characters of base64url, the same on every device
    /// and in every epoch.
    public func storedName(of key: String) -> String {
        Data(HMAC<SHA256>.authenticationCode(for: Array(key.utf8), using: naming.symmetric)).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    private func binding(epoch: UInt32, storedName: String, version: UInt64) -> [UInt8] {
        var binding = Binding("key-value", format: Self.format, epoch: epoch)
        binding.append(store)
        binding.append(storedName)
        binding.append(version)
        return binding.bytes
    }

    /// Seals a change of `key`: its new value's bytes, or its removal (`value` nil), as `version`.
    /// - Returns: The name the server files it under and the sealed change.
    /// - Throws: ``EncryptionError`` `.malformed` for a key longer than 65,535 bytes.
    public func seal(key: String, value: Data?, version: UInt64) throws -> (storedName: String, sealed: Data) {
        let name = Array(key.utf8)
        guard name.count <= Int(UInt16.max) else { throw EncryptionError(.malformed, "a key-value key is longer than 65,535 bytes") }
        var payload: [UInt8] = [value == nil ? 0 : 1, UInt8(name.count >> 8), UInt8(name.count & 0xff)]
        payload.append(contentsOf: name)
        if let value { payload.append(contentsOf: value) }
        var clear = [UInt8]()
        withUnsafeBytes(of: version.bigEndian) { clear.append(contentsOf: $0) }
        let storedName = storedName(of: key)
        let sealed = try Sealing.seal(Padme.pad(payload, minimum: 64), key: values[epoch]!, binding: binding(epoch: epoch, storedName: storedName, version: version),
                                      header: SealedHeader(format: Self.format, epoch: epoch), clear: clear)
        return (storedName, sealed)
    }

    /// Opens the change the server filed under `storedName`.
    /// - Throws: ``EncryptionError``: `.malformed`, `.unsupportedFormat`, `.authenticationFailed`
    ///   (changed bytes; another store's, name's or version's change; an epoch this device does not
    ///   hold; a key whose tag is not `storedName`).
    public func open(_ sealed: some DataProtocol, storedName: String) throws -> Opened {
        let bytes = Array(sealed)
        let header = try SealedHeader(bytes)
        guard header.format == Self.format else { throw EncryptionError(.unsupportedFormat, "a key-value change is in format \(header.format); this device reads format \(Self.format)") }
        let versionEnd = SealedHeader.size + 8
        guard let key = values[header.epoch] else {
            throw EncryptionError(.authenticationFailed, "a key-value change is sealed in epoch \(header.epoch), whose key this device does not hold")
        }
        guard bytes.count >= versionEnd + 12 + 16 + 1 else { throw EncryptionError(.malformed, "a key-value change is truncated") }
        let version = bytes[SealedHeader.size..<versionEnd].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        guard let padded = Sealing.open(bytes, at: versionEnd, key: key, binding: binding(epoch: header.epoch, storedName: storedName, version: version)) else {
            throw EncryptionError(.authenticationFailed, "a key-value change does not open: changed, or another key's, store's or version's")
        }
        guard let payload = Padme.unpad(padded), payload.count >= 3, payload[0] <= 1 else { throw EncryptionError(.malformed, "a key-value change has bad padding or fields") }
        let length = Int(payload[1]) << 8 | Int(payload[2])
        guard payload.count >= 3 + length, let name = String(bytes: payload[3..<(3 + length)], encoding: .utf8) else {
            throw EncryptionError(.malformed, "a key-value change's key is malformed")
        }
        guard self.storedName(of: name) == storedName else {
            throw EncryptionError(.authenticationFailed, "a key-value change is filed under a name that is not its key's")
        }
        return Opened(key: name, value: payload[0] == 1 ? Data(payload[(3 + length)...]) : nil, version: version)
    }
}
