import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// How long a request may take to arrive, and how large its head may be.
///
/// Apache's `mod_reqtimeout` rule: a request's head must arrive within ``headerTimeout`` of its
/// first byte (else 408 and the connection closes); its body gets ``bodyTimeout`` plus one second
/// for every ``minimumBodyRate`` bytes received — a client sending 1 byte a second is cut after
/// about 20 seconds, one uploading a 16 MiB chunk batch at 100 kB/s is not.
package struct RequestLimits: Sendable {
    /// From a request's first byte to the end of its head. Default 20 s.
    package var headerTimeout: Duration = .seconds(20)
    /// A body's time before the bytes received extend it. Default 20 s.
    package var bodyTimeout: Duration = .seconds(20)
    /// Each this many bytes of body received extend its time by a second. Default 500.
    package var minimumBodyRate = 500
    /// Bytes of one header line (name and value). Default 16 KiB; more is answered 431.
    package var maximumHeaderFieldBytes = 16 << 10
    /// Bytes of all header lines. Default 32 KiB; more is answered 431.
    package var maximumHeaderBytes = 32 << 10
    /// Header lines. Default 100; more is answered 431.
    package var maximumHeaderFields = 100

    /// The limits of a public server.
    package init() {}
}

/// Where a connection is in its request/answer cycle, shared by ``ByteWatcher`` (the socket's
/// bytes) and ``RequestGuard`` (the decoded request); both run on the connection's event loop.
final class RequestClock {
    enum Phase {
        /// No request under way: bytes that arrive start a head.
        case between
        /// A head is arriving (since its first byte).
        case head
        /// The head was read; the body may still be arriving.
        case body
        /// Upgraded to a WebSocket: the idle timeout alone applies.
        case upgraded
        /// Refused: the connection is closing.
        case closing
    }
    var phase = Phase.between
    /// Whether the current request's end was read, and whether its answer's end was written.
    var requestEnded = false, answerEnded = false
    var timer: Scheduled<Void>?
    var bodyStarted = NIODeadline.now(), bodyBytes = 0
    /// Set by ``RequestGuard``: what to do when a head's time is up.
    var headTimedOut: (() -> Void)?

    func cancelTimer() {
        timer?.cancel()
        timer = nil
    }
}

/// The socket's first handler: a request's first byte starts its head's clock.
final class ByteWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    let clock: RequestClock
    let limits: RequestLimits

    init(clock: RequestClock, limits: RequestLimits) {
        self.clock = clock
        self.limits = limits
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if clock.phase == .between {
            clock.phase = .head
            clock.requestEnded = false
            clock.answerEnded = false
            let clock = self.clock
            clock.timer = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(limits.headerTimeout)) { clock.headTimedOut?() }
        }
        context.fireChannelRead(data)
    }
}

/// Sits behind the HTTP decoder and holds each request to ``RequestLimits``: a head that takes
/// too long is answered 408, a body that trickles is cut, a head too large is answered 431 (and
/// any other malformed request 400) — each with a JSON body, then the connection closes and the
/// log says so. It also gives a refused WebSocket upgrade its real answer (the WebSocket library
/// writes an empty 400 for every refusal; the routes note the error here, see
/// ``noteRefusal(_:on:)``). It leaves the pipeline once a connection is upgraded.
final class RequestGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    let clock: RequestClock
    let limits: RequestLimits
    let refusals: RefusalLog
    let logger: Logger
    /// Whether the request under way asked for an upgrade.
    var upgradeAsked = false
    /// Why the route refused that upgrade.
    var refusal: SyncError?
    /// Swallowing the body of an empty answer that was replaced.
    var replacing = false

    init(clock: RequestClock, limits: RequestLimits, refusals: RefusalLog, logger: Logger) {
        self.clock = clock
        self.limits = limits
        self.refusals = refusals
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // (Cycles through the clock and the timers are broken when the handler leaves.)
        clock.headTimedOut = {
            self.refuse(SyncError(.requestTimeout, "requestTimeout", "the request's head did not arrive within \(self.limits.headerTimeout)"),
                        kind: "slow head", context: context)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        clock.headTimedOut = nil
        clock.cancelTimer()
    }

    // MARK: Requests

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            clock.cancelTimer()
            clock.phase = .body
            clock.requestEnded = false
            clock.answerEnded = false
            clock.bodyStarted = .now()
            clock.bodyBytes = 0
            upgradeAsked = head.headers.contains(name: "upgrade")
            refusal = nil
            scheduleBodyCheck(context: context, at: clock.bodyStarted + TimeAmount(limits.bodyTimeout))
        case .body(let buffer):
            clock.bodyBytes += buffer.readableBytes
        case .end:
            clock.cancelTimer()
            clock.requestEnded = true
            if clock.answerEnded { clock.phase = .between }
        }
        context.fireChannelRead(data)
    }

    /// When a body's time is up, unless what arrived since extended it.
    func scheduleBodyCheck(context: ChannelHandlerContext, at deadline: NIODeadline) {
        clock.timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) {
            self.checkBody(context: context)
        }
    }

    func checkBody(context: ChannelHandlerContext) {
        guard clock.phase == .body, !clock.requestEnded else { return }
        let allowed = TimeAmount(limits.bodyTimeout) + .nanoseconds(Int64(clock.bodyBytes) * 1_000_000_000 / Int64(max(1, limits.minimumBodyRate)))
        let deadline = clock.bodyStarted + allowed
        if deadline > .now() {
            scheduleBodyCheck(context: context, at: deadline)
            return
        }
        // The route is reading the body (and may have begun its answer): the connection just closes.
        refusals.note("slow body", address: context.remoteAddress, detail: "\(clock.bodyBytes) bytes in \(limits.bodyTimeout) + their allowance", logger: logger)
        context.close(promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let parseError = error as? HTTPParserError else {
            context.fireErrorCaught(error)
            return
        }
        let refused = parseError == .headerOverflow
            ? SyncError(.requestHeaderFieldsTooLarge, "headersTooLarge",
                        "request headers are at most \(limits.maximumHeaderBytes) bytes, \(limits.maximumHeaderFieldBytes) a line, \(limits.maximumHeaderFields) lines")
            : SyncError.badRequest("malformedRequest", "the request is not well-formed HTTP/1.1 (\(parseError))")
        refuse(refused, kind: parseError == .headerOverflow ? "headers too large" : "malformed request", context: context)
    }

    /// Answers `error` (when no answer has begun) and closes the connection.
    func refuse(_ error: SyncError, kind: String, context: ChannelHandlerContext) {
        clock.cancelTimer()
        refusals.note(kind, address: context.remoteAddress, detail: error.message, logger: logger)
        if clock.phase == .head || clock.phase == .between {
            var head = HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: Int(error.status.code), reasonPhrase: error.status.reasonPhrase))
            let body = error.jsonBody()
            head.headers = ["content-type": "application/json", "content-length": "\(body.count)", "connection": "close"]
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        } else {
            context.close(promise: nil)
        }
        clock.phase = .closing
    }

    // MARK: Answers

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let head) where head.status == .switchingProtocols:
            clock.cancelTimer()
            clock.phase = .upgraded // this handler leaves once the answer is flushed

        case .head(let head) where upgradeAsked && head.status == .badRequest && head.headers["content-length"].first == "0":
            // The WebSocket library's answer to a refused upgrade: say why instead.
            let error = refusal ?? SyncError.badRequest("upgradeRefused", "this request cannot be upgraded to a WebSocket")
            let body = error.jsonBody()
            var replaced = HTTPResponseHead(version: head.version, status: HTTPResponseStatus(statusCode: Int(error.status.code), reasonPhrase: error.status.reasonPhrase))
            replaced.headers = ["content-type": "application/json", "content-length": "\(body.count)", "connection": "close"]
            replacing = true
            context.write(wrapOutboundOut(.head(replaced)), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: promise)
            return
        case .body where replacing:
            promise?.succeed()
            return
        case .end:
            replacing = false
            clock.answerEnded = true
            if clock.requestEnded && clock.phase == .body { clock.phase = .between }
        default:
            break
        }
        context.write(data, promise: promise)
    }

    func flush(context: ChannelHandlerContext) {
        context.flush()
        // Upgraded: nothing HTTP comes this way any more.
        if clock.phase == .upgraded { context.pipeline.syncOperations.removeHandler(context: context, promise: nil) }
    }

    /// Tells the connection's guard why its upgrade was refused, so that the answer says it
    /// (401 for a missing or revoked token, …) instead of the WebSocket library's empty 400.
    static func noteRefusal(_ error: SyncError, on channel: any Channel) async {
        try? await channel.eventLoop.submit {
            try channel.pipeline.syncOperations.handler(type: RequestGuard.self).refusal = error
        }.get()
    }
}

/// Says refused requests in the log: each of the first 20 in a minute, then how many more.
final class RefusalLog: Sendable {
    private let state = Mutex((minute: ContinuousClock.Instant?.none, said: 0, unsaid: 0))

    func note(_ kind: String, address: SocketAddress?, detail: String, logger: Logger) {
        let now = ContinuousClock.now
        let (say, earlier) = state.withLock { state -> (Bool, Int) in
            var earlier = 0
            if state.minute.map({ now - $0 >= .seconds(60) }) ?? true {
                earlier = state.unsaid
                state = (now, 0, 0)
            }
            if state.said < 20 {
                state.said += 1
                return (true, earlier)
            }
            state.unsaid += 1
            return (false, earlier)
        }
        if earlier > 0 { logger.notice("\(earlier) more requests were refused in the last minute (not said one by one)") }
        if say {
            logger.notice("refused a request", metadata: ["reason": "\(kind)", "address": "\(address?.ipAddress ?? "unknown")", "detail": "\(detail)"])
        }
    }
}
