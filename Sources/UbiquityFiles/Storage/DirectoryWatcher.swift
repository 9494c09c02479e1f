import Foundation
import Logging
import CUbiquitySystem
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Watches a folder and everything under it with inotify and says when something in it
/// changed: a file written and closed, created, moved or deleted, a folder created (watched
/// from then on). The agent starts a round on each, and a metadata query looks again at what
/// changed; both rescan everything when inotify's queue overflowed or a watch could not be
/// added, so a change is never silently missed (the scan, not the event, says what changed).
///
/// Where inotify cannot be had — the user's inotify instances are all in use
/// (`fs.inotify.max_user_instances`, 128 by default: a busy desktop, or many apps' key-value
/// stores and queries at once), or no watch is left for the folder — the watcher looks at the
/// folder's tree itself instead (``isPolling``), every ``pollInterval`` or longer for a large
/// tree, and says `overflow` when anything in it changed: slower to hear, never deaf.
public final class DirectoryWatcher: Sendable {
    /// What happened.
    public enum Event: Sendable, Equatable {
        /// Something changed at this path (absolute).
        case changed(String)
        /// Events were lost (queue overflow, watch limit), or a polling watcher saw something
        /// change: rescan everything.
        case overflow
        /// The file or folder at `from` was renamed to `to` (absolute paths; both inside the
        /// watched folder). Sent after the `changed` of each end, however far apart the two
        /// events came: what a scan cannot tell when the file at `to` was replaced since (a
        /// move, then a save over the moved file).
        case moved(from: String, to: String)
    }

    /// The shortest time between two looks of a polling watcher (a tree that takes long to
    /// look at is looked at less often: at most a twentieth of the time goes to looking).
    public static let pollInterval: Duration = .seconds(2)

    /// The folder watched.
    public let root: URL
    /// Whether this watcher looks at the tree itself, inotify being unavailable.
    public let isPolling: Bool
    private let wake: (read: Int32, write: Int32)
    private let stopped = Atomic<Bool>(false)

    /// Whether the environment asks every watcher to look at its tree rather than use inotify
    /// (`UBIQUITY_WATCH=poll`): for folders on a network file system, whose changes made on
    /// other machines inotify never hears.
    public static var pollingRequested: Bool { ProcessInfo.processInfo.environment["UBIQUITY_WATCH"] == "poll" }

    /// Starts watching `root` (created if missing); `onEvent` is called on the watcher's own
    /// thread. Falls back on looking at the tree (``isPolling``) when inotify's per-user limits
    /// are reached (or `polling`, or ``pollingRequested``, asks for it).
    /// - Throws: ``FileAccessError`` when `root` cannot be created or watched for another reason.
    public init(root: URL, logger: Logger = Logger(label: "ubiquity.watcher"), polling: Bool = false, onEvent: @escaping @Sendable (Event) -> Void) throws {
        self.root = root
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        var ends: [Int32] = [0, 0]
        guard ubq_wake_pipe(&ends) == 0 else { throw FileAccessError(operation: "pipe", path: root.path, errno: errno) }
        wake = (ends[0], ends[1])
        if !polling && !Self.pollingRequested {
            let inotify = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
            let failure: Int32
            if inotify >= 0 {
                let loop = WatchLoop(inotify: inotify, wake: ends[0], logger: logger, onEvent: onEvent)
                if loop.watchTree(root.path) {
                    isPolling = false
                    Self.start("ubq-watcher", loop.run)
                    return
                }
                failure = loop.failure
                close(inotify)
            } else {
                failure = errno
            }
            guard Self.pollsInstead(failing: failure) else {
                close(ends[0])
                close(ends[1])
                throw FileAccessError(operation: inotify >= 0 ? "watch" : "inotify", path: root.path, errno: failure)
            }
            logger.warning("cannot use inotify: looking at the folder every few seconds instead (raise fs.inotify.max_user_instances and max_user_watches)",
                           metadata: ["folder": "\(root.path)", "error": "\(String(cString: strerror(failure)))"])
        }
        isPolling = true
        let loop = PollLoop(root: root.path, wake: ends[0], onEvent: onEvent)
        Self.start("ubq-watch-poll", loop.run)
    }

    /// Whether inotify failing with `code` leaves looking at the tree as the way to hear of
    /// changes: the per-user (or system-wide) limits of instances, watches or memory — not a
    /// folder that cannot be read.
    static func pollsInstead(failing code: Int32) -> Bool {
        [EMFILE, ENFILE, ENOSPC, ENOMEM, ENOSYS].contains(code)
    }

    private static func start(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread {
            _ = ubq_name_this_thread(name) // for `top -H` (see ubq_name_this_thread)
            body()
        }
        thread.start()
    }

    /// The wake pipe's two ends (tests: both are closed once the watcher is gone).
    var wakeDescriptors: [Int32] { [wake.read, wake.write] }

    /// Stops watching (idempotent).
    public func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        var byte: UInt8 = 1
        _ = write(wake.write, &byte, 1)
    }

    deinit {
        stop()
        close(wake.write) // (the thread closes its end once it has seen the byte)
    }
}

/// A polling watcher's thread: looks at the tree every ``DirectoryWatcher/pollInterval`` (or
/// twenty times as long as the last look took) and says `overflow` when what it saw — every
/// entry's name, kind, size, inode and modification time — differs from the look before. The
/// first look is taken before the watcher is returned: a change made as soon as it is (before
/// its thread got to run) is a change from that look, not part of it (found under load: a
/// query's first update never came).
private final class PollLoop: Sendable {
    let root: String
    let wake: Int32
    let onEvent: @Sendable (DirectoryWatcher.Event) -> Void
    /// The tree as it was when watching began, and how long looking took.
    let first: (digest: Int, took: Duration)

    init(root: String, wake: Int32, onEvent: @escaping @Sendable (DirectoryWatcher.Event) -> Void) {
        self.root = root
        self.wake = wake
        self.onEvent = onEvent
        first = Self.look(root)
    }

    func run() {
        defer { close(wake) }
        var (last, took) = first
        while true {
            let wait = max(DirectoryWatcher.pollInterval, took * 20)
            var descriptors = [pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
            let milliseconds = Int32(clamping: wait.components.seconds * 1_000 + wait.components.attoseconds / 1_000_000_000_000_000)
            if SystemCall.poll(&descriptors, timeout: milliseconds) < 0 || descriptors[0].revents != 0 { return }
            let now: Int
            (now, took) = Self.look(root)
            if now != last {
                last = now
                onEvent(.overflow)
            }
        }
    }

    /// A digest of the tree at `root` as it is now, and how long looking took.
    static func look(_ root: String) -> (digest: Int, took: Duration) {
        let clock = ContinuousClock()
        var hasher = Hasher()
        let took = clock.measure { add(root, to: &hasher) }
        return (hasher.finalize(), took)
    }

    private static func add(_ folder: String, to hasher: inout Hasher) {
        guard let directory = opendir(folder) else { return }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = POSIX.entryName(entry)
            if name != "." && name != ".." { names.append(name) }
        }
        closedir(directory)
        for name in names.sorted() {
            let path = folder + "/" + name
            var info = stat()
            guard lstat(path, &info) == 0 else { continue } // gone meanwhile: the next look sees it
            hasher.combine(name)
            hasher.combine(info.st_mode)
            hasher.combine(info.st_size)
            hasher.combine(info.st_ino)
            hasher.combine(info.st_mtim.tv_sec)
            hasher.combine(info.st_mtim.tv_nsec)
            if info.st_mode & S_IFMT == S_IFDIR { add(path, to: &hasher) }
        }
    }
}

/// The watcher's thread: owns the watch table (touched by that thread only, after setup).
private final class WatchLoop: @unchecked Sendable {
    let inotify: Int32
    let wake: Int32
    let logger: Logger
    let onEvent: @Sendable (DirectoryWatcher.Event) -> Void
    var paths: [Int32: String] = [:]
    /// `IN_MOVED_FROM` cookies → the path that moved (the two ends of a rename may come in two reads).
    var renamed: [UInt32: String] = [:]
    /// Why the last folder could not be watched (`errno` as `inotify_add_watch` left it, before
    /// anything logged).
    var failure: Int32 = 0
    static let mask = UInt32(IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_ATTRIB)

    init(inotify: Int32, wake: Int32, logger: Logger, onEvent: @escaping @Sendable (DirectoryWatcher.Event) -> Void) {
        self.inotify = inotify
        self.wake = wake
        self.logger = logger
        self.onEvent = onEvent
    }

    /// Watches `path` and every folder under it; false if `path` itself cannot be watched.
    @discardableResult
    func watchTree(_ path: String) -> Bool {
        let watch = inotify_add_watch(inotify, path, Self.mask | UInt32(IN_ONLYDIR))
        guard watch >= 0 else {
            failure = errno
            if failure == ENOSPC {
                logger.warning("inotify watch limit reached: falling back to periodic rescans (raise fs.inotify.max_user_watches)", metadata: ["folder": "\(path)"])
                onEvent(.overflow)
            }
            return false
        }
        paths[watch] = path
        guard let directory = opendir(path) else { return true }
        defer { closedir(directory) }
        var children: [String] = []
        while let entry = readdir(directory) {
            guard entry.pointee.d_type == UInt8(DT_DIR) else { continue } // a folder of files costs no string per file
            let name = POSIX.entryName(entry)
            if name == "." || name == ".." { continue }
            children.append(path + "/" + name)
        }
        for child in children { watchTree(child) }
        return true
    }

    func run() {
        defer {
            close(inotify)
            close(wake)
        }
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            var descriptors = [pollfd(fd: inotify, events: Int16(POLLIN), revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
            if SystemCall.poll(&descriptors, timeout: -1) < 0 { return }
            if descriptors[1].revents != 0 { return }
            let count = buffer.withUnsafeMutableBytes { read(inotify, $0.baseAddress, $0.count) }
            guard count > 0 else { continue }
            var offset = 0
            let header = MemoryLayout<inotify_event>.size
            while offset + header <= count {
                let (event, name) = buffer.withUnsafeBytes { raw -> (inotify_event, String) in
                    let event = raw.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
                    let bytes = raw[(offset + header)..<(offset + header + Int(event.len))]
                    return (event, String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self))
                }
                offset += header + Int(event.len)
                handle(event, name)
            }
        }
    }

    private func handle(_ event: inotify_event, _ name: String) {
        if event.mask & UInt32(IN_Q_OVERFLOW) != 0 {
            logger.notice("inotify's event queue overflowed: everything under the folder is looked at again")
            onEvent(.overflow)
            return
        }
        if event.mask & UInt32(IN_IGNORED) != 0 {
            paths[event.wd] = nil
            return
        }
        guard let folder = paths[event.wd] else { return }
        let path = name.isEmpty ? folder : folder + "/" + name
        if event.mask & UInt32(IN_ISDIR) != 0 && event.mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0 {
            watchTree(path) // a new folder (and whatever was made in it before the watch)
        }
        onEvent(.changed(path))
        if event.mask & UInt32(IN_MOVED_FROM) != 0 {
            if renamed.count >= 4_096 { renamed = [:] } // moves out of the tree never pair: bounded
            renamed[event.cookie] = path
        } else if event.mask & UInt32(IN_MOVED_TO) != 0, let from = renamed.removeValue(forKey: event.cookie) {
            onEvent(.moved(from: from, to: path))
        }
    }
}
