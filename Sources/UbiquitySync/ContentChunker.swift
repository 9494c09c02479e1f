import Crypto
import Foundation
import UbiquityFiles
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
/// average; a 1-byte edit moves about two chunks. Which sizes depends on the file's size alone
/// (``forFile(ofSize:)``): ``standard`` below ``largeFileSize``, ``large`` from it.
package struct ContentChunker: Sendable {
    /// No cut before this many bytes (4 KiB for ``standard``, 64 KiB for ``large``).
    package let minimumSize: Int
    /// The size chunks gather around (16 KiB, 128 KiB).
    package let averageSize: Int
    /// A cut at this many bytes whatever the content (32 KiB, 256 KiB).
    package let maximumSize: Int
    let strictMask: UInt64
    let looseMask: UInt64
    /// Where a keyed chunker cuts instead (nil: the fixed gear's FastCDC; see ``ChunkCodec``).
    let keyedCut: (@Sendable (UnsafeRawBufferPointer, Int) -> Int)?
    /// How a keyed chunker names chunks instead of SHA-256 (see ``ChunkCodec``).
    let keyedName: (@Sendable (UnsafeRawBufferPointer) -> String)?

    /// The sizes for files of less than ``largeFileSize``.
    package static let standard = ContentChunker(minimumSize: 4 << 10, averageSize: 16 << 10, maximumSize: 32 << 10)

    /// The sizes for files of ``largeFileSize`` or more: eight times fewer chunks, so a large
    /// file costs the devices and the server an eighth of the bookkeeping per byte (a row, a
    /// list entry, a frame per chunk; a 64 MiB file is about 512 chunks, not 4,096). An edit
    /// still moves little: a changed chunk travels as a patch of the one it replaces.
    package static let large = ContentChunker(minimumSize: 64 << 10, averageSize: 128 << 10, maximumSize: 256 << 10)

    /// The size from which files are cut by ``large`` (8 MiB). A file that grows past it is cut
    /// anew, every chunk new (once: about this many bytes sent again).
    package static let largeFileSize = 8 << 20

    /// The chunker for a file of `size` bytes (every device chooses alike: the choice is part of
    /// the protocol).
    package static func forFile(ofSize size: Int) -> ContentChunker {
        size >= largeFileSize ? large : standard
    }

    /// The chunks of `data`, hashed, cut by the chunker for its size.
    package static func chunks(of data: Data) -> [ContentChunk] {
        forFile(ofSize: data.count).chunks(of: data)
    }

    /// The chunks of the file at `url`, hashed, cut by the chunker for its size (as it is when
    /// opened; if it is found to have another size once read, it is cut again with the
    /// chunker for that one, so that the list is what any device would make of those bytes).
    /// - Throws: The file's read errors.
    package static func chunks(ofFileAt url: URL) throws -> [ContentChunk] {
        try chunks(ofFileAt: url, sizeWhenOpened: nil)
    }

    /// ``chunks(ofFileAt:)``, the file taken to be `sizeWhenOpened` bytes long when opened if
    /// given (a file that grows or shrinks while it is read, for tests).
    static func chunks(ofFileAt url: URL, sizeWhenOpened: Int?) throws -> [ContentChunk] {
        try chunks(ofFileAt: url, sizeWhenOpened: sizeWhenOpened, choosing: forFile(ofSize:))
    }

    /// ``chunks(ofFileAt:)`` with the chunker `choosing` picks for a size (a ``ChunkCodec``'s).
    static func chunks(ofFileAt url: URL, sizeWhenOpened: Int?, choosing: (Int) -> ContentChunker) throws -> [ContentChunk] {
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() } // read-only: closing cannot lose anything
        var status = stat()
        guard fstat(handle.fileDescriptor, &status) == 0 else { throw readError(url) }
        var chunker = choosing(sizeWhenOpened ?? Int(status.st_size))
        for _ in 0..<3 {
            let chunks = try chunker.chunks(of: handle.fileDescriptor, url: url)
            let cutBy = choosing(chunks.last.map { $0.offset + $0.length } ?? 0)
            if cutBy.averageSize == chunker.averageSize { return chunks }
            guard lseek(handle.fileDescriptor, 0, SEEK_SET) == 0 else { throw readError(url) }
            chunker = cutBy
        }
        throw CocoaError(.fileReadUnknown, userInfo: [NSFilePathErrorKey: url.path, NSLocalizedFailureReasonErrorKey: "the file kept changing size while it was read"])
    }

    /// A read error of the file at `url`, from `errno`.
    static func readError(_ url: URL) -> CocoaError {
        CocoaError(.fileReadUnknown, userInfo: [NSFilePathErrorKey: url.path, NSUnderlyingErrorKey: POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)])
    }

    /// A chunker with other sizes (for tests; devices must all use ``forFile(ofSize:)``).
    /// - Precondition: `averageSize` is a power of two, and minimum < average < maximum.
    package init(minimumSize: Int, averageSize: Int, maximumSize: Int) {
        self.init(minimumSize: minimumSize, averageSize: averageSize, maximumSize: maximumSize, cut: nil, name: nil)
    }

    /// A chunker that cuts where `cut` says (the length of the chunk from an offset, between
    /// the sizes given) and names each chunk by `name`: a keyed chunker and a keyed MAC, for
    /// an account whose devices hold its keys (``ChunkCodec``). Windows, threads and the
    /// re-cut of a file that changes size work as for the gear.
    /// - Precondition: `averageSize` is a power of two, and minimum < average < maximum.
    package init(minimumSize: Int, averageSize: Int, maximumSize: Int,
                 cut: (@Sendable (UnsafeRawBufferPointer, Int) -> Int)?, name: (@Sendable (UnsafeRawBufferPointer) -> String)?) {
        precondition(averageSize > 0 && averageSize & (averageSize - 1) == 0, "the average size is a power of two")
        precondition(0 < minimumSize && minimumSize < averageSize && averageSize < maximumSize)
        self.minimumSize = minimumSize
        self.averageSize = averageSize
        self.maximumSize = maximumSize
        keyedCut = cut
        keyedName = name
        // Normalised chunking: two bits harder than the average before it, two easier after.
        // The gear hash's high bits depend on the most bytes (bit k on the last k + 1), so the
        // masks take the top bits.
        let bits = averageSize.trailingZeroBitCount
        strictMask = ~UInt64(0) << UInt64(64 - (bits + 2))
        looseMask = ~UInt64(0) << UInt64(64 - (bits - 2))
    }

    /// The length of the chunk that starts at `start` in `bytes`.
    package func cut(_ bytes: UnsafeRawBufferPointer, from start: Int) -> Int {
        if let keyedCut { return keyedCut(bytes, start) }
        let remaining = bytes.count - start
        guard remaining > minimumSize else { return remaining }
        let normal = min(averageSize, remaining)
        let limit = min(maximumSize, remaining)
        // The hot loop of every scan: raw pointers, no bounds checks (the indexes stay below
        // `limit`, within `bytes`; the table has an entry for every byte value).
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self).advanced(by: start) else { return remaining }
        let gear = Self.gearTable
        let strictMask = strictMask, looseMask = looseMask
        var fingerprint: UInt64 = 0
        var index = minimumSize
        // Two bytes a step: the fingerprint after the second byte is worked out from the one
        // before the first (shifted twice), so the two need not wait for each other — the same
        // values as one byte at a time, in about two thirds of the time.
        for (end, mask) in [(normal, strictMask), (limit, looseMask)] {
            while index &+ 1 < end {
                let first = gear[Int(base[index])], second = gear[Int(base[index &+ 1])]
                let one = (fingerprint << 1) &+ first
                let two = (fingerprint << 2) &+ ((first << 1) &+ second)
                if one & mask == 0 { return index &+ 1 }
                if two & mask == 0 { return index &+ 2 }
                fingerprint = two
                index &+= 2
            }
            if index < end {
                fingerprint = (fingerprint << 1) &+ gear[Int(base[index])]
                if fingerprint & mask == 0 { return index &+ 1 }
                index &+= 1
            }
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
    package func chunks(of data: some ContiguousBytes) -> [ContentChunk] {
        data.withUnsafeBytes { bytes in
            var chunks: [ContentChunk] = []
            var start = 0
            for end in boundaries(of: bytes) {
                let piece = UnsafeRawBufferPointer(rebasing: bytes[start..<end])
                chunks.append(ContentChunk(offset: start, length: end - start, hash: name(piece)))
                start = end
            }
            return chunks
        }
    }

    /// The chunks of the file at `url`, read in one pass a window at a time into two buffers
    /// used in turn (large files are never held in memory whole, and no memory is asked for
    /// per window). While one window's chunks are hashed on another thread, the next window is
    /// read and cut on this one: a large file costs about the longer of the two, not both
    /// (64 MiB: 104 ms one after the other on the reference machine, 57 ms so).
    /// - Throws: The file's read errors.
    package func chunks(ofFileAt url: URL) throws -> [ContentChunk] {
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() } // read-only: closing cannot lose anything
        return try chunks(of: handle.fileDescriptor, url: url)
    }

    /// The chunks of what is left to read of the open file `fd` (the file at `url`).
    private func chunks(of fd: Int32, url: URL) throws -> [ContentChunk] {
        let buffers = [WindowBuffer(capacity: Self.windowBytes + maximumSize), WindowBuffer(capacity: Self.windowBytes + maximumSize)]
        var chunks: [ContentChunk] = []
        var window = try cutWindow(into: buffers[0], after: nil, from: fd, url: url)
        var turn = 0
        // A thread of its own (a thread of a shared pool may never come: callers on Swift's
        // cooperative threads wait here, and two cuts at once could each wait for a hashing
        // that got no thread), started only for a file of more than one window.
        let hashing = window.atEnd ? nil : WorkThread(name: "ubq-hash")
        while !window.atEnd, let hashing {
            // This window hashed on that thread while the next is read and cut here (a
            // blocking wait, not a spinning one: other processes need the cores too). The
            // hashing reads its buffer up to the last cut; this thread reads only what follows.
            let current = window, hashed = HashedChunks()
            hashing.async { hashed.set(self.hash(current)) }
            turn = 1 - turn
            let next = Result { try cutWindow(into: buffers[turn], after: current, from: fd, url: url) }
            chunks += hashed.get()
            window = try next.get()
        }
        return chunks + hash(window)
    }

    /// Memory a window is read into, reused from window to window. Written by one thread at a
    /// time: filled before its window is handed to the hashing thread, and filled again only
    /// after that thread is done with it (the hand-overs are ``HashedChunks``').
    private final class WindowBuffer: @unchecked Sendable {
        let memory: UnsafeMutableRawBufferPointer
        var count = 0
        init(capacity: Int) { memory = .allocate(byteCount: capacity, alignment: 16) }
        deinit { memory.deallocate() }
    }

    /// A window's chunks, handed from the thread that hashed them (``get()`` waits for them).
    private final class HashedChunks: @unchecked Sendable {
        private let condition = NSCondition()
        private var chunks: [ContentChunk]? // guarded by the condition's lock
        func set(_ value: [ContentChunk]) {
            condition.lock()
            chunks = value
            condition.signal()
            condition.unlock()
        }
        func get() -> [ContentChunk] {
            condition.lock()
            defer { condition.unlock() }
            while chunks == nil { condition.wait() }
            return chunks ?? []
        }
    }

    /// Bytes read from a file at `offset` (in `buffer`), and where their chunks end (relative to them).
    private struct Window: Sendable {
        var buffer: WindowBuffer
        var offset: Int
        var ends: [Int]
        /// Whether the file ended in this window (every byte of it is in a chunk).
        var atEnd: Bool
        /// How many bytes are in chunks.
        var consumed: Int { ends.last ?? 0 }
        /// The file offset after its last chunk.
        var end: Int { offset + consumed }
    }

    /// How many bytes a window reads at least.
    static let windowBytes = 1 << 20

    /// The next window, in `buffer`: what `previous` left uncut and about ``windowBytes`` more,
    /// cut up to the last point every device would cut there too (at least one maximum chunk
    /// before the window's end, unless the file ended).
    private func cutWindow(into buffer: WindowBuffer, after previous: Window?, from fd: Int32, url: URL) throws -> Window {
        let memory = buffer.memory
        var count = 0
        if let previous, previous.buffer.count > previous.consumed {
            let carry = UnsafeRawBufferPointer(rebasing: previous.buffer.memory[previous.consumed..<previous.buffer.count])
            memory.copyMemory(from: carry)
            count = carry.count
        }
        var atEnd = false
        while count < memory.count {
            let read = SystemCall.read(fd, into: UnsafeMutableRawBufferPointer(rebasing: memory[count...]))
            if read < 0 { throw Self.readError(url) }
            if read == 0 {
                atEnd = true
                break
            }
            count += read
        }
        buffer.count = count
        let bytes = UnsafeRawBufferPointer(rebasing: memory[..<count])
        var ends: [Int] = [], start = 0
        while start < count, atEnd || count - start >= maximumSize {
            start += cut(bytes, from: start)
            ends.append(start)
        }
        return Window(buffer: buffer, offset: previous?.end ?? 0, ends: ends, atEnd: atEnd)
    }

    /// The chunks of a cut window, hashed.
    private func hash(_ window: Window) -> [ContentChunk] {
        let bytes = UnsafeRawBufferPointer(window.buffer.memory)
        var chunks: [ContentChunk] = [], start = 0
        chunks.reserveCapacity(window.ends.count)
        for end in window.ends {
            chunks.append(ContentChunk(offset: window.offset + start, length: end - start, hash: name(UnsafeRawBufferPointer(rebasing: bytes[start..<end]))))
            start = end
        }
        return chunks
    }

    /// The name of a chunk of these bytes: SHA-256 as lowercase hexadecimal, or the keyed MAC.
    package func name(_ bytes: UnsafeRawBufferPointer) -> String {
        keyedName?(bytes) ?? Self.hash(bytes)
    }

    /// SHA-256 as lowercase hexadecimal.
    package static func hash(_ bytes: UnsafeRawBufferPointer) -> String {
        SHA256.hash(data: bytes).lowercaseHex
    }

    /// 256 fixed pseudo-random words (SplitMix64 from a fixed seed): part of the protocol.
    /// ``gear`` where the cutting loop reads it without bounds checks (allocated once, never freed).
    nonisolated(unsafe) static let gearTable: UnsafePointer<UInt64> = {
        let table = UnsafeMutablePointer<UInt64>.allocate(capacity: 256)
        table.initialize(from: gear, count: 256)
        return UnsafePointer(table)
    }()

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
