import CUbiquitySystem
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Cross-process reader/writer locks on file-system items, the mutual exclusion under
/// ``NSFileCoordinator``.
///
/// Each item (by canonical path) has a small lock file in a per-user runtime directory. Two
/// bytes of it are locked with open-file-description locks (`F_OFD_SETLK`):
/// - byte 0, the *item* byte: shared by readers of the item, exclusive for a writer;
/// - byte 1, the *subtree* byte: shared by every access to something *inside* the item,
///   exclusive for a writer of the item — so writing a directory excludes accesses within it.
///
/// An access locks the subtree byte of every ancestor (shared) and its own bytes, always in
/// one global order (by lock-file name, then byte), so coordinators never deadlock one another.
/// OFD locks conflict between open file descriptions even inside one process and are dropped
/// by the kernel when their descriptor closes, including when the process dies (SIGKILL).
public final class FileCoordinationLocks: Sendable {
    /// The lock-file directory.
    public let directory: String

    /// The default locks, in `$XDG_RUNTIME_DIR/ubiquity/locks` or `/tmp/ubiquity-UID/locks`.
    public static let shared: FileCoordinationLocks = {
        do { return try FileCoordinationLocks(directory: defaultDirectory()) } catch {
            // The per-user directory is unusable (e.g. squatted by another user): fall back to a
            // private directory of this process; cross-process exclusion is then lost, loudly.
            let fallback = NSTemporaryDirectory() + "ubiquity-locks-\(getpid())-\(UUID().uuidString.prefix(8))"
            FileHandle.standardError.write(Data("ubiquity: file coordination locks unavailable (\(error)); using \(fallback)\n".utf8))
            return try! FileCoordinationLocks(directory: URL(fileURLWithPath: fallback))
        }
    }()

    /// The per-user runtime directory for locks.
    public static func defaultDirectory() -> URL {
        let environment = ProcessInfo.processInfo.environment
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty, access(runtime, W_OK) == 0 {
            return URL(fileURLWithPath: runtime).appendingPathComponent("ubiquity/locks")
        }
        return URL(fileURLWithPath: "/tmp/ubiquity-\(getuid())/locks")
    }

    /// Uses (creating it, mode 0700) `directory` for lock files.
    /// - Parameter directory: A directory owned by this user.
    /// - Throws: ``FileCoordinationError`` `.unsafeLockDirectory` if it (or its parent) is a
    ///   symbolic link, or is owned by someone else, or is writable by others.
    public init(directory: URL) throws {
        let path = directory.standardizedFileURL.path
        try Self.makePrivateDirectory(path)
        self.directory = path
    }

    /// Creates (mode 0700) `path` and its parent if missing, and checks that both are real
    /// directories owned by this user and writable by no one else.
    /// - Throws: ``FileCoordinationError`` `.unsafeLockDirectory` or `.ioFailure`.
    static func makePrivateDirectory(_ path: String) throws {
        for dir in [(path as NSString).deletingLastPathComponent, path] {
            if mkdir(dir, 0o700) != 0 && errno != EEXIST {
                throw FileCoordinationError(.ioFailure, "cannot create a coordination directory: \(String(cString: strerror(errno)))", path: dir)
            }
            var st = stat()
            guard lstat(dir, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, st.st_uid == getuid(), st.st_mode & 0o022 == 0 else {
                throw FileCoordinationError(.unsafeLockDirectory, "a coordination directory must be a directory owned by this user and writable only by it", path: dir)
            }
        }
    }

    /// A lock mode.
    enum Mode: Int, Comparable {
        case shared = 0
        case exclusive = 1
        static func < (a: Mode, b: Mode) -> Bool { a.rawValue < b.rawValue }
    }

    /// One byte of one lock file.
    struct Key: Hashable, Comparable {
        let file: String
        let byte: Int
        static func < (a: Key, b: Key) -> Bool { (a.file, a.byte) < (b.file, b.byte) }
    }

    /// What an access needs: for each byte, the strongest mode any part of it asked for.
    struct Plan {
        var modes: [Key: Mode] = [:]

        mutating func require(_ key: Key, _ mode: Mode) {
            modes[key] = max(modes[key] ?? mode, mode)
        }

        func isCovered(by held: [Key: Mode]) -> Bool {
            modes.allSatisfy { key, mode in (held[key] ?? .shared) >= mode && held[key] != nil }
        }
    }

    /// The plan for reading `reading` and writing `writing` (canonical paths).
    func plan(reading: [String], writing: [String]) -> Plan {
        var plan = Plan()
        for (path, write) in reading.map({ ($0, false) }) + writing.map({ ($0, true) }) {
            for ancestor in Self.ancestors(of: path) { plan.require(Key(file: Self.lockName(ancestor), byte: 1), .shared) }
            let name = Self.lockName(path)
            plan.require(Key(file: name, byte: 0), write ? .exclusive : .shared)
            if write { plan.require(Key(file: name, byte: 1), .exclusive) }
        }
        return plan
    }

    /// Locks held by one access; released by ``release()`` (or when the process dies).
    final class Held: @unchecked Sendable {
        // Guarded by being used by one access at a time (the coordinator that made it).
        var descriptors: [String: Int32] = [:]
        var modes: [Key: Mode] = [:]

        func release() {
            for fd in descriptors.values { close(fd) }
            descriptors = [:]
            modes = [:]
        }
        deinit { release() }
    }

    /// Takes every lock of `plan`, in global order, waiting as long as needed.
    /// - Parameters:
    ///   - plan: What to lock.
    ///   - deadline: Give up (throwing `.timedOut`) after this instant.
    ///   - isCancelled: Polled while waiting; when true, gives up with `.cancelled`.
    func acquire(_ plan: Plan, deadline: ContinuousClock.Instant? = nil, isCancelled: () -> Bool = { false }) throws -> Held {
        let held = Held()
        do {
            for key in plan.modes.keys.sorted() {
                let mode = plan.modes[key]!
                let fd = try descriptor(for: key.file, in: held)
                var delay: UInt32 = 50
                while ubq_ofd_lock_byte(fd, Int64(key.byte), mode == .exclusive ? 1 : 0) != 0 {
                    let code = errno
                    guard code == EAGAIN || code == EACCES || code == EINTR else {
                        throw FileCoordinationError(.ioFailure, "locking failed: \(String(cString: strerror(code)))", path: directory + "/" + key.file)
                    }
                    if isCancelled() { throw FileCoordinationError(.cancelled, "the coordination was cancelled") }
                    if let deadline, ContinuousClock.now >= deadline {
                        throw FileCoordinationError(.timedOut, "another process holds conflicting access")
                    }
                    usleep(delay)
                    delay = min(delay * 2, 2_000)
                }
                held.modes[key] = mode
            }
        } catch {
            held.release()
            throw error
        }
        return held
    }

    /// Tries to take `plan` without waiting.
    /// - Returns: The held locks, or nil if something conflicts.
    func tryAcquire(_ plan: Plan) throws -> Held? {
        do { return try acquire(plan, deadline: .now) } catch let error as FileCoordinationError where error.code == .timedOut {
            return nil
        }
    }

    private func descriptor(for file: String, in held: Held) throws -> Int32 {
        if let fd = held.descriptors[file] { return fd }
        let path = directory + "/" + file
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw FileCoordinationError(.ioFailure, "cannot open a lock file: \(String(cString: strerror(errno)))", path: path)
        }
        held.descriptors[file] = fd
        return fd
    }

    /// Every proper ancestor of a canonical path, outermost first ("/" included).
    static func ancestors(of path: String) -> [String] {
        var result: [String] = []
        var current = (path as NSString).deletingLastPathComponent
        while current != path && !current.isEmpty {
            result.insert(current, at: 0)
            if current == "/" { break }
            current = (current as NSString).deletingLastPathComponent
        }
        return result
    }

    /// The lock file's name for a canonical path: 128 bits of two FNV-1a hashes.
    static func lockName(_ path: String) -> String {
        var a: UInt64 = 0xcbf2_9ce4_8422_2325
        var b: UInt64 = 0x8422_2325_cbf2_9ce4
        for byte in path.utf8 {
            a = (a ^ UInt64(byte)) &* 0x100_0000_01b3
            b = (b ^ UInt64(byte)) &* 0x100_0000_01b3 &+ 0x9e37
        }
        return String(format: "%016llx%016llx.lock", a, b)
    }

    /// The canonical path of an item that may not exist: the real path of its nearest existing
    /// ancestor, followed by the rest. Symbolic links in the last component are resolved only
    /// when `resolvingLastComponent` is true.
    static func canonicalPath(_ url: URL, resolvingLastComponent: Bool = false) -> String {
        let path = url.standardizedFileURL.path
        if resolvingLastComponent, let real = realPath(path) { return real }
        var head = (path as NSString).deletingLastPathComponent
        var tail = [(path as NSString).lastPathComponent]
        while head != "/" && !head.isEmpty {
            if let real = realPath(head) { return ([real] + tail).joined(separator: "/").replacingOccurrences(of: "//", with: "/") }
            tail.insert((head as NSString).lastPathComponent, at: 0)
            head = (head as NSString).deletingLastPathComponent
        }
        return "/" + tail.joined(separator: "/")
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
