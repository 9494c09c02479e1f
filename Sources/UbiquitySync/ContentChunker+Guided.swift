import Foundation
import UbiquityFiles
#if canImport(Glibc)
import Glibc
#endif

// Cutting a file again after an edit, guided by the chunks it was cut into before: a 1-byte
// edit of a 64 MiB file need not run the cutter over 64 MiB. Each earlier chunk is looked for
// where it was (or, if the file's size changed, where it would be after the change: shifted by
// the difference), hashed on two threads; the cutter then runs only from where a chunk is not
// found again, until a cut lands where a found one starts. The list is the one a whole cut
// gives (`aGuidedCutIsTheWholeCut`): a cut depends only on the bytes from where the chunk
// starts to where it ends, and on how far the file goes on when that is less than the largest
// chunk, so a chunk found again at a cut point, as far from the end or at least a largest
// chunk from it both times, is cut there again.
extension ContentChunker {
    /// Files smaller than this are cut whole: the guide saves little there.
    static let guidedMinimumBytes = 1 << 20

    /// The chunks of the file at `url`, exactly as ``chunks(ofFileAt:sizeWhenOpened:choosing:)``
    /// gives them, worked out from `previous` — the chunks of what the file held before, cut
    /// by the chunker `choosing` picks — where they are found again. Cuts the file whole when
    /// it is small, when the guide was cut by another chunker, or when little of it is found.
    /// - Throws: The file's read errors.
    static func chunks(ofFileAt url: URL, guidedBy previous: [ContentChunk], choosing: (Int) -> ContentChunker) throws -> [ContentChunk] {
        if let chunks = try guidedChunks(ofFileAt: url, guidedBy: previous, choosing: choosing) { return chunks }
        return try chunks(ofFileAt: url, sizeWhenOpened: nil, choosing: choosing)
    }

    /// The guided cut of the file at `url` (``chunks(ofFileAt:guidedBy:choosing:)``); nil where
    /// it would not pay or does not apply — the file is small, the guide was cut by another
    /// chunker, little of it is found, or the file's size changed while it was read — and the
    /// file is to be cut whole.
    /// - Throws: The file's read errors.
    static func guidedChunks(ofFileAt url: URL, guidedBy previous: [ContentChunk], choosing: (Int) -> ContentChunker) throws -> [ContentChunk]? {
        let fd = open(url.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw readError(url) }
        defer { close(fd) } // read-only: closing cannot lose anything
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw readError(url) }
        let size = Int(status.st_size), oldSize = previous.last.map { $0.offset + $0.length } ?? 0
        let chunker = choosing(size)
        guard size >= guidedMinimumBytes, previous.count >= 2, choosing(oldSize).averageSize == chunker.averageSize,
              previous.allSatisfy({ $0.length <= chunker.maximumSize }),
              let chunks = try chunker.chunks(of: fd, size: size, guidedBy: previous, url: url),
              fstat(fd, &status) == 0, Int(status.st_size) == size else { return nil }
        return chunks
    }

    /// The guided cut of the open file `fd` of `size` bytes; nil when too little of `previous`
    /// is found for the guide to pay (the caller cuts it whole).
    private func chunks(of fd: Int32, size: Int, guidedBy previous: [ContentChunk], url: URL) throws -> [ContentChunk]? {
        let oldSize = previous.last.map { $0.offset + $0.length } ?? 0
        let found = FoundChunks(count: previous.count)
        // The first half looked for from the front, the second from the back on a thread of its
        // own (the scan's caller may be on a cooperative thread: no shared pool is waited for).
        let middle = previous.count / 2
        let helper = WorkThread(name: "ubq-guide"), back = Handoff()
        helper.async { back.set(self.find(previous, indices: (middle..<previous.count).reversed(), in: fd, size: size, oldSize: oldSize, into: found)) }
        let front = find(previous, indices: Array(0..<middle), in: fd, size: size, oldSize: oldSize, into: found)
        guard back.get(), front else { return nil }

        var startingAt: [Int: Int] = [:]
        for index in previous.indices { if let offset = found[index] { startingAt[offset] = index } }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: maximumSize, alignment: 16)
        defer { buffer.deallocate() }
        var chunks: [ContentChunk] = [], position = 0
        chunks.reserveCapacity(previous.count + 4)
        while position < size {
            if let index = startingAt[position] {
                let known = previous[index], left = oldSize - known.offset, leftNow = size - position
                if left == leftNow || (left >= maximumSize && leftNow >= maximumSize) {
                    chunks.append(ContentChunk(offset: position, length: known.length, hash: known.hash))
                    position += known.length
                    continue
                }
            }
            // Not found here: cut from what the file holds (a largest chunk's worth, or to its end).
            let span = min(maximumSize, size - position)
            let window = UnsafeMutableRawBufferPointer(rebasing: buffer[..<span])
            guard SystemCall.readFully(fd, into: window, at: Int64(position)) == span else { throw Self.readError(url) }
            let bytes = UnsafeRawBufferPointer(window), length = cut(bytes, from: 0)
            chunks.append(ContentChunk(offset: position, length: length, hash: name(UnsafeRawBufferPointer(rebasing: bytes[..<length]))))
            position += length
        }
        return chunks
    }

    /// Looks for the chunks of `previous` at `indices` (in that order) in the open file: each
    /// where it was, or shifted by the change in size — whichever found the last one first.
    /// False once more than 32 are not found and those are most (the guide does not pay).
    private func find(_ previous: [ContentChunk], indices: some Sequence<Int>, in fd: Int32, size: Int, oldSize: Int, into found: FoundChunks) -> Bool {
        let shift = size - oldSize
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: maximumSize, alignment: 16)
        defer { buffer.deallocate() }
        var shiftedFirst = false, hits = 0, misses = 0
        for index in indices {
            let chunk = previous[index]
            let places = shift == 0 ? [chunk.offset] : shiftedFirst ? [chunk.offset + shift, chunk.offset] : [chunk.offset, chunk.offset + shift]
            var at: Int?
            for offset in places where offset >= 0 && offset + chunk.length <= size {
                let window = UnsafeMutableRawBufferPointer(rebasing: buffer[..<chunk.length])
                // (A read that fails counts as not found: the cut from there reads it again, and says why.)
                guard SystemCall.readFully(fd, into: window, at: Int64(offset)) == chunk.length else { continue }
                if name(UnsafeRawBufferPointer(window)) == chunk.hash {
                    at = offset
                    break
                }
            }
            if let at {
                found[index] = at
                hits += 1
                shiftedFirst = at != chunk.offset
            } else {
                misses += 1
                if misses > 32 && misses > hits { return false }
            }
        }
        return true
    }

    /// Where each earlier chunk was found (its offset in the file now), written by two threads
    /// at different indexes, read once both are done (``Handoff``).
    private final class FoundChunks: @unchecked Sendable {
        private let offsets: UnsafeMutableBufferPointer<Int>
        init(count: Int) { offsets = .allocate(capacity: count); offsets.initialize(repeating: -1) }
        deinit { offsets.deallocate() }
        subscript(index: Int) -> Int? {
            get { offsets[index] >= 0 ? offsets[index] : nil }
            set { offsets[index] = newValue ?? -1 }
        }
    }

    /// A result handed from the helper thread (``get()`` waits for it).
    private final class Handoff: @unchecked Sendable {
        private let condition = NSCondition()
        private var value: Bool? // guarded by the condition's lock
        func set(_ result: Bool) {
            condition.lock()
            value = result
            condition.signal()
            condition.unlock()
        }
        func get() -> Bool {
            condition.lock()
            defer { condition.unlock() }
            while value == nil { condition.wait() }
            return value ?? false
        }
    }
}
