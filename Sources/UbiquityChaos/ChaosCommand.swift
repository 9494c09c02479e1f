import ArgumentParser
import UbiquityFiles
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `ubiquity-chaos`: real servers and agents under faults, and the proof that nothing was lost.
@main struct ChaosCommand: AsyncParsableCommand {
    /// Parses the arguments (read from the kernel when libfaketime hid them from Swift: the
    /// writer of a device with a skewed clock runs under it).
    static func main() async { await main(ProcessArguments.afterProgram) }

    static let configuration = CommandConfiguration(
        commandName: "ubiquity-chaos",
        abstract: "Run a real server and agents with app-like writers under injected faults, then check that every device agrees and no edit was lost.",
        discussion: """
            Prints a JSON report on standard output and a summary on standard error; exits 1 when \
            an invariant was broken. A failing run names its seed and the command that replays \
            it. See docs/Reliability.md.
            """,
        subcommands: [RunCommand.self, WriteCommand.self, DatabaseCommand.self],
        defaultSubcommand: RunCommand.self)
}

/// The harness (the default subcommand).
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "run", abstract: "Run the harness (the default).")

    @Option(help: "The seed of the faults and the writers' choices.") var seed: UInt64 = 1
    @Option(help: "Devices (each a home, an agent and a writer).") var devices = 3
    @Option(help: "Rounds of writes under faults, each followed by healing and the checks.") var rounds = 2
    @Option(help: "Run rounds for this many minutes instead of --rounds.") var minutes: Double?
    @Option(help: "Seconds of writes and faults per round.") var roundSeconds = 20.0
    @Option(help: "Seconds the devices get to go quiet after healing.") var settleSeconds = 120.0
    @Option(help: "Each writer waits up to this many milliseconds between steps.") var paceMilliseconds = 200
    @Option(help: "A PostgreSQL URL for the server's storage instead of an embedded database (its own schema: add search_path=NAME).") var database: String?
    @Option(help: "Server instances behind the devices' links, each connection to one of them (with --database).") var servers = 1
    @Option(help: "The working folder (default: a new one under /tmp).") var work: String?
    @Option(help: "MiB of the small filesystem each device's home is on (the disk-full faults fill them); the server's is this or 64 MiB per minute of writing, whichever is more.") var diskMegabytes = 768
    @Option(help: "Seconds the last device's clock is off (libfaketime; 0: none).") var skewSeconds = 240
    @Flag(help: "Keep the working folder even when the run passes.") var keep = false
    @Flag(help: "Share the folder every device writes into with a second account, the last device's; remove and invite it again, and kill a move on an owner's device, each round.")
    var share = false
    @Flag(help: "With --share: the owner's devices seal too, so the folder is shared sealed, with the share's own keys.")
    var sealedShare = false
    @Flag(help: "With --database: chunk contents in a real object store (SeaweedFS's weed, on the PATH) that the faults stop, stall, make answer 503 SlowDown, and whose answers they lose.")
    var objectStore = false
    @Option(help: "Fault kinds to leave out, comma-separated (e.g. signOut).") var without: String?
    @Flag(help: ArgumentHelp("Delete one of the first device's files behind its writer's back (the checks must fail).", visibility: .hidden))
    var sabotage = false

    func validate() throws {
        for name in (without ?? "").split(separator: ",") where FaultKind(rawValue: String(name)) == nil {
            throw ValidationError("unknown fault kind \(name) (known: \(FaultKind.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        guard (1...8).contains(devices) else { throw ValidationError("--devices is 1 to 8") }
        guard !share || devices >= 2 else { throw ValidationError("--share needs at least 2 devices (the last is the other account's)") }
        guard rounds > 0, roundSeconds >= 1, settleSeconds >= 1, paceMilliseconds >= 0 else { throw ValidationError("rounds and seconds are positive") }
        guard !objectStore || database != nil else { throw ValidationError("--object-store keeps its index in PostgreSQL: give --database too") }
        guard (1...4).contains(servers), servers == 1 || database != nil else { throw ValidationError("--servers is 1 to 4, more than one only with --database (they share its storage)") }
    }

    func run() async throws {
        let folder = work.map { URL(fileURLWithPath: $0) } ?? URL(fileURLWithPath: "/tmp/ubiquity-chaos-\(getpid())")
        let settings = ChaosSettings(seed: seed, devices: devices, rounds: rounds, roundSeconds: roundSeconds, settleSeconds: settleSeconds, minutes: minutes,
                                     paceMilliseconds: paceMilliseconds, database: database, servers: servers, work: folder, keep: keep, diskMegabytes: diskMegabytes, skewSeconds: skewSeconds, sabotage: sabotage,
                                     without: Set((without ?? "").split(separator: ",").compactMap { FaultKind(rawValue: String($0)) }), share: share || sealedShare, sealedShare: sealedShare, objectStore: objectStore)
        let harness = try Harness(settings: settings)
        // Interrupted, the harness leaves no process or mount behind.
        var interruptions: [any DispatchSourceSignal] = []
        for number: Int32 in [SIGINT, SIGTERM] {
            _ = Glibc.signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                say("interrupted: stopping every process the run started (kept \(folder.path))")
                harness.emergencyStop()
                Glibc.exit(130)
            }
            source.resume()
            interruptions.append(source)
        }
        defer { interruptions.forEach { $0.cancel() } }
        let report: ChaosReport
        do {
            report = try await harness.run()
        } catch {
            await harness.shutDown()
            await harness.releaseDisks(keepingCopies: true)
            say("the harness failed: \(error); kept \(folder.path); replay: \(settings.replay)")
            throw ExitCode(2)
        }
        await harness.shutDown()
        await harness.releaseDisks(keepingCopies: keep || !report.passed)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        FileHandle.standardOutput.write(try encoder.encode(report) + Data("\n".utf8))
        say("\(report.rounds.count) round(s), \(report.faultsInjected) faults \(report.faults.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")), "
            + "\(report.edits) edits, \(report.lost) lost, \(report.violations) violations; quiet after healing p50 \(String(format: "%.1f", report.convergence["p50"] ?? 0)) s, "
            + "p99 \(String(format: "%.1f", report.convergence["p99"] ?? 0)) s; \(Int(report.seconds)) s in all")
        if report.passed {
            if !keep { try? FileManager.default.removeItem(at: folder) } // (best effort: a leftover folder under /tmp is harmless)
        } else {
            say("FAILED — kept \(folder.path); replay: \(report.replay)")
            throw ExitCode(1)
        }
    }
}
