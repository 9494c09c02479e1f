import Foundation
import Synchronization
import Ubiquity
import UbiquityTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A failure of the harness itself (a process that would not start, a check that could not run).
struct ChaosError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The executables built beside this one.
enum Binaries {
    static var folder: URL { URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent() }
    static var ubiquity: URL { folder.appendingPathComponent("ubiquity") }
    static var chaos: URL { URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath() }
}

/// Runs a blocking wait on a thread of its own, never on one of the few threads Swift's
/// concurrency shares.
func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

/// Runs `ubiquity ARGS` to its end: status and what it printed.
func runUbiquity(_ arguments: [String], environment: [String: String]? = nil, input: String? = nil) async throws -> (status: Int32, output: String) {
    try await blocking {
        let process = ChildProcess()
        process.executableURL = Binaries.ubiquity
        process.arguments = arguments
        process.environment = environment.map { ProcessInfo.processInfo.environment.merging($0) { $1 } }
        let output = Pipe(), stdin = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = stdin
        try process.run()
        if let input { stdin.fileHandleForWriting.write(Data(input.utf8)) }
        try stdin.fileHandleForWriting.close()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, text)
    }
}

/// `ubiquity serve`, killed and started again on the same storage as the run goes.
final class ChaosServer: @unchecked Sendable { // state behind `lock`
    let storage: [String]
    let log: URL
    private let lock = NSLock()
    private var process: ChildProcess?
    private(set) var port = 0

    /// More arguments for `ubiquity serve` only.
    let serving: [String]

    init(storage: [String], serving: [String] = [], log: URL) {
        self.storage = storage
        self.serving = serving
        self.log = log
    }

    var isRunning: Bool { lock.withLock { process?.isRunning ?? false } }

    /// Starts it and waits until it says where it listens (on any free port).
    func start() async throws {
        let (process, port) = try await blocking { [storage, serving, log] in
            let process = ChildProcess()
            process.executableURL = Binaries.ubiquity
            process.arguments = ["serve"] + storage + serving + ["--port", "0", "--log-level", "warning"]
            let output = Pipe()
            process.standardOutput = output
            if !FileManager.default.fileExists(atPath: log.path) { _ = FileManager.default.createFile(atPath: log.path, contents: nil) }
            let handle = try FileHandle(forWritingTo: log)
            handle.seekToEndOfFile()
            process.standardError = handle
            try process.run()
            let (address, said) = ChildProcess.listeningAddress(in: output)
            guard let port = address?.port else {
                process.signal(SIGKILL)
                process.waitUntilExit()
                throw ChaosError("the server did not start: \(said) (see \(log.path))")
            }
            // Whatever it prints later is read and dropped, so it never blocks on a full pipe.
            Thread { while !output.fileHandleForReading.availableData.isEmpty {} }.start()
            return (process, port)
        }
        lock.withLock {
            self.process = process
            self.port = port
        }
    }

    /// SIGKILL, and waits for it to be gone.
    func kill() async {
        guard let process = lock.withLock({ () -> ChildProcess? in defer { self.process = nil }; return self.process }) else { return }
        process.signal(SIGKILL)
        _ = try? await blocking { process.waitUntilExit() } // (cannot fail: the thread always resumes)
    }

    /// SIGKILL without waiting (the harness itself is being stopped).
    func killNow() { lock.withLock { process?.signal(SIGKILL) } }

    /// SIGTERM (a graceful stop); its exit status.
    func stop() async -> Int32 {
        guard let process = lock.withLock({ () -> ChildProcess? in defer { self.process = nil }; return self.process }) else { return 0 }
        process.terminate()
        return (try? await blocking { process.waitUntilExit(); return process.terminationStatus }) ?? -1
    }
}

/// One device: its own home (configuration and data: on a small filesystem of its own when the
/// harness can mount one, so that it can fill up), its runtime folder, its link to the server
/// (a relay the harness breaks at will), its `ubiquity agent` and its writer processes. Its
/// ledger and logs live beside it (`WORK/logs`), where a full disk cannot reach them.
final class ChaosDevice: @unchecked Sendable { // state behind `lock`
    let index: Int
    let name: String
    let home: URL
    let logs: URL
    let environment: [String: String]
    /// Variables that make the device's processes see a clock off by ``skew`` seconds
    /// (libfaketime), empty for a device on time.
    let clockEnvironment: [String: String]
    let skew: Int
    let paths: UbiquityPaths
    let containers: UbiquityContainers
    let relay: RelayProxy
    let container: String
    let keyValueStore: String
    /// The account it signs in to: the harness's own (`ada`), or with `--share` the last
    /// device's, `bob`, whom Ada's shared folder is shared with.
    let account: String
    /// Whether it takes part in another account's shared folder (its writer then never makes
    /// that folder: the share's engine does).
    var isParticipant: Bool { account != Harness.owner }
    private let lock = NSLock()
    private var agent: ChildProcess?
    private var writer: ChildProcess?

    init(index: Int, folder: URL, container: String, keyValueStore: String, serverPort: Int, skew: Int = 0, account: String = Harness.owner,
         sealing: Bool? = nil) throws {
        self.index = index
        self.account = account
        name = "device\(index)"
        self.container = container
        self.keyValueStore = keyValueStore
        self.skew = skew
        clockEnvironment = skew == 0 ? [:] : ["LD_PRELOAD": Faults.fakeTimeLibrary, "FAKETIME": "\(skew >= 0 ? "+" : "")\(skew)", "FAKETIME_DONT_FAKE_MONOTONIC": "1"]
        home = folder.appendingPathComponent(name)
        logs = folder.appendingPathComponent("logs")
        let runtime = folder.appendingPathComponent("run/\(name)")
        environment = ["HOME": home.path, "XDG_CONFIG_HOME": home.appendingPathComponent("config").path,
                       "XDG_DATA_HOME": home.appendingPathComponent("data").path, "XDG_RUNTIME_DIR": runtime.path]
        paths = UbiquityPaths(environment: environment)
        containers = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [container], keyValueStore: keyValueStore))
        try FileManager.default.createDirectory(at: runtime, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try FileManager.default.createDirectory(at: logs, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: paths.configuration, withIntermediateDirectories: true)
        // The first device sends documents in plaintext (an agent of an older build, or one told
        // not to seal), which the server seals in place (the `sealInPlace` fault); the others
        // seal them (the default): each reads what the others cut at other points.
        // With `--share` the owner's devices do not seal (the folder is shared in plaintext);
        // with `--sealed-share` they do (it is shared sealed, with the share's keys).
        let sealing = sealing.map { "\($0)" } ?? (index == 0 ? "false" : "true")
        try Data(#"{"containers": ["\#(container)"], "greedy": true, "rescanSeconds": 15, "sealedContents": \#(sealing)}"#.utf8).write(to: paths.agentConfiguration)
        relay = try RelayProxy.start(to: serverPort)
    }

    var ledger: URL { logs.appendingPathComponent("\(name)-ledger.jsonl") }
    var stopFile: URL { logs.appendingPathComponent("\(name)-stop-writer") }
    var root: URL? { containers.url(forContainer: container) }

    /// Whether the device is signed in (the `signOut` fault signs it out for a while).
    private var signedIn = false
    var isSignedIn: Bool { lock.withLock { signedIn } }

    /// `ubiquity login` through the relay.
    func login() async throws {
        let login = try await runUbiquity(["login", "--server", "http://127.0.0.1:\(relay.port)", "--account", account, "--device-name", name, "--password-stdin"],
                                          environment: environment, input: "correct horse\n")
        guard login.status == 0 else { throw ChaosError("\(name): ubiquity login: \(login.output)") }
        lock.withLock { signedIn = true }
    }

    /// `ubiquity login`, tried again each second (the server may be down) for up to `attempts`.
    func loginRetrying(attempts: Int = 60) async throws {
        for attempt in 1...attempts {
            do {
                return try await login()
            } catch where attempt < attempts {
                try? await Task.sleep(for: .seconds(1)) // (a cancelled sleep only hurries the next try)
            }
        }
    }

    /// `ubiquity logout` (the token revoked if the server answers; the credentials go either way).
    func logout() async throws {
        let logout = try await runUbiquity(["logout"], environment: environment)
        guard logout.status == 0 else { throw ChaosError("\(name): ubiquity logout: \(logout.output)") }
        lock.withLock { signedIn = false }
    }

    private func logHandle(_ file: String) throws -> FileHandle {
        let url = logs.appendingPathComponent("\(name)-\(file)")
        if !FileManager.default.fileExists(atPath: url.path) { _ = FileManager.default.createFile(atPath: url.path, contents: nil) }
        let handle = try FileHandle(forWritingTo: url)
        handle.seekToEndOfFile()
        return handle
    }

    var agentIsRunning: Bool { lock.withLock { agent?.isRunning ?? false } }

    /// Starts `executable ARGUMENTS` with the device's environment (and clock), its output
    /// appended to `logs/NAME-LOG`.
    private func spawn(_ executable: URL, _ arguments: [String], log: String) throws -> ChildProcess {
        let process = ChildProcess()
        process.executableURL = executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }.merging(clockEnvironment) { $1 }
        let handle = try logHandle(log)
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        try? handle.close() // (the child has its own copy)
        return process
    }

    /// Starts `ubiquity agent` and waits (up to 30 s) until it answers on its socket.
    func startAgent() async throws {
        let process = try spawn(Binaries.ubiquity, ["agent", "--log-level", ProcessInfo.processInfo.environment["UBIQUITY_CHAOS_AGENT_LOG_LEVEL"] ?? "debug"], log: "agent.log")
        lock.withLock { agent = process }
        let start = ContinuousClock.now
        while (try? containers.agent.send(AgentRequest(.status), timeout: .seconds(1))) == nil {
            guard process.isRunning else {
                process.waitUntilExit()
                throw ChaosError("\(name)'s agent exited at start (\(process.terminationReason == .exit ? "status" : "signal") \(process.terminationStatus); see \(logs.path)/\(name)-agent.log)")
            }
            guard ContinuousClock.now - start < .seconds(30) else { throw ChaosError("\(name)'s agent did not answer in 30 s") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// SIGKILL, and waits for it to be gone.
    func killAgent() async {
        guard let process = lock.withLock({ () -> ChildProcess? in defer { agent = nil }; return agent }) else { return }
        process.signal(SIGKILL)
        _ = try? await blocking { process.waitUntilExit() } // (cannot fail)
    }

    /// SIGTERM; its exit status.
    func stopAgent() async -> Int32 {
        guard let process = lock.withLock({ () -> ChildProcess? in defer { agent = nil }; return agent }) else { return 0 }
        process.terminate()
        return (try? await blocking { process.waitUntilExit(); return process.terminationStatus }) ?? -1
    }

    /// The seed and pace of the round's writer, and how many times it was killed this round.
    private var writerSettings: (seed: UInt64, pace: Int, kills: UInt64)?

    /// Starts this device's writer for a round.
    func startWriter(seed: UInt64, pace: Int) throws {
        try? FileManager.default.removeItem(at: stopFile) // (absent after the first round)
        lock.withLock { writerSettings = (seed, pace, 0) }
        try spawnWriter(seed: seed, pace: pace)
    }

    private func spawnWriter(seed: UInt64, pace: Int) throws {
        let process = try spawn(Binaries.chaos, ["write", "--container", container, "--key-value-store", keyValueStore, "--device", name, "--seed", "\(seed)",
                                                 "--ledger", ledger.path, "--stop-file", stopFile.path, "--pace-milliseconds", "\(pace)"]
                                                 + (isParticipant ? ["--participant"] : []), log: "writer.log")
        lock.withLock { writer = process }
    }

    var writerIsRunning: Bool { lock.withLock { writer?.isRunning ?? false } }

    /// SIGKILLs the writer (an app killed wherever it is: mid-save, mid-move, holding a
    /// coordinated write or a document open), and waits for it to be gone.
    func killWriter() async {
        guard let process = lock.withLock({ () -> ChildProcess? in defer { writer = nil }; return writer }) else { return }
        process.signal(SIGKILL)
        _ = try? await blocking { process.waitUntilExit() } // (cannot fail)
    }

    /// Waits (up to `timeout`) until the writer is inside a step — its ledger's last line an
    /// intent written ahead — so that a kill lands mid-save; false if none began meanwhile.
    func waitForWriterMidStep(timeout: Duration) async -> Bool {
        let start = ContinuousClock.now
        while ContinuousClock.now - start < timeout {
            if let handle = try? FileHandle(forReadingFrom: ledger) {
                defer { try? handle.close() } // (read-only)
                let size = (try? handle.seekToEnd()) ?? 0
                try? handle.seek(toOffset: size > 4_096 ? size - 4_096 : 0)
                let tail = (try? handle.readToEnd()) ?? Data()
                if let line = tail.split(separator: UInt8(ascii: "\n")).last, let entry = try? JSONDecoder().decode(LedgerEntry.self, from: Data(line)),
                   entry.operation == .intent { return true }
            }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return false
    }

    /// Starts the round's writer again after a kill (the app launched again): its choices
    /// from a seed of their own, its ledger where the killed one left it.
    func restartWriter() throws {
        guard let settings = lock.withLock({ () -> (seed: UInt64, pace: Int, kills: UInt64)? in
            writerSettings?.kills += 1
            return writerSettings
        }) else { return }
        try spawnWriter(seed: settings.seed &+ 7_919 &* settings.kills, pace: settings.pace)
    }

    /// Asks the writer to stop after its step and waits (up to `timeout`); false if it had to
    /// be killed or had failed.
    func stopWriter(timeout: Duration = .seconds(120)) async -> Bool {
        guard let process = lock.withLock({ () -> ChildProcess? in defer { writer = nil }; return writer }) else { return true }
        _ = FileManager.default.createFile(atPath: stopFile.path, contents: nil)
        let start = ContinuousClock.now
        while process.isRunning && ContinuousClock.now - start < timeout { try? await Task.sleep(for: .milliseconds(50)) }
        if process.isRunning { process.signal(SIGKILL) }
        _ = try? await blocking { process.waitUntilExit() } // (cannot fail)
        return process.terminationReason == .exit && process.terminationStatus == 0
    }

    /// SIGKILL to the agent and the writer without waiting (the harness itself is being stopped).
    func killNow() {
        lock.withLock {
            agent?.signal(SIGKILL)
            writer?.signal(SIGKILL)
        }
    }

    /// Opens the device's database as its app would at launch (`ubiquity-chaos database`, in the
    /// device's environment): what it published, imported and holds.
    func databaseState() async throws -> DatabaseState {
        let environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }.merging(clockEnvironment) { $1 }
        let log = try logHandle("writer.log")
        defer { try? log.close() } // (the child has its own copy)
        let (status, output) = try await blocking { () -> (Int32, Data) in
            let process = ChildProcess()
            process.executableURL = Binaries.chaos
            process.arguments = ["database", "--container", self.container]
            process.environment = environment
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = log
            try process.run()
            let output = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, output)
        }
        guard status == 0 else { throw ChaosError("\(name)'s database did not open or import (status \(status); see \(logs.path)/\(name)-writer.log)") }
        return try JSONDecoder().decode(DatabaseState.self, from: output)
    }

    /// The agent's status, if it answers.
    func status() -> AgentStatus? {
        try? containers.agent.send(AgentRequest(.status), timeout: .seconds(2)).status
    }
}
