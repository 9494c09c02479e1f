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
public final class DirectoryWatcher: Sendable {
    /// What happened.
    public enum Event: Sendable, Equatable {
        /// Something changed at this path (absolute).
        case changed(String)
        /// Events were lost (queue overflow, watch limit): rescan everything.
        case overflow
        /// The file or folder at `from` was renamed to `to` (absolute paths; both inside the
        /// watched folder). Sent after the `changed` of each end, however far apart the two
        /// events came: what a scan cannot tell when the file at `to` was replaced since (a
        /// move, then a save over the moved file).
        case moved(from: String, to: String)
    }

    /// The folder watched.
    public let root: URL
    private let descriptor: Int32
    private let wake: (read: Int32, write: Int32)
    private let stopped = Atomic<Bool>(false)

    /// Starts watching `root` (created if missing); `onEvent` is called on the watcher's own thread.
    /// - Throws: ``FileAccessError`` when inotify is unavailable or `root` cannot be watched.
    public init(root: URL, logger: Logger = Logger(label: "ubiquity.watcher"), onEvent: @escaping @Sendable (Event) -> Void) throws {
        self.root = root
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let inotify = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard inotify >= 0 else { throw FileAccessError(operation: "inotify", path: root.path, errno: errno) }
        var ends: [Int32] = [0, 0]
        guard ubq_wake_pipe(&ends) == 0 else {
            close(inotify)
            throw FileAccessError(operation: "pipe", path: root.path, errno: errno)
        }
        descriptor = inotify
        wake = (ends[0], ends[1])
        let loop = WatchLoop(inotify: inotify, wake: ends[0], logger: logger, onEvent: onEvent)
        guard loop.watchTree(root.path) else {
            close(inotify)
            close(ends[0])
            close(ends[1])
            throw FileAccessError(operation: "watch", path: root.path, errno: errno)
        }
        let thread = Thread {
            _ = ubq_name_this_thread("ubq-watcher") // for `top -H` (see ubq_name_this_thread)
            loop.run()
        }
        thread.start()
    }

    /// Stops watching (idempotent).
    public func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        var byte: UInt8 = 1
        _ = write(wake.write, &byte, 1)
    }

    deinit { stop() }
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
            if errno == ENOSPC {
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
