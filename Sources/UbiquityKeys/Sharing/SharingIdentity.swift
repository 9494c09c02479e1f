import Crypto
import Foundation

/// An account's sharing identity as others see it: its name and the public half of the keys
/// share keys are sealed to and by (an X25519 agreement key and an Ed25519 signing key, the
/// same kinds as a device's). Every device of the account holds the private half; other
/// accounts pin the public half (``IdentityPins``) once their people compared a
/// ``SafetyCode``.
public struct SharingIdentity: Hashable, Sendable {
    /// The account's name.
    public var account: String
    /// Its identity's public keys.
    public var keys: DevicePublicKeys

    /// An identity.
    /// - Parameters:
    ///   - account: The account's name.
    ///   - keys: Its identity's public keys.
    public init(account: String, keys: DevicePublicKeys) {
        self.account = account
        self.keys = keys
    }
}

/// The short code two people compare to know that each device holds the other's real sharing
/// identity, not a key the server put in between (the failure of other products' sharing:
/// Nextcloud's end-to-end encryption, EuroS&P 2024; MEGA, S&P 2023).
///
/// It is derived from both identities — names and keys — in an order that does not depend on
/// who looks, so both devices show the same twelve digits (`1234 5678 9012`, about 40 bits: a
/// server that wanted to swap a key would have to find one whose code matches, about 10¹² tries
/// for each person it fools, before the people compare).
public enum SafetyCode {
    /// The code of the pair `a`, `b` (the same for `b`, `a`).
    public static func code(_ a: SharingIdentity, _ b: SharingIdentity) -> String {
        let ordered = [a, b].sorted { lhs, rhs in
            lhs.account != rhs.account ? Array(lhs.account.utf8).lexicographicallyPrecedes(Array(rhs.account.utf8))
                : lhs.keys.signing.lexicographicallyPrecedes(rhs.keys.signing)
        }
        var binding = Binding("safety code", format: 1, epoch: 0)
        for identity in ordered {
            binding.append(identity.account)
            binding.append(identity.keys.signing)
            binding.append(identity.keys.agreement)
        }
        // Iterated, so that each guess at a matching key costs a little more than one hash.
        var digest = Array(SHA256.hash(data: binding.bytes))
        for _ in 0..<1_024 { digest = Array(SHA256.hash(data: digest + binding.bytes)) }
        let number = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 1_000_000_000_000
        let digits = String(format: "%012llu", number)
        let characters = Array(digits)
        return [0, 4, 8].map { String(characters[$0..<($0 + 4)]) }.joined(separator: " ")
    }
}

/// The sharing identities of other accounts this account has seen, each pinned when first seen
/// and confirmed once its person compared the ``SafetyCode``: a key that changes later is
/// refused until it is compared and confirmed again — the server cannot swap a key quietly.
///
/// Kept by the account's devices (format 1, in JSON: ``encoded()``).
public struct IdentityPins: Sendable, Equatable {
    /// The format this build writes.
    public static let format = 1

    /// What is pinned of one account.
    public struct Pin: Codable, Sendable, Equatable {
        /// The identity's signing key (32 bytes).
        public var signing: [UInt8]
        /// Its agreement key (32 bytes).
        public var agreement: [UInt8]
        /// Whether its person compared the safety code and said it matched.
        public var confirmed: Bool
    }

    /// What an identity the server gave is, against the pins.
    public enum Standing: Sendable, Equatable {
        /// Never seen: pinned now, not confirmed yet.
        case new
        /// The pinned keys; `confirmed` says whether they were compared.
        case pinned(confirmed: Bool)
        /// Not the pinned keys: refused until compared and confirmed (``confirm(_:)``).
        case changed
    }

    /// The pins, by account name.
    public private(set) var pins: [String: Pin] = [:]

    /// No pins.
    public init() {}

    /// Looks `identity` up, pinning it if its account was never seen.
    /// - Returns: Its standing; only ``Standing/pinned(confirmed:)`` with `true` may be sealed to
    ///   or trusted without asking the person.
    public mutating func check(_ identity: SharingIdentity) -> Standing {
        guard let pin = pins[identity.account] else {
            pins[identity.account] = Pin(signing: identity.keys.signing, agreement: identity.keys.agreement, confirmed: false)
            return .new
        }
        guard pin.signing == identity.keys.signing, pin.agreement == identity.keys.agreement else { return .changed }
        return .pinned(confirmed: pin.confirmed)
    }

    /// Pins `identity` as its person confirmed it (the safety code compared), replacing a
    /// changed key.
    public mutating func confirm(_ identity: SharingIdentity) {
        pins[identity.account] = Pin(signing: identity.keys.signing, agreement: identity.keys.agreement, confirmed: true)
    }

    private struct File: Codable {
        var format: Int
        var pins: [String: Pin]
    }

    /// The pins as stored.
    public func encoded() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return try encoder.encode(File(format: Self.format, pins: pins))
    }

    /// Writes the pins to `url` (mode 0600, replaced atomically, on disk before this returns).
    /// - Throws: What writing throws.
    public func write(to url: URL) throws {
        try PrivateFile.write(try encoded(), to: url)
    }

    /// The pins kept at `url`; none when there is no file yet.
    /// - Throws: ``EncryptionError``: `.keyFileUnusable` (readable by others), or what
    ///   ``init(encoded:)`` throws.
    public init(contentsOf url: URL) throws {
        guard FileManager.default.fileExists(atPath: url.path) else {
            self.init()
            return
        }
        try self.init(encoded: try PrivateFile.read(url, what: "pinned sharing identities"))
    }

    /// Pins from ``encoded()``.
    /// - Throws: ``EncryptionError``: `.unsupportedFormat` for another format, `.malformed` for
    ///   damaged pins or keys that are not 32 bytes.
    public init(encoded data: Data) throws {
        guard let file = try? JSONDecoder().decode(File.self, from: data) else { throw EncryptionError(.malformed, "the pinned sharing identities are damaged") }
        guard file.format == Self.format else { throw EncryptionError(.unsupportedFormat, "the pinned sharing identities are in format \(file.format)") }
        guard file.pins.values.allSatisfy({ (try? DevicePublicKeys(signing: $0.signing, agreement: $0.agreement)) != nil }) else {
            throw EncryptionError(.malformed, "a pinned sharing identity is not a pair of 32-byte Curve25519 keys")
        }
        pins = file.pins
    }
}
