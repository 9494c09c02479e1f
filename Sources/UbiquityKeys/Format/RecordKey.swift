import Crypto
import Foundation

/// Where an item record belongs: what its seal is bound to, so that the server cannot move it
/// to another item, folder, container or revision.
public struct RecordBinding: Hashable, Sendable {
    /// The container's identifier.
    public var container: String
    /// The item's identifier.
    public var item: String
    /// Its parent folder's item identifier ("" for the container's root).
    public var parent: String
    /// The revision the record describes.
    public var revision: String

    /// A binding.
    public init(container: String, item: String, parent: String, revision: String) {
        self.container = container
        self.item = item
        self.parent = parent
        self.revision = revision
    }
}

/// A container's item-record key in one epoch.
///
/// Sealed record (format 1): `01 ‖ epoch (4) ‖ nonce (12) ‖ AES-256-GCM(record key, padded record) ‖ tag (16)`,
/// the associated data binding the label, format, epoch, container, item, parent and revision.
/// The record (name, size, dates, type, chunk list) is padded (Padmé, and to at least
/// ``minimumPaddedSize`` bytes), so its length tells little of the name's.
public struct RecordKey: Sendable {
    /// The format this build writes.
    public static let format: UInt8 = 1
    /// Records shorter than this are padded to it: short names all look alike.
    public static let minimumPaddedSize = 256

    let key: SecretKey
    let nameTag: SecretKey
    /// The epoch of this key.
    public let epoch: UInt32

    private func binding(_ where_: RecordBinding) -> [UInt8] {
        var binding = Binding("record", format: Self.format, epoch: epoch)
        binding.append(where_.container)
        binding.append(where_.item)
        binding.append(where_.parent)
        binding.append(where_.revision)
        return binding.bytes
    }

    /// Seals `record` for `binding`.
    /// - Throws: What the cipher throws (nothing in practice).
    public func seal(_ record: some DataProtocol, for binding: RecordBinding) throws -> Data {
        try Sealing.seal(Padme.pad(Array(record), minimum: Self.minimumPaddedSize), key: key, binding: self.binding(binding),
                         header: SealedHeader(format: Self.format, epoch: epoch))
    }

    /// The epoch a sealed record says it was sealed in (which key to open it with).
    /// - Throws: ``EncryptionError`` `.malformed` for bytes shorter than a header.
    public static func epoch(of sealed: some DataProtocol) throws -> UInt32 {
        try SealedHeader(Array(sealed.prefix(SealedHeader.size))).epoch
    }

    /// The record sealed for `binding`.
    /// - Throws: ``EncryptionError``: `.malformed`, `.unsupportedFormat`, or
    ///   `.authenticationFailed` for changed bytes or a record of another item, parent,
    ///   container, revision or epoch.
    public func open(_ sealed: some DataProtocol, for binding: RecordBinding, minimumFormat: UInt8 = 1) throws -> Data {
        let bytes = Array(sealed)
        let header = try SealedHeader(bytes)
        guard header.format == Self.format, header.format >= minimumFormat else {
            throw EncryptionError(.unsupportedFormat, "the record of item \(binding.item) is in format \(header.format); this device reads format \(Self.format) (minimum \(minimumFormat))")
        }
        guard header.epoch == epoch, bytes.count >= SealedHeader.size + 12 + 16 + 1 else {
            throw EncryptionError(.authenticationFailed, "the record of item \(binding.item) is not sealed for this epoch, or is truncated")
        }
        guard let padded = Sealing.open(bytes, at: SealedHeader.size, key: key, binding: self.binding(binding)) else {
            throw EncryptionError(.authenticationFailed, "the record of item \(binding.item) does not open: changed, or not this item's, parent's or revision's")
        }
        guard let record = Padme.unpad(padded) else { throw EncryptionError(.malformed, "the record of item \(binding.item) has bad padding") }
        return Data(record)
    }

    /// A keyed tag of a name in a folder (composed and case-folded, as the server's own
    /// name-clash rule folds names), so that the server can refuse two items whose names clash
    /// without seeing either name: 32 lowercase hexadecimal digits (128 bits of HMAC-SHA-256), a
    /// name the server accepts as it is. Stable across epochs when made with the account's first
    /// epoch's key (docs/Encryption.md).
    /// - Parameters:
    ///   - name: The item's name.
    ///   - parent: Its folder's item identifier.
    public func nameClashTag(_ name: String, parent: String) -> String {
        var message = Binding("name", format: Self.format, epoch: 0)
        message.append(parent)
        // Composed form first (an ASCII name is its own: the common case skips the work).
        let composed = name.utf8.allSatisfy { $0 < 0x80 } ? name : name.precomposedStringWithCanonicalMapping
        message.append(composed.lowercased())
        let digits = Array("0123456789abcdef".utf8)
        let tag = HMAC<SHA256>.authenticationCode(for: message.bytes, using: nameTag.symmetric).prefix(16)
        return String(decoding: tag.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0f)]] }, as: UTF8.self)
    }
}
