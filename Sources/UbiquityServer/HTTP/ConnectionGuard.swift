import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// What a connection may hold of the server: how many there are at once, and how long one may
/// sit without a byte either way.
package struct ConnectionLimits: Sendable {
    /// Connections open at once; the next one is closed as soon as it is accepted (and said in
    /// the log, once a minute at most).
    package var maximum = 10_000
    /// A connection with nothing read or written for this long is closed — one that never sends
    /// a request, an idle keep-alive, a push connection whose device stopped answering the
    /// server's pings (every 30 s).
    package var idleTimeout: Duration = .seconds(90)

    /// The limits of a public server.
    package init() {}
}

/// The HTTP/1 + WebSocket channel of every connection, with ``ConnectionLimits`` in front: a
/// connection over the limit is closed at once, and one idle for too long is closed (the
/// WebSocket library's own idle timer only starts after a first request).
struct GuardedChannel<Inner: ServerChildChannel>: ServerChildChannel {
    typealias Value = Inner.Value
    let inner: Inner
    let limits: ConnectionLimits
    let requestLimits: RequestLimits
    let open: OpenConnections
    let refusals: RefusalLog

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard open.enter(limit: limits.maximum) else {
            open.sayRefused(logger: logger, limit: limits.maximum)
            channel.close(promise: nil)
            return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
        }
        channel.closeFuture.whenComplete { _ in open.leave() }
        let clock = RequestClock()
        do {
            try channel.syncOptions?.setOption(ChannelOptions.recvAllocator, value: Self.reads)
            try channel.pipeline.syncOperations.addHandlers([
                ByteWatcher(clock: clock, limits: requestLimits),
                IdleStateHandler(allTimeout: TimeAmount(limits.idleTimeout)), IdleCloser(logger: logger),
            ], position: .first)
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        let (requestLimits, refusals) = (self.requestLimits, self.refusals)
        return inner.setup(channel: channel, logger: logger).assumeIsolated().flatMapThrowing { value in
            // Behind the HTTP decoder (there once the inner channel is set up).
            let operations = channel.pipeline.syncOperations
            let decoder = try operations.context(handlerType: ByteToMessageHandler<HTTPRequestDecoder>.self)
            try operations.addHandler(RequestGuard(clock: clock, limits: requestLimits, refusals: refusals, logger: logger), position: .after(decoder.handler))
            return value
        }.nonisolated()
    }

    /// How much one read of a connection takes at most: 256 KiB, where NIO's default is 64 KiB
    /// (growing from 2 KiB only while reads fill what they are given, shrinking when they do
    /// not). A large body — a batch of chunks — then reaches the routes in a quarter as many
    /// pieces, each handed from the event loop to a task; what is held is bounded by the
    /// connection limit as before (the kernel holds as much for a connection that is not read).
    static var reads: AdaptiveRecvByteBufferAllocator { AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 2048, maximum: 256 << 10) }

    func handle(value: Value, logger: Logger) async {
        var quiet = logger
        quiet.handler = ClosedBeforeRequestFilter(base: logger.handler)
        await inner.handle(value: value, logger: quiet)
    }
}

/// Closes a connection on which nothing was read or written for the idle timeout.
final class IdleCloser: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = NIOAny
    let logger: Logger

    init(logger: Logger) { self.logger = logger }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let idle = event as? IdleStateHandler.IdleStateEvent, idle == .all {
            logger.debug("closing an idle connection", metadata: ["address": "\(context.remoteAddress?.description ?? "unknown")"])
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}

/// How many connections are open, shared by every connection's channel.
final class OpenConnections: Sendable {
    private let state = Mutex((count: 0, lastSaid: ContinuousClock.Instant?.none))

    /// Counts one more if fewer than `limit` are open; whether it did.
    func enter(limit: Int) -> Bool {
        state.withLock { state in
            guard state.count < limit else { return false }
            state.count += 1
            return true
        }
    }

    func leave() { state.withLock { $0.count -= 1 } }

    /// How many are open.
    var count: Int { state.withLock { $0.count } }

    /// Logs a refused connection, at most once a minute.
    func sayRefused(logger: Logger, limit: Int) {
        let now = ContinuousClock.now
        let say = state.withLock { state in
            if let last = state.lastSaid, now - last < .seconds(60) { return false }
            state.lastSaid = now
            return true
        }
        if say { logger.warning("connection refused: the server holds its most connections", metadata: ["limit": "\(limit)"]) }
    }
}

/// Says at `debug`, not `error`, what the WebSocket library logs when a connection closes before
/// its first request was read — a client that connected and went, or one this server closed for
/// idling or trickling (already said once, by ``RefusalLog`` or ``IdleCloser``). A stranger who
/// opens and drops connections cannot fill the log with errors; every other message passes as is.
struct ClosedBeforeRequestFilter: LogHandler {
    var base: any LogHandler

    var metadata: Logger.Metadata {
        get { base.metadata }
        set { base.metadata = newValue }
    }
    var logLevel: Logger.Level {
        get { base.logLevel }
        set { base.logLevel = newValue }
    }
    var metadataProvider: Logger.MetadataProvider? {
        get { base.metadataProvider }
        set { base.metadataProvider = newValue }
    }
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { base[metadataKey: key] }
        set { base[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        if event.level == .error, event.message.description == "Error handling upgrade result",
           event.metadata?["error.type"].map({ "\($0)".contains("Inappropriate operation for state") }) == true {
            guard base.logLevel <= .debug else { return }
            event.level = .debug
            event.message = "the connection closed before its first request"
        }
        base.log(event: event)
    }
}
