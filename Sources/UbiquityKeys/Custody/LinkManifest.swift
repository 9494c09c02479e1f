import Crypto
import Foundation

/// What a public link's page needs to open one revision of a file under Advanced Data
/// Protection, where the server holds no key: the file's name, size and date, its chunks in
/// order with their plaintext sizes, and for each chunk the page may meet — the file's, and the
/// bases of those the server keeps as sealed patches — the chunk's own key in each epoch the
/// publishing device holds (``ChunkKeys/sharedKey(of:)``; a patch's ``ChunkKeys/sharedPatchKey(making:from:)``),
/// never a container's keys: the link opens this file and nothing else of the account.
///
/// The publishing device seals it (``sealed()``) under a random 256-bit key that travels only in
/// the link's fragment (`/l/TOKEN#k=…`: browsers never send a fragment), and the server keeps
/// the sealed bytes with the link. Format 1: `01 ‖ epoch 0 (4) ‖ nonce (12) ‖ AES-256-GCM(key,
/// JSON) ‖ tag (16)`, the associated data binding the label "link manifest" and the format.
/// The key is the link's alone, so a manifest cannot be moved to another link; the server can
/// withhold or break it (the page then says the link does not open), never change it.
public struct LinkManifest: Codable, Sendable, Equatable {
    /// The format this build writes and reads.
    public static let format: UInt8 = 1
    /// The most sealed bytes a manifest may take (a file of about 5 GiB in one epoch).
    public static let maximumSealedBytes = 6 << 20

    /// One chunk of the file, in order.
    public struct Chunk: Codable, Sendable, Equatable {
        /// Its name (64 hexadecimal digits).
        public var name: String
        /// Its plaintext size in bytes.
        public var size: Int64

        enum CodingKeys: String, CodingKey {
            case name = "h", size = "z"
        }
    }

    /// The keys of one chunk the page may meet.
    public struct Keys: Codable, Sendable, Equatable {
        /// The chunk's name.
        public var name: String
        /// Its shared key in each of ``LinkManifest/epochs``, in that order (32 bytes each).
        public var keys: Data
        /// The chunk the server keeps it as a sealed patch of, if it does.
        public var base: String?
        /// That patch's shared key in each of ``LinkManifest/epochs``, in that order.
        public var patchKeys: Data?

        enum CodingKeys: String, CodingKey {
            case name = "h", keys = "k", base = "b", patchKeys = "p"
        }
    }

    /// The format of the manifest's contents (1).
    public var version: Int
    /// The file's name.
    public var name: String
    /// Its size in bytes.
    public var size: Int64
    /// Its modification date (seconds since 1970).
    public var modificationDate: Double
    /// The epochs each entry of ``keys`` carries a key of, in order.
    public var epochs: [UInt32]
    /// The file's chunks, in order.
    public var chunks: [Chunk]
    /// The keys of every chunk the page may meet.
    public var keys: [Keys]

    enum CodingKeys: String, CodingKey {
        case version = "v", name = "n", size = "s", modificationDate = "d", epochs = "e", chunks = "c", keys = "k"
    }

    /// The manifest of a file of `chunks` (names and plaintext sizes, in order), whose stored
    /// chunks the server keeps as sealed patches of the chunks `bases` maps them to (the bases'
    /// own bases included), with the keys of every epoch in `epochKeys`.
    /// - Throws: ``EncryptionError`` `.malformed` for a name that is not 64 hexadecimal digits.
    public init(name: String, size: Int64, modificationDate: Double, chunks: [(name: String, size: Int64)],
                bases: [String: String], epochKeys: [ChunkKeys]) throws {
        version = Int(Self.format)
        self.name = name
        self.size = size
        self.modificationDate = modificationDate
        epochs = epochKeys.map(\.epoch)
        self.chunks = chunks.map { Chunk(name: $0.name, size: $0.size) }
        func identifier(_ name: String) throws -> ChunkIdentifier {
            guard let id = ChunkIdentifier(hex: name) else { throw EncryptionError(.malformed, "a chunk's name is 64 hexadecimal digits") }
            return id
        }
        // Every chunk the page may meet: the file's, then each one's bases down to a whole one.
        var met: [String] = [], seen = Set<String>()
        for chunk in chunks {
            var at: String? = chunk.name
            while let name = at, seen.insert(name).inserted {
                met.append(name)
                at = bases[name]
            }
        }
        keys = try met.map { name in
            let id = try identifier(name)
            var entry = Keys(name: name, keys: Data(epochKeys.flatMap { $0.sharedKey(of: id) }))
            if let base = bases[name] {
                let baseId = try identifier(base)
                entry.base = base
                entry.patchKeys = Data(epochKeys.flatMap { $0.sharedPatchKey(making: id, from: baseId) })
            }
            return entry
        }
    }

    /// The sealed manifest and the key it is sealed under (a new random one: the link's own).
    /// - Throws: What encoding or the cipher throws (nothing in practice).
    public func sealed() throws -> (body: Data, key: [UInt8]) {
        let key = SymmetricKey(size: .bits256)
        let json = try JSONEncoder().encode(self)
        let body = try Sealing.seal(Array(json), key: SecretKey(key), binding: Self.binding, header: SealedHeader(format: Self.format, epoch: 0))
        return (body, key.withUnsafeBytes { Array($0) })
    }

    /// A sealed manifest's contents.
    /// - Throws: ``EncryptionError``: `.unsupportedFormat`, `.malformed`, `.authenticationFailed`
    ///   (changed, truncated, or sealed under another key: another link's).
    public static func open(_ body: some DataProtocol, key: [UInt8]) throws -> LinkManifest {
        let bytes = Array(body)
        let header = try SealedHeader(bytes)
        guard header.format == format else { throw EncryptionError(.unsupportedFormat, "a link's manifest is in format \(header.format); this build reads format \(format)") }
        guard key.count == 32, let json = Sealing.open(bytes, at: SealedHeader.size, key: SecretKey(SymmetricKey(data: key)), binding: binding) else {
            throw EncryptionError(.authenticationFailed, "a link's manifest does not open: changed, truncated or another link's")
        }
        guard let manifest = try? JSONDecoder().decode(LinkManifest.self, from: Data(json)), manifest.version == Int(format) else {
            throw EncryptionError(.malformed, "a link's manifest is not one this build reads")
        }
        return manifest
    }

    /// The link's fragment for `key`: `k=` and the key in base64url without padding.
    public static func fragment(key: [UInt8]) -> String {
        "k=" + Data(key).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The key a link's fragment carries; nil if it carries none.
    public static func key(fromFragment fragment: String) -> [UInt8]? {
        guard let value = fragment.split(separator: "&").first(where: { $0.hasPrefix("k=") })?.dropFirst(2) else { return nil }
        var text = value.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        guard let data = Data(base64Encoded: text), data.count == 32 else { return nil }
        return Array(data)
    }

    private static let binding = Binding("link manifest", format: format, epoch: 0).bytes
}
