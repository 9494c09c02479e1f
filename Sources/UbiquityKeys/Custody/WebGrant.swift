import Crypto
import Foundation

/// What a device of the roster gives a browser it approved under Advanced Data Protection (the
/// server holds no key): the service keys of the containers it allows, in each epoch the device
/// holds — never the account's root key — for a while (an hour), sealed to the browser's
/// X25519 key and signed by the device, whose keys the browser knows from the code the person
/// typed (``JoinCode``). The page opens records and chunks with them in WebCrypto
/// (`/web/assets/advanced.js`); the server keeps the sealed grant for the browser's session and
/// serves the session sealed data only while it lasts.
///
/// Sealed grant (format 1): `01 ‖ ephemeral X25519 public key (32) ‖ nonce (12) ‖
/// AES-256-GCM(key, JSON) ‖ tag (16)`, the key HKDF-SHA256 of the X25519 secret shared with
/// the browser's key (salt: the ephemeral key then the browser's; info: "ubiquity web grant"),
/// the associated data binding the account and both parties' public keys. The signature is the
/// device's Ed25519 over `ubiquity web grant signature ‖ 0 ‖ format ‖ epoch 0 ‖ the sealed bytes`
/// (each field length-prefixed, as every binding).
public enum WebGrant {
    /// The format this build writes.
    public static let format: UInt8 = 1
    /// How long a grant lasts: an hour.
    public static let lifetime: TimeInterval = 3_600

    /// One container's keys in one epoch.
    public struct ContainerKeys: Codable, Sendable, Equatable {
        /// The container.
        public var container: String
        /// The epoch.
        public var epoch: UInt32
        /// The item-record key.
        public var itemRecord: Data
        /// The name-tag key.
        public var nameTag: Data
        /// The chunk-identifier key.
        public var chunkIdentifier: Data
        /// The chunk-content key.
        public var chunkContent: Data
        /// The chunker's key.
        public var chunker: Data

        enum CodingKeys: String, CodingKey {
            case container = "c", epoch = "e", itemRecord = "r", nameTag = "n", chunkIdentifier = "i", chunkContent = "k", chunker = "h"
        }

        /// `root`'s keys of `container`.
        public init(_ root: AccountRootKey, container: String) {
            self.container = container
            epoch = root.epoch
            itemRecord = Data(root.derive(.itemRecord, scope: container).bytes)
            nameTag = Data(root.derive(.nameTag, scope: container).bytes)
            chunkIdentifier = Data(root.derive(.chunkIdentifier, scope: container).bytes)
            chunkContent = Data(root.derive(.chunkContent, scope: container).bytes)
            chunker = Data(root.derive(.chunker, scope: container).bytes)
        }
    }

    /// What a grant says, once opened.
    public struct Contents: Codable, Sendable, Equatable {
        /// The grant's format.
        public var format: Int
        /// The account (its identity token).
        public var account: String
        /// Until when it lasts (seconds since 1970).
        public var expires: Double
        /// The keys.
        public var keys: [ContainerKeys]
        /// The roster entry that let the browser in (``RosterChange/addWebSession(keys:expires:)``):
        /// the page names it in the commits it signs. Nil under Standard custody, where the
        /// server signs the page's changes.
        public var session: Session?

        /// Where the roster let the browser in.
        public struct Session: Codable, Sendable, Equatable {
            /// The entry's index.
            public var index: UInt64
            /// The entry's hash.
            public var hash: Data

            /// A place in the roster.
            public init(index: UInt64, hash: Data) {
                self.index = index
                self.hash = hash
            }

            enum CodingKeys: String, CodingKey {
                case index = "i", hash = "h"
            }
        }

        enum CodingKeys: String, CodingKey {
            case format = "v", account = "a", expires = "x", keys = "k", session = "s"
        }

        /// The containers it opens.
        public var containers: Set<String> { Set(keys.map(\.container)) }

        /// What a grant says.
        public init(format: Int = Int(WebGrant.format), account: String, expires: Double, keys: [ContainerKeys], session: Session? = nil) {
            self.format = format
            self.account = account
            self.expires = expires
            self.keys = keys
            self.session = session
        }
    }

    /// A sealed, signed grant.
    public struct Sealed: Sendable, Equatable {
        /// The sealed bytes.
        public var body: Data
        /// The device's signature.
        public var signature: Data

        /// A grant as sent.
        public init(body: Data, signature: Data) {
            self.body = body
            self.signature = signature
        }
    }

    /// Seals `contents` to `browser` and signs it as `device`.
    /// - Throws: What the ciphers throw (nothing in practice).
    public static func seal(_ contents: Contents, to browser: DevicePublicKeys, signedBy device: DeviceKeys) throws -> Sealed {
        let ephemeral = Curve25519.KeyAgreement.PrivateKey()
        let shared = try ephemeral.sharedSecretFromKeyAgreement(with: try Curve25519.KeyAgreement.PublicKey(rawRepresentation: browser.agreement))
        let key = shared.hkdfDerivedSymmetricKey(using: SHA256.self, salt: Array(ephemeral.publicKey.rawRepresentation) + browser.agreement,
                                                 sharedInfo: Array("ubiquity web grant".utf8), outputByteCount: 32)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let plaintext = try encoder.encode(contents)
        let box = try AES.GCM.seal(plaintext, using: key, nonce: AES.GCM.Nonce(),
                                   authenticating: binding(account: contents.account, browser: browser, device: device.publicKeys))
        var body = Data([format])
        body.append(ephemeral.publicKey.rawRepresentation)
        body.append(contentsOf: box.nonce)
        body.append(box.ciphertext)
        body.append(box.tag)
        return Sealed(body: body, signature: Data(try device.sign(signedBytes(body))))
    }

    /// Opens a grant as the browser does (the page does the same in WebCrypto; this is its
    /// reference, and what the tests compare it with).
    /// - Parameters:
    ///   - sealed: The grant.
    ///   - browser: The browser's keys (its X25519 private half opens the grant).
    ///   - device: The approving device's public keys, as the code the person typed bound them.
    ///   - account: The account's identity token.
    /// - Throws: ``EncryptionError`` `.badSignature` (not the device's), `.unsupportedFormat`,
    ///   `.malformed`, `.authenticationFailed` (changed, or for another browser or account).
    public static func open(_ sealed: Sealed, as browser: DeviceKeys, from device: DevicePublicKeys, account: String) throws -> Contents {
        guard device.isValidSignature(Array(sealed.signature), for: signedBytes(sealed.body)) else {
            throw EncryptionError(.badSignature, "the browser's grant is not signed by the device that approved it")
        }
        let body = Array(sealed.body)
        guard body.count > 1 + 32 + 12 + 16 else { throw EncryptionError(.malformed, "a browser's grant is shorter than its header") }
        guard body[0] == format else { throw EncryptionError(.unsupportedFormat, "a browser's grant of format \(body[0]); this build reads format \(format)") }
        let ephemeral = Array(body[1..<33])
        do {
            let shared = try browser.agreementKey.sharedSecretFromKeyAgreement(with: try Curve25519.KeyAgreement.PublicKey(rawRepresentation: ephemeral))
            let key = shared.hkdfDerivedSymmetricKey(using: SHA256.self, salt: ephemeral + browser.publicKeys.agreement,
                                                     sharedInfo: Array("ubiquity web grant".utf8), outputByteCount: 32)
            let box = try AES.GCM.SealedBox(nonce: try AES.GCM.Nonce(data: body[33..<45]), ciphertext: body[45..<(body.count - 16)], tag: body[(body.count - 16)...])
            let plaintext = try AES.GCM.open(box, using: key, authenticating: binding(account: account, browser: browser.publicKeys, device: device))
            let contents = try JSONDecoder().decode(Contents.self, from: plaintext)
            guard contents.format == Int(format), contents.account == account else { throw EncryptionError(.authenticationFailed, "a browser's grant for another account") }
            return contents
        } catch let error as EncryptionError {
            throw error
        } catch {
            throw EncryptionError(.authenticationFailed, "the browser's grant does not open: changed, or sealed to another browser or account")
        }
    }

    static func binding(account: String, browser: DevicePublicKeys, device: DevicePublicKeys) -> [UInt8] {
        var binding = Binding("web grant", format: format, epoch: 0)
        binding.append(account)
        binding.append(browser.signing)
        binding.append(browser.agreement)
        binding.append(device.signing)
        return binding.bytes
    }

    static func signedBytes(_ body: Data) -> [UInt8] {
        var binding = Binding("web grant signature", format: format, epoch: 0)
        binding.append(Array(body))
        return binding.bytes
    }
}
