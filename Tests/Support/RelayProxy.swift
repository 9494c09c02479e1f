import Foundation
import Synchronization
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// A TCP relay on loopback in front of one port: counts the bytes it carries both ways (what
/// the two ends wrote), and injects the faults a network brings when told to — the link cut
/// (connections reset, new ones refused), stalled (bytes held), dripping (a few hundred bytes
/// at a time), jittery (each connection's bytes delayed on their own, so requests on different
/// connections arrive out of order), or every connection reset at once.
///
/// Plain blocking sockets, two threads per connection (a handful of connections per device),
/// `TCP_NODELAY` on both sides. The benchmarks put one in front of each device to know the
/// bytes of each leg apart; the chaos harness puts one in front of each device to break its
/// network.
public final class RelayProxy: Sendable {
    /// How the relay treats the bytes it carries.
    public enum Mode: UInt8, Sendable, CaseIterable {
        /// Carried as they come.
        case pass
        /// Held until the mode changes (a link that went silent: no error, no bytes).
        case stall
        /// Carried 256 bytes every 25 ms (about 10 KB/s).
        case drip
        /// Each connection's bytes delayed by 0–150 ms on their own.
        case jitter
        /// New connections closed at once, open ones reset (a network that is gone).
        case cut
        /// The client's bytes reach the server; the server's answers are held (a request that
        /// went out on a connection that died before its answer came back).
        case answersHeld
        /// An HTTP server that is overloaded: open connections reset, each new one's request
        /// answered `503 SlowDown` (S3's error, in its XML) and closed — the request never reaches
        /// the server.
        case slowDown
        /// Each connection's answers held until it is ``slowAnswerSeconds`` old (a server too
        /// loaded to answer a new connection quickly); the client's bytes pass.
        case slowToAnswer
    }

    /// How old a connection is before its answers pass in ``Mode/slowToAnswer``.
    public static let slowAnswerSeconds = 2.5

    /// The port to connect to instead of the target's.
    public let port: Int
    private let listener: Int32
    let counter = Atomic<Int64>(0)
    private let stopped = Atomic<Bool>(false)
    private let modeValue = Atomic<UInt8>(Mode.pass.rawValue)
    private let targetPorts: Mutex<[Int]>
    let connections = Mutex<[ObjectIdentifier: Pair]>([:])
    /// The link's two directions, when the relay shapes its bytes as a link (``LinkShape``).
    let pacers: (up: LinkPacer, down: LinkPacer)?
    private let resets = Atomic<Int>(0)

    private init(port: Int, listener: Int32, target: Int, shape: LinkShape?) {
        self.port = port
        self.listener = listener
        targetPorts = Mutex([target])
        pacers = shape.map { (LinkPacer($0.up), LinkPacer($0.down)) }
    }

    /// Starts relaying 127.0.0.1:`target` — shaped as `shape` (what connecting clients send
    /// goes up the link, what they are sent comes down it), every connection sharing the link;
    /// a shaped relay takes no ``Mode``.
    public static func start(to target: Int, shape: LinkShape? = nil) throws -> RelayProxy {
        let (listener, port) = try loopbackSocket(listening: 64)
        let proxy = RelayProxy(port: port, listener: listener, target: target, shape: shape)
        Thread { proxy.accepting() }.start()
        return proxy
    }

    /// Bytes carried so far, both ways.
    public var bytes: Int64 { counter.load(ordering: .relaxed) }

    /// The port connections are relayed to (a restarted server may listen elsewhere).
    public var target: Int {
        get { targetPorts.withLock { $0.first ?? 0 } }
        set { targetPorts.withLock { $0 = [newValue] } }
    }

    /// The ports connections are relayed to, each new connection to one of them at random
    /// (several server instances behind one address, as behind a load balancer); none: every
    /// connection is refused.
    public var targets: [Int] {
        get { targetPorts.withLock { $0 } }
        set { targetPorts.withLock { $0 = newValue } }
    }

    /// How bytes are treated now; ``Mode/cut`` also resets every open connection.
    public var mode: Mode {
        get { Mode(rawValue: modeValue.load(ordering: .relaxed)) ?? .pass }
        set {
            modeValue.store(newValue.rawValue, ordering: .relaxed)
            if newValue == .cut || newValue == .slowDown { resetAll() }
        }
    }

    /// Connections open now.
    public var openConnections: Int { connections.withLock { $0.count } }

    /// Resets every open connection (RST to both ends); new ones are accepted as the mode says.
    public func resetAll() {
        let open = connections.withLock { Array($0.values) }
        for pair in open { pair.reset() }
        resets.add(open.count, ordering: .relaxed)
    }

    /// Stops accepting and resets what is open.
    public func stop() {
        stopped.store(true, ordering: .relaxed)
        shutdown(listener, Int32(SHUT_RDWR))
        resetAll()
    }

    private func accepting() {
        defer { close(listener) }
        while !stopped.load(ordering: .relaxed) {
            let client = SystemCall.accept(listener)
            if client < 0 {
                if stopped.load(ordering: .relaxed) { return }
                usleep(10_000)
                continue
            }
            if mode == .cut {
                Pair.abort(client)
                continue
            }
            if mode == .slowDown {
                Thread { Self.answerSlowDown(client) }.start()
                continue
            }
            guard let port = targets.randomElement() else {
                Pair.abort(client)
                continue
            }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = loopback(port: port)
            let connected = server >= 0 && withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            }
            guard connected else {
                // Nothing listens there (the server is down): the client sees a reset, as it
                // would connecting to the server itself.
                Pair.abort(client)
                if server >= 0 { close(server) }
                continue
            }
            for fd in [client, server] {
                var one: Int32 = 1
                setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            }
            let pair = Pair(client: client, server: server)
            connections.withLock { $0[ObjectIdentifier(pair)] = pair }
            if let pacers {
                shape(pair, pacers: pacers)
                continue
            }
            Thread { self.pump(from: client, to: server, pair: pair, answers: false) }.start()
            Thread { self.pump(from: server, to: client, pair: pair, answers: true) }.start()
        }
    }

    /// Reads a request's head from `client` (for at most a second), answers it 503 `SlowDown`
    /// as S3 does, and closes the connection.
    private static func answerSlowDown(_ client: Int32) {
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var head: [UInt8] = [], buffer = [UInt8](repeating: 0, count: 16 << 10)
        func complete() -> Bool { head.count >= 4 && (0...(head.count - 4)).contains { head[$0] == 13 && head[$0 + 1] == 10 && head[$0 + 2] == 13 && head[$0 + 3] == 10 } }
        while head.count < 64 << 10, !complete() {
            let count = SystemCall.retrying { recv(client, &buffer, buffer.count, 0) }
            guard count > 0 else { break }
            head += buffer[0..<count]
        }
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
        let answer = "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
        _ = Array(answer.utf8).withUnsafeBytes { SystemCall.sendAll(client, $0) }
        shutdown(client, Int32(SHUT_WR))
        // The rest of the request (a body being sent) is read and dropped until the client closes.
        while SystemCall.retrying({ recv(client, &buffer, buffer.count, 0) }) > 0 {}
        close(client)
    }

    /// The two sockets of one relayed connection, closed when both directions ended.
    final class Pair: Sendable {
        let client: Int32, server: Int32
        private let open = Atomic<Int>(2)
        private let aborted = Atomic<Bool>(false)
        /// This connection's own delay in ``Mode/jitter`` (microseconds).
        let jitter = UInt32.random(in: 0...150_000)
        /// When the connection was accepted (``Mode/slowToAnswer``).
        let accepted = ContinuousClock.now

        init(client: Int32, server: Int32) {
            self.client = client
            self.server = server
        }

        var isAborted: Bool { aborted.load(ordering: .relaxed) }

        /// Both directions end; closing sends RST (linger 0) instead of FIN.
        func reset() {
            aborted.store(true, ordering: .relaxed)
            for fd in [client, server] {
                var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
                shutdown(fd, Int32(SHUT_RDWR))
            }
        }

        /// Closes `fd` with RST.
        static func abort(_ fd: Int32) {
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
            close(fd)
        }

        /// One direction ended; returns true when it was the last.
        func ended() -> Bool {
            guard open.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return false }
            close(client)
            close(server)
            return true
        }
    }

    private func pump(from source: Int32, to destination: Int32, pair: Pair, answers: Bool) {
        defer {
            if pair.ended() { _ = connections.withLock { $0.removeValue(forKey: ObjectIdentifier(pair)) } }
        }
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while !pair.isAborted {
            let count = SystemCall.retrying { recv(source, &buffer, buffer.count, 0) }
            guard count > 0 else { break }
            counter.add(Int64(count), ordering: .relaxed)
            guard forward(buffer, count: count, to: destination, pair: pair, answers: answers) else {
                shutdown(source, Int32(SHUT_RD))
                return
            }
        }
        shutdown(destination, Int32(SHUT_WR))
    }

    /// Sends `count` bytes of `buffer` (the server's answers if `answers`) as the mode says;
    /// false when the connection is gone.
    private func forward(_ buffer: [UInt8], count: Int, to destination: Int32, pair: Pair, answers: Bool) -> Bool {
        var sent = 0
        while sent < count {
            if pair.isAborted { return false }
            var slice = count - sent
            switch mode {
            case .pass: break
            case .cut, .slowDown: return false
            case .stall:
                usleep(20_000)
                continue
            case .answersHeld:
                guard !answers else {
                    usleep(20_000)
                    continue
                }
            case .slowToAnswer:
                if answers && ContinuousClock.now < pair.accepted + .seconds(Self.slowAnswerSeconds) {
                    usleep(20_000)
                    continue
                }
            case .drip:
                slice = min(slice, 256)
                usleep(25_000)
            case .jitter:
                usleep(pair.jitter)
            }
            let wrote = buffer.withUnsafeBytes { SystemCall.sendAll(destination, UnsafeRawBufferPointer(rebasing: $0[sent..<(sent + slice)])) }
            guard wrote == slice else { return false }
            sent += slice
        }
        return true
    }
}

/// 127.0.0.1:`port`.
public func loopback(port: Int) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = UInt16(port).bigEndian
    return address
}

/// A TCP socket bound to a free port on loopback (listening, if `backlog` is given): the
/// descriptor and the port.
/// - Throws: `POSIXError` when the socket cannot be made, bound or listened on.
public func loopbackSocket(listening backlog: Int32? = nil) throws -> (fd: Int32, port: Int) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    var address = loopback(port: 0)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound, backlog.map({ listen(fd, $0) == 0 }) ?? true else {
        let code = errno
        close(fd)
        throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
    }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

/// Threads that connect to a port on loopback and close again, as fast as they can, until
/// ``stop()`` — devices retrying against a server that is stopping.
public final class ConnectionHammer: Sendable {
    private final class Flag: Sendable {
        let up = Atomic<Bool>(true)
        let finished = Atomic<Int>(0)
    }
    private let running = Flag()
    private let count: Int

    /// Starts `count` threads connecting to `port`.
    public init(port: Int, threads count: Int = 4) {
        let running = self.running
        self.count = count
        for _ in 0..<count {
            Thread {
                defer { running.finished.add(1, ordering: .relaxed) }
                while running.up.load(ordering: .relaxed) {
                    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
                    guard fd >= 0 else { continue }
                    var address = loopback(port: port)
                    _ = withUnsafePointer(to: &address) { pointer in
                        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                    }
                    close(fd)
                }
            }.start()
        }
    }

    /// Stops connecting and waits (without holding a shared thread) until every thread has.
    public func stop() async {
        running.up.store(false, ordering: .relaxed)
        while running.finished.load(ordering: .relaxed) < count { try? await Task.sleep(for: .milliseconds(5)) }
    }
}
