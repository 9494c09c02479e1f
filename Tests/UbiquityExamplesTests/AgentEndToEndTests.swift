import Foundation
import Testing
import Ubiquity
import UbiquityTestSupport

/// One "device" on this machine: a home of its own (XDG config, data and runtime folders), a
/// real `ubiquity agent` process, and the client API an app on it would use.
final class TestDevice: @unchecked Sendable {
    let name: String
    let home: URL
    let environment: [String: String]
    let paths: UbiquityPaths
    let containers: UbiquityContainers
    let container: String
    private var agent: ChildProcess?

    /// - Parameter settings: More of the agent's settings (`agent.json` keys and values, as JSON).
    init(_ name: String, in dir: TemporaryDirectory, container: String, settings: String = "") throws {
        self.name = name
        self.container = container
        home = dir.file(name)
        environment = ["HOME": home.path, "XDG_CONFIG_HOME": home.appendingPathComponent("config").path,
                       "XDG_DATA_HOME": home.appendingPathComponent("data").path, "XDG_RUNTIME_DIR": home.appendingPathComponent("run").path]
        paths = UbiquityPaths(environment: environment)
        containers = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [container]))
        try FileManager.default.createDirectory(at: paths.configuration, withIntermediateDirectories: true)
        try Data(#"{"containers": ["\#(container)"], "rescanSeconds": 30\#(settings.isEmpty ? "" : ", " + settings)}"#.utf8).write(to: paths.agentConfiguration)
    }

    /// `ubiquity login` as `account` (ada unless told; password "correct horse").
    func login(_ server: RunningServer, account: String = "ada") throws {
        let login = try runUbiquity(["login", "--server", server.base.absoluteString, "--account", account, "--device-name", name, "--password-stdin"],
                                    environment: environment, input: "correct horse\n")
        #expect(login.status == 0, "\(login.output)")
    }

    /// Runs `ubiquity ARGUMENTS` as this device, on a thread of its own (never one of the two
    /// threads the tests' concurrency shares): its exit status and output.
    func running(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let environment = self.environment
        return try await onOwnThread { try runUbiquity(arguments, environment: environment) }
    }

    /// Starts `ubiquity agent` and waits until it answers on its socket.
    func startAgent() async throws {
        let process = ChildProcess()
        process.executableURL = RunningServer.binary
        process.arguments = ["agent", "--log-level", ProcessInfo.processInfo.environment["UBIQUITY_E2E_LOG_LEVEL"] ?? "warning"]
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let log = home.appendingPathComponent("agent.log")
        if !FileManager.default.fileExists(atPath: log.path) { _ = FileManager.default.createFile(atPath: log.path, contents: nil) }
        let handle = try FileHandle(forWritingTo: log)
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        agent = process
        try await eventually("\(name)'s agent answers") { (try? self.containers.agent.send(AgentRequest(.status), timeout: .seconds(1))) != nil }
    }

    /// Stops the agent with SIGTERM; its exit status.
    func stopAgent() -> Int32 {
        guard let agent else { return -1 }
        agent.terminate()
        agent.waitUntilExit()
        self.agent = nil
        return agent.terminationStatus
    }

    /// The container's Documents folder (asking as an app does).
    var documents: URL { containers.url(forContainer: container)!.appendingPathComponent("Documents") }

    func read(_ name: String) -> String? {
        (try? Data(contentsOf: documents.appendingPathComponent(name))).map { String(decoding: $0, as: UTF8.self) }
    }

    /// Saves `text` as an app does: a coordinated write.
    func save(_ name: String, _ text: String) throws {
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: documents.appendingPathComponent(name), options: .forReplacing) { url in
            try Data(text.utf8).write(to: url, options: .atomic)
        }
    }

    func values(_ name: String) -> UbiquityResourceValues {
        containers.resourceValues(of: documents.appendingPathComponent(name), forKeys: [
            .isUbiquitousItemKey, .ubiquitousItemDownloadingStatusKey, .ubiquitousItemIsUploadedKey, .ubiquitousItemHasUnresolvedConflictsKey,
            .ubiquitousItemIsUploadingKey, .ubiquitousItemUploadingErrorKey, .ubiquitousItemContainerDisplayNameKey, .ubiquitousItemIsSharedKey,
        ])
    }

    /// The running agent's process id.
    var agentProcessID: Int32? { agent?.processIdentifier }

    /// How often each of the agent's threads has gone to sleep so far (each a later wake-up):
    /// their voluntary context switches, by thread id.
    var agentSleeps: [String: Int] {
        guard let pid = agentProcessID, let threads = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") else { return [:] }
        var sleeps: [String: Int] = [:]
        for thread in threads {
            let status = (try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/status", encoding: .utf8)) ?? ""
            let line = status.split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches:") }
            sleeps[thread] = line.flatMap { Int($0.split(separator: "\t").last?.trimmingCharacters(in: .whitespaces) ?? "") }
        }
        return sleeps
    }

    /// The wake-ups between two readings of ``agentSleeps``: each thread's increase (a thread
    /// started meanwhile counts from zero; one that ended is not seen).
    static func wakeUps(from before: [String: Int], to after: [String: Int]) -> Int {
        after.reduce(0) { $0 + max(0, $1.value - (before[$1.key] ?? 0)) }
    }

    /// Whether the agent has nothing left to do.
    var isIdle: Bool {
        guard let status = try? containers.agent.send(AgentRequest(.status), timeout: .seconds(2)).status else { return false }
        return status.connected && status.containers.allSatisfy { $0.idle && $0.queued == 0 }
    }

    deinit { _ = stopAgent() }
}

/// A real server (its data in `dir`) and two devices of account ada — a laptop and a phone —
/// signed in with their agents running; the caller stops the server.
func serverAndTwoDevices(in dir: TemporaryDirectory, container: String) async throws -> (RunningServer, laptop: TestDevice, phone: TestDevice) {
    let server = try await RunningServer.start(data: dir.file("server").path)
    let laptop = try TestDevice("laptop", in: dir, container: container)
    let phone = try TestDevice("phone", in: dir, container: container)
    try await onOwnThread { try laptop.login(server); try phone.login(server) } // (a process each, waited for on a thread of its own)
    try await laptop.startAgent()
    try await phone.startAgent()
    return (server, laptop, phone)
}

/// Polls `condition` until it holds (recording an issue and throwing after `timeout`); returns how long it took.
/// Each look is taken on a thread of its own: a condition asks the agent, and waits for its answer.
@discardableResult
func eventually(_ what: String, timeout: Duration = .seconds(20), _ condition: @escaping @Sendable () throws -> Bool) async throws -> Duration {
    let start = ContinuousClock.now
    while try await !onOwnThread(condition) {
        if ContinuousClock.now - start > timeout {
            Issue.record("timed out waiting until \(what)")
            throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "timed out waiting until \(what)"])
        }
        try await Task.sleep(for: .milliseconds(20))
    }
    return ContinuousClock.now - start
}

/// The whole story with real processes: a server and two agents, each device with its own home,
/// driven through the client API an app uses.
@Suite(.serialized) struct AgentEndToEndTests {
    /// An agent with nothing to do sleeps until something happens, even after the work that
    /// used to start Dispatch's once-a-second monitor for good (its shared pool's first
    /// thread does): a round of more than a thousand files (SQLite's caches are released
    /// afterwards), a file of several windows (hashed on a thread beside its reader),
    /// coordinated writes and `Task.sleep`s. Over four idle seconds, the monitor alone would
    /// wake it four times.
    @Test func anIdleAgentSleeps() async throws {
        let dir = try TemporaryDirectory("idle"); defer { dir.remove() }
        let server = try await RunningServer.start(data: dir.file("server").path)
        defer { server.stop() }
        let laptop = try TestDevice("laptop", in: dir, container: "ABCDE12345.com.example.idle")
        try await onOwnThread { try laptop.login(server) }
        try await laptop.startAgent()

        let batch = dir.file("Batch")
        try FileManager.default.createDirectory(at: batch, withIntermediateDirectories: true)
        for index in 0..<1_100 { try Data("note \(index)".utf8).write(to: batch.appendingPathComponent("note-\(index).txt")) }
        try FileManager.default.moveItem(at: batch, to: laptop.documents.appendingPathComponent("Batch"))
        // Random-looking bytes a word at a time (a byte at a time from the system's generator is
        // three million system calls, seconds of one of the two threads the suite's tasks share).
        var generator = SeededGenerator(seed: 3)
        let words = (0..<(3 << 17)).map { _ in generator.next() }
        try words.withUnsafeBytes { Data($0) }.write(to: laptop.documents.appendingPathComponent("Large.bin"))
        try await eventually("the laptop sent everything", timeout: .seconds(120)) {
            laptop.isIdle && (try? laptop.containers.agent.send(AgentRequest(.status), timeout: .seconds(2)).status?.containers.first?.items) ?? 0 >= 1_102
        }

        // Idle is a stretch of 4 s with at most two wake-ups. Under a loaded machine the tail of
        // the work (the server's news of the agent's own last commit, late) may fall into the
        // first stretch: up to six are looked at; an agent that polls wakes in every one.
        try await Task.sleep(for: .seconds(1))
        var stretches: [Int] = []
        while stretches.count < 6, stretches.last.map({ $0 > 2 }) ?? true {
            let before = laptop.agentSleeps
            #expect(!before.isEmpty, "the agent's threads are read")
            try await Task.sleep(for: .seconds(4))
            stretches.append(TestDevice.wakeUps(from: before, to: laptop.agentSleeps))
        }
        #expect(stretches.last.map { $0 <= 2 } == true, "the idle agent's wake-ups in each stretch of 4 s: \(stretches)")
    }

    @Test func twoDevicesThroughRealAgents() async throws {
        let dir = try TemporaryDirectory("e2e"); defer { if ProcessInfo.processInfo.environment["UBIQUITY_KEEP_E2E"] == nil { dir.remove() } }
        let server = try await RunningServer.start(data: dir.file("server").path)
        defer { server.stop() }
        let container = "ABCDE12345.com.example.e2e"
        let laptop = try TestDevice("laptop", in: dir, container: container)
        let phone = try TestDevice("phone", in: dir, container: container)
        #expect(laptop.containers.url(forContainer: container) == nil, "signed out: no container")
        try await onOwnThread { try laptop.login(server); try phone.login(server) }
        #expect(laptop.containers.url(forContainer: "ABCDE12345.com.example.other") == nil, "not entitled")
        try await laptop.startAgent()
        try await phone.startAgent()

        // Created on the laptop: listed on the phone first (metadata), not downloaded.
        try await onOwnThread { try laptop.save("Trip.txt", "pack the tent") }
        let listed = try await eventually("the phone lists Trip.txt") { phone.containers.isUbiquitousItem(at: phone.documents.appendingPathComponent("Trip.txt")) }
        #expect(phone.read("Trip.txt") == nil)
        #expect(phone.values("Trip.txt").ubiquitousItemDownloadingStatus == .notDownloaded)
        print("metadata reached the other device in \(listed)")

        // Download on demand: a coordinated read waits for it.
        phone.containers.installDownloader()
        let text = try NSFileCoordinator(filePresenter: nil).coordinate(readingItemAt: phone.documents.appendingPathComponent("Trip.txt")) { url in
            try String(contentsOf: url, encoding: .utf8)
        }
        #expect(text == "pack the tent")
        let values = phone.values("Trip.txt")
        #expect(values.ubiquitousItemDownloadingStatus == .current && values.ubiquitousItemIsUploaded == true && values.isUbiquitousItem == true)
        #expect(values.ubiquitousItemContainerDisplayName == "e2e" && values.ubiquitousItemIsShared == false, "\(values)")

        // Edits flow both ways.
        try await onOwnThread { try phone.save("Trip.txt", "pack the tent and the stove") }
        try await eventually("the laptop has the phone's edit") { laptop.read("Trip.txt") == "pack the tent and the stove" }

        // A rename follows the item.
        try FileManager.default.moveItem(at: laptop.documents.appendingPathComponent("Trip.txt"), to: laptop.documents.appendingPathComponent("Trip 2027.txt"))
        try await eventually("the phone follows the rename") { phone.read("Trip 2027.txt") == "pack the tent and the stove" && phone.read("Trip.txt") == nil }

        // Eviction frees the copy, keeps the listing; asking again brings it back.
        try await eventually("the phone is in step") { phone.isIdle }
        try phone.containers.evict(at: phone.documents.appendingPathComponent("Trip 2027.txt"))
        #expect(phone.read("Trip 2027.txt") == nil && phone.values("Trip 2027.txt").ubiquitousItemDownloadingStatus == .notDownloaded)
        try phone.containers.startDownloading(at: phone.documents.appendingPathComponent("Trip 2027.txt"))
        try await eventually("the phone downloads it again") { phone.read("Trip 2027.txt") == "pack the tent and the stove" }

        // Offline on both sides: both edits survive; the same current version and conflict on both.
        try await eventually("both are in step") { laptop.isIdle && phone.isIdle }
        let stopped = try await onOwnThread { (laptop.stopAgent(), phone.stopAgent()) }
        #expect(stopped == (0, 0), "SIGTERM stops an agent cleanly")
        try await onOwnThread { try laptop.save("Trip 2027.txt", "from the laptop") }
        try await Task.sleep(for: .milliseconds(20))
        try await onOwnThread { try phone.save("Trip 2027.txt", "from the phone") }
        try await laptop.startAgent()
        try await eventually("the laptop sent its edit") { laptop.isIdle }
        try await phone.startAgent()
        try await eventually("both show the conflict") {
            laptop.values("Trip 2027.txt").ubiquitousItemHasUnresolvedConflicts == true && phone.values("Trip 2027.txt").ubiquitousItemHasUnresolvedConflicts == true
                && laptop.read("Trip 2027.txt") == "from the phone" && phone.read("Trip 2027.txt") == "from the phone"
                && NSFileVersion.unresolvedConflictVersionsOfItem(at: laptop.documents.appendingPathComponent("Trip 2027.txt"))?.count == 1
        }
        let loser = try #require(NSFileVersion.unresolvedConflictVersionsOfItem(at: phone.documents.appendingPathComponent("Trip 2027.txt"))?.first)
        #expect(try String(contentsOf: loser.url, encoding: .utf8) == "from the laptop" && loser.localizedNameOfSavingComputer == "laptop")

        // Resolved on the laptop by keeping its own version: the phone follows.
        let trip = laptop.documents.appendingPathComponent("Trip 2027.txt")
        let mine = try #require(NSFileVersion.unresolvedConflictVersionsOfItem(at: trip)?.first)
        _ = try mine.replaceItem(at: trip)
        try NSFileVersion.removeOtherVersionsOfItem(at: trip)
        try await eventually("the phone follows the resolution") {
            phone.read("Trip 2027.txt") == "from the laptop" && phone.values("Trip 2027.txt").ubiquitousItemHasUnresolvedConflicts == false
                && laptop.values("Trip 2027.txt").ubiquitousItemHasUnresolvedConflicts == false
        }

        // Moved into the container (setUbiquitous), it syncs; deleted on one device, gone on the other.
        let outside = dir.file("Packing list.txt")
        try Data("rope".utf8).write(to: outside)
        try laptop.containers.setUbiquitous(true, itemAt: outside, destinationURL: laptop.documents.appendingPathComponent("Packing list.txt"))
        #expect(!FileManager.default.fileExists(atPath: outside.path))
        try await eventually("the phone lists the moved-in file") { phone.containers.isUbiquitousItem(at: phone.documents.appendingPathComponent("Packing list.txt")) }
        try FileManager.default.removeItem(at: phone.documents.appendingPathComponent("Trip 2027.txt"))
        try await eventually("the laptop removes the deleted file") { laptop.read("Trip 2027.txt") == nil }

        // Folders: listed in their folder on the other device, downloaded on demand; a folder
        // renamed on one device is renamed on the other, with what is in it.
        try FileManager.default.createDirectory(at: laptop.documents.appendingPathComponent("Trips/2027"), withIntermediateDirectories: true)
        try await onOwnThread { try laptop.save("Trips/2027/Rome.txt", "Colosseum") }
        let nested = phone.documents.appendingPathComponent("Trips/2027/Rome.txt")
        try await eventually("the phone lists Trips/2027/Rome.txt") { phone.containers.isUbiquitousItem(at: nested) }
        try phone.containers.startDownloading(at: nested)
        try await eventually("the phone downloads it") { phone.read("Trips/2027/Rome.txt") == "Colosseum" }
        try FileManager.default.moveItem(at: laptop.documents.appendingPathComponent("Trips"), to: laptop.documents.appendingPathComponent("Journeys"))
        try await eventually("the phone follows the folder's rename") {
            phone.read("Journeys/2027/Rome.txt") == "Colosseum" && !FileManager.default.fileExists(atPath: phone.documents.appendingPathComponent("Trips").path)
        }

        // The agent's refusals come with a code to act on.
        let agent = phone.containers.agent
        let nowhere = phone.documents.appendingPathComponent("Nowhere.txt").path
        #expect { try agent.send(AgentRequest(.item, path: nowhere)) } throws: { ($0 as? AgentError)?.code == .unknownItem }
        #expect { try agent.send(AgentRequest(.evict, path: phone.documents.appendingPathComponent("Journeys").path)) } throws: { error in
            (error as? AgentError)?.code == .refused && "\(error)".contains("is a folder")
        }
        #expect { try agent.send(AgentRequest(.list)) } throws: { ($0 as? AgentError)?.code == .badRequest }

        // Signing out makes the account's containers unavailable and stops their sync.
        let phoneFolder = phone.documents
        let logout = try runUbiquity(["logout"], environment: phone.environment)
        #expect(logout.status == 0, "\(logout.output)")
        #expect(phone.containers.url(forContainer: container) == nil)
        try await eventually("the phone's agent stops syncing") { (try? phone.containers.agent.send(AgentRequest(.status)).status?.account) == .some(nil) }
        #expect { try agent.send(AgentRequest(.item, path: nowhere)) } throws: { ($0 as? AgentError)?.code == .notSignedIn }
        try await onOwnThread { try laptop.save("After.txt", "not for the phone") }
        try await eventually("the laptop sent it") { laptop.isIdle }
        try await Task.sleep(for: .milliseconds(500))
        #expect(!FileManager.default.fileExists(atPath: UbiquityPlaceholder.url(for: phoneFolder.appendingPathComponent("After.txt")).path))
        let ended = try await onOwnThread { (laptop.stopAgent(), phone.stopAgent()) }
        #expect(ended == (0, 0))
    }
}
