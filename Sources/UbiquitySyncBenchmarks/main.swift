// ubiquity-sync-bench: the sync figures of issue 16 and SYSTEM.md, for Ubiquity (`ubiquity
// serve` and two `ubiquity agent` processes on loopback) and its peer, Syncthing (two
// instances of the Debian package on loopback; discovery, relays and NAT off; the file watcher
// at its 1 s minimum), measured the same way in one run and printed as JSON with their ratios
// and the goals. Every device reaches its server (or its peer) through a counting relay, so
// the bytes of each leg are known; CPU time and wake-ups come from /proc.
//
//   swift build -c release --product ubiquity && swift run -c release ubiquity-sync-bench
//     [--small N] [--syncthing-small N] [--burst N] [--folder N] [--big-folder N] [--large-mib M]
//     [--large-runs N] [--cost-changes N] [--idle-items N] [--idle-seconds S] [--database-updates N] [--skip-syncthing]
//     [--web-items N] [--web-only] [--sealed] [--advanced] [--reference-build DIR] [--directory DIR] [--keep] [--skip-fan-out]
//     [--sharing-only [--sharing-items N] [--sharing-runs N]]
//     [--storage-only --database URL --object-store URL --object-store-credentials FILE [--storage-runs N]]
//     [--link home|office] [--up-mbit M] [--down-mbit M] [--delay-ms D] [--jitter-ms J] [--loss P] [--check-link]
//
// `--link` measures only the figures of issue 48 on shaped links (LinkScenario.swift): `home`
// is 20 Mbit/s up, 100 down, 20 ms each way; `office` 100 Mbit/s both ways, 5 ms each way; the
// explicit flags change either (or, alone, shape a link of their own). Every leg of both
// systems goes through a user-space shaping relay; the relay's own check comes first. Ubiquity's
// run ends with ten more devices fetching a new large file at once (TenDeviceScenario.swift:
// the server's store reads against the file's size).
// `--check-link` runs only that check.
//
// `--sharing-only` measures only the sharing figures of issue 46 (ShareScenario.swift): sharing
// a folder of N items (10,000) against one of 10, a participant's first listing, and an edit
// through a share against one within an account, to the owner's other device.
//
// `--storage-only` measures only the storage figures of issue 47 (StorageScenario.swift): the
// same server on PostgreSQL with chunk contents in its rows, then in an object store
// (`--object-store`, e.g. the SeaweedFS `.ci/seaweedfs start` runs), in one run: a new
// `--large-mib` file (median of `--storage-runs`), `--small` new 4 KiB files, the server's
// memory, and the object store's requests per GiB uploaded.
//
// `--sealed` measures Ubiquity's sync scenarios a second time in the same run with the agents
// sealing the container's chunks and records (`sealedContents`, issue 45), and the web figures
// with folders of sealed records: `ubiquitySealed` in the JSON, with its ratios to the plaintext
// run (`sealedOver…`) and the issue's goals for it. `--advanced` makes that second run one under
// Advanced Data Protection (device A switches the account once both agents run): what coverage
// costs, every change of an item a commit named waiting for its commit.
//
// `--reference-build DIR` measures the sync scenarios a third time with another build's `ubiquity`
// (DIR/ubiquity: "today's build" of an issue, built from the commit before its work began), the
// same scenarios in the same run: `ubiquityReference` in the JSON, and the sealed run over it
// (`sealedOverReference…`, issue 45: a new 64 MiB file's CPU at most 1.2 times today's).
//
// A whole run ends with the server's figure for 1,000 devices of one account (FanOutScenario.swift:
// a short `ubiquity-load --devices 1000`, so build that product too), unless `--skip-fan-out`.
//
// `--web-only` measures only the web interface's figures (WebScenario.swift) on Ubiquity's
// server (with `--sealed`, on the sealed run's server too): no sync scenarios, no Syncthing.
import Foundation
import Ubiquity
import UbiquityFiles
import UbiquityTestSupport

#if canImport(Glibc)
import Glibc
#endif

struct Options {
    var small = 50
    var syncthingSmall = 20
    var burst = 100
    var folder = 1000
    var bigFolder = 10_000
    var largeMiB = 64
    var largeRuns = 3
    var costChanges = 10
    var idleItems = 100_000
    var idleSeconds = 60
    var databaseUpdates = 20
    var webItems = 10_000
    var webOnly = false
    /// Measure only the sharing figures (ShareScenario.swift).
    var sharingOnly = false
    var sharingItems = 10_000
    var sharingRuns = 10
    var skipSyncthing = false
    /// Leave out the 1,000-device figure (`ubiquity-load`).
    var skipFanOut = false
    /// Measure Ubiquity a second time with sealed contents.
    var sealed = false
    /// That second time under Advanced Data Protection (the account switched by device A).
    var advanced = false
    /// Another build's folder (its `ubiquity`), measured a third time beside this one.
    var referenceBuild: URL?
    /// Only the storage figures of issue 47 (StorageScenario.swift): chunk contents in
    /// PostgreSQL's rows, then in an object store, in one run.
    var storageOnly = false
    var storageDatabase: String?
    var storageObjectStore: String?
    var storageCredentials: String?
    var storageRuns = 5
    /// Every leg on a link of this shape (issue 48's figures only; LinkScenario.swift).
    var link: LinkShape?
    /// Only the shaping relay's own check.
    var checkLink = false
    /// Leave the run's folder (homes, logs, data) in place afterwards.
    var keep = false
    var directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ubiquity-sync-bench-\(getpid())")

    init(_ arguments: [String]) throws {
        var rest = arguments.makeIterator()
        func value(_ flag: String) throws -> String {
            guard let next = rest.next() else { throw BenchError("\(flag) needs a value") }
            return next
        }
        func count(_ flag: String, allowZero: Bool = false) throws -> Int {
            guard let number = Int(try value(flag)), number > 0 || (allowZero && number == 0) else {
                throw BenchError("\(flag) needs a \(allowZero ? "whole number" : "positive whole number")")
            }
            return number
        }
        func number(_ flag: String) throws -> Double {
            guard let number = Double(try value(flag)), number >= 0, number.isFinite else { throw BenchError("\(flag) needs a number ≥ 0") }
            return number
        }
        var shape: LinkShape?
        func shaping(_ change: (inout LinkShape) -> Void) {
            var changed = shape ?? .office
            change(&changed)
            shape = changed
        }
        while let argument = rest.next() {
            switch argument {
            case "--link":
                switch try value(argument) {
                case "home": shape = .home
                case "office": shape = .office
                case let other: throw BenchError("--link is home or office, not \(other)")
                }
            case "--up-mbit": let mbit = try number(argument); shaping { $0.up.bitsPerSecond = mbit * 1_000_000 }
            case "--down-mbit": let mbit = try number(argument); shaping { $0.down.bitsPerSecond = mbit * 1_000_000 }
            case "--delay-ms": let ms = try number(argument); shaping { ($0.up.delaySeconds, $0.down.delaySeconds) = (ms / 1_000, ms / 1_000) }
            case "--jitter-ms": let ms = try number(argument); shaping { ($0.up.jitterSeconds, $0.down.jitterSeconds) = (ms / 1_000, ms / 1_000) }
            case "--loss": let rate = try number(argument); shaping { ($0.up.lossRate, $0.down.lossRate) = (rate, rate) }
            case "--check-link": checkLink = true
            case "--small": small = try count(argument)
            case "--syncthing-small": syncthingSmall = try count(argument)
            case "--burst": burst = try count(argument)
            case "--folder": folder = try count(argument)
            case "--big-folder": bigFolder = try count(argument)
            case "--large-mib": largeMiB = try count(argument)
            case "--large-runs": largeRuns = try count(argument)
            case "--cost-changes": costChanges = try count(argument)
            case "--idle-items": idleItems = try count(argument, allowZero: true)
            case "--idle-seconds": idleSeconds = try count(argument)
            case "--database-updates": databaseUpdates = try count(argument, allowZero: true)
            case "--web-items": webItems = try count(argument)
            case "--web-only": webOnly = true
            case "--sharing-only": sharingOnly = true
            case "--sharing-items": sharingItems = try count(argument)
            case "--sharing-runs": sharingRuns = try count(argument)
            case "--skip-syncthing": skipSyncthing = true
            case "--skip-fan-out": skipFanOut = true
            case "--sealed": sealed = true
            case "--advanced": (sealed, advanced) = (true, true)
            case "--keep": keep = true
            case "--reference-build": referenceBuild = URL(fileURLWithPath: try value(argument)).appendingPathComponent("ubiquity")
            case "--directory": directory = URL(fileURLWithPath: try value(argument))
            case "--storage-only": storageOnly = true
            case "--database": storageDatabase = try value(argument)
            case "--object-store": storageObjectStore = try value(argument)
            case "--object-store-credentials": storageCredentials = try value(argument)
            case "--storage-runs": storageRuns = try count(argument)
            default: throw BenchError("unknown argument \(argument); see the comment at the top of Sources/UbiquitySyncBenchmarks/main.swift")
            }
        }
        if checkLink && shape == nil { shape = .home }
        link = shape
        if let shape, shape.up.bitsPerSecond <= 0 || shape.down.bitsPerSecond <= 0 { throw BenchError("a link's bandwidth must be above 0") }
    }
}

/// One system's figures; a scenario that failed is missing (and its error is in `failure`).
struct Figures: Encodable {
    var newSmallFile: Latency?
    var burst: NewFolder?
    var newFolder: NewFolder?
    var newBigFolder: NewFolder?
    var costOfOneChange: ChangeCost?
    var renameBigFolder: Rename?
    var large: LargeFigures?
    var wholeContainer: WholeContainer?
    var database: DatabaseUpdates?
    var idle: Idle?
    var web: WebFigures?
    var failure: String?
    var notes: String
}

/// Runs every scenario on `peer`, in order, keeping what was measured if one fails; `syncOnly`:
/// the sync scenarios alone (no whole-container, database, web or idle figures); `sealedRecords`:
/// the web figures too, their folders' items committed with sealed records.
func measure(_ peer: some Peer, options: Options, small: Int, notes: String, syncOnly: Bool = false, sealedRecords: Bool = false) async -> Figures {
    var figures = Figures(notes: notes)
    do {
        log("\(peer.name): warming up")
        let warm = Data("warm".utf8)
        try warm.write(to: peer.sideA.appendingPathComponent("warm-up.txt"), options: .atomic)
        _ = try await until("\(peer.name) syncs the warm-up file") { (try? Data(contentsOf: peer.sideB.appendingPathComponent("warm-up.txt"))) == warm }
        if options.webOnly, let ubiquity = peer as? UbiquityPeer {
            figures.web = try await webFigures(ubiquity, items: options.webItems, uploadMiB: options.largeMiB, sealed: sealedRecords)
            return figures
        }
        figures.newSmallFile = try await newSmallFiles(peer, count: small)
        figures.burst = try await newFolder(peer, named: "burst", count: options.burst, size: 4096, seed: 1_000_000)
        figures.newFolder = try await newFolder(peer, named: "folder", count: options.folder, size: 1024, seed: 2_000_000)
        figures.costOfOneChange = try await changeCost(peer, items: options.folder + options.burst + small, changes: options.costChanges, label: "small")
        figures.newBigFolder = try await newFolder(peer, named: "big-folder", count: options.bigFolder, size: 1024, seed: 3_000_000)
        figures.renameBigFolder = try await renameFolder(peer, from: "big-folder", to: "renamed-folder", count: options.bigFolder, size: 1024)
        figures.large = try await largeFiles(peer, mib: options.largeMiB, runs: options.largeRuns)
        if sealedRecords, let ubiquity = peer as? UbiquityPeer {
            figures.web = try await webFigures(ubiquity, items: options.webItems, uploadMiB: options.largeMiB, sealed: true)
        }
        if !syncOnly, let ubiquity = peer as? UbiquityPeer {
            figures.wholeContainer = try await wholeContainer(ubiquity)
            if options.databaseUpdates > 0 { figures.database = try await databaseUpdates(ubiquity, count: options.databaseUpdates) }
            figures.web = try await webFigures(ubiquity, items: options.webItems, uploadMiB: options.largeMiB)
            if options.idleItems > 0 {
                figures.idle = try await idleAgents(ubiquity, items: options.idleItems, seconds: options.idleSeconds, changes: options.costChanges)
            }
        }
    } catch {
        log("\(peer.name): \(error)")
        figures.failure = "\(error)"
    }
    return figures
}

// MARK: Run

let options: Options
do {
    options = try Options(Array(CommandLine.arguments.dropFirst()))
} catch {
    log("\(error)")
    exit(2)
}

// Prerequisites first: a missing piece is said before anything is measured, never after.
if !FileManager.default.isExecutableFile(atPath: UbiquityPeer.executable.path) {
    log("\(UbiquityPeer.executable.path) is missing: swift build -c release --product ubiquity")
    exit(2)
}
if options.sharingOnly {
    try? FileManager.default.removeItem(at: options.directory)
    try FileManager.default.createDirectory(at: options.directory, withIntermediateDirectories: true)
    let figures = try await sharingFigures(in: options.directory.appendingPathComponent("sharing"), items: options.sharingItems, runs: options.sharingRuns)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    print(String(decoding: try encoder.encode(["sharing": figures]), as: UTF8.self))
    if !options.keep { try? FileManager.default.removeItem(at: options.directory) }
    exit(0)
}
if options.storageOnly {
    guard let database = options.storageDatabase, let objectStore = options.storageObjectStore, let credentials = options.storageCredentials else {
        log("--storage-only needs --database, --object-store and --object-store-credentials (.ci/postgres start, .ci/seaweedfs start)")
        exit(2)
    }
    try? FileManager.default.removeItem(at: options.directory)
    try FileManager.default.createDirectory(at: options.directory, withIntermediateDirectories: true)
    let figures = try await storageFigures(in: options.directory, postgres: database, objectStore: objectStore, credentials: credentials,
                                           mib: options.largeMiB, runs: options.storageRuns, small: options.small)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    print(String(decoding: try encoder.encode(["storage": figures]), as: UTF8.self))
    if !options.keep { try? FileManager.default.removeItem(at: options.directory) }
    exit(0)
}
if let link = options.link {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    if options.checkLink {
        print(String(decoding: try encoder.encode(["check": try checkLink(link, bytes: 8 << 20)]), as: UTF8.self))
        exit(0)
    }
    if !options.skipSyncthing && SyncthingPeer.executable == nil {
        log("syncthing is not installed (apt-get install syncthing), or pass --skip-syncthing")
        exit(2)
    }
    try? FileManager.default.removeItem(at: options.directory)
    try FileManager.default.createDirectory(at: options.directory, withIntermediateDirectories: true)
    let figures = try await linkFigures(link, options: options)
    print(String(decoding: try encoder.encode(["link": figures]), as: UTF8.self))
    if !options.keep { try? FileManager.default.removeItem(at: options.directory) }
    exit(0)
}
if !options.skipFanOut && !options.webOnly && !FileManager.default.isExecutableFile(atPath: loadExecutable.path) {
    log("\(loadExecutable.path) is missing: swift build -c release --product ubiquity-load, or pass --skip-fan-out")
    exit(2)
}
if !options.skipSyncthing && !options.webOnly && SyncthingPeer.executable == nil {
    log("syncthing is not installed (apt-get install syncthing), or pass --skip-syncthing")
    exit(2)
}
try? FileManager.default.removeItem(at: options.directory) // a leftover of an earlier run, if any
try FileManager.default.createDirectory(at: options.directory, withIntermediateDirectories: true)
defer {
    // Best effort: the figures are printed either way.
    if !options.keep { try? FileManager.default.removeItem(at: options.directory) }
}

// The reference for a large file: the same bytes through a loopback socket into a new file.
let referenceFile = options.directory.appendingPathComponent("reference.bin")
try noise(options.largeMiB << 20, seed: 1).write(to: referenceFile)
var copies: [Double] = []
for run in 0..<3 {
    let copy = options.directory.appendingPathComponent("reference-copy-\(run).bin")
    copies.append((try await loopbackCopy(of: referenceFile, to: copy)).inMilliseconds)
    try FileManager.default.removeItem(at: copy)
}
let loopbackCopyMs = percentile(copies, 0.5)

var results: [String: Figures] = [:]
do {
    let ubiquity = try await UbiquityPeer.start(in: options.directory.appendingPathComponent("ubiquity"))
    results["ubiquity"] = await measure(ubiquity, options: options, small: options.small,
                                        notes: "ubiquity serve (embedded SQLite) and two ubiquity agent --greedy processes, each device through its own counting relay")
    await ubiquity.stop()
} catch {
    log("Ubiquity could not be started: \(error)")
    results["ubiquity"] = Figures(failure: "\(error)", notes: "")
}
if options.sealed {
    do {
        let sealed = try await UbiquityPeer.start(in: options.directory.appendingPathComponent("ubiquity-sealed"), sealed: true, advanced: options.advanced)
        results["ubiquitySealed"] = await measure(sealed, options: options, small: options.small,
                                                  notes: options.advanced
                                                    ? "as ubiquity, under Advanced Data Protection (device A switched the account: the server holds no key; every device seals contents and records and signs its commits, and takes a state of an item a commit named only once a commit names it)"
                                                    : "as ubiquity, the agents sealing the container's chunks and records (sealedContents: keyed chunker, keyed MAC names, AES-256-GCM; names, sizes and dates in sealed records); the web figures' folders of sealed records, opened by the server with the escrow's keys (Standard)",
                                                  syncOnly: true, sealedRecords: !options.advanced)
        await sealed.stop()
    } catch {
        log("Ubiquity (sealed) could not be started: \(error)")
        results["ubiquitySealed"] = Figures(failure: "\(error)", notes: "")
    }
}
if let reference = options.referenceBuild, !options.webOnly {
    do {
        let earlier = try await UbiquityPeer.start(in: options.directory.appendingPathComponent("ubiquity-reference"), binary: reference)
        results["ubiquityReference"] = await measure(earlier, options: options, small: options.small,
                                                     notes: "as ubiquity, every process another build's (\(reference.path))", syncOnly: true)
        await earlier.stop()
    } catch {
        log("The reference build could not be started: \(error)")
        results["ubiquityReference"] = Figures(failure: "\(error)", notes: "")
    }
}
var syncthingVersion: String?
if !options.skipSyncthing && !options.webOnly {
    // Ubiquity's figures are printed whatever happens to the peer's.
    do {
        let syncthing = try await SyncthingPeer.start(in: options.directory.appendingPathComponent("syncthing"))
        syncthingVersion = syncthing.version
        var peerOptions = options
        peerOptions.idleItems = 0
        results["syncthing"] = await measure(syncthing, options: peerOptions, small: options.syncthingSmall,
                                             notes: "\(syncthing.version); two instances on loopback, A dials B through a counting relay; discovery, relays, NAT off; fsWatcherDelayS=1 (its minimum; 10 by default)")
        await syncthing.stop()
    } catch {
        log("Syncthing could not be measured: \(error)")
        syncthingVersion = "failed: \(error)"
    }
}

// Last, on a quiet machine: the server's figure with 1,000 devices connected.
var fanOut: FanOutFigures?
if !options.skipFanOut && !options.webOnly {
    do {
        fanOut = try fanOutFigures()
    } catch {
        log("The 1,000-device figure could not be measured: \(error)")
    }
}

#if DEBUG
let buildConfiguration = "debug"
#else
let buildConfiguration = "release"
#endif

struct Report: Encodable {
    var machine: [String: String]
    /// A new file of the large size through a loopback TCP socket into a new file, `fsync`ed
    /// (median of three), in milliseconds.
    var loopbackCopyMs: Double
    var ubiquity: Figures?
    /// Ubiquity's sync scenarios with sealed contents (`--sealed`).
    var ubiquitySealed: Figures?
    /// The sync scenarios with another build's processes (`--reference-build`).
    var ubiquityReference: Figures?
    var syncthing: Figures?
    /// The server with 1,000 devices of one account connected (`ubiquity-load`).
    var serverFanOut: FanOutFigures?
    /// Ubiquity's figure divided by Syncthing's (below 1: Ubiquity is better).
    var ratios: [String: Double]
    var goals: [String: Bool]
}

var ratios: [String: Double] = [:]
var goals: [String: Bool] = [:]
/// `a ÷ b` to three places (nil without both, or for a zero `b`).
func ratio(_ a: Double?, _ b: Double?) -> Double? {
    guard let a, let b, b > 0 else { return nil }
    return (a / b).rounded(toPlaces: 3)
}
/// Ubiquity's timed figures (and the large file's CPU) over Syncthing's, as `ratios[prefix + Name]`.
@MainActor func setRatios(of ours: Figures, over theirs: Figures, prefix: String = "") {
    func name(_ figure: String) -> String { prefix.isEmpty ? figure : prefix + figure.prefix(1).uppercased() + figure.dropFirst() }
    ratios[name("newSmallFileP50")] = ratio(ours.newSmallFile?.p50Ms, theirs.newSmallFile?.p50Ms)
    ratios[name("burst")] = ratio(ours.burst?.transfer.ms, theirs.burst?.transfer.ms)
    ratios[name("newFolder")] = ratio(ours.newFolder?.transfer.ms, theirs.newFolder?.transfer.ms)
    ratios[name("newBigFolder")] = ratio(ours.newBigFolder?.transfer.ms, theirs.newBigFolder?.transfer.ms)
    ratios[name("renameBigFolder")] = ratio(ours.renameBigFolder?.transfer.ms, theirs.renameBigFolder?.transfer.ms)
    ratios[name("newLargeFile")] = ratio(ours.large?.newFile.ms, theirs.large?.newFile.ms)
    ratios[name("newLargeFileCpu")] = ratio(ours.large?.newFile.cpuMs, theirs.large?.newFile.cpuMs)
    ratios[name("oneByteEditSafeSave")] = ratio(ours.large?.oneByteEditSafeSave.transfer.ms, theirs.large?.oneByteEditSafeSave.transfer.ms)
    ratios[name("oneByteEditInPlace")] = ratio(ours.large?.oneByteEditInPlace.transfer.ms, theirs.large?.oneByteEditInPlace.transfer.ms)
}
if let ours = results["ubiquity"] {
    if let small = ours.newSmallFile {
        goals["newSmallFileP50AtMost10ms"] = small.p50Ms <= 10
        goals["newSmallFileP99AtMost30ms"] = small.p99Ms <= 30
    }
    if let burst = ours.burst { goals["burstAtMost500ms"] = burst.transfer.ms <= 500 }
    if let folder = ours.newFolder {
        goals["newFolderAtMost2s"] = folder.transfer.ms <= 2000
        goals["newFolderWireWithinBudget"] = folder.transfer.bytesOnWire <= folder.wireBudget
    }
    if let big = ours.newBigFolder {
        goals["newBigFolderAtMost15s"] = big.transfer.ms <= 15_000
        goals["newBigFolderWireWithinBudget"] = big.transfer.bytesOnWire <= big.wireBudget
        if let folder = ours.newFolder {
            ratios["bigFolderOverFolder"] = (big.transfer.ms / folder.transfer.ms).rounded(toPlaces: 2)
            goals["linearInFiles"] = big.transfer.ms <= folder.transfer.ms * 12 * Double(big.files) / Double(10 * folder.files)
        }
    }
    if let rename = ours.renameBigFolder {
        goals["renameAtMost1s"] = rename.transfer.ms <= 1000
        goals["renameAtMost1MiB"] = rename.transfer.bytesOnWire <= 1 << 20
    }
    if let large = ours.large {
        goals["newLargeFileAtMost2xLoopbackCopy"] = large.newFile.ms <= 2 * loopbackCopyMs
        for (name, edit) in [("SafeSave", large.oneByteEditSafeSave), ("InPlace", large.oneByteEditInPlace)] {
            goals["oneByteEdit\(name)AtMost300ms"] = edit.transfer.ms <= 300
            goals["oneByteEdit\(name)AtMost32KiB"] = edit.transfer.bytesOnWire <= 32 << 10
        }
    }
    if let whole = ours.wholeContainer { goals["besideDocumentsArrivesNoSyncNever"] = !whole.noSyncArrived }
    if let database = ours.database {
        goals["databaseOneRowUpdateP50AtMost100ms"] = database.p50Ms <= 100
        goals["databaseOneRowUpdateAtMost2KiB"] = database.bytesPerUpdate <= 2048
    }
    if let web = ours.web {
        goals["webFirstPageOf10000ItemFolderAtMost100ms"] = web.firstPageP50Ms <= 100
        goals["webUploadAtLeastHalfTheAgents"] = (web.browserUploadMiBPerSecond ?? web.webUploadMiBPerSecond) >= 0.5 * web.agentUploadMiBPerSecond
        if let browser = web.browserUploadMiBPerSecond {
            ratios["webBrowserUploadSpeedOverAgents"] = (browser / max(0.01, web.agentUploadMiBPerSecond)).rounded(toPlaces: 2)
        }
        ratios["webFirstPageBigOverSmallFolder"] = (web.firstPageP50Ms / max(0.01, web.smallFolderFirstPageP50Ms)).rounded(toPlaces: 2)
        ratios["webFirstPageOverWholeListing"] = (web.firstPageP50Ms / max(0.01, web.wholeContainerListingP50Ms)).rounded(toPlaces: 3)
        ratios["webUploadSpeedOverAgents"] = (web.webUploadMiBPerSecond / max(0.01, web.agentUploadMiBPerSecond)).rounded(toPlaces: 2)
    }
    if let idle = ours.idle {
        goals["idleAtMost1WakeUpPerSecond"] = idle.wakeUpsPerSecond.values.allSatisfy { $0 <= 1 }
        goals["idleAtMost150MB"] = idle.residentMiB.values.allSatisfy { $0 * 1_048_576 <= 150_000_000 }
    }
    if let theirs = results["syncthing"] {
        setRatios(of: ours, over: theirs)
        if let cpu = ratios["newLargeFileCpu"] { goals["newLargeFileCpuAtMostSyncthings"] = cpu <= 1 }
    }
}
if let plain = results["ubiquity"], let sealed = results["ubiquitySealed"] {
    ratios["sealedOverPlainNewSmallFileP50"] = ratio(sealed.newSmallFile?.p50Ms, plain.newSmallFile?.p50Ms)
    ratios["sealedOverPlainNewFolder"] = ratio(sealed.newFolder?.transfer.ms, plain.newFolder?.transfer.ms)
    ratios["sealedOverPlainNewLargeFile"] = ratio(sealed.large?.newFile.ms, plain.large?.newFile.ms)
    ratios["sealedOverPlainNewLargeFileCpu"] = ratio(sealed.large?.newFile.cpuMs, plain.large?.newFile.cpuMs)
    ratios["sealedOverPlainOneByteEditInPlaceBytes"] = ratio(sealed.large.map { Double($0.oneByteEditInPlace.transfer.bytesOnWire) },
                                                             plain.large.map { Double($0.oneByteEditInPlace.transfer.bytesOnWire) })
    if let cpu = ratios["sealedOverPlainNewLargeFileCpu"] { goals["sealedNewLargeFileCpuAtMost1_2xPlain"] = cpu <= 1.2 }
    if let folder = sealed.newFolder { goals["sealedNewFolderAtMost2s"] = folder.transfer.ms <= 2000 }
    if let large = sealed.large {
        for (name, edit) in [("SafeSave", large.oneByteEditSafeSave), ("InPlace", large.oneByteEditInPlace)] {
            goals["sealedOneByteEdit\(name)AtMost300ms"] = edit.transfer.ms <= 300
            goals["sealedOneByteEdit\(name)AtMost32KiB"] = edit.transfer.bytesOnWire <= 32 << 10
        }
    }
}
// Against the build the issue called today's (`--reference-build`): the same figures, both runs of
// this build over it.
if let earlier = results["ubiquityReference"] {
    for (prefix, run) in [("plain", results["ubiquity"]), ("sealed", results["ubiquitySealed"])] {
        guard let run else { continue }
        ratios["\(prefix)OverReferenceNewLargeFileCpu"] = ratio(run.large?.newFile.cpuMs, earlier.large?.newFile.cpuMs)
        ratios["\(prefix)OverReferenceNewLargeFile"] = ratio(run.large?.newFile.ms, earlier.large?.newFile.ms)
        ratios["\(prefix)OverReferenceNewFolder"] = ratio(run.newFolder?.transfer.ms, earlier.newFolder?.transfer.ms)
        ratios["\(prefix)OverReferenceOneByteEditInPlaceBytes"] = ratio(run.large.map { Double($0.oneByteEditInPlace.transfer.bytesOnWire) },
                                                                      earlier.large.map { Double($0.oneByteEditInPlace.transfer.bytesOnWire) })
    }
    if let cpu = ratios["sealedOverReferenceNewLargeFileCpu"] { goals["sealedNewLargeFileCpuAtMost1_2xReference"] = cpu <= 1.2 }
}
// Sealed documents are the default under Standard: the sealed run beside Syncthing too, figure by
// figure (issue 45: every figure of the sync bench still beats Syncthing's).
if let sealed = results["ubiquitySealed"], let theirs = results["syncthing"] {
    setRatios(of: sealed, over: theirs, prefix: "sealed")
    let beside = ["sealedNewSmallFileP50", "sealedBurst", "sealedNewFolder", "sealedNewBigFolder", "sealedRenameBigFolder", "sealedNewLargeFile",
                  "sealedOneByteEditSafeSave", "sealedOneByteEditInPlace"].compactMap { ratios[$0] }
    if !beside.isEmpty { goals["sealedBeatsSyncthingOnEveryTimedFigure"] = beside.allSatisfy { $0 < 1 } }
}
if let web = results["ubiquitySealed"]?.web {
    goals["sealedWebFirstPageOf10000ItemFolderAtMost100ms"] = web.firstPageP50Ms <= 100
    if let plain = results["ubiquity"]?.web { ratios["sealedOverPlainWebFirstPage"] = ratio(web.firstPageP50Ms, plain.firstPageP50Ms) }
}
if let fanOut { goals["fanOut1000DevicesAtLeast400CommitsPerSecondP99AtMost100ms"] = fanOut.goal.met }
let report = Report(
    machine: ["cores": "\(ProcessInfo.processInfo.activeProcessorCount)", "memoryGiB": "\(ProcessInfo.processInfo.physicalMemory >> 30)",
              "build": buildConfiguration, "syncthing": syncthingVersion ?? "skipped"],
    loopbackCopyMs: loopbackCopyMs, ubiquity: results["ubiquity"], ubiquitySealed: results["ubiquitySealed"],
    ubiquityReference: results["ubiquityReference"], syncthing: results["syncthing"], serverFanOut: fanOut,
    ratios: ratios, goals: goals)
let encoder = JSONEncoder()
encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
print(String(decoding: try encoder.encode(report), as: UTF8.self))
