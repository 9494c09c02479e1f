import AsyncHTTPClient
import Foundation
import Synchronization
import Ubiquity
import UbiquityTestSupport

#if canImport(Glibc)
import Glibc
#endif

let container = "BENCH12345.com.example.bench"

/// Two folders kept in step by one system, and a way to wait until it has nothing left to do.
protocol Peer: Sendable {
    var name: String { get }
    /// Where files are written.
    var sideA: URL { get }
    /// Where they must arrive.
    var sideB: URL { get }
    /// The system's processes (their CPU time is the sync's).
    var processIDs: [pid_t] { get }
    /// Their names, in the same order.
    var processNames: [String] { get }
    /// Bytes on each leg so far (both directions of each).
    func legs() -> [String: Int64]
    /// Bytes on device B's link so far (both directions: what arrives is most of it).
    func arrivingBytes() -> Int64
    func settle() async throws
    func stop() async
}

/// Ubiquity as a user runs it: `ubiquity serve` (embedded storage) and two devices, each with
/// its own home and a `ubiquity agent --greedy` process, every process separate from this
/// one. Each device reaches the server through its own counting relay.
final class UbiquityPeer: Peer {
    let name = "ubiquity"
    let sideA: URL
    let sideB: URL
    /// The two containers' folders (beside `Documents`).
    let rootA: URL
    let rootB: URL
    /// Every device's container folder, in order (a, b, and c when there is a participant).
    let roots: [URL]
    let devices: [UbiquityContainers]
    let processes: Mutex<[ChildProcess]>
    let processIDs: [pid_t]
    let relays: [RelayProxy]

    var processNames: [String] { Array(["server", "agentA", "agentB", "agentC"].prefix(processIDs.count)) }

    /// The devices' runtime folders (on tmpfs), removed when stopping.
    let runtimes: [URL]

    /// The server's port on loopback (the devices reach it through ``relays``).
    let serverPort: Int

    /// Device A's keyring (the account's keys, which `ubiquity login` set up).
    let keyringA: URL

    private init(roots: [URL], devices: [UbiquityContainers], processes: [ChildProcess], relays: [RelayProxy], runtimes: [URL], serverPort: Int, keyringA: URL) {
        self.keyringA = keyringA
        self.runtimes = runtimes
        self.serverPort = serverPort
        rootA = roots[0]
        rootB = roots[1]
        self.roots = roots
        sideA = roots[0].appendingPathComponent("Documents")
        sideB = roots[1].appendingPathComponent("Documents")
        self.devices = devices
        self.processes = Mutex(processes)
        processIDs = processes.map(\.processIdentifier)
        self.relays = relays
    }

    /// The `ubiquity` executable built beside this one.
    static var executable: URL {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("ubiquity")
    }

    /// - Parameter sealed: Whether the agents seal the container's chunks (`sealedContents`).
    /// - Parameter advanced: Whether device A switches the account to Advanced Data Protection
    ///   once both agents run (the server then holds no key; devices hold back what no signed
    ///   commit names yet: docs/Encryption.md, "Coverage under Advanced").
    /// - Parameter binary: The `ubiquity` every process runs (another build's, to compare).
    /// - Parameter participant: Another account, made for a third device ("c", signed in as it):
    ///   for the sharing figures.
    /// - Parameter storage: The server's storage arguments (default: `--data` in `folder`).
    /// - Parameter serving: More arguments for `ubiquity serve` only (an escrow key's file).
    /// - Parameter link: The shape of each device's link to the server (nil: loopback as it is).
    static func start(in folder: URL, sealed: Bool = false, advanced: Bool = false, binary: URL = executable, participant: String? = nil,
                      storage: [String]? = nil, serving: [String] = [], link: LinkShape? = nil, streamUploads: Bool = true) async throws -> UbiquityPeer {
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            throw BenchError("\(binary.path) is missing: swift build -c release --product ubiquity")
        }
        let storage = storage ?? ["--data", folder.appendingPathComponent("server").path]
        let created = try run(binary, ["account", "create", "ada"] + storage + ["--password-stdin", "--quota", "\(Int64(1) << 40)"], input: "correct horse\n")
        guard created.status == 0 else { throw BenchError("ubiquity account create: \(created.output)") }
        if let participant {
            let other = try run(binary, ["account", "create", participant] + storage + ["--password-stdin", "--quota", "\(Int64(1) << 40)"], input: "correct horse\n")
            guard other.status == 0 else { throw BenchError("ubiquity account create: \(other.output)") }
        }

        let server = ChildProcess()
        server.executableURL = binary
        server.arguments = ["serve"] + storage + serving + ["--port", "0", "--log-level", "error"]
        let output = Pipe()
        server.standardOutput = output
        try server.run()
        var said = ""
        while !said.contains("listening on") {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            said += String(decoding: chunk, as: UTF8.self)
        }
        guard let address = said.split(separator: " ").first(where: { $0.hasPrefix("http") }), let port = URL(string: String(address))?.port else {
            server.terminate()
            throw BenchError("ubiquity serve did not say where it listens: \(said)")
        }

        var processes = [server], devices: [UbiquityContainers] = [], relays: [RelayProxy] = [], roots: [URL] = [], runtimes: [URL] = [], keyrings: [URL] = []
        var environments: [[String: String]] = []
        do {
            for name in ["a", "b"] + (participant == nil ? [] : ["c"]) {
                let home = folder.appendingPathComponent(name)
                // The runtime folder on tmpfs, as systemd gives every session (/run/user/UID):
                // the agent's socket and the file coordination locks live there.
                let runtime = URL(fileURLWithPath: "/dev/shm/ubiquity-sync-bench-\(getpid())-\(name)")
                try? FileManager.default.removeItem(at: runtime) // a leftover of an earlier run, if any
                try FileManager.default.createDirectory(at: runtime, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
                runtimes.append(runtime)
                let environment = ["HOME": home.path, "XDG_CONFIG_HOME": home.appendingPathComponent("config").path,
                                   "XDG_DATA_HOME": home.appendingPathComponent("data").path, "XDG_RUNTIME_DIR": runtime.path]
                let paths = UbiquityPaths(environment: environment)
                keyrings.append(paths.keyring)
                environments.append(environment)
                try FileManager.default.createDirectory(at: paths.configuration, withIntermediateDirectories: true)
                try Data(#"{"containers": ["\#(container)"], "greedy": true, "rescanSeconds": 600, "sealedContents": \#(sealed), "streamUploads": \#(streamUploads)}"#.utf8).write(to: paths.agentConfiguration)
                let relay = try RelayProxy.start(to: port, shape: link)
                relays.append(relay)
                let account = name == "c" ? participant ?? "ada" : "ada"
                let login = try run(binary, ["login", "--server", "http://127.0.0.1:\(relay.port)", "--account", account, "--device-name", name, "--password-stdin"],
                                    environment: environment, input: "correct horse\n")
                guard login.status == 0 else { throw BenchError("ubiquity login: \(login.output)") }

                let agent = ChildProcess()
                // UBIQUITY_BENCH_AGENT_LOG_LEVEL=debug puts where each round's time went in agent.log (kept with --keep).
                var arguments = ["agent", "--greedy", "--log-level", ProcessInfo.processInfo.environment["UBIQUITY_BENCH_AGENT_LOG_LEVEL"] ?? "error"]
                // UBIQUITY_BENCH_AGENT_B_WRAPPER="heaptrack -o /tmp/b" runs device B's agent under a
                // tool (a profiler: what the agent that did the work holds, not one restarted).
                let wrapper = name == "b" ? ProcessInfo.processInfo.environment["UBIQUITY_BENCH_AGENT_B_WRAPPER"]?.split(separator: " ").map(String.init) : nil
                if let wrapper, let tool = wrapper.first {
                    agent.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                    arguments = [tool] + wrapper.dropFirst() + [binary.path] + arguments
                } else {
                    agent.executableURL = binary
                }
                agent.arguments = arguments
                agent.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
                let logFile = home.appendingPathComponent("agent.log")
                _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
                let handle = try FileHandle(forWritingTo: logFile)
                agent.standardOutput = handle
                agent.standardError = handle
                try agent.run()
                processes.append(agent)

                let containers = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [container]))
                guard let root = containers.url(forContainer: container) else { throw BenchError("no container folder for device \(name)") }
                try FileManager.default.createDirectory(at: root.appendingPathComponent("Documents"), withIntermediateDirectories: true)
                devices.append(containers)
                roots.append(root)
            }
            if advanced {
                let switched = try run(binary, ["protection", "advanced", "--yes", "--without-recovery-key"], environment: environments[0])
                guard switched.status == 0 else { throw BenchError("ubiquity protection advanced: \(switched.output)") }
            }
        } catch {
            for process in processes { process.terminate() }
            for runtime in runtimes { try? FileManager.default.removeItem(at: runtime) } // best effort
            throw error
        }
        let peer = UbiquityPeer(roots: roots, devices: devices, processes: processes, relays: relays, runtimes: runtimes, serverPort: port, keyringA: keyrings[0])
        do {
            try await peer.settle()
        } catch {
            await peer.stop()
            throw error
        }
        return peer
    }

    func legs() -> [String: Int64] {
        ["deviceAWithServer": relays[0].bytes, "serverWithDeviceB": relays[1].bytes]
    }

    func arrivingBytes() -> Int64 { relays[1].bytes }

    /// Until both agents are connected and have nothing queued.
    func settle() async throws {
        _ = try await until("both agents are idle", limit: .seconds(600), every: .milliseconds(5)) {
            devices.allSatisfy { device in
                guard let status = try? device.agent.send(AgentRequest(.status), timeout: .seconds(5)).status else { return false }
                return status.connected && !status.containers.isEmpty && status.containers.allSatisfy { $0.idle && $0.queued == 0 }
            }
        }
    }

    /// How many items device B's agent knows.
    func itemsOnB() -> Int {
        (try? devices[1].agent.send(AgentRequest(.status), timeout: .seconds(5)).status?.containers.first?.items) ?? 0
    }

    func stop() async {
        processes.withLock { processes in
            for process in processes.reversed() where process.isRunning { process.terminate() }
            for process in processes { process.waitUntilExit() }
        }
        for relay in relays { relay.stop() }
        for runtime in runtimes { try? FileManager.default.removeItem(at: runtime) } // best effort: tmpfs, gone at reboot
    }
}

/// Syncthing: two instances of the installed `syncthing` on loopback, one folder shared
/// between them; global and local discovery, relays, NAT traversal and usage reports off; the
/// file watcher on with its shortest delay (1 s). A dials B through a counting relay (B does
/// not know where A is), so the one connection between them is counted.
final class SyncthingPeer: Peer {
    let name = "syncthing"
    let sideA: URL
    let sideB: URL
    let version: String
    let processes: Mutex<[ChildProcess]>
    let processIDs: [pid_t]
    let rest: [(url: String, key: String, other: String)]
    let relay: RelayProxy

    let processNames = ["a", "b"]

    private init(sideA: URL, sideB: URL, version: String, processes: [ChildProcess], rest: [(url: String, key: String, other: String)], relay: RelayProxy) {
        self.sideA = sideA
        self.sideB = sideB
        self.version = version
        self.processes = Mutex(processes)
        processIDs = processes.map(\.processIdentifier)
        self.rest = rest
        self.relay = relay
    }

    func legs() -> [String: Int64] { ["deviceAWithDeviceB": relay.bytes] }
    func arrivingBytes() -> Int64 { relay.bytes }

    static let executable = ["/usr/bin/syncthing", "/usr/local/bin/syncthing"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Two instances, A dialling B — through A's link then B's when `link` is given.
    static func start(in folder: URL, link: LinkShape? = nil) async throws -> SyncthingPeer {
        guard let executable else { throw BenchError("syncthing is not installed (apt-get install syncthing), or pass --skip-syncthing") }
        let binary = URL(fileURLWithPath: executable)
        let version = try run(binary, ["--version"]).output.split(separator: "\n").first.map(String.init) ?? "syncthing"
        var ids: [String] = []
        for name in ["a", "b"] {
            let output = try run(binary, ["generate", "--home=" + folder.appendingPathComponent(name).path, "--no-default-folder", "--skip-port-probing"]).output
            guard let line = output.split(separator: "\n").first(where: { $0.contains("Device ID:") }),
                  let id = line.components(separatedBy: "Device ID:").last?.trimmingCharacters(in: .whitespaces) else {
                throw BenchError("syncthing generate printed no device ID: \(output)")
            }
            ids.append(id)
        }
        let listen = [try freePort(), try freePort()], gui = [try freePort(), try freePort()]
        let relay = try RelayProxy.start(to: listen[1], shape: link.map { $0.path(to: $0) })
        let dial = ["dynamic", "tcp://127.0.0.1:\(relay.port)"]
        var processes: [ChildProcess] = [], rest: [(url: String, key: String, other: String)] = [], sides: [URL] = []
        for (index, name) in ["a", "b"].enumerated() {
            let home = folder.appendingPathComponent(name)
            let shared = folder.appendingPathComponent(name + "-folder")
            try FileManager.default.createDirectory(at: shared.appendingPathComponent(".stfolder"), withIntermediateDirectories: true)
            let key = "bench-" + UUID().uuidString
            let other = 1 - index
            let config = """
                <configuration version="36">
                    <folder id="bench" label="bench" path="\(shared.path)" type="sendreceive" rescanIntervalS="3600" fsWatcherEnabled="true" fsWatcherDelayS="1" ignorePerms="false" autoNormalize="true">
                        <device id="\(ids[index])"></device>
                        <device id="\(ids[other])"></device>
                        <minDiskFree unit="%">0</minDiskFree>
                    </folder>
                    <device id="\(ids[index])" name="\(name)" compression="metadata"><address>dynamic</address></device>
                    <device id="\(ids[other])" name="peer" compression="metadata"><address>\(dial[other])</address></device>
                    <gui enabled="true" tls="false"><address>127.0.0.1:\(gui[index])</address><apikey>\(key)</apikey></gui>
                    <options>
                        <listenAddress>tcp://127.0.0.1:\(listen[index])</listenAddress>
                        <globalAnnounceEnabled>false</globalAnnounceEnabled>
                        <localAnnounceEnabled>false</localAnnounceEnabled>
                        <relaysEnabled>false</relaysEnabled>
                        <natEnabled>false</natEnabled>
                        <startBrowser>false</startBrowser>
                        <urAccepted>-1</urAccepted>
                        <autoUpgradeIntervalH>0</autoUpgradeIntervalH>
                        <crashReportingEnabled>false</crashReportingEnabled>
                        <minHomeDiskFree unit="%">0</minHomeDiskFree>
                    </options>
                </configuration>
                """
            try Data(config.utf8).write(to: home.appendingPathComponent("config.xml"))
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = ["serve", "--home=" + home.path, "--no-browser", "--no-restart", "--no-upgrade", "--logfile=" + home.appendingPathComponent("log.txt").path]
            var environment = ProcessInfo.processInfo.environment
            environment["STNOUPGRADE"] = "1"
            environment["STNODEFAULTFOLDER"] = "1"
            process.environment = environment
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            processes.append(process)
            rest.append(("http://127.0.0.1:\(gui[index])", key, ids[other]))
            sides.append(shared)
        }
        let peer = SyncthingPeer(sideA: sides[0], sideB: sides[1], version: version, processes: processes, rest: rest, relay: relay)
        do {
            for api in rest {
                let start = ContinuousClock.now
                while true {
                    if let answer = try? await get(api, "/rest/system/connections"),
                       let connections = answer["connections"] as? [String: Any], let other = connections[api.other] as? [String: Any],
                       other["connected"] as? Bool == true { break }
                    guard ContinuousClock.now - start < .seconds(60) else { throw BenchError("the two syncthing instances did not connect") }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            try await peer.settle()
        } catch {
            await peer.stop()
            throw error
        }
        return peer
    }

    /// Until both instances have the folder idle, need nothing, and see the other complete.
    func settle() async throws {
        let start = ContinuousClock.now
        while true {
            var done = true
            for api in rest {
                let status = try? await Self.get(api, "/rest/db/status?folder=bench")
                let completion = try? await Self.get(api, "/rest/db/completion?folder=bench&device=\(api.other)")
                if status?["state"] as? String != "idle" || (status?["needBytes"] as? Int ?? 1) != 0 || (completion?["completion"] as? Double ?? 0) < 100 {
                    done = false
                }
            }
            if done { return }
            guard ContinuousClock.now - start < .seconds(300) else { throw BenchError("syncthing did not settle") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    func stop() async {
        processes.withLock { processes in
            for process in processes where process.isRunning { process.terminate() }
            for process in processes { process.waitUntilExit() }
        }
        relay.stop()
    }

    static func get(_ api: (url: String, key: String, other: String), _ path: String) async throws -> [String: Any] {
        var request = HTTPClientRequest(url: api.url + path)
        request.headers.add(name: "X-API-Key", value: api.key)
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 1 << 20)
        guard response.status == .ok, let json = try JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any] else {
            throw BenchError("syncthing answered \(response.status) to \(path)")
        }
        return json
    }

    /// A TCP port on loopback nobody listens on now.
    static func freePort() throws -> Int {
        let (fd, port) = try loopbackSocket()
        close(fd)
        return port
    }
}
