import Foundation
import UbiquityFiles
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A connection to this user's agent over its local socket (`UbiquityPaths.agentSocket` in
/// `UbiquityClient`, which adds `init(paths:)`): one request, one answer. What the client API
/// and `ubiquity ls/download/evict` use.
public struct AgentConnection: Sendable {
    /// The socket's path.
    public let socket: URL

    /// A connection to the agent answering at `socket`.
    public init(socket: URL) {
        self.socket = socket
    }

    /// Sends `request` and returns the agent's answer.
    /// - Parameter timeout: How long to wait for the answer (nil: as long as it takes).
    /// - Throws: ``AgentError`` when the agent is not running (`notRunning`), does not answer
    ///   (`noAnswer`), or answers with an error (its code).
    public func send(_ request: AgentRequest, timeout: Duration? = .seconds(30)) throws -> AgentResponse {
        let descriptor = try connect(sending: request, timeout: timeout)
        defer { close(descriptor) }
        var reader = LineReader(descriptor: descriptor)
        guard let response = try reader.next() else { throw AgentError(.noAnswer, "the agent closed the connection without answering") }
        if let error = response.error { throw error }
        return response
    }

    /// Follows a container's item statuses: the agent sends every item's status first, then
    /// the items whose status changed, each time some did, until ``AgentStatusStream/close()``.
    /// - Throws: ``AgentError`` (`notRunning`) when the agent is not running.
    public func watch(container: String) throws -> AgentStatusStream {
        AgentStatusStream(descriptor: try connect(sending: AgentRequest(.watch, container: container), timeout: nil))
    }

    /// Connects, sends `request`, and returns the open descriptor.
    private func connect(sending request: AgentRequest, timeout: Duration?) throws -> Int32 {
        let descriptor = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw AgentError(.notRunning, "cannot create a socket: \(String(cString: strerror(errno)))") }
        var ok = false
        defer { if !ok { close(descriptor) } }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array(socket.path.utf8)
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw AgentError(.notRunning, "the agent's socket path is too long: \(socket.path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path)
            raw[path.count] = 0
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            throw AgentError(.notRunning, "the agent is not running (no answer at \(socket.path): \(String(cString: strerror(errno)))); start it with `ubiquity agent` or `systemctl --user start ubiquity-agent`")
        }
        if let timeout {
            let seconds = timeout.components.seconds
            var value = timeval(tv_sec: Int(seconds), tv_usec: Int(timeout.components.attoseconds / 1_000_000_000_000))
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        }
        var line = try JSONEncoder().encode(request)
        line.append(UInt8(ascii: "\n"))
        if line.withUnsafeBytes({ SystemCall.writeAll(descriptor, $0) }) < 0 {
            throw AgentError(.noAnswer, "cannot write to the agent: \(String(cString: strerror(errno)))")
        }
        ok = true
        return descriptor
    }
}

/// Reads the agent's answers, one JSON line each.
struct LineReader {
    let descriptor: Int32
    private var pending = [UInt8]()

    init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// Whether a whole answer has been read and not yet returned.
    var holdsAnswer: Bool { pending.contains(UInt8(ascii: "\n")) }

    /// The next answer; nil when the connection closed.
    mutating func next() throws -> AgentResponse? {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while !pending.contains(UInt8(ascii: "\n")) {
            let count = buffer.withUnsafeMutableBytes { SystemCall.read(descriptor, into: $0) }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { throw AgentError(.noAnswer, "the agent did not answer in time") }
            guard count > 0 else { return nil }
            pending.append(contentsOf: buffer[0..<count])
        }
        let end = pending.firstIndex(of: UInt8(ascii: "\n"))!
        let line = Data(pending[..<end])
        pending.removeSubrange(...end)
        do {
            return try JSONDecoder().decode(AgentResponse.self, from: line)
        } catch {
            throw AgentError(.noAnswer, "the agent's answer is not understood: \(error)")
        }
    }
}

/// A container's status changes as the agent sends them (``AgentConnection/watch(container:)``).
public final class AgentStatusStream: Sendable {
    private let descriptor: Int32
    private let reader: Mutex<LineReader>
    private let closed = Atomic<Bool>(false)

    init(descriptor: Int32) {
        self.descriptor = descriptor
        reader = Mutex(LineReader(descriptor: descriptor))
    }

    deinit {
        close()
        Glibc.close(descriptor)
    }

    /// Waits for the next change: the items whose status changed; nil once the agent stopped
    /// or the stream was closed.
    public func next() -> [UbiquityItemStatus]? {
        guard !closed.load(ordering: .relaxed) else { return nil }
        // A broken connection is the end of the stream (the agent stopped): the caller sees nil.
        guard let response = try? reader.withLock({ try $0.next() }), response.error == nil else { return nil }
        return response.items ?? []
    }

    /// Whether the agent has written something within `timeout`: an answer (``next()`` then
    /// returns it without waiting for the agent), or the connection's end. False when it said
    /// nothing in that time — a slow agent (a loaded machine, a long round), not a stopped one:
    /// what it sends later is still there for ``next()``.
    public func isReady(within timeout: Duration) -> Bool {
        if reader.withLock({ $0.holdsAnswer }) { return true }
        var descriptors = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
        let milliseconds = timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000
        // An error (a broken descriptor) counts as ready: next() then says the stream ended.
        return SystemCall.poll(&descriptors, timeout: Int32(clamping: milliseconds)) != 0
    }

    /// Stops following (a waiting ``next()`` returns nil).
    public func close() {
        guard !closed.exchange(true, ordering: .relaxed) else { return }
        shutdown(descriptor, Int32(SHUT_RDWR))
    }
}
