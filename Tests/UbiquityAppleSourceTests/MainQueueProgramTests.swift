import Foundation
import Synchronization
import Testing
import Ubiquity
import UbiquityTestSupport

/// How a program drains its main queue.
enum EntryPoint: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// `@main struct App { static func main() async }`.
    case async
    /// The same program with Ubiquity's run-loop hook turned off (`UBIQUITY_ASYNC_MAIN=dispatch`):
    /// its main queue drained by libdispatch's threads, as Swift's runtime does on Linux alone.
    case asyncDrainedByDispatch
    /// `RunLoop.main.run()`.
    case runLoop
    /// `dispatchMain()`.
    case dispatchMain

    var testDescription: String { rawValue }
}

/// The Apple-style app (Tests/AppleApps) as a real program — for every way it drains its main
/// queue and every queue its observers ask for — hears every notification Ubiquity posts, on
/// the queue it asked for, within a bound: a deadlock fails the test, it does not hang it.
@Suite(.serialized) struct MainQueueProgramTests {
    static let queues = ["main", "operationQueueMain", "none", "privateQueue"]

    @Test(arguments: EntryPoint.allCases, queues)
    func everyNotificationReachesItsObservers(entry: EntryPoint, queue: String) async throws {
        try await Self.check(entry: entry, queue: queue)
    }

    /// The same where inotify cannot be used (`UBIQUITY_WATCH=poll`, as a network file system
    /// needs and as a user out of inotify instances gets): the key-value store, the queries and
    /// the database hear other devices' changes by looking.
    @Test func everyNotificationReachesItsObserversWithoutInotify() async throws {
        try await Self.check(entry: .async, queue: "main", environment: ["UBIQUITY_WATCH": "poll"])
    }

    static func check(entry: EntryPoint, queue: String, environment extra: [String: String] = [:]) async throws {
        let paths = temporaryPaths()
        let root = paths.configuration.deletingLastPathComponent().deletingLastPathComponent()
        defer { try? FileManager.default.removeItem(at: root) }
        try credentials().save(to: paths)
        let store = "ABCDE12345.com.example.notes"
        let entitlements = root.appendingPathComponent("entitlements.json")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        try Data("""
            {"\(UbiquityEntitlements.containersKey)": ["ABCDE12345.com.example.notes"], "\(UbiquityEntitlements.keyValueStoreKey)": "\(store)",
             "\(UbiquityEntitlements.applicationGroupsKey)": ["group.com.example.notes"]}
            """.utf8).write(to: entitlements)

        let program = AppProgram()
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_CONFIG_HOME"] = root.appendingPathComponent("config").path
        environment["XDG_DATA_HOME"] = root.appendingPathComponent("data").path
        // A runtime folder of its own: its file coordination (locks, presenters) is the program's
        // alone, not shared with this test process and every other test's files.
        let runtime = root.appendingPathComponent("run")
        try FileManager.default.createDirectory(at: runtime, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        environment["XDG_RUNTIME_DIR"] = runtime.path
        environment["UBIQUITY_ENTITLEMENTS"] = entitlements.path
        environment["UBIQUITY_ASYNC_MAIN"] = entry == .asyncDrainedByDispatch ? "dispatch" : nil
        environment.merge(extra) { $1 }
        let work = root.appendingPathComponent("work").path
        switch entry {
        case .async, .asyncDrainedByDispatch: try program.run("UbiquityAppleAsyncApp", [queue, work], environment)
        case .runLoop, .dispatchMain: try program.run("UbiquityAppleMainQueueApp", [entry.rawValue, queue, work], environment)
        }
        defer { program.stop() }

        // Playing the agent: a change from another device for the key-value store, then another
        // account signed in — each once the app says it is ready.
        guard await program.waitFor({ $0 == "ready key-value-store" }) != nil else {
            Issue.record("never got to the key-value store: \(program.transcript)")
            return
        }
        let folder = paths.account("identity-ada").appendingPathComponent("kv")
        try KeyValueStoreFile.update(store, in: folder) { file in
            file.entries["level"] = .init(value: .integer(9), timestamp: Date().timeIntervalSince1970, pending: false)
            file.synced = true
            file.change = .init(serial: 1, reason: NSUbiquitousKeyValueStoreServerChange, keys: ["level"])
        }
        guard await program.waitFor({ $0 == "ready identity" }) != nil else {
            Issue.record("never got to the identity: \(program.transcript)")
            return
        }
        try credentials(identity: "identity-bob").save(to: paths)

        let ended = await program.waitFor(timeout: 360, { $0 == "done" || $0.hasPrefix("failures") })
        let lines = program.transcript
        #expect(!lines.contains { $0.hasPrefix("failed") }, "\(lines.filter { $0.hasPrefix("failed") })")
        #expect(ended == "done", "\(entry) with observers on \(queue): \(lines.filter { !$0.hasPrefix("ok") && !$0.contains("queue=right") })")
        #expect(await program.exitStatus() == 0)
        // Every notification was heard, each where its observer asked.
        let heard = Set(lines.filter { $0.hasSuffix("queue=right") }.map { $0.split(separator: " ")[1] })
        let expected: Set<Substring> = [
            "document-state", "own-notification-from-completion-handler", "own-notification-from-main-actor",
            "undo-did-close-group", "undo-did-undo", "undo-did-redo",
            "query-did-start-gathering", "query-gathering-progress", "query-did-finish-gathering", "query-did-update",
            "presentedItemDidChange", "database-did-import", "key-value-store-changed-externally", "identity-did-change",
        ]
        #expect(expected.subtracting(heard).isEmpty, "not heard: \(expected.subtracting(heard).sorted())")
        // An async entry point drains the main queue on the main thread, as on Apple's systems,
        // unless the hook is turned off; dispatchMain() never does.
        let onMainThread = lines.contains("finished mainThread=true")
        #expect(onMainThread == (entry == .async || entry == .runLoop), "\(lines.last(where: { $0.hasPrefix("finished") }) ?? "not finished")")
    }
}

/// One run of an app program, its standard output read line by line.
final class AppProgram: @unchecked Sendable {
    let process = ChildProcess()
    let output = Pipe()
    private var lines: OutputLines!

    func run(_ name: String, _ arguments: [String], _ environment: [String: String]) throws {
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent(name)
        process.arguments = arguments
        process.environment = environment
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        lines = OutputLines(output)
    }

    var transcript: [String] { lines.all }

    /// Waits (at most `timeout` seconds) for a line satisfying `match`.
    func waitFor(timeout: Double = 90, _ match: @escaping @Sendable (String) -> Bool) async -> String? {
        await lines.waitFor(timeout: timeout, match)
    }

    /// The exit status, once the program ends (killed after 30 s).
    func exitStatus() async -> Int32 {
        (try? await onOwnThread {
            let deadline = Date().addingTimeInterval(30)
            while self.process.isRunning && Date() < deadline { usleep(10_000) }
            if self.process.isRunning { self.stop() }
            self.process.waitUntilExit()
            return self.process.terminationStatus
        }) ?? -1
    }

    /// Kills the program if it still runs.
    func stop() {
        if process.isRunning {
            process.signal(SIGKILL)
            process.waitUntilExit()
        }
    }
}
