import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ServiceLifecycle
import Synchronization

/// One request through a ``HostileRelay`` and the server's answer, as a tamper sees it.
struct RelayedExchange: Sendable {
    /// GET, POST, …
    var method: String
    /// The path with its query (`/v1/keys?for=…`).
    var path: String
    /// The request's body.
    var requestBody: Data
    /// The answer's status.
    var status: Int
    /// The answer's body.
    var body: Data
    /// The answer's content type.
    var contentType: String?
    /// The answer's other headers, carried to the device as they came (a sealed patch's base, a
    /// retry time, …; not those of the connection, the body's length or encoding, nor the
    /// server's offer to take gzip: what devices send through a relay stays readable to tests).
    var headers: [(name: String, value: String)] = []

    /// The answer decoded as `type` (nil if it is not).
    func decoded<T: Decodable>(_ type: T.Type) -> T? { try? JSONDecoder().decode(type, from: body) }

    /// The answer replaced by `value`, encoded.
    mutating func encode(_ value: some Encodable) {
        body = (try? JSONEncoder().encode(value)) ?? body
        contentType = "application/json"
    }
}

/// A server that lies: an HTTP relay on loopback in front of a real server, which carries each
/// request to it and lets a test change, drop or replace the answer (``tamper``), or answer
/// without asking the server at all (``intercept``) — what a malicious or compromised server can
/// do, with the real server's storage and rules behind it. Answers are carried uncompressed (the
/// relay asks for them so and hides the server's offer of gzip, so clients send plain bodies
/// too). Push connections (WebSockets) are not carried: devices behind it sync by asking.
final class HostileRelay: Sendable {
    /// Where devices connect instead of the server.
    let base: URL
    private let services: ServiceGroup
    /// Changes the server's answer; nil from it drops the answer (502).
    let tamper = Mutex<(@Sendable (RelayedExchange) -> RelayedExchange?)?>(nil)
    /// Answers instead of the server (nil from it: the request goes on to the server).
    let intercept = Mutex<(@Sendable (RelayedExchange) -> RelayedExchange?)?>(nil)
    /// Every exchange so far, as the server answered it (before tampering).
    let exchanges = Mutex<[RelayedExchange]>([])

    private init(base: URL, services: ServiceGroup) {
        self.base = base
        self.services = services
    }

    /// Starts a relay in front of `server`.
    static func start(to server: URL) async throws -> HostileRelay {
        let (ports, portSent) = AsyncStream.makeStream(of: Int.self)
        let box = Mutex<HostileRelay?>(nil)
        let router = Router()
        router.add(middleware: Forwarding(server: server, relay: { box.withLock { $0 } }))
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                              onServerRunning: { channel in portSent.yield(channel.localAddress?.port ?? 0) })
        // Stopped gracefully, never by cancelling its task: a connection accepted just as the
        // serving task is cancelled traps in NIO (swift-nio#3481; a device retrying through the
        // relay as a test ends, seen in CI).
        // No limit on the graceful shutdown either: past one the group cancels the serving task,
        // which is the same trap (a full run, 2026-11-29: a push connection an agent still held
        // kept the shutdown past its 5 s, and a connection accepted then crashed the test
        // process). The listening socket closes at once; the task ends when the last open
        // connection does (its peer's process stops).
        let configuration = ServiceGroupConfiguration(services: [app], gracefulShutdownSignals: [], logger: app.logger)
        let services = ServiceGroup(configuration: configuration)
        Task { try await services.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            await services.triggerGracefulShutdown()
            throw CocoaError(.fileReadUnknown)
        }
        let relay = HostileRelay(base: URL(string: "http://127.0.0.1:\(port)")!, services: services)
        box.withLock { $0 = relay }
        return relay
    }

    /// Stops relaying: the listening socket closes now, open requests finish (without waiting).
    func stop() { Task { [services] in await services.triggerGracefulShutdown() } }

    /// From now on, answers to `method` requests whose path satisfies `matches` reach the client
    /// decoded as `T`, changed by `change` and encoded again (answers of another shape pass as
    /// they are).
    func rewrite<T: Codable & Sendable>(_ type: T.Type, method: String = "GET", where matches: @escaping @Sendable (String) -> Bool,
                             _ change: @escaping @Sendable (inout T) -> Void) {
        tamper.withLock {
            $0 = { exchange in
                guard exchange.method == method, matches(exchange.path), var value = exchange.decoded(T.self) else { return exchange }
                change(&value)
                var changed = exchange
                changed.encode(value)
                return changed
            }
        }
    }

    /// The last answer to a request whose path satisfies `matches`, decoded as `T`.
    func last<T: Decodable>(_ type: T.Type, where matches: (String) -> Bool) -> T? {
        exchanges.withLock { $0.last { matches($0.path) } }?.decoded(T.self)
    }

    /// Carries every request to the server and the (tampered) answer back.
    struct Forwarding: RouterMiddleware {
        typealias Context = BasicRequestContext
        let server: URL
        let relay: @Sendable () -> HostileRelay?

        func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
            guard let relay = relay() else { return Response(status: .serviceUnavailable) }
            let path = request.uri.description
            let requestBody = Data(buffer: try await request.body.collect(upTo: 64 << 20))
            let asked = RelayedExchange(method: request.method.rawValue, path: path, requestBody: requestBody, status: 0, body: Data(), contentType: nil)
            if let intercept = relay.intercept.withLock({ $0 }), let faked = intercept(asked) { return Self.response(faked) }
            var outgoing = HTTPClientRequest(url: server.absoluteString.trimmingCharacters(in: CharacterSet(charactersIn: "/")) + path)
            outgoing.method = .RAW(value: request.method.rawValue)
            for field in request.headers where field.name != .acceptEncoding && field.name != .contentLength {
                outgoing.headers.add(name: field.name.rawName, value: field.value)
            }
            if !requestBody.isEmpty { outgoing.body = .bytes(ByteBuffer(bytes: requestBody)) }
            let answer = try await HTTPClient.shared.execute(outgoing, timeout: .seconds(60))
            var exchange = asked
            exchange.status = Int(answer.status.code)
            exchange.contentType = answer.headers.first(name: "content-type")
            let hopByHop: Set<String> = ["content-type", "content-length", "content-encoding", "accept-encoding", "transfer-encoding", "connection", "keep-alive", "date", "server"]
            exchange.headers = answer.headers.filter { !hopByHop.contains($0.name.lowercased()) }.map { ($0.name, $0.value) }
            exchange.body = Data(buffer: try await answer.body.collect(upTo: 64 << 20))
            relay.exchanges.withLock { $0.append(exchange) }
            guard let tamper = relay.tamper.withLock({ $0 }) else { return Self.response(exchange) }
            guard let changed = tamper(exchange) else { return Response(status: .badGateway) }
            return Self.response(changed)
        }

        static func response(_ exchange: RelayedExchange) -> Response {
            var headers = HTTPFields()
            if let type = exchange.contentType { headers[.contentType] = type }
            for (name, value) in exchange.headers { if let field = HTTPField.Name(name) { headers.append(HTTPField(name: field, value: value)) } }
            return Response(status: .init(code: exchange.status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: exchange.body)))
        }
    }
}
