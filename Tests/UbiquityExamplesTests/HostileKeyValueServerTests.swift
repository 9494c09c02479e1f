import Foundation
import Synchronization
import Testing
import UbiquityKeys
import UbiquityProtocol
import UbiquityTestSupport

/// A server that lies about an account's key-value stores, with real devices: each device's
/// `ubiquity agent` syncs through a ``HostileRelay`` of its own, the laptop's app sets values
/// (`ubiquity kv set`), and the phone's relay changes what the phone is served. Every lie is
/// refused by the phone's agent — logged, and shown by `ubiquity status` — and the phone's
/// store keeps what it had.
@Suite(.serialized) struct HostileKeyValueServerTests {
    typealias Device = DataProtectionCommandTests.Device
    static let store = "ABCDE12345.com.example.game"
    static let other = "ABCDE12345.com.example.other"

    /// The attacks, one test each.
    enum Attack: String, CaseIterable, Sendable {
        case valueMovedToAnotherKey, oldValueServedAgain, valueOfAnotherStore, timestampChanged, plaintextUnderAdvanced, valueCalledARemoval
    }

    /// A device's running agent (its log kept in its folder).
    final class Agent: Sendable {
        let process: ChildProcess
        let log: URL

        init(_ device: Device, in dir: TemporaryDirectory) throws {
            log = dir.file("\(device.name)-agent-\(UUID().uuidString.prefix(4)).log")
            _ = FileManager.default.createFile(atPath: log.path, contents: nil) // checked when opened below
            process = ChildProcess()
            process.executableURL = RunningServer.binary
            process.arguments = ["agent"]
            process.environment = ProcessInfo.processInfo.environment.merging(device.home) { $1 }
            let handle = try FileHandle(forWritingTo: log)
            process.standardOutput = handle
            process.standardError = handle
            try process.run()
            try handle.close()
        }

        /// Stops it (SIGTERM) and reaps it on a thread of its own: never waited for on one of
        /// the two threads Swift's concurrency shares here (an agent finishing a request through
        /// an in-process relay would wait for that very thread).
        func stop() {
            process.terminate()
            let process = process
            Thread.detachNewThread { process.waitUntilExit() }
        }

        /// Stops it and waits until it has exited (on a thread of its own).
        func stopped() async throws {
            process.terminate()
            let process = process
            try await onOwnThread { process.waitUntilExit() }
        }

        var logged: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }
    }

    /// The name the server files `key` of `store` under, computed from `device`'s keyring (the
    /// test stands for its user, who can read it).
    static func tag(_ key: String, of store: String = store, on device: Device) throws -> String {
        let keyring = try Keyring(contentsOf: URL(fileURLWithPath: try #require(device.home["XDG_CONFIG_HOME"])).appendingPathComponent("ubiquity/keyring.json"))
        return try KeyValueKeys(store: store, rootKeys: keyring.epochs.compactMap { keyring.rootKey(epoch: $0) }).storedName(of: key)
    }

    /// Waits (up to 30 s) until `condition` holds for `device`'s `ubiquity` output, the phone's
    /// app writing its store meanwhile (each write makes its agent sync the store: send, then
    /// pull what the server has — pushes do not pass the relay).
    static func until(_ device: Device, _ arguments: [String], nudging phone: Device? = nil, _ condition: @escaping @Sendable (String) -> Bool) async throws -> Bool {
        // Once a second: every look and nudge is a process started, and the suites beside these
        // share two cores.
        let deadline = ContinuousClock.now + .seconds(40)
        var nudge = 0
        while ContinuousClock.now < deadline {
            if condition(try await device.running(arguments).output) { return true }
            if let phone {
                nudge += 1
                _ = try await phone.running(["kv", "set", store, "opened", "\(nudge)"])
            }
            try await Task.sleep(for: .seconds(1))
        }
        return false
    }

    /// Waits (up to 40 s) until `agent` logged `words` more than `times` times, `phone`'s app
    /// writing its store every two seconds meanwhile (each write makes its agent sync the store).
    static func until(_ agent: Agent, logs words: String, moreThan times: Int = 0, nudging phone: Device? = nil) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(40)
        var nudge = 0
        while ContinuousClock.now < deadline {
            if occurrences(of: words, in: agent) > times { return true }
            if let phone, nudge % 4 == 0 { _ = try await phone.running(["kv", "set", store, "opened", "nudge \(nudge)"]) }
            nudge += 1
            try await Task.sleep(for: .milliseconds(500))
        }
        return false
    }

    /// How many times `agent` logged `words` so far.
    static func occurrences(of words: String, in agent: Agent) -> Int {
        agent.logged.components(separatedBy: words).count - 1
    }

    @Test(arguments: Attack.allCases) func thePhoneRefusesTheLie(attack: Attack) async throws {
        let setup = try await HostileKeyServerTests.Setup()
        defer { setup.tearDown() }
        let (laptop, phone, relay) = (setup.laptop, setup.phone, setup.phoneRelay)
        let store = Self.store
        // Both devices' agents; the phone's store exists (an app of it opened it).
        var phoneAgent = try Agent(phone, in: setup.dir)
        let laptopAgent = try Agent(laptop, in: setup.dir)
        defer { laptopAgent.stop(); phoneAgent.stop() }
        #expect(try await phone.running(["kv", "set", store, "opened", "yes"]).status == 0)
        #expect(try await laptop.running(["kv", "set", store, "player", "Ada"]).status == 0)
        #expect(try await laptop.running(["kv", "set", store, "level", "--json", #"{"integer":7}"#]).status == 0)
        #expect(try await Self.until(phone, ["kv", "list", store], nudging: phone) { $0.contains(#"player = {"string":"Ada"}"#) && $0.contains(#"level = {"integer":7}"#) },
                "\(phoneAgent.logged.suffix(2000))")
        let (player, level) = (try Self.tag("player", on: phone), try Self.tag("level", on: phone))
        // Every entry the phone was served so far, by tag.
        let served = relay.exchanges.withLock { exchanges in
            exchanges.filter { $0.path.hasPrefix("/v1/kv/\(store)") }.compactMap { $0.decoded(KeyValueResponse.self) }.flatMap(\.entries)
        }
        func entry(_ tag: String) throws -> KeyValueEntry { try #require(served.last { $0.key == tag }, "\(served.map(\.key))") }
        /// From now on, answers to the phone's pulls of the store get `lie` applied.
        func tell(_ lie: @escaping @Sendable (inout KeyValueResponse) -> Void) {
            relay.rewrite(KeyValueResponse.self, where: { $0.hasPrefix("/v1/kv/\(store)") }, lie)
        }

        switch attack {
        case .valueMovedToAnotherKey:
            // The level's sealed value served as the player's.
            var moved = try entry(level)
            moved.key = player
            let lie = moved
            tell { $0.entries.append(lie) }
        case .oldValueServedAgain:
            // The laptop reaches 9; the server then serves 7 again, exactly as it was sealed.
            let seven = try entry(level)
            #expect(try await laptop.running(["kv", "set", store, "level", "--json", #"{"integer":9}"#]).status == 0)
            #expect(try await Self.until(phone, ["kv", "get", store, "level"], nudging: phone) { $0 == "{\"integer\":9}\n" })
            tell { $0.entries.append(seven) }
        case .valueOfAnotherStore:
            // Another store's sealed value for the same key, filed under this store's tag.
            #expect(try await laptop.running(["kv", "set", Self.other, "player", "Mallory"]).status == 0)
            let otherTag = try Self.tag("player", of: Self.other, on: laptop)
            let foreign = try #require(await eventuallyValue {
                setup.laptopRelay.exchanges.withLock { $0.filter { $0.path.hasPrefix("/v1/kv/\(Self.other)") } }
                    .compactMap { $0.decoded(KeyValueResponse.self) }.flatMap(\.entries).last { $0.key == otherTag }
            })
            tell { var spliced = foreign; spliced.key = player; $0.entries.append(spliced) }
        case .valueCalledARemoval:
            // The player's value served again, the server calling it a removal: only the seal
            // says what a change is, so the phone keeps the player (nothing to refuse).
            var removal = try entry(player)
            removal.removed = true
            let lie = removal, told = Told()
            tell { $0.entries.append(lie); told.count.withLock { $0 += 1 } }
            for nudge in 0..<3 {
                _ = try await phone.running(["kv", "set", store, "opened", "removal \(nudge)"])
                try await Task.sleep(for: .milliseconds(500))
            }
            #expect(told.count.withLock { $0 } > 0, "the lie was told")
            let values = try await phone.running(["kv", "list", store]).output
            #expect(values.contains(#"player = {"string":"Ada"}"#), "\(values)")
            try await laptopAgent.stopped()
            try await phoneAgent.stopped()
            return
        case .timestampChanged:
            // Every change dated later than its device sealed it (to make it win over newer ones).
            tell { $0.entries = $0.entries.map { var later = $0; later.timestamp += 1_000; return later } }
        case .plaintextUnderAdvanced:
            // Advanced Data Protection turned on; the phone's agent starts again (reads the roster
            // at once); the server, holding no key, puts a plaintext value in.
            #expect(try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"]).status == 0)
            try await phoneAgent.stopped()
            phoneAgent = try Agent(phone, in: setup.dir)
            #expect(try await Self.until(phone, ["protection", "status"]) { $0.contains("Advanced") })
            tell { $0.entries.append(KeyValueEntry(key: "player", value: .string("Mallory"), timestamp: Date().timeIntervalSince1970 + 100, deviceName: "laptop", sequence: 1_000)) }
        }
        // A change on the laptop, and the phone's next pull carries the lie.
        #expect(try await laptop.running(["kv", "set", store, "nudge", "1"]).status == 0)
        let agent = phoneAgent
        #expect(try await Self.until(agent, logs: "refused a key-value change the server sent", nudging: phone), "\(agent.logged.suffix(3000))")
        #expect(try await Self.until(phone, ["status"]) { $0.contains("key-value store \(store): refused") }, "ubiquity status says so")
        let values = try await phone.running(["kv", "list", store]).output
        #expect(values.contains(#"player = {"string":"Ada"}"#), "\(values)")
        #expect(values.contains(attack == .oldValueServedAgain ? #"level = {"integer":9}"# : #"level = {"integer":7}"#), "\(values)")
        // The agents gone before the server and the relays go.
        try await laptopAgent.stopped()
        try await agent.stopped()
    }
}

/// How many times a lie was told.
final class Told: Sendable {
    let count = Mutex(0)
}

/// Whether `name` is in `folder` within a minute (a file a device's agent brings).
func hasArrived(_ folder: URL, _ name: String) async -> Bool {
    await eventuallyValue(seconds: 60) { FileManager.default.fileExists(atPath: folder.appendingPathComponent(name).path) ? true : nil } == true
}

/// `value()` once it is not nil (up to `seconds`).
func eventuallyValue<T: Sendable>(seconds: Double = 15, _ value: @escaping @Sendable () -> T?) async -> T? {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline {
        if let found = value() { return found }
        try? await Task.sleep(for: .milliseconds(100))
    }
    return nil
}
