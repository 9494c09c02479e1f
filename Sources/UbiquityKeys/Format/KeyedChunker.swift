import CUbiquityCut
import Crypto
import Foundation

/// Cuts a file into chunks where a keyed pseudorandom function of the content says, so that
/// neither the cut points of bytes someone knows nor the key can be worked out from the chunk
/// sizes a server sees.
///
/// Content-defined chunkers with a secret table or polynomial (Borg's buzhash, restic's Rabin,
/// Tarsnap's, a keyed FastCDC gear) give each cut away as a few linear facts about their key:
/// from the chunk sizes of one known file an attacker recovers the key, then recognises any
/// known file by its sizes (Truong, Merz, Scarlata, Günther and Paterson, "Breaking and Fixing
/// Content-Defined Chunking", 2025). Here a window's gear hash (a table from the key) is only the
/// input: the decision is AES-128 of it under a second key, below a threshold. A cut seen
/// tells the attacker one bit about one output of a pseudorandom function; it says nothing
/// about another window's, so a file the attacker knows cuts, for them, at random places.
///
/// Cost: a cipher call per byte looked at. No byte before ``Sizes-swift.struct/minimum`` of a
/// chunk is looked at (the decision needs only the 64 bytes before each place), and the minimum
/// is a quarter of the average, so about three quarters of the bytes are; with AES instructions
/// eight windows go through the cipher side by side (about 1 GB/s a core). Inserting bytes still
/// moves only the chunks around the edit: a larger minimum would save cipher calls but take
/// longer to fall back in step after an insertion (three quarters of the average: up to eight
/// chunks new after 5,000 bytes inserted; a quarter: up to three).
public struct KeyedChunker: Sendable {
    /// The sizes a chunker cuts to.
    public struct Sizes: Sendable, Hashable {
        /// No cut before this many bytes.
        public let minimum: Int
        /// The size chunks average.
        public let average: Int
        /// A cut at this many bytes whatever the content.
        public let maximum: Int

        /// Sizes for tests and benchmarks (devices use ``standard`` and ``large``).
        /// - Precondition: 64 ≤ minimum < average < maximum.
        public init(minimum: Int, average: Int, maximum: Int) {
            precondition(64 <= minimum && minimum < average && average < maximum, "64 ≤ minimum < average < maximum")
            self.minimum = minimum
            self.average = average
            self.maximum = maximum
        }

        /// Files under ``KeyedChunker/largeFileSize``: 4, 16 and 64 KiB.
        public static let standard = Sizes(minimum: 4 << 10, average: 16 << 10, maximum: 64 << 10)
        /// Files of ``KeyedChunker/largeFileSize`` or more: 32, 128 and 512 KiB.
        public static let large = Sizes(minimum: 32 << 10, average: 128 << 10, maximum: 512 << 10)
    }

    /// The size from which files are cut to ``Sizes-swift.struct/large`` (8 MiB).
    public static let largeFileSize = 8 << 20

    /// The sizes for a file of `size` bytes (every device chooses alike).
    public static func sizes(forFileOfSize size: Int) -> Sizes { size >= largeFileSize ? .large : .standard }

    /// The sizes this chunker cuts to.
    public let sizes: Sizes
    private let table: [UInt64]
    private let roundKeys: [UInt8]
    private let threshold: UInt64
    /// How places are decided (tests choose the others).
    let decision: Decision

    /// How a place is decided.
    enum Decision: Int32 {
        /// AES, on the processor's instructions where there are any.
        case cipher = 0
        /// AES in portable C (tests: it must cut alike).
        case portableCipher = 1
        /// The keyed gear hash alone, as keyed gear chunkers decide (tests: the attack they
        /// fall to must succeed against it).
        case gearAlone = 2
        /// AES on the processor's 128-bit instructions even where there are 512-bit ones
        /// (tests: every way must cut alike).
        case narrowCipher = 3
    }

    /// A chunker for a container's chunks.
    /// - Parameters:
    ///   - keys: The container's chunk keys (the chunker key is one of them).
    ///   - sizes: The sizes to cut to.
    public init(keys: ChunkKeys, sizes: Sizes) {
        self.init(key: keys.chunker, sizes: sizes)
    }

    init(key: SecretKey, sizes: Sizes, decision: Decision = .cipher) {
        self.sizes = sizes
        self.decision = decision
        let tableKey = HKDF<SHA256>.deriveKey(inputKeyMaterial: key.symmetric, info: Array("ubiquity/1/chunker-table".utf8), outputByteCount: 256 * 8)
        table = tableKey.withUnsafeBytes { raw in (0..<256).map { UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: $0 * 8, as: UInt64.self)) } }
        let cipherKey = HKDF<SHA256>.deriveKey(inputKeyMaterial: key.symmetric, info: Array("ubiquity/1/chunker-cipher".utf8), outputByteCount: 16)
        var expanded = [UInt8](repeating: 0, count: 176)
        cipherKey.withUnsafeBytes { raw in
            expanded.withUnsafeMutableBufferPointer { ubq_cut_expand_key(raw.bindMemory(to: UInt8.self).baseAddress, $0.baseAddress) }
        }
        roundKeys = expanded
        // A place is picked with probability 1 / (average − minimum): after the minimum, the
        // first one picked comes on average that many bytes later.
        threshold = UInt64.max / UInt64(sizes.average - sizes.minimum)
    }

    /// Whether the cipher runs on the processor's AES instructions here.
    public static var usesAESInstructions: Bool { ubq_cut_has_aes_instructions() != 0 }

    /// Whether the cut decisions use the processor's 512-bit AES instructions (sixteen windows
    /// at a time) here.
    public static var usesWideAESInstructions: Bool { ubq_cut_has_wide_aes_instructions() != 0 }

    /// The length of the chunk that starts at `start` in `bytes`.
    /// - Precondition: `start` is within `bytes`.
    public func cut(_ bytes: UnsafeRawBufferPointer, from start: Int) -> Int {
        precondition(start >= 0 && start <= bytes.count)
        let remaining = bytes.count - start
        guard remaining > sizes.minimum, let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return remaining }
        let limit = min(sizes.maximum, remaining)
        let found = table.withUnsafeBufferPointer { table in
            roundKeys.withUnsafeBufferPointer { keys in
                ubq_cut_scan(base, start + sizes.minimum, start + limit, table.baseAddress, keys.baseAddress, threshold, decision.rawValue)
            }
        }
        return found < 0 ? limit : found - start
    }

    /// Where the chunks of `bytes` end (each cut point, the last being `bytes.count`).
    public func boundaries(of bytes: UnsafeRawBufferPointer) -> [Int] {
        var ends: [Int] = []
        ends.reserveCapacity(bytes.count / sizes.average + 1)
        var start = 0
        while start < bytes.count {
            start += cut(bytes, from: start)
            ends.append(start)
        }
        return ends
    }

    /// Where the chunks of `data` end.
    public func boundaries(of data: Data) -> [Int] {
        data.withUnsafeBytes { boundaries(of: $0) }
    }
}
