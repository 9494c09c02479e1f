import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import Synchronization
import Ubiquity
import UbiquityAgent
import UbiquityServer

#if canImport(Glibc)
import Glibc
#endif

let container = "BENCH12345.com.example.bench"

/// Ubiquity: an embedded server (SQLite, loopback) and two greedy devices, each with its own
/// home and a real agent (inotify, push), in this process.
final class UbiquityPeer: Peer, Sendable {
    let name = "ubiquity"
    let sideA: URL
    let sideB: URL
    let devices: [UbiquityContainers]
    let agents: [Task<Void, any Error>]
    let server: EmbeddedServer

    private init(sideA: URL, sideB: URL, devices: [UbiquityContainers], agents: [Task<Void, any Error>], server: EmbeddedServer) {
        self.sideA = sideA
        self.sideB = sideB
        self.devices = devices
        self.agents = agents
        self.server = server
    }

    static func start(in folder: URL) async throws -> UbiquityPeer {
        var logger = Logger(label: "ubiquity.bench")
        logger.logLevel = .critical
        let server = try await EmbeddedServer.start(dataDirectory: folder.appendingPathComponent("server").path, account: "ada", password: "correct horse", logger: logger)

        var devices: [UbiquityContainers] = [], agents: [Task<Void, any Error>] = [], sides: [URL] = []
        for name in ["a", "b"] {
            let home = folder.appendingPathComponent(name)
            let paths = UbiquityPaths(configuration: home.appendingPathComponent("config"), data: home.appendingPathComponent("data"),
                                      runtime: home.appendingPathComponent("run"))
            try await SyncClient(server: server.url).signIn(account: "ada", password: "correct horse", deviceName: name, savingTo: paths)
            let agent = Agent(paths: paths, configuration: AgentConfiguration(containers: [container], greedy: true, rescanSeconds: 60), logger: logger)
            agents.append(Task { try await agent.run() })
            let containers = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [container]))
            guard let root = containers.url(forContainer: container) else { throw BenchError("no container folder for device \(name)") }
            let documents = root.appendingPathComponent("Documents")
            try FileManager.default.createDirectory(at: documents, withIntermediateDirectories: true)
            devices.append(containers)
            sides.append(documents)
        }
        let peer = UbiquityPeer(sideA: sides[0], sideB: sides[1], devices: devices, agents: agents, server: server)
        try await peer.settle()
        return peer
    }

    /// Until both agents are connected and have nothing queued.
    func settle() async throws {
        _ = try await until("both agents are idle", limit: .seconds(300)) {
            devices.allSatisfy { device in
                guard let status = try? device.agent.send(AgentRequest(.status), timeout: .seconds(2)).status else { return false }
                return status.connected && !status.containers.isEmpty && status.containers.allSatisfy { $0.idle && $0.queued == 0 }
            }
        }
    }

    func stop() async {
        for agent in agents { agent.cancel() }
        for agent in agents { _ = await agent.result }
        await server.stop()
    }
}

/// Syncthing: two instances of the installed `syncthing` on loopback, one folder shared
/// between them; global and local discovery, relays, NAT traversal and usage reports off; the
/// file watcher on with its shortest delay (1 s).
final class SyncthingPeer: Peer, Sendable {
    let name = "syncthing"
    let sideA: URL
    let sideB: URL
    let version: String
    let processes: Mutex<[Process]>
    let rest: [(url: String, key: String, other: String)]

    private init(sideA: URL, sideB: URL, version: String, processes: [Process], rest: [(url: String, key: String, other: String)]) {
        self.sideA = sideA
        self.sideB = sideB
        self.version = version
        self.processes = Mutex(processes)
        self.rest = rest
    }

    static let executable = ["/usr/bin/syncthing", "/usr/local/bin/syncthing"].first { FileManager.default.isExecutableFile(atPath: $0) }

    static func start(in folder: URL) async throws -> SyncthingPeer {
        guard let executable else { throw BenchError("syncthing is not installed (apt-get install syncthing), or pass --skip-syncthing") }
        let version = try run(executable, ["--version"]).split(separator: "\n").first.map(String.init) ?? "syncthing"
        var ids: [String] = []
        for name in ["a", "b"] {
            let output = try run(executable, ["generate", "--home=" + folder.appendingPathComponent(name).path, "--no-default-folder", "--skip-port-probing"])
            guard let line = output.split(separator: "\n").first(where: { $0.contains("Device ID:") }),
                  let id = line.components(separatedBy: "Device ID:").last?.trimmingCharacters(in: .whitespaces) else {
                throw BenchError("syncthing generate printed no device ID: \(output)")
            }
            ids.append(id)
        }
        let listen = [try freePort(), try freePort()], gui = [try freePort(), try freePort()]
        var processes: [Process] = [], rest: [(url: String, key: String, other: String)] = [], sides: [URL] = []
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
                    <device id="\(ids[other])" name="peer" compression="metadata"><address>tcp://127.0.0.1:\(listen[other])</address></device>
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
            let process = Process()
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
        let peer = SyncthingPeer(sideA: sides[0], sideB: sides[1], version: version, processes: processes, rest: rest)
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
    }

    static func get(_ api: (url: String, key: String, other: String), _ path: String) async throws -> [String: Any] {
        var request = HTTPClientRequest(url: api.url + path)
        request.headers.add(name: "X-API-Key", value: api.key)
        let response = try await SyncClient.defaultHTTPClient.execute(request, timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 1 << 20)
        guard response.status == .ok, let json = try JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any] else {
            throw BenchError("syncthing answered \(response.status) to \(path)")
        }
        return json
    }

    /// Runs a command to its end; its standard output and error.
    static func run(_ executable: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: output, as: UTF8.self)
    }

    /// A TCP port on loopback nobody listens on now.
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket: \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw BenchError("bind: \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
