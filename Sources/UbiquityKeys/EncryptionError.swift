/// Why an encrypted object, a key or a roster was refused.
///
/// Every refusal names what failed, never a key or a plaintext: it may be logged and shown.
public struct EncryptionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What failed. Extensible: new codes may be added.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The object is shorter than its format allows, or its fields are malformed.
        public static let malformed = Code(rawValue: "malformed")
        /// The object's format byte is one this device does not read, or below the account's minimum.
        public static let unsupportedFormat = Code(rawValue: "unsupportedFormat")
        /// The authenticated decryption failed: changed, truncated or spliced bytes, or another binding.
        public static let authenticationFailed = Code(rawValue: "authenticationFailed")
        /// A chunk's contents do not match the identifier it was asked for (a swapped chunk).
        public static let identifierMismatch = Code(rawValue: "identifierMismatch")
        /// A signature does not verify, or its signer is not a device of the roster.
        public static let badSignature = Code(rawValue: "badSignature")
        /// A roster that does not extend the one this device pinned: rolled back, forked or re-chained.
        public static let rosterNotExtended = Code(rawValue: "rosterNotExtended")
        /// A roster entry that breaks the roster's rules (a removed device signing, an epoch going back, …).
        public static let rosterRuleBroken = Code(rawValue: "rosterRuleBroken")
        /// A value older than one already seen (a replay).
        public static let replayed = Code(rawValue: "replayed")
        /// Two histories where there must be one: a device's commit differs from the one seen at
        /// the same place (the server showed devices forked histories).
        public static let forked = Code(rawValue: "forked")
        /// Commits were kept from this device: a gap in a device's sequence, or another device
        /// had seen commits this one was never shown.
        public static let withheld = Code(rawValue: "withheld")
        /// A key file that cannot be used.
        public static let keyFileUnusable = Code(rawValue: "keyFileUnusable")
        /// The object is sealed in an epoch whose key this device does not hold.
        public static let keyUnavailable = Code(rawValue: "keyUnavailable")
    }

    /// What failed.
    public var code: Code
    /// What was refused and why, in words (no key, no plaintext).
    public var message: String

    /// An error of `code` saying `message`.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(message) [\(code)]" }
}
