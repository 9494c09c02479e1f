import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization
import UbiquityClient

#if canImport(Glibc)
import Glibc
#endif

/// The agent's local socket: apps and the `ubiquity` command send one JSON request per line
/// (``AgentRequest``) and get one JSON answer per line (``AgentResponse``). Only this user can
/// reach it: the socket is in a folder of mode 0700, has mode 0600 itself, and a connecting
/// process of another user is turned away (its credentials are checked with `SO_PEERCRED`).
enum AgentControlServer {
    /// Serves `socket` until the task is cancelled.
    /// - Throws: ``AgentError`` when another agent already answers there, or the
    ///   socket's folder is not this user's alone.
    static func run(socket: URL, logger: Logger, answer: @escaping @Sendable (AgentRequest) async -> AgentResponse,
                    watch: @escaping @Sendable (AgentRequest) async -> AsyncStream<AgentResponse>) async throws {
        let folder = socket.deletingLastPathComponent()
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var info = stat()
        guard stat(folder.path, &info) == 0, info.st_uid == getuid() else {
            throw AgentError(.failed, "the agent's socket folder \(folder.path) belongs to another user")
        }
        if info.st_mode & 0o077 != 0 { chmod(folder.path, 0o700) }
        if (try? AgentConnection(socket: socket).send(AgentRequest(.status), timeout: .seconds(2))) != nil { // no answer: no other agent
            throw AgentError(.failed, "another agent already answers at \(socket.path)")
        }
        let accepted = AcceptedConnections()
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(unixDomainSocketPath: socket.path, cleanupExistingSocketFile: true) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(LineDecoder()))
                    return try accepted.wrap(channel)
                }
            }
        chmod(socket.path, 0o600)
        logger.info("agent answering", metadata: ["socket": "\(socket.path)"])
        defer { unlink(socket.path) }
        // Stopping closes the listening socket. A connection NIO accepted but the closed stream
        // no longer hands over is still in `accepted` and closed there: NIO stops the process
        // when an accepted connection is dropped unclosed.
        let channel = server.channel
        let accepting = Task {
            try await withThrowingDiscardingTaskGroup { group in
                try await server.executeThenClose { connections in
                    for try await connection in connections {
                        accepted.handedOver(connection)
                        group.addTask { await serve(connection, logger: logger, answer: answer, watch: watch) }
                    }
                }
                for leftover in accepted.close() {
                    try? await leftover.executeThenClose { _, _ in } // closing a connection nobody used: nothing to report
                }
                group.cancelAll() // the socket is closed: the connections end too
            }
        }
        try await withTaskCancellationHandler {
            try await accepting.value
        } onCancel: {
            channel.close(promise: nil)
        }
    }

    /// The connections wrapped for the accept loop and not yet taken by it. Wrapping and
    /// closing are under one lock, so every wrapped connection is either served or closed
    /// here — none is wrapped after the leftovers were closed.
    final class AcceptedConnections: Sendable {
        private let state = Mutex<(closed: Bool, waiting: [ObjectIdentifier: NIOAsyncChannel<ByteBuffer, ByteBuffer>])>((false, [:]))

        /// Wraps `channel` (on its event loop) unless the server has stopped.
        func wrap(_ channel: any Channel) throws -> NIOAsyncChannel<ByteBuffer, ByteBuffer> {
            try state.withLock { state in
                guard !state.closed else { throw AgentError(.stopping, "the agent is stopping") }
                let wrapped = try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                state.waiting[ObjectIdentifier(channel)] = wrapped
                return wrapped
            }
        }

        /// The accept loop took `connection`: serving it closes it.
        func handedOver(_ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>) {
            _ = state.withLock { $0.waiting.removeValue(forKey: ObjectIdentifier(connection.channel)) }
        }

        /// Refuses further connections; answers those wrapped but never handed over.
        func close() -> [NIOAsyncChannel<ByteBuffer, ByteBuffer>] {
            state.withLock { state in
                state.closed = true
                defer { state.waiting = [:] }
                return Array(state.waiting.values)
            }
        }
    }

    static func serve(_ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>, logger: Logger, answer: @escaping @Sendable (AgentRequest) async -> AgentResponse,
                      watch: @escaping @Sendable (AgentRequest) async -> AsyncStream<AgentResponse>) async {
        if let uid = await peerUser(connection.channel), uid != getuid() {
            logger.warning("turned away a connection from another user", metadata: ["uid": "\(uid)"])
            try? await connection.executeThenClose { _, _ in } // closed unanswered (closing a wrapped connection any other way stops the process)
            return
        }
        // A client that goes away mid-answer ends its own connection; nothing else depends on it.
        try? await connection.executeThenClose { inbound, outbound in
            for try await line in inbound {
                let response: AgentResponse
                do {
                    let request = try JSONDecoder().decode(AgentRequest.self, from: Data(line.readableBytesView))
                    if request.operation == .watch {
                        // A stream of answers until the client goes (a failed write ends it).
                        for await update in await watch(request) {
                            var data = try JSONEncoder().encode(update)
                            data.append(UInt8(ascii: "\n"))
                            try await outbound.write(ByteBuffer(bytes: data))
                        }
                        return
                    }
                    response = await answer(request)
                } catch let error as DecodingError {
                    response = AgentResponse(error: AgentError(.badRequest, "not a request the agent understands: \(error)"))
                }
                var data = try JSONEncoder().encode(response)
                data.append(UInt8(ascii: "\n"))
                try await outbound.write(ByteBuffer(bytes: data))
            }
        }
    }

    /// The user id of the process at the other end, when the platform says.
    static func peerUser(_ channel: any Channel) async -> uid_t? {
        guard let provider = channel as? any SocketOptionProvider else { return nil }
        // Unknown peer credentials count as another user's: the connection is refused.
        let credentials: PeerCredentials? = try? await provider.unsafeGetSocketOption(
            level: NIOBSDSocket.OptionLevel(rawValue: SOL_SOCKET), name: NIOBSDSocket.Option(rawValue: SO_PEERCRED)).get()
        return credentials?.uid
    }
}

/// `struct ucred` (Glibc hides it without `_GNU_SOURCE`): what `SO_PEERCRED` answers.
struct PeerCredentials {
    var pid: Int32
    var uid: UInt32
    var gid: UInt32
}

/// Splits a byte stream into lines (without their `\n`); a line over 1 MiB is an error.
struct LineDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let end = buffer.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) else {
            if buffer.readableBytes > 1 << 20 { throw AgentError(.badRequest, "request longer than 1 MiB") }
            return .needMoreData
        }
        let line = buffer.readSlice(length: end - buffer.readerIndex)!
        buffer.moveReaderIndex(forwardBy: 1)
        context.fireChannelRead(wrapInboundOut(line))
        return .continue
    }
}
