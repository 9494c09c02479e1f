import DequeModule
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The chunk packs a ``FileChunkStore`` wrote lately, each with the file's status as written:
/// the chunks of such a pack are the bytes that were checked against their hashes before it
/// was written, for as long as its status-change time stays the same (any write to the file —
/// a flipped bit, a copy over it, a change of its times — sets that to the moment of the write,
/// which no one can set back) and for at most ``trustedFor`` after it was written.
///
/// A chunk read from such a pack is not hashed again (``VerifiedChunks``): the devices that
/// fetch a file a moment after another uploaded it — every sync of a new file — cost the server
/// one SHA-256 pass over its bytes, not two. Damage the file system cannot see (the medium
/// returning other bytes than were written) is caught when the chunk is read after the window,
/// by the device that fetches it (which checks every chunk) and by `ubiquity fsck`. (Linux
/// gives a file whose times were just read a fine-grained time at its next change since 6.13;
/// on older kernels a write within the same clock tick as the pack's own last one — a few
/// milliseconds, a writer racing the server itself — would not show.)
final class FreshPacks: Sendable {
    /// How long after a pack is written its chunks are vouched for (ten minutes by default).
    let trustedFor: Duration
    /// The most packs remembered (the oldest go first; 65,536 by default, about 100 bytes each).
    let maximumCount: Int

    /// Remembers packs for `trustedFor` after each is written, at most `maximumCount` at once.
    init(trustedFor: Duration = .seconds(600), maximumCount: Int = 65_536) {
        self.trustedFor = trustedFor
        self.maximumCount = maximumCount
    }

    private struct Written {
        let device: UInt64
        let inode: UInt64
        let changed: timespec
        let until: ContinuousClock.Instant
    }

    private struct State {
        var packs: [String: Written] = [:]
        /// The packs' names in the order they were written.
        var order: Deque<String> = []
    }

    private let state = Mutex(State())

    /// How many packs are remembered now.
    var count: Int { state.withLock { $0.packs.count } }

    /// Remembers pack `name`, just written and synced, with `status`, its file's status then.
    func wrote(_ name: String, status: stat) {
        let now = ContinuousClock.now
        let written = Written(device: UInt64(status.st_dev), inode: UInt64(status.st_ino), changed: status.st_ctim, until: now + trustedFor)
        state.withLock { state in
            // The oldest first: those past their window, then any over the limit.
            while let oldest = state.order.first, state.packs.count >= maximumCount || (state.packs[oldest].map { $0.until <= now } ?? true) {
                state.packs[oldest] = nil
                state.order.removeFirst()
            }
            if state.packs.updateValue(written, forKey: name) == nil { state.order.append(name) }
        }
    }

    /// Whether the file open as `fd` is pack `name` as this store wrote it, within the window:
    /// the same file, its status unchanged since.
    func vouches(for name: String, fd: Int32) -> Bool {
        guard let written = state.withLock({ $0.packs[name] }), ContinuousClock.now < written.until else { return false }
        var status = stat()
        guard fstat(fd, &status) == 0 else { return false }
        return UInt64(status.st_dev) == written.device && UInt64(status.st_ino) == written.inode
            && status.st_ctim.tv_sec == written.changed.tv_sec && status.st_ctim.tv_nsec == written.changed.tv_nsec
    }
}
