import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import ServiceLifecycle
import Synchronization
import UbiquityProtocol
import UbiquityServer

/// An HTTP client with a connection pool of its own, large enough that its requests never
/// queue in the client (the flood's and the probes' are apart).
func loadClient(connections: Int) -> HTTPClient {
    var configuration = HTTPClient.Configuration()
    configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = connections
    return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
}

/// The status of `POST /v1/sign-in` for `account` and `password`, and how long it took (seconds).
func signInAttempt(_ client: HTTPClient, _ base: URL, account: String, password: String) async throws -> (status: Int, seconds: Double) {
    var request = HTTPClientRequest(url: base.appendingPathComponent("v1/sign-in").absoluteString)
    request.method = .POST
    request.headers.add(name: "Content-Type", value: "application/json")
    request.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(SignInRequest(account: account, password: password, deviceName: "load"))))
    let start = now()
    let response = try await client.execute(request, timeout: .seconds(60))
    _ = try await response.body.collect(upTo: 1 << 16)
    return (Int(response.status.code), Double(now() - start) / 1e9)
}

/// `GET /health` `count` times one after the other: the latencies (seconds), sorted.
func healthLatencies(_ client: HTTPClient, _ base: URL, count: Int) async throws -> [Double] {
    var latencies: [Double] = []
    for _ in 0..<count {
        let start = now()
        let response = try await client.execute(HTTPClientRequest(url: base.appendingPathComponent("health").absoluteString), timeout: .seconds(60))
        _ = try await response.body.collect(upTo: 1 << 16)
        guard response.status == .ok else { throw LoadError("GET /health: \(response.status.code)") }
        latencies.append(Double(now() - start) / 1e9)
    }
    return latencies.sorted()
}

/// A server on loopback with the default bcrypt cost and `policy`, an account "victim", and `body` run against it.
func withSignInServer<T>(options: Options, policy: SignInPolicy, _ body: (URL) async throws -> T) async throws -> T {
    try await withLoadServer(options: options, configure: { $0.signInPolicy = policy }, body)
}

/// A server on loopback with the default bcrypt cost, set up by `configure`, with an account
/// "victim" (password "the victim's password") and `more` accounts (the same password), and
/// `body` run against it.
func withLoadServer<T>(options: Options, accounts more: [String] = [], configure: (inout SyncServer.Configuration) -> Void, _ body: (URL) async throws -> T) async throws -> T {
    let directory = NSTemporaryDirectory() + "ubiquity-load-\(UUID().uuidString.prefix(8))"
    defer { try? FileManager.default.removeItem(atPath: directory) }
    var logger = Logger(label: "ubiquity.load")
    logger.logLevel = .error
    var configuration = SyncServer.Configuration(dataDirectory: directory, port: 0)
    configure(&configuration)
    if let database = options.database {
        configuration.database = database + (database.contains("?") ? "&" : "?") + "search_path=load_\(UUID().uuidString.prefix(8).lowercased())"
    }
    let server = try await SyncServer(configuration: configuration, logger: logger)
    let admin = try await ServerAdministration(dataDirectory: directory, database: configuration.database)
    for name in ["victim"] + more { _ = try await admin.createAccount(name: name, password: "the victim's password") }
    await admin.close()
    let port = BoundPort()
    let group = ServiceGroup(services: [try server.makeApplication { bound in port.value.withLock { $0 = bound } }], gracefulShutdownSignals: [], logger: logger)
    let serving = Task { try await group.run() }
    defer { serving.cancel() }
    while port.value.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(5)) }
    let base = URL(string: "http://127.0.0.1:\(port.value.withLock { $0 })")!
    let result = try await body(base)
    await group.triggerGracefulShutdown()
    await server.close()
    return result
}

/// A value tasks share.
final class Shared<Value: Sendable>: Sendable {
    private let value: Mutex<Value>
    init(_ initial: Value) { value = Mutex(initial) }
    func withLock<T>(_ body: (inout Value) -> T) -> T { value.withLock { body(&$0) } }
}

/// `/health` idle, then during `clients` clients sending wrong passwords as fast as answered.
func flood(_ base: URL, clients: Int, probes: Int) async throws -> [String: Any] {
    let prober = loadClient(connections: 2), flooder = loadClient(connections: clients)
    let idle = try await healthLatencies(prober, base, count: probes)
    let stop = Shared(false)
    let answers = Shared<[Int: Int]>([:])
    let flooding = Task {
        await withTaskGroup(of: Void.self) { group in
            for client in 0..<clients {
                group.addTask {
                    var attempt = 0
                    while !stop.withLock({ $0 }) {
                        attempt += 1
                        let status = (try? await signInAttempt(flooder, base, account: client % 2 == 0 ? "victim" : "nobody-\(client)", password: "guess \(attempt)").status) ?? 0
                        answers.withLock { $0[status, default: 0] += 1 }
                    }
                }
            }
        }
    }
    try await Task.sleep(for: .seconds(1)) // the flood under way
    let during = try await healthLatencies(prober, base, count: probes)
    stop.withLock { $0 = true }
    await flooding.value
    try await prober.shutdown()
    try await flooder.shutdown()
    let idleP99 = percentile(idle, 0.99), duringP99 = percentile(during, 0.99)
    return [
        "healthIdleSeconds": ["p50": percentile(idle, 0.5), "p99": idleP99],
        "healthDuringFloodSeconds": ["p50": percentile(during, 0.5), "p99": duringP99],
        "p99Ratio": idleP99 > 0 ? (duringP99 / idleP99 * 100).rounded() / 100 : 0,
        "floodAnswers": Dictionary(uniqueKeysWithValues: answers.withLock { $0 }.map { (String($0.key), $0.value) }) as [String: Int],
    ]
}

func signInRun(options: Options) async throws -> [String: Any] {
    var open = SignInPolicy()
    open.accountAttempts = 1_000_000
    open.addressAttempts = 1_000_000
    // Timing: wrong passwords for the account against unknown accounts, interleaved.
    let client = loadClient(connections: 2)
    let timing: [String: Any] = try await withSignInServer(options: options, policy: open) { base in
        _ = try await signInAttempt(client, base, account: "warm-up", password: "x") // the decoy is made
        var known: [Double] = [], unknown: [Double] = []
        for index in 0..<15 {
            let wrong = try await signInAttempt(client, base, account: "victim", password: "guess \(index)")
            let nobody = try await signInAttempt(client, base, account: "nobody-\(index)", password: "guess \(index)")
            guard wrong.status == 401, nobody.status == 401 else { throw LoadError("expected 401s, got \(wrong.status) and \(nobody.status)") }
            known.append(wrong.seconds)
            unknown.append(nobody.seconds)
        }
        known.sort()
        unknown.sort()
        let (a, b) = (percentile(known, 0.5), percentile(unknown, 0.5))
        return ["wrongPasswordSeconds": a, "unknownAccountSeconds": b, "unknownToWrongRatio": (b / a * 100).rounded() / 100]
    }
    try await client.shutdown()
    let throttled = try await withSignInServer(options: options, policy: SignInPolicy()) { try await flood($0, clients: 32, probes: 1_000) }
    let unthrottled = try await withSignInServer(options: options, policy: open) { try await flood($0, clients: 32, probes: 1_000) }
    return [
        "note": "bcrypt cost 12; all clients on 127.0.0.1; the flood alternates the existing account and unknown ones",
        "signInTiming": timing,
        "floodWithDefaultThrottling": throttled,
        "floodWithoutThrottling": unthrottled,
    ]
}
