import Foundation

/// A chunk written as a change of another chunk the receiver has: its first ``prefix`` bytes and
/// its last ``suffix`` bytes are the base chunk's, ``middle`` is what lies between. A 1-byte
/// edit of a large file changes one chunk of about 128 KiB; as a patch it travels in a few
/// hundred bytes. Whoever applies a patch checks the result against ``hash``.
///
/// Patches travel many per body (``ChunkPatchBatch``): up with `POST /v1/chunks/patches`, down as
/// the answer of `POST /v1/chunks/patches/fetch` (docs/SyncProtocol.md, "Chunk patches").
public struct ChunkPatch: Sendable, Equatable {
    /// The SHA-256 of the chunk the patch makes, lowercase hexadecimal.
    public var hash: String
    /// The SHA-256 of the chunk it changes.
    public var base: String
    /// How many bytes at the start are the base chunk's.
    public var prefix: Int
    /// How many bytes at the end are the base chunk's.
    public var suffix: Int
    /// The bytes between.
    public var middle: [UInt8]

    /// A patch making chunk `hash` from chunk `base`.
    public init(hash: String, base: String, prefix: Int, suffix: Int, middle: [UInt8]) {
        self.hash = hash
        self.base = base
        self.prefix = prefix
        self.suffix = suffix
        self.middle = middle
    }

    /// The length of the chunk the patch makes.
    public var length: Int { prefix + middle.count + suffix }

    /// The chunk made from `base` (the bytes of chunk ``base``); unchecked: compare its hash
    /// with ``hash``.
    /// - Throws: ``ChunkPatchBatch/FormatError`` when the patch takes more of the base than it has.
    public func applied(to base: [UInt8]) throws -> [UInt8] {
        guard prefix >= 0, suffix >= 0, prefix <= base.count - suffix else {
            throw ChunkPatchBatch.FormatError(description: "the patch of chunk \(hash) keeps \(prefix) + \(suffix) bytes of a base of \(base.count)")
        }
        var result: [UInt8] = []
        result.reserveCapacity(length)
        result += base[0..<prefix]
        result += middle
        result += base[(base.count - suffix)...]
        return result
    }

    /// The exact patch that makes `target` from `base`: the longest common prefix and suffix
    /// (not overlapping in either), the rest of `target` as the middle.
    public init(making target: [UInt8], hash: String, from base: [UInt8], baseHash: String) {
        let limit = min(base.count, target.count)
        var prefix = 0
        while prefix < limit && base[prefix] == target[prefix] { prefix += 1 }
        var suffix = 0
        while suffix < limit - prefix && base[base.count - 1 - suffix] == target[target.count - 1 - suffix] { suffix += 1 }
        self.init(hash: hash, base: baseHash, prefix: prefix, suffix: suffix, middle: Array(target[prefix..<(target.count - suffix)]))
    }
}

/// Many ``ChunkPatch``es in one body. Each is framed as the made chunk's hash and the base
/// chunk's hash (64 lowercase hexadecimal ASCII characters each), then the prefix, suffix and
/// middle lengths (4 bytes big-endian each), then the middle's bytes; nothing between patches.
public struct ChunkPatchBatch: Sendable, Equatable {
    /// Why a body is not a batch of patches, or a patch does not fit its base.
    public struct FormatError: Error, Equatable, CustomStringConvertible {
        /// What is wrong, for the error answer.
        public var description: String

        /// An error saying `description`.
        public init(description: String) {
            self.description = description
        }
    }

    /// The patches, in order.
    public var patches: [ChunkPatch]

    /// A batch of these patches.
    public init(_ patches: [ChunkPatch] = []) {
        self.patches = patches
    }

    /// Bytes of framing per patch.
    public static let framing = 140

    /// How many bytes the batch takes on the wire.
    public var encodedSize: Int { patches.reduce(0) { $0 + Self.framing + $1.middle.count } }

    /// The batch as a body.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(encodedSize)
        func hex(_ hash: String) {
            var bytes = Array(hash.utf8.prefix(64))
            bytes += Array(repeating: UInt8(ascii: "0"), count: 64 - bytes.count)
            out += bytes
        }
        func number(_ value: Int) {
            let value = UInt32(truncatingIfNeeded: value)
            out += [UInt8(value >> 24), UInt8(value >> 16 & 0xff), UInt8(value >> 8 & 0xff), UInt8(value & 0xff)]
        }
        for patch in patches {
            hex(patch.hash)
            hex(patch.base)
            number(patch.prefix)
            number(patch.suffix)
            number(patch.middle.count)
            out += patch.middle
        }
        return out
    }

    /// Reads a body: every patch whole, its hashes well formed, at most
    /// ``ChunkBatch/maximumCount`` patches, each making a chunk of at most `maximumChunkSize`
    /// bytes, and all together at most `maximumTotal` bytes of chunks.
    /// - Throws: ``FormatError`` saying what is wrong.
    public init(decoding body: [UInt8], maximumChunkSize: Int, maximumTotal: Int) throws {
        var patches: [ChunkPatch] = []
        var index = 0, total = 0
        func hash(at start: Int, _ what: String) throws -> String {
            let bytes = body[start..<start + 64]
            guard bytes.allSatisfy(\.isLowercaseHexDigit) else {
                throw FormatError(description: "patch \(patches.count + 1)'s \(what) is not 64 lowercase hexadecimal characters")
            }
            return String(decoding: bytes, as: UTF8.self)
        }
        func number(at start: Int) -> Int { body[start..<start + 4].reduce(0) { $0 << 8 | Int($1) } }
        while index < body.count {
            guard patches.count < ChunkBatch.maximumCount else { throw FormatError(description: "a batch holds at most \(ChunkBatch.maximumCount) patches") }
            guard body.count - index >= Self.framing else { throw FormatError(description: "the batch ends inside patch \(patches.count + 1)'s framing") }
            let made = try hash(at: index, "hash"), base = try hash(at: index + 64, "base")
            let prefix = number(at: index + 128), suffix = number(at: index + 132), middle = number(at: index + 136)
            let length = prefix + suffix + middle
            guard length <= maximumChunkSize else { throw FormatError(description: "patch \(patches.count + 1) makes a chunk of \(length) bytes (at most \(maximumChunkSize))") }
            total += length
            guard total <= maximumTotal || patches.isEmpty else {
                throw FormatError(description: "the patches make more than \(maximumTotal) bytes of chunks")
            }
            let start = index + Self.framing
            guard body.count - start >= middle else { throw FormatError(description: "the batch ends inside patch \(patches.count + 1)") }
            patches.append(ChunkPatch(hash: made, base: base, prefix: prefix, suffix: suffix, middle: Array(body[start..<start + middle])))
            index = start + middle
        }
        self.patches = patches
    }
}

/// What `POST /v1/chunks/patches/fetch` asks for: chunks, each as a patch of a chunk the asker
/// has.
public struct ChunkPatchRequest: Codable, Sendable, Equatable {
    /// One chunk wanted, and the chunk the asker has to make it from.
    public struct Wanted: Codable, Sendable, Equatable {
        /// The chunk wanted.
        public var hash: String
        /// The chunk the asker has.
        public var base: String

        /// Chunk `hash`, as a patch of chunk `base`.
        public init(hash: String, base: String) {
            self.hash = hash
            self.base = base
        }
    }

    /// The chunks (1 to ``ChunkBatch/maximumCount``).
    public var patches: [Wanted]

    /// A request for these patches.
    public init(patches: [Wanted]) {
        self.patches = patches
    }
}

/// What a chunk looks like in blocks, for a device that has a changed copy of it to send only
/// what changed (`POST /v1/chunks/signatures`): a short hash of each block of ``blockSize``
/// bytes counted from the start (``front``) and from the end (``back``). The device compares
/// them with its own bytes' and sends a ``ChunkPatch`` keeping the blocks that agree at either
/// end. A short hash may collide; the server checks the patched chunk against its full hash
/// and refuses it if so (the device then sends the chunk whole).
public struct ChunkSignature: Codable, Sendable, Equatable {
    /// The chunk's SHA-256.
    public var hash: String
    /// The chunk's length.
    public var length: Int
    /// The bytes per block.
    public var blockSize: Int
    /// 4 bytes per whole block from the start: the first 4 of the block's SHA-256.
    public var front: Data
    /// 4 bytes per whole block from the end, the last block first.
    public var back: Data

    /// A signature of these values.
    public init(hash: String, length: Int, blockSize: Int, front: Data, back: Data) {
        self.hash = hash
        self.length = length
        self.blockSize = blockSize
        self.front = front
        self.back = back
    }

    /// The bytes per block a signature uses.
    public static let standardBlockSize = 512
}

/// What `POST /v1/chunks/signatures` asks for.
public struct ChunkSignaturesRequest: Codable, Sendable, Equatable {
    /// Chunk hashes (1 to ``maximumCount``).
    public var hashes: [String]

    /// Signatures of these chunks.
    public init(hashes: [String]) {
        self.hashes = hashes
    }

    /// The most signatures one request asks for.
    public static let maximumCount = 1024
}

/// The answer of `POST /v1/chunks/signatures`: as many of the chunks asked for, in that order,
/// as the server read up to 16 MiB of (at least one); the client asks again for the rest.
public struct ChunkSignaturesResponse: Codable, Sendable, Equatable {
    /// The signatures.
    public var signatures: [ChunkSignature]

    /// An answer of these signatures.
    public init(signatures: [ChunkSignature]) {
        self.signatures = signatures
    }
}
