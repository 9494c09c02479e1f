import Crypto
import Foundation
import UbiquityProtocol

/// One piece of a file cut by ``ContentChunker``: where it is and what it hashes to.
package struct ContentChunk: Sendable, Hashable, Codable {
    /// Its offset in the file.
    package var offset: Int
    /// Its length in bytes.
    package var length: Int
    /// Its SHA-256, as 64 lowercase hexadecimal digits (the chunk's name on the server).
    package var hash: String

    /// Creates a chunk description.
    package init(offset: Int, length: Int, hash: String) {
        self.offset = offset
        self.length = length
        self.hash = hash
    }
}

/// Cuts files into content-defined chunks (FastCDC: a gear rolling hash with normalised
/// chunking), so an edit changes only the chunks around it: inserting or deleting bytes shifts
/// the rest of the file, but the cut points move with the content, and the chunks after the
/// edit are the same as before. Only changed chunks travel.
///
/// The cut points are part of the sync protocol (the same bytes must give the same chunks on
/// every device, in every version), so the gear table and the sizes are fixed: a chunk is
/// ``minimumSize`` to ``maximumSize`` bytes (the last may be shorter), ``averageSize`` on
/// average; a 1-byte edit moves about two chunks.
package struct ContentChunker: Sendable {
    /// No cut before this many bytes (4 KiB).
    package let minimumSize: Int
    /// The size chunks gather around (16 KiB).
    package let averageSize: Int
    /// A cut at this many bytes whatever the content (32 KiB).
    package let maximumSize: Int
    private let strictMask: UInt64
    private let looseMask: UInt64

    /// The chunker every device uses.
    package static let standard = ContentChunker(minimumSize: 4 << 10, averageSize: 16 << 10, maximumSize: 32 << 10)

    /// A chunker with other sizes (for tests; devices must all use ``standard``).
    /// - Precondition: `averageSize` is a power of two, and minimum < average < maximum.
    package init(minimumSize: Int, averageSize: Int, maximumSize: Int) {
        precondition(averageSize > 0 && averageSize & (averageSize - 1) == 0, "the average size is a power of two")
        precondition(0 < minimumSize && minimumSize < averageSize && averageSize < maximumSize)
        self.minimumSize = minimumSize
        self.averageSize = averageSize
        self.maximumSize = maximumSize
        // Normalised chunking: two bits harder than the average before it, two easier after.
        // The gear hash's high bits depend on the most bytes (bit k on the last k + 1), so the
        // masks take the top bits.
        let bits = averageSize.trailingZeroBitCount
        strictMask = ~UInt64(0) << UInt64(64 - (bits + 2))
        looseMask = ~UInt64(0) << UInt64(64 - (bits - 2))
    }

    /// The length of the chunk that starts at `start` in `bytes`.
    package func cut(_ bytes: UnsafeRawBufferPointer, from start: Int) -> Int {
        let remaining = bytes.count - start
        guard remaining > minimumSize else { return remaining }
        let normal = min(averageSize, remaining)
        let limit = min(maximumSize, remaining)
        var fingerprint: UInt64 = 0
        var index = minimumSize
        let gear = Self.gear
        while index < normal {
            fingerprint = (fingerprint << 1) &+ gear[Int(bytes[start + index])]
            if fingerprint & strictMask == 0 { return index + 1 }
            index += 1
        }
        while index < limit {
            fingerprint = (fingerprint << 1) &+ gear[Int(bytes[start + index])]
            if fingerprint & looseMask == 0 { return index + 1 }
            index += 1
        }
        return limit
    }

    /// Where the chunks of `bytes` end (each cut point, the last being `bytes.count`).
    package func boundaries(of bytes: UnsafeRawBufferPointer) -> [Int] {
        var ends: [Int] = []
        var start = 0
        while start < bytes.count {
            start += cut(bytes, from: start)
            ends.append(start)
        }
        return ends
    }

    /// The chunks of `data`, hashed.
    package func chunks(of data: Data) -> [ContentChunk] {
        data.withUnsafeBytes { bytes in
            var chunks: [ContentChunk] = []
            var start = 0
            for end in boundaries(of: bytes) {
                let piece = UnsafeRawBufferPointer(rebasing: bytes[start..<end])
                chunks.append(ContentChunk(offset: start, length: end - start, hash: Self.hash(piece)))
                start = end
            }
            return chunks
        }
    }

    /// The chunks of the file at `url`, read in one pass a window at a time (large files are
    /// never held in memory whole).
    /// - Throws: The file's read errors.
    package func chunks(ofFileAt url: URL) throws -> [ContentChunk] {
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() } // read-only: closing cannot lose anything
        var chunks: [ContentChunk] = []
        var buffer = Data()
        var offset = 0
        var atEnd = false
        while true {
            // Keep at least one maximum chunk ahead, so every cut sees what it would in the whole file.
            while !atEnd && buffer.count < maximumSize * 4 {
                let more = try handle.read(upToCount: maximumSize * 8) ?? Data()
                if more.isEmpty { atEnd = true } else { buffer.append(more) }
            }
            if buffer.isEmpty { return chunks }
            let consumed = buffer.withUnsafeBytes { bytes -> Int in
                var start = 0
                while start < bytes.count, atEnd || bytes.count - start >= maximumSize {
                    let length = cut(bytes, from: start)
                    let piece = UnsafeRawBufferPointer(rebasing: bytes[start..<(start + length)])
                    chunks.append(ContentChunk(offset: offset + start, length: length, hash: Self.hash(piece)))
                    start += length
                }
                return start
            }
            offset += consumed
            buffer.removeSubrange(0..<consumed)
        }
    }

    /// SHA-256 as lowercase hexadecimal.
    package static func hash(_ bytes: UnsafeRawBufferPointer) -> String {
        SHA256.hash(data: bytes).lowercaseHex
    }

    /// 256 fixed pseudo-random words (SplitMix64 from a fixed seed): part of the protocol.
    static let gear: [UInt64] = {
        var state: UInt64 = 0x5542_4951_5549_5459 // "UBIQUITY"
        return (0..<256).map { _ in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }()
}
