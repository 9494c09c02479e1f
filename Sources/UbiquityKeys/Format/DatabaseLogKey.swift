import Crypto
import Foundation

/// Where a database log segment belongs: its device's chain of segments.
public struct SegmentPlace: Hashable, Sendable {
    /// The device that wrote it.
    public var device: String
    /// Its number in that device's chain (the first is 1).
    public var number: UInt64
    /// The SHA-256 of the device's previous sealed segment (32 zero bytes for the first).
    public var previous: [UInt8]

    /// A place.
    public init(device: String, number: UInt64, previous: [UInt8]) {
        self.device = device
        self.number = number
        self.previous = previous
    }
}

/// A database's change-log key in one epoch. Each device's segments (already a hash chain in
/// the clear) are sealed bound to their place in that chain, so the server cannot reorder,
/// splice, drop from the middle or move them between devices or databases; and each device
/// signs its chain's head, so it cannot hold back the newest either without the heads telling.
///
/// Sealed segment (format 1): `01 ‖ epoch ‖ nonce (12) ‖ AES-256-GCM(key, padded segment) ‖ tag`,
/// bound to device, number and previous hash.
public struct DatabaseLogKey: Sendable {
    /// The format this build writes.
    public static let format: UInt8 = 1

    let key: SecretKey
    /// The epoch of this key.
    public let epoch: UInt32

    private func binding(_ place: SegmentPlace) -> [UInt8] {
        var binding = Binding("database segment", format: Self.format, epoch: epoch)
        binding.append(place.device)
        binding.append(place.number)
        binding.append(place.previous)
        return binding.bytes
    }

    /// Seals `segment` at `place`.
    /// - Throws: What the cipher throws (nothing in practice).
    public func seal(_ segment: some DataProtocol, at place: SegmentPlace) throws -> Data {
        try Sealing.seal(Padme.pad(Array(segment)), key: key, binding: binding(place), header: SealedHeader(format: Self.format, epoch: epoch))
    }

    /// The segment sealed at `place`.
    /// - Throws: ``EncryptionError``: `.unsupportedFormat`, `.malformed`, `.authenticationFailed`
    ///   (changed, or sealed at another place, device, database or epoch).
    public func open(_ sealed: some DataProtocol, at place: SegmentPlace) throws -> Data {
        let bytes = Array(sealed)
        let header = try SealedHeader(bytes)
        guard header.format == Self.format else { throw EncryptionError(.unsupportedFormat, "segment \(place.number) of device \(place.device) is in format \(header.format)") }
        guard header.epoch == epoch, bytes.count >= SealedHeader.size + 12 + 16 + 1 else {
            throw EncryptionError(.authenticationFailed, "segment \(place.number) of device \(place.device) is not sealed for this epoch, or is truncated")
        }
        guard let padded = Sealing.open(bytes, at: SealedHeader.size, key: key, binding: binding(place)) else {
            throw EncryptionError(.authenticationFailed, "segment \(place.number) of device \(place.device) does not open: changed, or not the segment at that place")
        }
        guard let segment = Padme.unpad(padded) else { throw EncryptionError(.malformed, "segment \(place.number) of device \(place.device) has bad padding") }
        return Data(segment)
    }
}
