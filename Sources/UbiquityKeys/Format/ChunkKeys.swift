import Crypto
import Foundation

/// A chunk's identifier: a keyed MAC of its plaintext (HMAC-SHA256 under the container's
/// chunk-identifier key), never a plain content hash, so the server cannot confirm that an
/// account holds a known file.
public struct ChunkIdentifier: Hashable, Sendable, CustomStringConvertible {
    /// The 32 bytes.
    public let bytes: [UInt8]

    /// An identifier from its bytes.
    /// - Throws: ``EncryptionError`` `.malformed` unless there are 32.
    public init(bytes: [UInt8]) throws {
        guard bytes.count == 32 else { throw EncryptionError(.malformed, "a chunk identifier is 32 bytes") }
        self.bytes = bytes
    }

    /// An identifier from its 64 lower-case hexadecimal digits (how chunks are named on the
    /// wire); nil for anything else.
    public init?(hex: String) {
        let digits = Array(hex.utf8)
        guard digits.count == 64 else { return nil }
        var bytes = [UInt8](repeating: 0, count: 32)
        for index in 0..<32 {
            guard let high = Self.nibble(digits[2 * index]), let low = Self.nibble(digits[2 * index + 1]) else { return nil }
            bytes[index] = high << 4 | low
        }
        self.bytes = bytes
    }

    private static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        default: nil
        }
    }

    init(mac: HashedAuthenticationCode<SHA256>) { bytes = Array(mac) }

    /// Lower-case hexadecimal.
    public var description: String {
        // (Written straight into the string: a format call a byte cost an eighth of a receiving
        // device's CPU when every opened chunk named itself.)
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            let digits = Array("0123456789abcdef".utf8)
            for (index, byte) in bytes.enumerated() {
                out[2 * index] = digits[Int(byte >> 4)]
                out[2 * index + 1] = digits[Int(byte & 0x0f)]
            }
            return bytes.count * 2
        }
    }
}

/// A container's chunk keys in one epoch: identifiers, contents and cut points.
///
/// Sealed chunk (format 1): `01 ‖ epoch (4) ‖ nonce (12) ‖ AES-256-GCM(key, padded plaintext) ‖ tag (16)`,
/// where `key` is derived for this identifier alone (HKDF of the content key), the plaintext is
/// padded (Padmé), and the associated data binds the label, format, epoch and identifier. A
/// reader recomputes the identifier from what it decrypted.
///
/// Sealing is deterministic: the nonce is derived too (HKDF of the content key, another label),
/// so a chunk seals to the same bytes on every device and every time — a chunk sent again, by any
/// device, is the very bytes the server stored, and the SHA-256 the server keeps of them stays
/// true. A key and its nonce seal one plaintext only (the one whose keyed MAC names them), so
/// nothing is lost by it; what it shows — that two chunks are equal — the identifier shows already.
public struct ChunkKeys: Sendable {
    /// The format this build writes.
    public static let format: UInt8 = 1
    /// The bytes a sealed chunk adds to its padded plaintext.
    public static let overhead = SealedHeader.size + 12 + 16

    /// The size of the sealed chunk of `length` plaintext bytes (what the server stores of it):
    /// the padding hides all but a few bits of the length.
    /// - Precondition: `length` ≥ 0.
    public static func sealedSize(ofPlaintext length: Int) -> Int {
        precondition(length >= 0, "a length is not negative")
        return overhead + Padme.paddedLength(length + 1)
    }

    let identifier: SecretKey
    let content: SecretKey
    /// The key of the chunker's cut points.
    let chunker: SecretKey
    /// The epoch of these keys.
    public let epoch: UInt32

    /// The identifier of `plaintext`.
    public func identifier(of plaintext: some DataProtocol) -> ChunkIdentifier {
        ChunkIdentifier(mac: HMAC<SHA256>.authenticationCode(for: plaintext, using: identifier.symmetric))
    }

    private func key(for id: ChunkIdentifier) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: content.symmetric, info: Array("chunk".utf8) + id.bytes, outputByteCount: 32)
    }

    private func nonce(for id: ChunkIdentifier) -> [UInt8] {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: content.symmetric, info: Array("chunk-nonce".utf8) + id.bytes, outputByteCount: 12).withUnsafeBytes { Array($0) }
    }

    private func binding(_ id: ChunkIdentifier) -> [UInt8] {
        var binding = Binding("chunk", format: Self.format, epoch: epoch)
        binding.append(id.bytes)
        return binding.bytes
    }

    /// Seals `plaintext`: its identifier and the stored body.
    /// - Throws: What the cipher throws (nothing in practice).
    public func seal(_ plaintext: some DataProtocol) throws -> (id: ChunkIdentifier, body: Data) {
        let id = identifier(of: plaintext)
        return (id, try seal(plaintext, as: id))
    }

    /// Seals `plaintext` as the chunk `id`, which the caller vouches is its identifier (made when
    /// the bytes were cut, and they have not changed since): a reader recomputes it from what it
    /// decrypts and refuses a mismatch, so a wrong one makes an unreadable chunk, never another's.
    /// - Throws: What the cipher throws (nothing in practice).
    public func seal(_ plaintext: some DataProtocol, as id: ChunkIdentifier) throws -> Data {
        try Sealing.seal(Self.padded(plaintext), key: SecretKey(key(for: id)), binding: binding(id),
                                header: SealedHeader(format: Self.format, epoch: epoch), nonce: nonce(for: id))
    }

    /// The plaintext of a sealed chunk asked for as `id`.
    /// - Throws: ``EncryptionError``: `.malformed` (too short, bad padding), `.unsupportedFormat`
    ///   (another format, or below `minimumFormat`), `.authenticationFailed` (changed,
    ///   truncated, spliced or sealed under another identifier or epoch), `.identifierMismatch`.
    public func open(_ body: some DataProtocol, as id: ChunkIdentifier, minimumFormat: UInt8 = 1) throws -> Data {
        let padded = try Self.openPadded(body, naming: "chunk \(id)", kind: "a sealed chunk", key: key(for: id), binding: binding(id), epoch: epoch,
                                         minimumFormat: minimumFormat, unopened: "changed, truncated or not the chunk asked for")
        guard HMAC<SHA256>.isValidAuthenticationCode(id.bytes, authenticating: padded, using: identifier.symmetric) else {
            throw EncryptionError(.identifierMismatch, "chunk \(id) holds other contents than its identifier names")
        }
        return padded
    }

    // MARK: Sealed patches

    private func patchKey(making id: ChunkIdentifier, from base: ChunkIdentifier) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: content.symmetric, info: Array("chunk-patch".utf8) + id.bytes + base.bytes, outputByteCount: 32)
    }

    private func patchBinding(making id: ChunkIdentifier, from base: ChunkIdentifier) -> [UInt8] {
        var binding = Binding("chunk-patch", format: Self.format, epoch: epoch)
        binding.append(id.bytes)
        binding.append(base.bytes)
        return binding.bytes
    }

    /// Seals `patch` — the bytes of a patch that makes chunk `id` from chunk `base` — as the
    /// server keeps it in place of the chunk (the way a 1-byte edit of a large file travels in
    /// a few KiB, not the chunk's 128). Format 1: `01 ‖ epoch (4) ‖ nonce (12) ‖
    /// AES-256-GCM(key, padded patch) ‖ tag (16)`, the key derived for this pair of identifiers
    /// alone, the nonce random (two devices may make different patches of one pair), the
    /// associated data binding the label, format, epoch and both identifiers; padded (Padmé),
    /// so its length tells little of the edit's. Whoever applies it checks that the result is
    /// chunk `id` (``identifier(of:)``): a patch applied to another base makes nothing.
    /// - Throws: What the cipher throws (nothing in practice).
    public func sealPatch(_ patch: some DataProtocol, making id: ChunkIdentifier, from base: ChunkIdentifier) throws -> Data {
        try Sealing.seal(Self.padded(patch), key: SecretKey(patchKey(making: id, from: base)), binding: patchBinding(making: id, from: base),
                                header: SealedHeader(format: Self.format, epoch: epoch))
    }

    /// The bytes of a sealed patch that makes chunk `id` from chunk `base`.
    /// - Throws: ``EncryptionError``: `.malformed`, `.unsupportedFormat`, `.authenticationFailed`
    ///   (changed, truncated, of another pair of chunks or another epoch).
    public func openPatch(_ body: some DataProtocol, making id: ChunkIdentifier, from base: ChunkIdentifier, minimumFormat: UInt8 = 1) throws -> Data {
        try Self.openPadded(body, naming: "the patch of chunk \(id)", kind: "a sealed patch", key: patchKey(making: id, from: base),
                            binding: patchBinding(making: id, from: base), epoch: epoch, minimumFormat: minimumFormat,
                            unopened: "changed, truncated or not a patch of the base named")
    }

    // MARK: Keys handed on

    /// The key of chunk `id` alone in this epoch: it opens that chunk and nothing else (every
    /// chunk's key is derived for its identifier), so a public link's manifest hands it to
    /// whoever has the link — never the container's keys (docs/Encryption.md, "Public links
    /// under Advanced").
    public func sharedKey(of id: ChunkIdentifier) -> [UInt8] {
        key(for: id).withUnsafeBytes { Array($0) }
    }

    /// The key of the sealed patch that makes chunk `id` from chunk `base` in this epoch: it
    /// opens that patch and nothing else (see ``sharedKey(of:)``).
    public func sharedPatchKey(making id: ChunkIdentifier, from base: ChunkIdentifier) -> [UInt8] {
        patchKey(making: id, from: base).withUnsafeBytes { Array($0) }
    }

    /// The plaintext of a sealed chunk opened with its ``sharedKey(of:)`` alone (what a public
    /// link's page does). Without the container's keys the identifier cannot be made again: the
    /// box's tag, under a key derived for this identifier only, is the check.
    /// - Throws: ``EncryptionError`` as ``open(_:as:minimumFormat:)`` (never `.identifierMismatch`).
    public static func open(_ body: some DataProtocol, as id: ChunkIdentifier, sharedKey: [UInt8], epoch: UInt32) throws -> Data {
        var binding = Binding("chunk", format: format, epoch: epoch)
        binding.append(id.bytes)
        return try openPadded(body, naming: "chunk \(id)", kind: "a sealed chunk", key: SymmetricKey(data: sharedKey), binding: binding.bytes, epoch: epoch,
                              minimumFormat: format, unopened: "changed, truncated or not the chunk asked for")
    }

    // MARK: Padding

    /// `plaintext` padded (Padmé: 0x80, then zeros), in one buffer of its final size.
    private static func padded(_ plaintext: some DataProtocol) -> [UInt8] {
        let length = Padme.paddedLength(plaintext.count + 1)
        var padded = [UInt8]()
        padded.reserveCapacity(length)
        padded.append(contentsOf: plaintext)
        padded.append(0x80)
        padded.append(contentsOf: repeatElement(0, count: length - padded.count))
        return padded
    }

    /// The padded plaintext of a sealed chunk or patch (`name` names it in errors, made only for
    /// one; `kind` says what it should be), its header checked and its box opened where it lies
    /// (one copy into the box, one out of the cipher; the padding cut off in place).
    private static func openPadded(_ body: some DataProtocol, naming name: @autoclosure () -> String, kind: String, key: SymmetricKey, binding: [UInt8], epoch: UInt32,
                                   minimumFormat: UInt8, unopened: String) throws -> Data {
        let header = try SealedHeader(body.prefix(SealedHeader.size))
        guard header.format == format, header.format >= minimumFormat else {
            throw EncryptionError(.unsupportedFormat, "\(name()) is in format \(header.format); this device reads format \(format) (minimum \(minimumFormat))")
        }
        guard header.epoch == epoch else {
            throw EncryptionError(.authenticationFailed, "\(name()) is sealed under epoch \(header.epoch), not \(epoch)")
        }
        guard body.count >= overhead + 1 else { throw EncryptionError(.malformed, "\(name()) is shorter than \(kind)") }
        guard let box = try? AES.GCM.SealedBox(combined: body.dropFirst(SealedHeader.size)),
              var padded = try? AES.GCM.open(box, using: key, authenticating: binding) else {
            throw EncryptionError(.authenticationFailed, "\(name()) does not open: \(unopened)")
        }
        guard unpad(&padded) else { throw EncryptionError(.malformed, "\(name()) has bad padding") }
        return padded
    }

    /// Cuts the padding off `padded` in place; false if it is not padding. (The zeros are
    /// looked at through a pointer: Data's own indexing costs several times as much a byte.)
    private static func unpad(_ padded: inout Data) -> Bool {
        let marker: Int? = padded.withUnsafeBytes { raw in
            var index = raw.count - 1
            while index >= 0 && raw[index] == 0 { index -= 1 }
            return index >= 0 && raw[index] == 0x80 ? index : nil
        }
        guard let marker else { return false }
        padded.count = marker
        return true
    }
}
