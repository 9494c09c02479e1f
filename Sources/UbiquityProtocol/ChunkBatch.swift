import Foundation

/// Many chunks in one body: what `POST /v1/chunks` carries up and `POST /v1/chunks/fetch`
/// answers with, so a large file travels in a few dozen requests instead of thousands.
///
/// Each chunk is framed as its SHA-256 hash (64 lowercase hexadecimal characters, ASCII), its
/// length (4 bytes, big-endian) and its bytes; chunks follow each other with nothing between
/// them. The framing only names the bytes: whoever reads a batch still checks each chunk
/// against its hash.
public struct ChunkBatch: Sendable, Equatable {
    /// One chunk: its hash and its bytes.
    public struct Chunk: Sendable, Equatable {
        /// The SHA-256 hash of `bytes`, lowercase hexadecimal.
        public var hash: String
        /// The chunk's contents: when decoded from a body, a slice of that body (its chunks
        /// share the body's storage; none is copied out).
        public var bytes: ArraySlice<UInt8>

        /// A chunk of these bytes, named `hash`.
        public init(hash: String, bytes: ArraySlice<UInt8>) {
            self.hash = hash
            self.bytes = bytes
        }

        /// A chunk of these bytes, named `hash`.
        public init(hash: String, bytes: [UInt8]) {
            self.init(hash: hash, bytes: bytes[...])
        }
    }

    /// Why a body is not a batch.
    public struct FormatError: Error, Equatable, CustomStringConvertible {
        /// What is wrong, for the error answer.
        public var description: String
    }

    /// The chunks, in order.
    public var chunks: [Chunk]

    /// A batch of these chunks.
    public init(_ chunks: [Chunk] = []) {
        self.chunks = chunks
    }

    /// Bytes of framing per chunk (hash and length).
    public static let framing = 68

    /// Chunks per batch at most, either way.
    public static let maximumCount = 4096

    /// The total of chunk bytes a batch carries at most (a single larger chunk travels alone).
    public static let maximumBytes = 16 << 20

    /// How many bytes the batch takes on the wire.
    public var encodedSize: Int { chunks.reduce(0) { $0 + Self.framing + $1.bytes.count } }

    /// The batch as a body.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(encodedSize)
        for chunk in chunks {
            out += Self.frame(hash: chunk.hash, length: chunk.bytes.count)
            out += chunk.bytes
        }
        return out
    }

    /// The framing that comes before a chunk's bytes in a body: its hash (64 ASCII characters;
    /// a shorter one is padded with `0`s, a longer one cut) and its length (4 bytes, big-endian).
    public static func frame(hash: String, length: Int) -> [UInt8] {
        var frame = Array(hash.utf8.prefix(64))
        frame += Array(repeating: UInt8(ascii: "0"), count: 64 - frame.count)
        let length = UInt32(truncatingIfNeeded: length)
        frame += [UInt8(length >> 24), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff)]
        return frame
    }

    /// Where one chunk is in a body: its hash, and the range of its bytes.
    public struct Frame: Sendable, Equatable {
        /// The chunk's hash as the framing names it (64 lowercase hexadecimal characters).
        public var hash: String
        /// Where its bytes are in the body.
        public var bytes: Range<Int>
    }

    /// Reads a body's framing: every chunk whole, its hash well formed, at most
    /// ``maximumCount`` chunks of at most `maximumChunkSize` bytes each. `cut`: the body ended
    /// early (its connection was cut) — the chunks that came whole, the one it ended inside left
    /// out.
    /// - Throws: ``FormatError`` saying what is wrong.
    public static func frames(in body: UnsafeRawBufferPointer, maximumChunkSize: Int, cut: Bool = false) throws -> [Frame] {
        var frames: [Frame] = []
        var index = 0
        while index < body.count {
            if cut && (body.count - index < framing || body.count - index - framing < body[(index + 64)..<(index + 68)].reduce(0, { $0 << 8 | Int($1) })) { break }
            guard frames.count < maximumCount else { throw FormatError(description: "a batch holds at most \(maximumCount) chunks") }
            guard body.count - index >= framing else { throw FormatError(description: "the batch ends inside chunk \(frames.count + 1)'s framing") }
            let hashBytes = UnsafeRawBufferPointer(rebasing: body[index..<index + 64])
            guard hashBytes.allSatisfy(\.isLowercaseHexDigit) else {
                throw FormatError(description: "chunk \(frames.count + 1)'s hash is not 64 lowercase hexadecimal characters")
            }
            let lengthStart = index + 64
            let length = body[lengthStart..<lengthStart + 4].reduce(0) { $0 << 8 | Int($1) }
            guard length <= maximumChunkSize else { throw FormatError(description: "chunk \(frames.count + 1) is \(length) bytes; chunks are at most \(maximumChunkSize)") }
            let start = lengthStart + 4
            guard body.count - start >= length else { throw FormatError(description: "the batch ends inside chunk \(frames.count + 1)") }
            frames.append(Frame(hash: String(decoding: hashBytes, as: UTF8.self), bytes: start..<start + length))
            index = start + length
        }
        return frames
    }

    /// Reads a body: every chunk whole, its hash well formed, at most `maximumCount` chunks of at
    /// most `maximumChunkSize` bytes each. The chunks' bytes are slices of `body` (nothing is
    /// copied).
    /// - Throws: ``FormatError`` saying what is wrong.
    public init(decoding body: ArraySlice<UInt8>, maximumChunkSize: Int) throws {
        let frames = try body.withUnsafeBytes { try Self.frames(in: $0, maximumChunkSize: maximumChunkSize) }
        let base = body.startIndex
        chunks = frames.map { Chunk(hash: $0.hash, bytes: body[(base + $0.bytes.lowerBound)..<(base + $0.bytes.upperBound)]) }
    }

    /// Reads a body, as the slice form does; the chunks share the array's storage.
    /// - Throws: ``FormatError`` saying what is wrong.
    public init(decoding body: [UInt8], maximumChunkSize: Int) throws {
        try self.init(decoding: body[...], maximumChunkSize: maximumChunkSize)
    }
}

/// `POST /v1/chunks/fetch`: chunks to download, in order. The answer is a ``ChunkBatch`` of as
/// many of them, in that order, as fit in ``ChunkBatch/maximumBytes`` (always at least one);
/// the client asks again for the rest.
public struct ChunkFetchRequest: Codable, Sendable, Equatable {
    /// Chunk hashes (at most ``ChunkBatch/maximumCount``).
    public var hashes: [String]
    /// Whether the asker takes chunks stored as sealed patches as they are stored: such a
    /// chunk's frame holds its sealed patch, and the answer's ``basesHeader`` names the chunk
    /// each patch changes (at most ``maximumPatchesPerAnswer`` per answer). Without it a chunk
    /// stored so is answered 409 `storedAsPatch`.
    public var patches: Bool?
    /// Whether to answer only those of the chunks that are there now — stored, or landing from
    /// an upload in progress (docs/SyncProtocol.md, "Incoming revisions") — in the order asked,
    /// leaving out the others instead of answering 404 (an empty answer: none is there yet).
    /// Chunks stored as sealed patches are left out too.
    public var available: Bool?

    /// A request for these chunks.
    public init(hashes: [String], patches: Bool? = nil, available: Bool? = nil) {
        self.hashes = hashes
        self.patches = patches
        self.available = available
    }

    /// The answer's header naming, for each chunk of it stored as a sealed patch, the chunk the
    /// patch changes: `made=base` pairs (64 hexadecimal digits each), comma-separated.
    public static let basesHeader = "Ubiquity-Chunk-Bases"

    /// The most chunks stored as patches one answer carries (the answer stops before another).
    public static let maximumPatchesPerAnswer = 64

    /// The ``basesHeader`` value for these pairs.
    public static func basesHeaderValue(_ bases: [(made: String, base: String)]) -> String {
        bases.map { "\($0.made)=\($0.base)" }.joined(separator: ",")
    }

    /// The pairs of a ``basesHeader`` value; nil for one that is not pairs of chunk names.
    public static func bases(inHeader value: String) -> [String: String]? {
        var bases: [String: String] = [:]
        for pair in value.split(separator: ",", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=")
            guard parts.count == 2, parts.allSatisfy({ $0.utf8.count == 64 && $0.utf8.allSatisfy(\.isLowercaseHexDigit) }) else { return nil }
            bases[String(parts[0])] = String(parts[1])
        }
        return bases
    }
}

extension ContiguousBytes {
    /// The bytes as lowercase hexadecimal (how chunk hashes are written): written straight into
    /// the string's storage (a chunk's digest is made into its name on every upload and read).
    public var lowercaseHex: String {
        withUnsafeBytes { bytes in
            String(unsafeUninitializedCapacity: bytes.count * 2) { out in
                for (index, byte) in bytes.enumerated() {
                    out[2 * index] = hexDigit(byte >> 4)
                    out[2 * index + 1] = hexDigit(byte & 0x0f)
                }
                return bytes.count * 2
            }
        }
    }
}

extension ContiguousBytes {
    /// Whether `hex` is ``lowercaseHex`` of these bytes (compared where both lie, nothing made).
    public func matches(lowercaseHex hex: String) -> Bool {
        var hex = hex
        return hex.withUTF8 { digits in
            withUnsafeBytes { bytes in
                guard digits.count == bytes.count * 2 else { return false }
                for (index, byte) in bytes.enumerated()
                where digits[2 * index] != hexDigit(byte >> 4) || digits[2 * index + 1] != hexDigit(byte & 0x0f) {
                    return false
                }
                return true
            }
        }
    }
}

/// The lowercase hexadecimal digit of `nibble` (0–15).
@inline(__always) private func hexDigit(_ nibble: UInt8) -> UInt8 {
    nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") - 10 + nibble
}

extension UInt8 {
    /// Whether the byte is a lowercase hexadecimal digit (`0`–`9`, `a`–`f`), as chunk hashes are
    /// written.
    package var isLowercaseHexDigit: Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(self)
    }
}
