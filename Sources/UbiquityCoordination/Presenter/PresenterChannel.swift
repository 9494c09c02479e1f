import CUbiquitySystem
import Foundation
import UbiquityFiles
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// How coordinators reach presenters in other processes of the same user.
///
/// Every process that registers a presenter listens on `presenters/PID.sock` in the per-user
/// runtime directory (mode 0700, so only the user's processes can connect). A coordinator
/// connects to every other process's socket before taking its locks and sends `prepare` with
/// the access; that process asks its own presenters to save and relinquish, and answers. After
/// the access the coordinator sends `finish` (with any moves) on the same connection, and the
/// process tells its presenters what changed and gives them their items back. A process that
/// does not answer within the presenter time-out is skipped (and logged); a socket nobody
/// listens on any more is removed once its process is gone; a coordinator that dies mid-access
/// closes its connection, which gives the presenters their items back.
final class PresenterChannel: Sendable {
    static let shared = PresenterChannel(directory: (FileCoordinationLocks.shared.directory as NSString).deletingLastPathComponent + "/presenters")

    struct Request: Codable {
        var op: String
        var access: AccessDescription?
        var timeoutMilliseconds: Int?
        var moves: [[String]]?
        var changed: Bool?
        /// For `ubiquity`: each item's path followed by the attributes of it that changed.
        var changes: [[String]]?
    }

    struct Reply: Codable {
        var ok: Bool
        /// For `prepare`: why that process's presenters refused the access, if they did.
        var refusals: [String]?
    }

    let directory: String
    private let serverStarted = Mutex(false)
    private let logger = Logger(label: "ubiquity.coordination.channel")

    init(directory: String) {
        self.directory = directory
    }

    var socketPath: String { directory + "/\(getpid()).sock" }

    // MARK: Client

    /// A prepared access in another process, finished after the access.
    final class RemoteSession: @unchecked Sendable {
        // Owned by the coordinating thread.
        let descriptor: Int32
        let process: String

        init(descriptor: Int32, process: String) {
            self.descriptor = descriptor
            self.process = process
        }

        func finish(moves: [[String]], changed: Bool) {
            defer { close(descriptor) }
            guard PresenterChannel.send(Request(op: "finish", moves: moves, changed: changed), to: descriptor) else { return }
            _ = PresenterChannel.receive(Reply.self, from: descriptor)
        }
    }

    /// Processes that lately did not answer in time, and until when each is asked with a short
    /// wait (``quietWait``) instead of the whole timeout: one stopped or stuck process with
    /// presenters would otherwise hold every coordinated access of every other process for the
    /// whole timeout, one after another (a full test run: a helper stopped by its test made a
    /// document's saves wait 5 s each until its close gave up). It answers again: forgotten.
    private static let unresponsive = Mutex<[String: ContinuousClock.Instant]>([:])
    /// How long a process that did not answer in time is asked with the short wait.
    static let quietPeriod: Duration = .seconds(30)
    /// The wait for a process that lately did not answer in time.
    static let quietWait: Duration = .milliseconds(200)

    /// The wait for `process`: `timeout`, or ``quietWait`` while it is known not to answer.
    static func wait(for process: String, timeout: Duration) -> Duration {
        unresponsive.withLock { marks in
            guard let until = marks[process] else { return timeout }
            if until > .now { return min(timeout, quietWait) }
            marks[process] = nil
            return timeout
        }
    }

    /// Notes whether `process` answered.
    private static func note(_ process: String, answered: Bool) {
        unresponsive.withLock { marks in marks[process] = answered ? nil : .now + quietPeriod }
    }

    /// Asks every other process with presenters to prepare for `access`: the sessions to
    /// finish afterwards, and why presenters there refused it (an eviction), if they did.
    ///
    /// Every process is asked at once and the answers are taken after: a slow process costs
    /// its own wait, not that wait added to every other's (asked one after another, a loaded
    /// machine's few slow processes held each coordinated access for several timeouts).
    func prepareRemote(_ access: AccessDescription, timeout requested: Duration, logger: Logger) -> (sessions: [RemoteSession], refusals: [String]) {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return ([], []) } // no folder: no other process presents
        let own = "\(getpid()).sock"
        var sessions: [RemoteSession] = [], refusals: [String] = []
        let evicting = access.writing.contains { NSFileCoordinator.WritingOptions(rawValue: $0.options).contains(.forEvicting) }
        var waiting: [(fd: Int32, process: String, timeout: Duration)] = []
        for entry in entries where entry.hasSuffix(".sock") && entry != own {
            let process = String(entry.dropLast(5))
            let timeout = Self.wait(for: process, timeout: requested)
            let fd: Int32
            switch connect(to: directory + "/" + entry, timeout: timeout) {
            case .connected(let connected): fd = connected
            case .gone: continue
            case .busy(let reason):
                // Alive but not taking connections (its queue of them full: a starved process
                // on a loaded machine, found by a full test run): as a process that does not
                // answer in time — an eviction waits, anything else goes on without it.
                Self.note(process, answered: false)
                if evicting {
                    logger.warning("a process with file presenters did not take the request in time; the eviction waits", metadata: ["pid": "\(process)", "error": "\(reason)"])
                    refusals.append("a process with file presenters (\(process)) did not answer in time")
                } else {
                    logger.warning("a process with file presenters did not take the request in time; proceeding without it", metadata: ["pid": "\(process)", "error": "\(reason)"])
                }
                continue
            }
            let milliseconds = Int(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
            // The other process's presenters get a little less time than this side waits, so
            // that one slow presenter there is passed over with an answer, not a silence.
            let request = Request(op: "prepare", access: access, timeoutMilliseconds: milliseconds * 4 / 5)
            if Self.send(request, to: fd) {
                waiting.append((fd, process, timeout))
            } else {
                close(fd) // that process is exiting (or was killed)
            }
        }
        let asked = ContinuousClock.now
        for (fd, process, timeout) in waiting {
            // What is left of this process's wait (all were asked at about the same moment).
            let left = max(timeout - (ContinuousClock.now - asked), .milliseconds(1))
            var seconds = timeval(tv_sec: Int(left.components.seconds), tv_usec: Int(left.components.attoseconds / 1_000_000_000_000))
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &seconds, socklen_t(MemoryLayout<timeval>.size))
            let reply = Self.receive(Reply.self, from: fd)
            let silent = reply == nil && ContinuousClock.now - asked >= timeout * 0.9
            Self.note(process, answered: !silent)
            if let reply, reply.ok {
                sessions.append(RemoteSession(descriptor: fd, process: process))
            } else if let refused = reply?.refusals, !refused.isEmpty {
                refusals += refused
                close(fd) // that process finished its presenters' side already
            } else if !silent {
                // The connection ended without an answer: that process is exiting (or was killed).
                logger.debug("a process with file presenters ended the exchange; proceeding without it", metadata: ["pid": "\(process)"])
                close(fd)
            } else if evicting {
                // No answer in time is a refusal of an eviction, as it is from a presenter here:
                // nothing is evicted from under a presenter that did not agree (a loaded
                // machine's live process, found by a full test run; the file stays, nothing lost).
                logger.warning("a process with file presenters did not answer in time; the eviction waits", metadata: ["pid": "\(process)", "timeout": "\(timeout)"])
                refusals.append("a process with file presenters (\(process)) did not answer in time")
                close(fd)
            } else {
                logger.warning("a process with file presenters did not answer in time; proceeding without it", metadata: ["pid": "\(process)", "timeout": "\(timeout)"])
                close(fd)
            }
        }
        return (sessions, refusals)
    }

    /// Tells every other process with presenters which ubiquity attributes of which items
    /// changed (`changes`: each a canonical path followed by attribute names; each process
    /// tells its presenters that observe them), in messages of at most
    /// ``ubiquityChangesPerMessage`` items; waits at most `timeout` for each.
    func announceUbiquityAttributes(_ changes: [[String]], timeout: Duration) {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return } // no folder: no other process presents
        let own = "\(getpid()).sock"
        for entry in entries where entry.hasSuffix(".sock") && entry != own {
            let process = String(entry.dropLast(5))
            let wait = Self.wait(for: process, timeout: timeout)
            for start in stride(from: 0, to: changes.count, by: Self.ubiquityChangesPerMessage) {
                guard case .connected(let fd) = connect(to: directory + "/" + entry, timeout: wait) else {
                    logger.warning("a process with file presenters did not hear of items' ubiquity attributes", metadata: ["pid": "\(process)"])
                    break
                }
                defer { close(fd) }
                let slice = Array(changes[start..<min(changes.count, start + Self.ubiquityChangesPerMessage)])
                let asked = ContinuousClock.now
                if !Self.send(Request(op: "ubiquity", changes: slice), to: fd) || Self.receive(Reply.self, from: fd)?.ok != true {
                    if ContinuousClock.now - asked >= wait * 0.9 { Self.note(process, answered: false) }
                    logger.warning("a process with file presenters did not hear of items' ubiquity attributes", metadata: ["pid": "\(process)"])
                    break
                }
                Self.note(process, answered: true)
            }
        }
    }

    /// How many items' attribute changes one message carries (well within a message's 1 MiB).
    static let ubiquityChangesPerMessage = 500

    /// What connecting to another process's socket came to.
    enum Connection {
        /// Connected.
        case connected(Int32)
        /// Nobody listens there any more (its process is gone; the socket was removed), or no
        /// socket could be made here.
        case gone
        /// Its process listens but did not take the connection in time (its queue is full).
        case busy(String)
    }

    private func connect(to path: String, timeout: Duration) -> Connection {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return .gone }
        var seconds = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: Int(timeout.components.attoseconds / 1_000_000_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &seconds, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &seconds, socklen_t(MemoryLayout<timeval>.size))
        var address = Self.address(path)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        if result != 0 {
            let code = errno
            close(fd)
            switch code {
            case ECONNREFUSED:
                // Nobody listens. The socket is removed only when its process is gone: a live
                // process's name may be another's by then (its own socket, of an earlier
                // process of that number, is stale), and removing a live process's socket
                // would hide its presenters from every coordinator after.
                if let pid = pid_t(((path as NSString).lastPathComponent as NSString).deletingPathExtension), kill(pid, 0) != 0, errno == ESRCH {
                    unlink(path)
                }
                return .gone
            case EAGAIN, ETIMEDOUT, EINTR: return .busy(String(cString: strerror(code)))
            default: return .gone
            }
        }
        return .connected(fd)
    }

    // MARK: Server

    /// Starts listening for other processes' coordinators (once per process).
    func startServerIfNeeded() {
        let start = serverStarted.withLock { started -> Bool in
            if started { return false }
            started = true
            return true
        }
        guard start else { return }
        do {
            let fd = try listen()
            let thread = Thread { [self] in
                _ = ubq_name_this_thread("ubq-pres-chan") // for `top -H` (see ubq_name_this_thread)
                acceptLoop(fd)
            }
            thread.start()
        } catch {
            logger.error("file presenters cannot be reached from other processes", metadata: ["error": "\(error)"])
        }
    }

    /// Listens on ``socketPath``. The socket is made under another name and renamed once it
    /// listens: a coordinator that found it bound but not yet listening was refused, took it
    /// for a dead process's and removed it, and every coordinator after passed this process's
    /// presenters over (a full test run: an eviction went ahead that a presenter here refused).
    private func listen() throws -> Int32 {
        try FileCoordinationLocks.makePrivateDirectory(directory)
        let path = socketPath, staging = path + ".new"
        unlink(staging)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw FileCoordinationError(.ioFailure, "socket failed", path: path) }
        var address = Self.address(staging)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        // (A long queue: every coordinated access of every process of the user connects here,
        // and a process starved on a loaded machine takes them late — a short one, full, made
        // their connects fail: 64 was too few in a full test run.)
        guard bound == 0, chmod(staging, 0o600) == 0, Glibc.listen(fd, SOMAXCONN) == 0, rename(staging, path) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            unlink(staging)
            throw FileCoordinationError(.ioFailure, "cannot listen: \(reason)", path: path)
        }
        return fd
    }

    private func acceptLoop(_ listener: Int32) {
        while true {
            let connection = SystemCall.accept(listener)
            if connection < 0 {
                logger.error("presenter channel stopped accepting", metadata: ["error": "\(String(cString: strerror(errno)))"])
                return
            }
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            Thread.detachNewThread { [self] in serve(connection) }
        }
    }

    /// One coordinated access by another process: prepare, then finish (or the peer vanishes).
    private func serve(_ connection: Int32) {
        defer { close(connection) }
        guard let request = Self.receive(Request.self, from: connection) else { return }
        if request.op == "ubiquity", let changes = request.changes {
            for change in changes where change.count > 1 {
                PresenterSession.deliverUbiquityAttributes(Set(change.dropFirst().map(URLResourceKey.init(rawValue:))), of: change[0])
            }
            _ = Self.send(Reply(ok: true), to: connection)
            return
        }
        guard request.op == "prepare", let access = request.access else { return }
        let timeout = Duration.milliseconds(request.timeoutMilliseconds ?? 5_000)
        let session = PresenterSession(access, excluding: nil, timeout: timeout, logger: logger)
        if !session.refusals.isEmpty {
            _ = Self.send(Reply(ok: false, refusals: session.refusals), to: connection)
            return session.finish(moved: [], changed: false)
        }
        guard Self.send(Reply(ok: true), to: connection) else { return session.finish(moved: [], changed: false) }
        // Wait (as long as the other process holds its access) for "finish".
        var none = timeval(tv_sec: 0, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &none, socklen_t(MemoryLayout<timeval>.size))
        let finish = Self.receive(Request.self, from: connection)
        var moved: Set<String> = []
        for move in finish?.moves ?? [] where move.count == 3 {
            moved.formUnion([move[0], FileCoordinationLocks.canonicalPath(URL(fileURLWithPath: move[2]))])
            PresenterSession.deliverMove(from: move[0], oldURL: URL(fileURLWithPath: move[1]), to: URL(fileURLWithPath: move[2]), excluding: nil)
        }
        session.finish(moved: moved, changed: finish?.changed ?? false)
        _ = Self.send(Reply(ok: true), to: connection)
    }

    // MARK: Framing: one JSON object per line

    static func send<T: Encodable>(_ message: T, to fd: Int32) -> Bool {
        guard var data = try? JSONEncoder().encode(message) else { return false } // our own messages always encode
        data.append(0x0A)
        return data.withUnsafeBytes { SystemCall.sendAll(fd, $0) } == data.count
    }

    static func receive<T: Decodable>(_ type: T.Type, from fd: Int32) -> T? {
        var line = Data()
        var byte: UInt8 = 0
        while line.count < 1 << 20 {
            let n = SystemCall.retrying { recv(fd, &byte, 1, 0) }
            if n <= 0 { return nil }
            if byte == 0x0A { return try? JSONDecoder().decode(type, from: line) } // a malformed line ends the exchange, like a closed one
            line.append(byte)
        }
        return nil
    }

    static func address(_ path: String) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            let bytes = Array(path.utf8.prefix(buffer.count - 1))
            buffer.copyBytes(from: bytes)
            buffer[bytes.count] = 0
        }
        return address
    }
}
