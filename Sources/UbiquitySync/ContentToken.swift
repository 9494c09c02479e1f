import Crypto
import Foundation
import UbiquityProtocol

/// What names an item's contents in the sync decisions, the same on every device and on the
/// server: SHA-256 of the chunk list (for a package, of each member's path and chunk list, in
/// path order); a folder's contents are always ``folder``. The server sends it as
/// ``ItemState/digest`` (hexadecimal) when it leaves the manifest out.
///
/// Held as its 32 bytes, in place: there is one or two per item, and as a 64-character string
/// each was a heap allocation of 112 bytes — 11 MB of an agent's 100,000 items. Written
/// (`Codable`, ``description``) as lowercase hexadecimal (`folder` for a folder), as it always was. A name that is not
/// 64 hexadecimal digits — `folder`, or what the sync engine's tests name contents with — is
/// kept as the SHA-256 of its text: the same name gives the same token, and it cannot be taken
/// for the digest of any contents (that would need a SHA-256 preimage).
package struct ContentToken: Hashable, Sendable, Codable, CustomStringConvertible, ExpressibleByStringInterpolation {
    // Four words, not an array or `Data`: no allocation, 32 bytes wherever it is stored.
    private var words: (UInt64, UInt64, UInt64, UInt64)

    private init(words: (UInt64, UInt64, UInt64, UInt64)) {
        self.words = words
    }

    /// The token of a digest's 32 bytes.
    package init(digest: some Sequence<UInt8>) {
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &words) { raw in
            var index = 0
            for byte in digest where index < 32 {
                raw[index] = byte
                index += 1
            }
            precondition(index == 32, "a content digest is 32 bytes")
        }
        self.words = words
    }

    /// The token written as `text`: 64 hexadecimal digits (either case) are the digest they
    /// spell; anything else is named by the SHA-256 of its UTF-8.
    package init(_ text: String) {
        if let words = Self.words(hex: text) {
            self.init(words: words)
        } else {
            self.init(digest: SHA256.hash(data: Data(text.utf8)))
        }
    }

    /// A token written in code (tests, and ``folder``).
    package init(stringLiteral value: String) {
        self.init(value)
    }

    /// The token's digest, as 64 lowercase hexadecimal digits; `folder` for ``folder`` (as
    /// the protocol has always written it).
    package var description: String {
        if self == Self.folder { return "folder" }
        return withUnsafeBytes(of: words) { raw in
            let digits = Array("0123456789abcdef".utf8)
            return String(unsafeUninitializedCapacity: 64) { buffer in
                for (index, byte) in raw.enumerated() {
                    buffer[2 * index] = digits[Int(byte >> 4)]
                    buffer[2 * index + 1] = digits[Int(byte & 0x0f)]
                }
                return 64
            }
        }
    }

    package init(from decoder: any Decoder) throws {
        self.init(try decoder.singleValueContainer().decode(String.self))
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }

    package static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.words.0 == rhs.words.0 && lhs.words.1 == rhs.words.1 && lhs.words.2 == rhs.words.2 && lhs.words.3 == rhs.words.3
    }

    package func hash(into hasher: inout Hasher) {
        hasher.combine(words.0)
        hasher.combine(words.1)
        hasher.combine(words.2)
        hasher.combine(words.3)
    }

    /// The 32 bytes `text` spells in hexadecimal, in place, if it is 64 hexadecimal digits
    /// (read for every item of every page of changes: no allocation).
    private static func words(hex text: String) -> (UInt64, UInt64, UInt64, UInt64)? {
        let utf8 = text.utf8
        guard utf8.count == 64 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        let valid = withUnsafeMutableBytes(of: &words) { raw -> Bool in
            var index = 0, high: UInt8?
            for digit in utf8 {
                guard let nibble = value(digit) else { return false }
                if let first = high {
                    raw[index] = first << 4 | nibble
                    index += 1
                    high = nil
                } else {
                    high = nibble
                }
            }
            return true
        }
        return valid ? words : nil
    }

    // MARK: Tokens of contents

    /// What names a folder's contents (a folder has none: its items are items of their own).
    package static let folder: ContentToken = "folder"

    /// The token of `manifest`, for an item of `kind`.
    package static func of(_ manifest: Manifest, kind: ItemKind) -> ContentToken {
        switch kind {
        case .directory:
            return folder
        case .file:
            return of(manifest.chunks ?? [])
        case .package:
            let text = "package\n" + (manifest.members ?? []).sorted { $0.path < $1.path }
                .map { $0.path + "\u{0}" + $0.chunks.map { "\($0.hash):\($0.size)" }.joined(separator: ",") }.joined(separator: "\n")
            return ContentToken(digest: SHA256.hash(data: Data(text.utf8)))
        }
    }

    /// The token of a flat file's chunk list.
    package static func of(_ chunks: [ChunkReference]) -> ContentToken {
        let text = chunks.map { "\($0.hash):\($0.size)" }.joined(separator: ",")
        return ContentToken(digest: SHA256.hash(data: Data(text.utf8)))
    }
}
