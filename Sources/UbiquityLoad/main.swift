// ubiquity-load: drives N simulated devices against a sync server over loopback and prints, as
// JSON, the sustained commits per second and the time from a commit to its push reaching the
// account's other devices (p50, p99).
//
//   swift run -c release ubiquity-load [--devices 100,1000] [--seconds 10] [--writers 4]
//                                      [--database postgres://… [--instances 2 [--shared-pace]]]
//   swift run -c release ubiquity-load --sign-in [--database postgres://…]
//   swift run -c release ubiquity-load --connections [--slow 300] [--idle 5000]
//   swift run -c release ubiquity-load --folder [--folder-items 10000] [--database postgres://…]
//   swift run -c release ubiquity-load --share [--flooders 64] [--seconds 10] [--database postgres://…]
//
// Each run starts its own server in this process (embedded SQLite in a temporary directory, or
// a fresh schema in the PostgreSQL database given), signs the devices in, connects each one's
// push WebSocket, then lets `writers` devices commit metadata-only revisions as fast as the
// server takes them for `seconds`. With `--instances N` (PostgreSQL), N server instances share
// the database; devices and writers are spread over them round-robin, so most pushes cross
// from one instance to another through LISTEN/NOTIFY. Each instance paces its own devices' pushes
// to the whole of an account's budget (two instances on this one machine: twice the messages of
// one); `--shared-pace` divides it among them.
//
// `--sign-in` measures sign-in as an attacker meets it, with passwords at bcrypt's default cost
// (12): the time of a wrong password for an existing account against that of an unknown account
// (they should cost the same), and `GET /health`'s latency idle and during a flood of wrong
// passwords from 32 clients — with the default throttling, and with throttling out of the way
// (what the bounded password pool alone holds).
//
// `--connections` measures what strangers' connections cost: 300 that trickle a sign-in body a
// byte a second for 30 s (the server's memory, `/health`'s p99 against idle, when the server cut
// them), then 5,000 opened and left idle with a 15 s idle timeout (whether `/health` still
// answers, and when the server closed them).
//
// `--folder` measures one commit's cost as its folder grows: single-item commits into an empty
// folder, then into one holding 10,000 items (p50, p99, and the ratio of the p50s).
//
// `--share` measures what one account's flood costs another: a neighbour's single-item commits
// (p50, p99) alone, then while `flooders` clients of one other account commit to one item as
// fast as they are answered — with each account's share at its default, and with no share
// (every request at work at once) — and the ratios of the flooded p99s to the one alone.
import Foundation
import HummingbirdWSClient
import Logging
import ServiceLifecycle
import Synchronization
import UbiquityProtocol
import UbiquityServer

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#endif

struct Options {
    var devices = [100, 1_000]
    var seconds = 10.0
    var writers = 4
    var database: String?
    var instances = 1
    /// `--shared-pace`: the instances divide one account's push budget among them (as instances
    /// sharing one host may be told to), instead of each pacing its own devices to the whole of it.
    var sharedPace = false
    var signIn = false
    var connections = false
    var folder = false
    var folderItems = 10_000
    var share = false
    var flooders = 64
    var slowConnections = 300
    var idleConnections = 5_000

    init(_ arguments: [String]) throws {
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            switch argument {
            case "--devices": devices = (rest.popFirst() ?? "").split(separator: ",").compactMap { Int($0) }
            case "--seconds": seconds = Double(rest.popFirst() ?? "") ?? seconds
            case "--writers": writers = Int(rest.popFirst() ?? "") ?? writers
            case "--database": database = rest.popFirst()
            case "--instances": instances = Int(rest.popFirst() ?? "") ?? 0
            case "--shared-pace": sharedPace = true
            case "--sign-in": signIn = true
            case "--connections": connections = true
            case "--folder": folder = true
            case "--folder-items": folderItems = max(1_000, Int(rest.popFirst() ?? "") ?? folderItems)
            case "--share": share = true
            case "--flooders": flooders = max(1, Int(rest.popFirst() ?? "") ?? flooders)
            case "--slow": slowConnections = Int(rest.popFirst() ?? "") ?? slowConnections
            case "--idle": idleConnections = Int(rest.popFirst() ?? "") ?? idleConnections
            default: throw LoadError("usage: ubiquity-load [--devices 100,1000] [--seconds S] [--writers W] [--database postgres://… [--instances N [--shared-pace]]] | --sign-in [--database postgres://…] | --connections [--slow N] [--idle N] | --folder [--folder-items N] [--database postgres://…] | --share [--flooders N] [--seconds S] [--database postgres://…]")
            }
        }
        guard !devices.isEmpty, devices.allSatisfy({ $0 >= 2 }), writers >= 1, seconds > 0, instances >= 1 else { throw LoadError("bad options") }
        guard instances == 1 || database != nil else { throw LoadError("--instances needs --database (instances share PostgreSQL)") }
    }
}

struct LoadError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

let container = "LOADTEST01.org.ubiquity.load"

/// Monotonic nanoseconds.
func now() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

/// What the run observed.
final class Observations: Sendable {
    struct State {
        var commitStarts: [Int64: (start: UInt64, writer: Int)] = [:]
        /// How long each commit's request took, seconds.
        var commitDurations: [Double] = []
        var arrivals: [(device: Int, sequence: Int64, at: UInt64)] = []
        /// The latest sequence each device has heard of.
        var latest: [Int: Int64] = [:]
        var connected = 0
        var stopped = false
    }
    let state = Mutex(State())
}

/// The port the in-process server bound.
final class BoundPort: Sendable {
    let value = Mutex(0)
}

func request(_ url: URL, method: String, token: String?, body: Data) async throws -> Data {
    var request = URLRequest(url: url)
    request.httpMethod = method
    request.httpBody = body
    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
    if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
    let (data, response) = try await URLSession.shared.data(for: request)
    guard (response as? HTTPURLResponse)?.statusCode == 200 else {
        throw LoadError("\(method) \(url.path): \((response as? HTTPURLResponse)?.statusCode ?? 0) \(String(decoding: data, as: UTF8.self))")
    }
    return data
}

/// The `"sequence":N` of a push message. (Read from its bytes: the simulated devices share the
/// two cores with the server they measure, and Foundation's string search on Linux costs a
/// few percent of the machine at 15,000 messages a second.)
func sequenceNumber(in text: String) -> Int64? {
    let bytes = Array(text.utf8)
    guard let end = bytes.endIndex(of: sequenceKey) else { return nil }
    var value: Int64 = 0, digits = 0
    for byte in bytes[end...] {
        guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { break }
        value = value * 10 + Int64(byte - UInt8(ascii: "0"))
        digits += 1
    }
    return digits > 0 ? value : nil
}

/// Whether a push message is the one that says the connection is ready.
func isConnectedMessage(_ text: String) -> Bool {
    Array(text.utf8).endIndex(of: connectedType) != nil
}

let sequenceKey = Array(#""sequence":"#.utf8)
let connectedType = Array(#""type":"connected""#.utf8)

extension Array where Element == UInt8 {
    /// Where the first occurrence of `needle` ends.
    func endIndex(of needle: [UInt8]) -> Int? {
        guard count >= needle.count else { return nil }
        for start in 0...(count - needle.count) where self[start] == needle[0] && self[start..<start + needle.count].elementsEqual(needle) {
            return start + needle.count
        }
        return nil
    }
}

func percentile(_ sorted: [Double], _ p: Double) -> Double {
    sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

func run(devices count: Int, options: Options) async throws -> [String: Any] {
    let directory = NSTemporaryDirectory() + "ubiquity-load-\(UUID().uuidString.prefix(8))"
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let logger: Logger = {
        var logger = Logger(label: "ubiquity.load")
        logger.logLevel = .error
        return logger
    }()
    var configuration = SyncServer.Configuration(dataDirectory: directory, port: 0, bcryptCost: 4)
    if let database = options.database {
        configuration.database = database + (database.contains("?") ? "&" : "?") + "search_path=load_\(UUID().uuidString.prefix(8).lowercased())"
    }
    if options.sharedPace {
        configuration.pushMessagesPerAccountPerSecond /= options.instances
    }
    // Every device signs in from this one address, 32 at a time: not an attack.
    configuration.signInPolicy.addressAttempts = 1_000_000
    configuration.signInPolicy.accountAttempts = 1_000_000
    var servers: [SyncServer] = []
    for _ in 0..<options.instances { servers.append(try await SyncServer(configuration: configuration, logger: logger)) }
    let admin = try await ServerAdministration(dataDirectory: directory, database: configuration.database, bcryptCost: 4)
    _ = try await admin.createAccount(name: "load", password: "load-test-password")
    await admin.close()
    let ports = servers.map { _ in BoundPort() }
    var apps: [any Service] = []
    for (server, port) in zip(servers, ports) { apps.append(try server.makeApplication { bound in port.value.withLock { $0 = bound } }) }
    let group = ServiceGroup(services: apps, gracefulShutdownSignals: [], logger: logger)
    let serving = Task { try await group.run() }
    let relays = servers.map { server in Task { await server.relayChanges() } }
    defer {
        serving.cancel()
        for relay in relays { relay.cancel() }
    }
    for port in ports { while port.value.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(5)) } }
    let bases = ports.map { URL(string: "http://127.0.0.1:\($0.value.withLock { $0 })")! }
    /// Device `index` uses instance `index % instances`.
    func base(_ index: Int) -> URL { bases[index % bases.count] }

    // Sign the devices in (a few at a time).
    var signedIn: [String] = []
    for batch in stride(from: 0, to: count, by: 32) {
        let signed = try await withThrowingTaskGroup(of: String.self) { group in
            for index in batch..<min(batch + 32, count) {
                group.addTask {
                    let body = try JSONEncoder().encode(SignInRequest(account: "load", password: "load-test-password", deviceName: "device-\(index)"))
                    return try JSONDecoder().decode(SignInResponse.self, from: try await request(base(index).appendingPathComponent("v1/sign-in"), method: "POST", token: nil, body: body)).token
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        signedIn += signed
    }
    let tokens = signedIn

    // Connect every device's push socket.
    let observations = Observations()
    let sockets = Task {
        await withTaskGroup(of: Void.self) { group in
            for (index, token) in tokens.enumerated() {
                group.addTask {
                    var configuration = WebSocketClientConfiguration()
                    configuration.additionalHeaders = [.authorization: "Bearer \(token)"]
                    _ = try? await WebSocketClient.connect(url: "ws://127.0.0.1:\(base(index).port!)/v1/push", configuration: configuration, logger: logger) { inbound, outbound, _ in
                        for try await message in inbound.messages(maxSize: 1 << 16) {
                            let at = now()
                            // (The devices share the machine with the server: a message is read
                            // for its type and sequence only, without a JSON decoder.)
                            guard case .text(let text) = message else { continue }
                            if isConnectedMessage(text) {
                                observations.state.withLock { $0.connected += 1 }
                            } else if let sequence = sequenceNumber(in: text) {
                                observations.state.withLock { state in
                                    state.arrivals.append((index, sequence, at))
                                    state.latest[index] = max(state.latest[index] ?? 0, sequence)
                                }
                            }
                            if observations.state.withLock({ $0.stopped }) { break }
                        }
                        try await outbound.close(.normalClosure, reason: nil)
                    }
                }
            }
        }
    }
    let connectDeadline = ContinuousClock.now + .seconds(60)
    while observations.state.withLock({ $0.connected }) < count {
        guard ContinuousClock.now < connectDeadline else { throw LoadError("only \(observations.state.withLock { $0.connected }) of \(count) devices connected") }
        try await Task.sleep(for: .milliseconds(10))
    }

    // Writers commit as fast as the server takes them.
    let writers = min(options.writers, count - 1)
    let started = now()
    let duration = UInt64(options.seconds * 1e9)
    let commits = try await withThrowingTaskGroup(of: Int.self) { group in
        for writer in 0..<writers {
            group.addTask {
                var revision: String?
                var done = 0
                while now() - started < duration {
                    let update = ItemUpdate(baseRevision: revision, name: "note-\(writer).txt", kind: .file, modificationDate: Date().timeIntervalSince1970, manifest: Manifest(chunks: []))
                    let start = now()
                    let data = try await request(base(writer).appendingPathComponent("v1/containers/\(container)/items/item-\(writer)"), method: "PUT", token: tokens[writer], body: try JSONEncoder().encode(update))
                    let response = try JSONDecoder().decode(CommitResponse.self, from: data)
                    let answered = now()
                    observations.state.withLock {
                        $0.commitStarts[response.item.sequence] = (start, writer)
                        $0.commitDurations.append(Double(answered - start) / 1e9)
                    }
                    revision = response.revision
                    done += 1
                }
                return done
            }
        }
        return try await group.reduce(0, +)
    }
    let elapsed = Double(now() - started) / 1e9

    // Let the last pushes arrive: each device hears of the last commit another device made
    // (several changes waiting for a device go as one message, the latest sequence).
    let expected = commits * (count - 1)
    let drainDeadline = ContinuousClock.now + .seconds(20)
    func caughtUp() -> Int {
        observations.state.withLock { state in
            var lastOf: [Int: Int64] = [:] // each writer's last commit
            for (sequence, commit) in state.commitStarts { lastOf[commit.writer] = max(lastOf[commit.writer] ?? 0, sequence) }
            return (0..<count).filter { device in
                let others = lastOf.filter { $0.key != device }.values.max() ?? 0
                return (state.latest[device] ?? 0) >= others
            }.count
        }
    }
    while caughtUp() < count && ContinuousClock.now < drainDeadline { try await Task.sleep(for: .milliseconds(50)) }
    let devicesCaughtUp = caughtUp()
    observations.state.withLock { $0.stopped = true }

    // For each commit and each other device: how long until the device heard of it — of its
    // sequence or a later one (several changes waiting for a device go as one message).
    let (latencies, pushesRead): ([Double], Int) = observations.state.withLock { state in
        let commits = state.commitStarts.sorted { $0.key < $1.key }
        var byDevice: [Int: [(sequence: Int64, at: UInt64)]] = [:]
        for arrival in state.arrivals { byDevice[arrival.device, default: []].append((arrival.sequence, arrival.at)) }
        var latencies: [Double] = []
        latencies.reserveCapacity(commits.count * count)
        for device in 0..<count {
            // A device's messages arrive in order of sequence (per container, and there is one).
            let heard = (byDevice[device] ?? []).sorted { $0.sequence < $1.sequence }
            var next = 0
            for (sequence, commit) in commits where commit.writer != device {
                while next < heard.count && heard[next].sequence < sequence { next += 1 }
                guard next < heard.count, heard[next].at >= commit.start else { continue }
                latencies.append(Double(heard[next].at - commit.start) / 1e9)
            }
        }
        return (latencies.sorted(), state.arrivals.count)
    }
    let commitDurations = observations.state.withLock { $0.commitDurations.sorted() }
    await group.triggerGracefulShutdown()
    sockets.cancel()
    for server in servers { await server.close() }
    let rate = (Double(commits) / elapsed).rounded(), p99 = percentile(latencies, 0.99)
    var report: [String: Any] = [
        "devices": count, "writers": writers, "instances": options.instances, "sharedPace": options.sharedPace, "seconds": (elapsed * 1000).rounded() / 1000,
        "commits": commits, "commitsPerSecond": rate,
        "pushesExpected": expected, "pushesRead": pushesRead, "commitsHeard": latencies.count, "devicesCaughtUp": devicesCaughtUp,
        "commitToPushSeconds": ["p50": percentile(latencies, 0.5), "p99": p99, "max": latencies.last ?? 0],
        "commitSeconds": ["p50": percentile(commitDurations, 0.5), "p99": percentile(commitDurations, 0.99), "max": commitDurations.last ?? 0],
    ]
    // The goal beside the figure (issue 17, held by issue 49): with 1,000 devices, at least 400
    // commits a second, every device hearing each within 100 ms at p99, every one caught up.
    if count == FanOutGoal.devices {
        report["goal"] = [
            "commitsPerSecond": FanOutGoal.commitsPerSecond, "p99Seconds": FanOutGoal.p99Seconds,
            "met": rate >= FanOutGoal.commitsPerSecond && p99 <= FanOutGoal.p99Seconds && devicesCaughtUp == count,
        ] as [String: Any]
    }
    return report
}

/// What the server must hold with 1,000 devices of one account connected (docs/Benchmarks.md).
enum FanOutGoal {
    static let devices = 1_000
    static let commitsPerSecond = 400.0
    static let p99Seconds = 0.1
}

/// Raises the open-file limit: every device holds a socket at each end.
func raiseFileLimit() {
    var limit = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    limit.rlim_cur = limit.rlim_max
    setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
}

do {
    let options = try Options(Array(CommandLine.arguments.dropFirst()))
    raiseFileLimit()
    if options.signIn || options.connections || options.folder || options.share {
        var report = try await options.signIn ? signInRun(options: options) : options.folder ? folderRun(options: options)
            : options.share ? shareRun(options: options) : connectionRun(options: options)
        report["benchmark"] = options.signIn ? "ubiquity-load --sign-in" : options.folder ? "ubiquity-load --folder"
            : options.share ? "ubiquity-load --share" : "ubiquity-load --connections"
        report["backend"] = options.database == nil ? "sqlite" : "postgresql"
        report["cores"] = ProcessInfo.processInfo.activeProcessorCount
        FileHandle.standardOutput.write(try JSONSerialization.data(withJSONObject: report, options: [.prettyPrinted, .sortedKeys]) + Data("\n".utf8))
        exit(0)
    }
    var runs: [[String: Any]] = []
    for devices in options.devices { runs.append(try await run(devices: devices, options: options)) }
    let report: [String: Any] = [
        "benchmark": "ubiquity-load", "backend": options.database == nil ? "sqlite" : "postgresql", "cores": ProcessInfo.processInfo.activeProcessorCount,
        "note": "server and devices share this machine; latency is from sending a commit to a device reading its push",
        "runs": runs,
    ]
    FileHandle.standardOutput.write(try JSONSerialization.data(withJSONObject: report, options: [.prettyPrinted, .sortedKeys]) + Data("\n".utf8))
} catch {
    FileHandle.standardError.write(Data("ubiquity-load: \(error)\n".utf8))
    exit(1)
}
