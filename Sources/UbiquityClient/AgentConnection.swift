import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A connection to this user's agent over its local socket (``UbiquityPaths/agentSocket``):
/// one request, one answer. What the client API and `ubiquity ls/download/evict` use.
public struct AgentConnection: Sendable {
    /// The socket's path.
    public let socket: URL

    /// A connection to the agent of `paths`.
    public init(paths: UbiquityPaths = UbiquityPaths()) {
        socket = paths.agentSocket
    }

    /// A connection to the agent answering at `socket`.
    public init(socket: URL) {
        self.socket = socket
    }

    /// Sends `request` and returns the agent's answer.
    /// - Parameter timeout: How long to wait for the answer (nil: as long as it takes).
    /// - Throws: ``AgentConnectionError`` when the agent is not running or does not answer, or
    ///   answers with an error.
    public func send(_ request: AgentRequest, timeout: Duration? = .seconds(30)) throws -> AgentResponse {
        let descriptor = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw AgentConnectionError(reason: "cannot create a socket: \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array(socket.path.utf8)
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw AgentConnectionError(reason: "the agent's socket path is too long: \(socket.path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path)
            raw[path.count] = 0
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            throw AgentConnectionError(reason: "the agent is not running (no answer at \(socket.path): \(String(cString: strerror(errno)))); start it with `ubiquity agent` or `systemctl --user start ubiquity-agent`")
        }
        if let timeout {
            let seconds = timeout.components.seconds
            var value = timeval(tv_sec: Int(seconds), tv_usec: Int(timeout.components.attoseconds / 1_000_000_000_000))
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        }
        var line = try JSONEncoder().encode(request)
        line.append(UInt8(ascii: "\n"))
        try line.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = write(descriptor, raw.baseAddress! + offset, raw.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    throw AgentConnectionError(reason: "cannot write to the agent: \(String(cString: strerror(errno)))")
                }
                offset += written
            }
        }
        var answer = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while !answer.contains(UInt8(ascii: "\n")) {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { throw AgentConnectionError(reason: "the agent did not answer in time") }
            guard count > 0 else { throw AgentConnectionError(reason: "the agent closed the connection without answering") }
            answer.append(contentsOf: buffer[0..<count])
        }
        let response: AgentResponse
        do {
            response = try JSONDecoder().decode(AgentResponse.self, from: Data(answer.prefix { $0 != UInt8(ascii: "\n") }))
        } catch {
            throw AgentConnectionError(reason: "the agent's answer is not understood: \(error)")
        }
        if let error = response.error { throw AgentConnectionError(reason: error) }
        return response
    }
}

/// The agent could not be asked, or refused.
public struct AgentConnectionError: Error, CustomStringConvertible, Equatable, LocalizedError {
    /// Why.
    public var reason: String

    /// Creates an error.
    public init(reason: String) {
        self.reason = reason
    }

    /// The reason.
    public var description: String { reason }
    /// The reason.
    public var errorDescription: String? { reason }
}
