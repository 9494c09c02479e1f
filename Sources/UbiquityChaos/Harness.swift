import Foundation
import Synchronization
import Ubiquity
import UbiquityTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// One round's outcome.
struct RoundReport: Codable, Sendable {
    var round: Int
    var faults: [String: Int]
    var edits: Int
    var expected: Int
    var lost: Int
    var convergenceSeconds: Double?
    var violations: [Violation]
}

/// The whole run's outcome, printed as JSON.
struct ChaosReport: Codable, Sendable {
    var seed: UInt64
    var devices: Int
    var servers: Int
    var storage: String
    var rounds: [RoundReport]
    var faults: [String: Int]
    var faultsInjected: Int
    var edits: Int
    var lost: Int
    var violations: Int
    var convergence: [String: Double]
    var seconds: Double
    var replay: String
    var passed: Bool
    /// The device whose clock was skewed, and by how many seconds.
    var skewedDevice: String?
    var skewSeconds: Int
    /// Faults that could not be injected on this machine, and why.
    var unavailable: [String]
}

/// The settings of one run.
struct ChaosSettings: Sendable {
    var seed: UInt64
    var devices: Int
    var rounds: Int
    var roundSeconds: Double
    var settleSeconds: Double
    var minutes: Double?
    var paceMilliseconds: Int
    var database: String?
    /// Server instances (more than one only with ``database``).
    var servers = 1
    var work: URL
    var keep: Bool
    /// Each device's home and the server's data on a tmpfs of this many MiB (to fill up).
    var diskMegabytes = 768
    /// The last device's clock is off by this many seconds (0: every clock on time).
    var skewSeconds = 240
    /// Deletes one of the first device's files behind its writer's back after the first
    /// round's writes: a loss the checks must report (the harness's own test).
    var sabotage = false
    /// Fault kinds left out (`--without`).
    var without: Set<FaultKind> = []
    /// The first device's account shares the folder every device writes into with a second
    /// account, the last device's (`--share`; docs/Sharing.md).
    var share = false
    /// The owner's devices seal, so that the share is sealed with its own keys (`--sealed-share`).
    var sealedShare = false
    /// The servers keep chunk contents in a real object store the harness breaks (`--object-store`).
    var objectStore = false

    var replay: String {
        var words = ["ubiquity-chaos", "--seed", "\(seed)", "--devices", "\(devices)", "--round-seconds", "\(Int(roundSeconds))", "--pace-milliseconds", "\(paceMilliseconds)"]
        if let minutes { words += ["--minutes", "\(minutes)"] } else { words += ["--rounds", "\(rounds)"] }
        if skewSeconds != 240 { words += ["--skew-seconds", "\(skewSeconds)"] }
        if servers != 1 { words += ["--servers", "\(servers)"] }
        if !without.isEmpty { words += ["--without", without.map(\.rawValue).sorted().joined(separator: ",")] }
        if share { words += [sealedShare ? "--sealed-share" : "--share"] }
        if objectStore { words += ["--object-store"] }
        if database != nil { words += ["--database", "\"$DATABASE_URL\""] }
        return words.joined(separator: " ")
    }
}

/// Prints a line of the human summary (standard error; standard output is the JSON).
func say(_ line: String) {
    FileHandle.standardError.write(Data("[chaos] \(line)\n".utf8))
}

/// Starts the server and devices, runs rounds of writes under faults, heals, waits for quiet,
/// checks, and reports.
final class Harness: @unchecked Sendable { // used from one task at a time, faults through locks
    let settings: ChaosSettings
    let container = "CHAOS12345.com.example.chaos"
    let keyValueStore = "CHAOS12345.com.example.chaos"
    /// The server instances (several only on PostgreSQL: they share its storage).
    let servers: [ChaosServer]
    /// The first instance (the one that creates the account and checks the storage).
    var server: ChaosServer { servers[0] }
    /// With `--object-store`: the store the servers keep chunk contents in.
    let objectStore: ChaosObjectStore?
    /// `--escrow-key FILE` on PostgreSQL (one file for every instance), for the commands that take it.
    let escrowArguments: [String]
    /// Whether an object-store fault holds the store now.
    let objectStoreTurn = Mutex(false)
    var devices: [ChaosDevice] = []
    private var random: SeededGenerator
    private let faultCounts = Mutex<[String: Int]>([:])
    /// Devices whose network a fault holds now (one network fault per device at a time).
    private let busyLinks = Mutex<Set<Int>>([])
    private let serverBusy = Mutex(false)
    private let sealing = Mutex(false)
    /// Filesystems a disk-full fault holds now.
    private let busyDisks = Mutex<Set<String>>([])
    /// Devices whose agent is being killed and started again (a second kill meanwhile would
    /// only make the restart report a kill of its own).
    let busyAgents = Mutex<Set<Int>>([])
    /// Whether the shared folder's participant is being removed and invited again.
    let sharingBusy = Mutex(false)
    /// Devices whose writer is being killed and started again.
    private let busyWriters = Mutex<Set<Int>>([])

    /// Small filesystems mounted for the run (released at its end).
    private(set) var disks: [URL] = []
    /// Fault kinds this machine cannot give, and why.
    private(set) var unavailable: [String] = []
    private var skewed: ChaosDevice?

    init(settings: ChaosSettings) throws {
        self.settings = settings
        random = SeededGenerator(seed: settings.seed)
        objectStore = settings.objectStore ? try ChaosObjectStore(folder: settings.work.appendingPathComponent("objects")) : nil
        // Every instance on one database shares one escrow key file (in the run's folder).
        escrowArguments = settings.database == nil ? [] : ["--escrow-key", settings.work.appendingPathComponent("escrow.key").path]
        let storage = (settings.database.map { ["--database", $0] } ?? ["--data", settings.work.appendingPathComponent("server").path]) + (objectStore?.arguments ?? [])
        servers = (0..<settings.servers).map { [escrowArguments] index in
            ChaosServer(storage: storage, serving: escrowArguments + (settings.sealedShare ? ["--sealed-shares"] : []), log: settings.work.appendingPathComponent(settings.servers == 1 ? "logs/server.log" : "logs/server\(index).log"))
        }
    }

    /// The server's data folder (its chunks, and its database unless on PostgreSQL).
    var serverData: URL { settings.work.appendingPathComponent("server") }

    /// Mounts the small filesystems the disk-full faults fill (as root; else those faults are
    /// left out, and the report says so).
    /// The server keeps every revision (about 45 MB a minute under the writers here), so its
    /// filesystem grows with the run: full for good from the run's own writes, it would be no
    /// fault the harness injected, and none it could heal (found by a 25-minute run).
    private func mountDisks() {
        let writing = settings.minutes ?? Double(settings.rounds) * settings.roundSeconds / 60
        let serverMegabytes = max(settings.diskMegabytes, Int(64 * writing.rounded(.up)))
        let folders = [serverData] + (0..<settings.devices).map { settings.work.appendingPathComponent("device\($0)") }
        for folder in folders {
            guard Faults.mountSmallDisk(at: folder, megabytes: folder == serverData ? serverMegabytes : settings.diskMegabytes) else {
                unavailable.append("diskFull, serverDiskFull: cannot mount a tmpfs (errno \(errno); needs root or CAP_SYS_ADMIN)")
                for disk in disks { Faults.unmount(disk) }
                disks = []
                return
            }
            disks.append(folder)
        }
    }

    /// Unmounts the run's small filesystems; with `keepingCopies`, what they hold is copied
    /// beside them first (`deviceN.kept`), for a failed run's post-mortem.
    func releaseDisks(keepingCopies: Bool) async {
        for disk in disks {
            if keepingCopies {
                let copy = disk.path + ".kept"
                _ = try? await blocking { () -> Int32 in // (a failed copy loses only the post-mortem; the report stands)
                    let process = ChildProcess()
                    process.executableURL = URL(fileURLWithPath: "/bin/cp")
                    process.arguments = ["-a", disk.path + "/.", copy]
                    try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
                    try process.run()
                    process.waitUntilExit()
                    return process.terminationStatus
                }
            }
            Faults.unmount(disk)
        }
        disks = []
    }

    /// The whole run.
    func run() async throws -> ChaosReport {
        let start = ContinuousClock.now
        try FileManager.default.createDirectory(at: settings.work.appendingPathComponent("logs"), withIntermediateDirectories: true)
        say("seed \(settings.seed), \(settings.devices) devices, work in \(settings.work.path)")
        mountDisks()
        var skew = 0
        if settings.skewSeconds != 0 && settings.devices > 1 {
            if Faults.canSkewClocks { skew = settings.skewSeconds } else { unavailable.append("clock skew: \(Faults.fakeTimeLibrary) missing (Debian's faketime)") }
        }
        if settings.database != nil { unavailable.append("serverDiskFull: the server's storage is PostgreSQL (its disk is not the harness's)") }
        for line in unavailable { say("left out: \(line)") }
        if settings.share {
            let line = "sealInPlace: the server would seal a shared folder with the owner's container keys, which the other account never holds (docs/Sharing.md)"
            unavailable.append(line)
            say("left out: \(line)")
        }
        if let objectStore { try await objectStore.start() }
        for account in [Self.owner] + (settings.share ? [Self.participant] : []) {
            let created = try await runUbiquity(["account", "create", account] + server.storage + ["--password-stdin", "--quota", "\(Int64(1) << 40)"], input: "correct horse\n")
            guard created.status == 0 else { throw ChaosError("ubiquity account create: \(created.output)") }
        }
        for instance in servers { try await instance.start() }
        for index in 0..<settings.devices {
            let participant = settings.share && index == settings.devices - 1
            let device = try ChaosDevice(index: index, folder: settings.work, container: container, keyValueStore: keyValueStore, serverPort: server.port,
                                         skew: index == settings.devices - 1 ? skew : 0, account: participant ? Self.participant : Self.owner,
                                         sealing: settings.share ? (participant || settings.sealedShare) : nil)
            if device.skew != 0 { skewed = device }
            device.relay.targets = servers.map(\.port)
            try await device.login()
            try await device.startAgent()
            devices.append(device)
        }
        for device in devices { device.containers.installDownloader() }
        if settings.share { try await shareFolder() }

        var rounds: [RoundReport] = []
        var round = 0
        let deadline = settings.minutes.map { ContinuousClock.now + .seconds($0 * 60) }
        while deadline.map({ ContinuousClock.now < $0 }) ?? (round < settings.rounds) {
            round += 1
            let report = try await runRound(round)
            rounds.append(report)
            say("round \(round): \(report.faults.values.reduce(0, +)) faults, \(report.edits) edits, \(report.lost) lost, "
                + "\(report.violations.count) violations, quiet after \(report.convergenceSeconds.map { String(format: "%.1f s", $0) } ?? "never")")
            for violation in report.violations.prefix(20) { say("  \(violation)") }
            if !report.violations.isEmpty { break }
        }

        // The server's storage, once it is stopped: its own check and SQLite's.
        var closing = Checks(devices: devices)
        for device in devices where await device.stopAgent() != 0 { closing.record("agent", "\(device.name)'s agent did not stop cleanly on SIGTERM") }
        for (index, instance) in servers.enumerated() {
            let status = await instance.stop()
            if status != 0 { closing.record("server", "server \(index) exited with \(status) on SIGTERM") }
        }
        let fsck = try await runUbiquity(["fsck"] + server.storage + escrowArguments)
        if fsck.status != 0 { closing.record("server", "ubiquity fsck: \(fsck.output)") }
        if settings.database == nil { closing.checkServerDatabases(data: settings.work.appendingPathComponent("server")) }
        if !closing.violations.isEmpty, !rounds.isEmpty { rounds[rounds.count - 1].violations += closing.violations }
        for violation in closing.violations { say("  \(violation)") }

        let faults = faultCounts.withLock { $0 }
        let times = rounds.compactMap(\.convergenceSeconds).sorted()
        func percentile(_ p: Double) -> Double { times.isEmpty ? 0 : times[min(times.count - 1, Int((Double(times.count - 1) * p).rounded()))] }
        let violations = rounds.map(\.violations.count).reduce(0, +)
        let lost = rounds.map(\.lost).reduce(0, +)
        let report = ChaosReport(
            seed: settings.seed, devices: settings.devices, servers: settings.servers, storage: settings.database == nil ? "sqlite" : "postgresql", rounds: rounds,
            faults: faults, faultsInjected: faults.values.reduce(0, +), edits: rounds.map(\.edits).reduce(0, +), lost: lost, violations: violations,
            convergence: ["p50": percentile(0.5), "p99": percentile(0.99), "max": times.last ?? 0],
            seconds: (ContinuousClock.now - start).seconds, replay: settings.replay, passed: violations == 0 && lost == 0 && rounds.allSatisfy { $0.convergenceSeconds != nil },
            skewedDevice: skewed?.name, skewSeconds: skewed?.skew ?? 0, unavailable: unavailable)
        return report
    }

    /// Kills every process the run started and releases its disks at once, from any thread:
    /// the harness was interrupted (SIGINT, SIGTERM) and must leave nothing behind.
    func emergencyStop() {
        for device in devices { device.killNow() }
        for instance in servers { instance.killNow() }
        objectStore?.killNow()
        for disk in disks { Faults.unmount(disk) }
    }

    /// Stops whatever still runs (after a run, or after it failed part way).
    func shutDown() async {
        for device in devices {
            _ = await device.stopWriter(timeout: .seconds(5))
            await device.killAgent()
            device.relay.stop()
        }
        for instance in servers { await instance.kill() }
        await objectStore?.stop()
        objectStore?.relay.stop()
    }

    /// Writers run while faults come; then the faults end, the writers stop, everything is
    /// healed, the devices go quiet, and the invariants are checked.
    private func runRound(_ round: Int) async throws -> RoundReport {
        let before = faultCounts.withLock { $0 }
        let editsBefore = try devices.map { try LedgerEntry.read($0.ledger).filter { $0.operation != .intent }.count }.reduce(0, +)
        for device in devices {
            try device.startWriter(seed: settings.seed &* 1_000_003 &+ UInt64(round * 100 + device.index), pace: settings.paceMilliseconds)
        }
        note("round \(round): writers start")
        let end = ContinuousClock.now + .seconds(settings.roundSeconds)
        var faults: [Task<Void, Never>] = settings.share ? sharedFolderFaults(roundEnd: end) : []
        while ContinuousClock.now < end {
            try await Task.sleep(for: .milliseconds(Int.random(in: 300...2_000, using: &random)))
            if let fault = pickFault(roundEnd: end) { faults.append(fault) }
        }
        for fault in faults { await fault.value }

        var checks = Checks(devices: devices)
        note("round \(round): faults end, writers stop")
        for device in devices where !(await device.stopWriter()) {
            checks.record("writer", "\(device.name)'s writer failed or had to be killed (see \(device.logs.path)/\(device.name)-writer.log)")
        }
        if settings.sabotage && round == 1, let root = devices[0].root,
           let victim = LedgerModel(try LedgerEntry.read(devices[0].ledger)).files.keys.sorted().first {
            try FileManager.default.removeItem(at: root.appendingPathComponent(victim))
            note("sabotage: removed \(victim) from \(devices[0].name) behind its writer's back")
        }
        // Heal: every link carries bytes again, every process runs.
        for device in devices { device.relay.mode = .pass }
        if let objectStore {
            objectStore.relay.mode = .pass
            if !objectStore.isRunning { try await objectStore.start() }
        }
        for instance in servers where !instance.isRunning { try await instance.start() }
        for device in devices { device.relay.targets = servers.map(\.port) }
        for device in devices where !device.isSignedIn { try await device.loginRetrying() }
        for device in devices where !device.agentIsRunning { try await device.startAgent() }

        note("round \(round): healed")
        let healed = ContinuousClock.now
        var (quiet, snapshots, stores) = try await settle(since: healed)
        // The databases, opened as their apps would at launch: each publishes what a killed
        // writer had not, and imports the others' logs; what one published must reach the
        // others (quiet again) before they import it. Three passes at most.
        var databases: [DatabaseState] = []
        for pass in 1...3 where quiet != nil {
            databases = []
            for device in devices {
                do { databases.append(try await device.databaseState()) } catch {
                    checks.record("database", "\(error)")
                    databases = []
                    break
                }
            }
            let published = zip(devices, databases).filter { $0.1.published }.map(\.0.name)
            if published.isEmpty { break }
            note("round \(round): database pass \(pass): \(published.joined(separator: ", ")) published what a killed writer had not")
            (quiet, snapshots, stores) = try await settle(since: healed)
        }
        if quiet == nil {
            snapshots = devices.map { $0.root.map { Snapshot(root: $0) } ?? Snapshot() }
            stores = devices.map(keyValues)
            for device in devices {
                let status = device.status()
                checks.record("agent", "\(device.name) not quiet after \(Int(settings.settleSeconds)) s: "
                    + (status.map { "connected \($0.connected), \($0.containers.map { "idle \($0.idle), queued \($0.queued), errors \($0.errors)" })" } ?? "no answer"))
            }
        }

        let models = try devices.map { LedgerModel(try LedgerEntry.read($0.ledger)) }
        checks.checkTrees(snapshots)
        checks.checkOwnedFiles(snapshots, models: models)
        await checks.checkSharedFiles(snapshots, models: models)
        checks.checkKeyValues(stores, models: models)
        if !databases.isEmpty { checks.checkDatabases(databases, models: models) }

        let after = faultCounts.withLock { $0 }
        let edits = try devices.map { try LedgerEntry.read($0.ledger).filter { $0.operation != .intent }.count }.reduce(0, +) - editsBefore
        return RoundReport(round: round, faults: after.merging(before.mapValues { -$0 }) { $0 + $1 }.filter { $0.value > 0 }, edits: edits,
                           expected: checks.expected, lost: checks.lost, convergenceSeconds: quiet, violations: checks.violations)
    }

    /// Waits (until `settleSeconds` after `healed`) for every agent to be connected and idle,
    /// every tree the same without strays or placeholders, and every key-value store the same:
    /// the seconds since `healed` it took (nil: never), and the trees and stores last read.
    private func settle(since healed: ContinuousClock.Instant) async throws -> (quiet: Double?, snapshots: [Snapshot], stores: [[String: String]]) {
        var snapshots: [Snapshot] = []
        var stores: [[String: String]] = []
        while ContinuousClock.now - healed < .seconds(settings.settleSeconds) {
            let statuses = devices.map { $0.status() }
            let idle = statuses.allSatisfy { status in status.map { $0.connected && $0.containers.allSatisfy { $0.idle && $0.queued == 0 } } ?? false }
            if idle {
                snapshots = devices.map { Snapshot(root: $0.root!) }
                stores = devices.map(keyValues)
                let accounts = devices.map(\.account)
                let storesAgree = Checks.groups(accounts).allSatisfy { group in group.allSatisfy { stores[$0] == stores[group[0]] } }
                if Snapshot.agree(snapshots, accounts: accounts) && snapshots.allSatisfy({ $0.placeholders.isEmpty && $0.strays.isEmpty }) && storesAgree {
                    return ((ContinuousClock.now - healed).seconds, snapshots, stores)
                }
            }
            try await Task.sleep(for: .milliseconds(250))
        }
        return (nil, snapshots, stores)
    }

    /// A device's key-value store as strings.
    private func keyValues(_ device: ChaosDevice) -> [String: String] {
        NSUbiquitousKeyValueStore(identifier: keyValueStore, containers: device.containers).dictionaryRepresentation.mapValues { "\($0)" }
    }

    private let started = ContinuousClock.now
    private let timeline = Mutex<[String]>([])

    /// Counts a fault and notes it in the timeline (`faults.log` in the working folder: when,
    /// what, where — to read beside the agents' and the server's logs).
    func count(_ kind: FaultKind, _ target: String = "", _ detail: String = "") {
        faultCounts.withLock { $0[kind.rawValue, default: 0] += 1 }
        note("\(kind.rawValue) \(target) \(detail)")
    }

    /// Appends a line to the timeline, stamped with the seconds since the start and the wall clock.
    func note(_ line: String) {
        let stamp = String(format: "%8.2f", (ContinuousClock.now - started).seconds)
        let text = "\(stamp) \(ISO8601DateFormatter().string(from: Date())) \(line)\n"
        timeline.withLock { _ in
            let url = settings.work.appendingPathComponent("faults.log")
            if let handle = try? FileHandle(forWritingTo: url) {
                handle.seekToEndOfFile()
                handle.write(Data(text.utf8))
                try? handle.close() // (a timeline line is a debugging aid; the counts are what is reported)
            } else {
                _ = FileManager.default.createFile(atPath: url.path, contents: Data(text.utf8))
            }
        }
    }

    /// Picks a fault from the seed and starts it; nil when its target is busy with another.
    private func pickFault(roundEnd: ContinuousClock.Instant) -> Task<Void, Never>? {
        let kinds = FaultKind.allCases.filter {
            !settings.without.contains($0) && (settings.share ? $0 != .sealInPlace : !$0.needsShare) && (settings.objectStore || !$0.needsObjectStore)
        }
        let total = kinds.map(\.weight).reduce(0, +)
        guard total > 0 else { return nil }
        var roll = Int.random(in: 0..<total, using: &random)
        let kind = kinds.first { roll -= $0.weight; return roll < 0 }!
        let device = devices[Int.random(in: 0..<devices.count, using: &random)]
        let pause = Double.random(in: 0...1, using: &random)
        let remaining = max(0, (roundEnd - ContinuousClock.now).seconds)
        switch kind {
        case .agentKill:
            guard device.agentIsRunning, busyAgents.withLock({ $0.insert(device.index).inserted }) else { return nil }
            count(kind, device.name, String(format: "restart after %.1f s", pause * 2))
            return Task {
                await device.killAgent()
                try? await Task.sleep(for: .seconds(pause * 2)) // (a cancelled sleep only shortens the pause)
                do { try await device.startAgent() } catch { say("\(device.name)'s agent did not restart: \(error)") }
                self.busyAgents.withLock { _ = $0.remove(device.index) }
            }
        case .appKill:
            guard device.writerIsRunning, busyWriters.withLock({ $0.insert(device.index).inserted }) else { return nil }
            return Task {
                // Aimed mid-step (a save, a move, a delete under way) when one begins within 3 s.
                let midStep = await device.waitForWriterMidStep(timeout: .seconds(3))
                self.count(kind, device.name, (midStep ? "mid-step, " : "between steps, ") + String(format: "restart after %.1f s", pause * 2))
                await device.killWriter()
                try? await Task.sleep(for: .seconds(pause * 2)) // (a cancelled sleep only shortens the pause)
                do { try device.restartWriter() } catch { say("\(device.name)'s writer did not restart: \(error)") }
                self.busyWriters.withLock { _ = $0.remove(device.index) }
            }
        case .serverKill:
            guard serverBusy.withLock({ busy in defer { busy = true }; return !busy }) else { return nil }
            let index = Int.random(in: 0..<servers.count, using: &random)
            let instance = servers[index]
            count(kind, servers.count == 1 ? "server" : "server\(index)", String(format: "restart after %.1f s", pause * 3))
            return Task { [servers, devices] in
                await instance.kill()
                // A load balancer stops sending to an instance that is down.
                for device in devices { device.relay.targets = servers.filter(\.isRunning).map(\.port) }
                try? await Task.sleep(for: .seconds(pause * 3)) // (a cancelled sleep only shortens the pause)
                do {
                    try await instance.start()
                    for device in devices { device.relay.targets = servers.filter(\.isRunning).map(\.port) }
                } catch { say("the server did not restart: \(error)") }
                self.serverBusy.withLock { $0 = false }
            }
        case .reset:
            count(kind, device.name)
            device.relay.resetAll()
            return nil
        case .sealInPlace:
            guard sealing.withLock({ busy in defer { busy = true }; return !busy }) else { return nil }
            count(kind, "server", String(format: "killed after %.1f s unless done", pause * 2))
            return Task { [storage = servers[0].storage + escrowArguments, log = settings.work.appendingPathComponent("logs/seal-in-place.log")] in
                do { try await Faults.sealInPlace(storage: storage, killedAfter: .seconds(pause * 2), log: log) } catch { say("sealing in place did not start: \(error)") }
                self.sealing.withLock { $0 = false }
            }
        case .diskFull, .serverDiskFull:
            guard !disks.isEmpty, kind == .diskFull || settings.database == nil else { return nil }
            let folder = kind == .serverDiskFull ? serverData : device.home
            let seconds = kind == .serverDiskFull ? 1 + pause * 3 : 2 + pause * 4
            guard busyDisks.withLock({ $0.insert(folder.path).inserted }) else { return nil }
            count(kind, kind == .serverDiskFull ? "server" : device.name, String(format: "for %.1f s", seconds))
            return Task {
                do {
                    let ballast = try await blocking { try Faults.fill(folder) }
                    try? await Task.sleep(for: .seconds(seconds)) // (a cancelled sleep only shortens the fault)
                    try FileManager.default.removeItem(at: ballast)
                } catch {
                    say("filling \(folder.path) failed: \(error)")
                }
                self.busyDisks.withLock { _ = $0.remove(folder.path) }
            }
        case .shareRemoval, .moveKill:
            return sharedFolderFault(kind, pause: pause)
        case .storeDown, .storeStall, .storeErrors, .storeLostAnswers:
            return objectStoreFault(kind, pause: pause)
        case .signOut:
            // (A participant's device signing out and in is not in the profile yet: docs/Reliability.md.)
            guard device.isSignedIn, !device.isParticipant, busyLinks.withLock({ $0.insert(device.index).inserted }) else { return nil }
            let seconds = 2 + pause * 4
            count(kind, device.name, String(format: "for %.1f s", seconds))
            return Task {
                do {
                    try await device.logout()
                    try? await Task.sleep(for: .seconds(seconds)) // (a cancelled sleep only shortens the fault)
                    try await device.loginRetrying()
                } catch {
                    say("signing \(device.name) out and in failed: \(error)")
                }
                self.busyLinks.withLock { _ = $0.remove(device.index) }
            }
        case .flood:
            guard let root = device.root else { return nil }
            count(kind, device.name, "6,000 files made and removed")
            let folder = root.appendingPathComponent(Layout.owned(by: device.name))
            return Task {
                do { try await blocking { try Faults.flood(in: folder, count: 6_000) } } catch { say("flooding \(device.name) failed: \(error)") }
            }
        case .cut, .stall, .drip, .jitter, .offline:
            guard busyLinks.withLock({ $0.insert(device.index).inserted }) else { return nil }
            let seconds: Double
            let mode: RelayProxy.Mode
            switch kind {
            case .cut: (seconds, mode) = (1 + pause * 4, .cut)
            case .stall: (seconds, mode) = (1 + pause * 7, .stall)
            case .drip: (seconds, mode) = (2 + pause * 6, .drip)
            case .jitter: (seconds, mode) = (2 + pause * 6, .jitter)
            default: (seconds, mode) = (min(remaining, settings.roundSeconds * (0.25 + pause / 4)), .cut)
            }
            count(kind, device.name, String(format: "for %.1f s", seconds))
            device.relay.mode = mode
            return Task {
                try? await Task.sleep(for: .seconds(seconds)) // (a cancelled sleep only shortens the fault)
                device.relay.mode = .pass
                self.busyLinks.withLock { _ = $0.remove(device.index) }
            }
        }
    }
}

extension Duration {
    /// In seconds.
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
