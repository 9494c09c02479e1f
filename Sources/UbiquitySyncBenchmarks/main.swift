// ubiquity-sync-bench: the sync figures of SYSTEM.md for Ubiquity (an embedded server and two
// agents on loopback) and for its peer, Syncthing (two instances of the Debian package on
// loopback; discovery, relays and NAT off; the file watcher at its 1 s minimum), measured the
// same way in one run and printed as JSON with their ratios:
//
//   - a new 4 KiB file: p50 and p99 time until it is readable on the other side;
//   - a 1-byte edit in a 64 MiB file (saved the safe way: a whole new file renamed over the
//     old one): time until the other side has it, and bytes on the wire (loopback's counters);
//   - a new 64 MiB file: time until it is readable, complete, on the other side (the median of
//     three different files, one after the other).
//
//   swift run -c release ubiquity-sync-bench [--small N] [--syncthing-small N] [--large-mib M] [--large-runs N]
//                                            [--skip-syncthing] [--directory DIR]
import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import Ubiquity
import UbiquityAgent
import UbiquityServer

#if canImport(Glibc)
import Glibc
#endif

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

struct Options {
    var small = 50
    var syncthingSmall = 20
    var largeMiB = 64
    var largeRuns = 3
    var skipSyncthing = false
    var directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ubiquity-sync-bench-\(getpid())")

    init(_ arguments: [String]) throws {
        var rest = arguments.makeIterator()
        func value(_ flag: String) throws -> String {
            guard let next = rest.next() else { throw BenchError("\(flag) needs a value") }
            return next
        }
        func count(_ flag: String) throws -> Int {
            guard let number = Int(try value(flag)), number > 0 else { throw BenchError("\(flag) needs a positive whole number") }
            return number
        }
        while let argument = rest.next() {
            switch argument {
            case "--small": small = try count(argument)
            case "--syncthing-small": syncthingSmall = try count(argument)
            case "--large-mib": largeMiB = try count(argument)
            case "--large-runs": largeRuns = try count(argument)
            case "--skip-syncthing": skipSyncthing = true
            case "--directory": directory = URL(fileURLWithPath: try value(argument))
            default: throw BenchError("unknown argument \(argument); see the comment at the top of Sources/UbiquitySyncBenchmarks/main.swift")
            }
        }
    }
}

// MARK: Measuring

/// Two folders kept in step by one system, and a way to wait until it has nothing left to do.
protocol Peer {
    var name: String { get }
    var sideA: URL { get }
    var sideB: URL { get }
    func settle() async throws
    func stop() async
}

struct Figures: Encodable {
    struct Small: Encodable { var p50Ms: Double, p99Ms: Double, n: Int }
    struct Edit: Encodable { var ms: Double, bytesOnWire: Int64 }
    /// The median of `runs` new files (each a different one).
    struct Large: Encodable { var ms: Double, mib: Int, runsMs: [Double] }
    var newSmallFile: Small
    var oneByteEditInLargeFile: Edit
    var newLargeFile: Large
    var notes: String
}

func milliseconds(_ duration: Duration) -> Double {
    (Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15).rounded(toPlaces: 1)
}

extension Double {
    func rounded(toPlaces places: Int) -> Double {
        let scale = Foundation.pow(10, Double(places))
        return (self * scale).rounded() / scale
    }
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
}

/// Bytes received on the loopback interface so far (every byte sent over loopback is received
/// once; TCP/IP headers included, the same for both systems).
func loopbackBytes() throws -> Int64 {
    let text = try String(contentsOfFile: "/proc/net/dev", encoding: .utf8)
    for line in text.split(separator: "\n") where line.trimmingCharacters(in: .whitespaces).hasPrefix("lo:") {
        let fields = line.split(separator: ":", maxSplits: 1)[1].split(separator: " ")
        if let bytes = Int64(fields[0]) { return bytes }
    }
    throw BenchError("no loopback counters in /proc/net/dev")
}

/// Deterministic pseudo-random bytes (the same files for both systems).
func noise(_ count: Int, seed: UInt64) -> Data {
    var state = seed &+ 0x9e37_79b9_7f4a_7c15
    var data = Data(count: count)
    data.withUnsafeMutableBytes { buffer in
        let words = buffer.bindMemory(to: UInt64.self)
        for index in words.indices {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            words[index] = state ^ (state >> 29)
        }
    }
    return data
}

/// Polls `condition` every millisecond until it holds (at most `limit`); the time it took.
func until(_ what: String, limit: Duration = .seconds(120), _ condition: () throws -> Bool) async throws -> Duration {
    let start = ContinuousClock.now
    while !(try condition()) {
        guard ContinuousClock.now - start < limit else { throw BenchError("timed out waiting until \(what)") }
        try await Task.sleep(for: .milliseconds(1))
    }
    return ContinuousClock.now - start
}

/// The byte at `offset` of the file at `url`, if it is there and `size` bytes long.
func byte(at offset: Int, of url: URL, size: Int) -> UInt8? {
    let fd = open(url.path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0, Int(info.st_size) == size else { return nil }
    var value: UInt8 = 0
    return pread(fd, &value, 1, off_t(offset)) == 1 ? value : nil
}

func measure(_ peer: some Peer, small: Int, largeMiB: Int, largeRuns: Int, notes: String) async throws -> Figures {
    log("\(peer.name): warming up")
    let warm = Data("warm".utf8)
    try warm.write(to: peer.sideA.appendingPathComponent("warm-up.txt"), options: .atomic)
    _ = try await until("\(peer.name) syncs the warm-up file") { (try? Data(contentsOf: peer.sideB.appendingPathComponent("warm-up.txt"))) == warm }
    try await peer.settle()

    log("\(peer.name): \(small) new 4 KiB files")
    var times: [Double] = []
    for index in 0..<small {
        let data = noise(4096, seed: UInt64(index))
        let name = "small-\(index).bin"
        try data.write(to: peer.sideA.appendingPathComponent(name), options: .atomic)
        let took = try await until("\(peer.name) syncs \(name)") { (try? Data(contentsOf: peer.sideB.appendingPathComponent(name))) == data }
        times.append(milliseconds(took))
        try await Task.sleep(for: .milliseconds(20))
    }
    try await peer.settle()

    log("\(peer.name): \(largeRuns) new \(largeMiB) MiB files, one at a time")
    let size = largeMiB << 20
    var large = Data()
    var largeTimes: [Double] = []
    var target = peer.sideB
    for run in 0..<largeRuns {
        let name = "large-\(run).bin"
        large = noise(size, seed: 64 + UInt64(run))
        try large.write(to: peer.sideA.appendingPathComponent(name), options: .atomic)
        target = peer.sideB.appendingPathComponent(name)
        let took = try await until("\(peer.name) syncs \(name)", limit: .seconds(600)) { [target, large] in
            guard byte(at: size - 1, of: target, size: size) != nil else { return false }
            return (try? Data(contentsOf: target)) == large
        }
        largeTimes.append(milliseconds(took))
        try await peer.settle()
        try await Task.sleep(for: .seconds(1))
    }

    log("\(peer.name): a 1-byte edit in the \(largeMiB) MiB file")
    let offset = size / 2 + 12_345
    large[offset] ^= 0x5a
    let before = try loopbackBytes()
    try large.write(to: peer.sideA.appendingPathComponent(target.lastPathComponent), options: .atomic)
    let edit = try await until("\(peer.name) syncs the edit", limit: .seconds(600)) { byte(at: offset, of: target, size: size) == large[offset] }
    try await Task.sleep(for: .seconds(2)) // what follows the edit (acknowledgements, index updates) counts too
    let bytes = try loopbackBytes() - before
    expect((try? Data(contentsOf: target)) == large, "\(peer.name): the edited file arrived whole")
    try await peer.settle()

    return Figures(newSmallFile: .init(p50Ms: percentile(times, 0.5), p99Ms: percentile(times, 0.99), n: times.count),
                   oneByteEditInLargeFile: .init(ms: milliseconds(edit), bytesOnWire: bytes),
                   newLargeFile: .init(ms: percentile(largeTimes, 0.5), mib: largeMiB, runsMs: largeTimes), notes: notes)
}

func log(_ line: String) {
    FileHandle.standardError.write(Data(("ubiquity-sync-bench: " + line + "\n").utf8))
}

/// A check whose failure is reported (the figures are printed anyway).
func expect(_ condition: Bool, _ message: String) {
    if !condition { log("CHECK FAILED: " + message) }
}

// MARK: Run

let options: Options
do {
    options = try Options(Array(CommandLine.arguments.dropFirst()))
} catch {
    FileHandle.standardError.write(Data("ubiquity-sync-bench: \(error)\n".utf8))
    exit(2)
}
try? FileManager.default.removeItem(at: options.directory)
try FileManager.default.createDirectory(at: options.directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: options.directory) }

// Prerequisites first: a missing peer is said before anything is measured, never after.
if !options.skipSyncthing && SyncthingPeer.executable == nil {
    FileHandle.standardError.write(Data("ubiquity-sync-bench: syncthing is not installed (apt-get install syncthing), or pass --skip-syncthing\n".utf8))
    exit(2)
}

var results: [String: Figures] = [:]
let ubiquity = try await UbiquityPeer.start(in: options.directory.appendingPathComponent("ubiquity"))
do {
    results["ubiquity"] = try await measure(ubiquity, small: options.small, largeMiB: options.largeMiB, largeRuns: options.largeRuns,
                                            notes: "embedded server (SQLite) and two agents on loopback; greedy devices; inotify and push")
    await ubiquity.stop()
} catch {
    await ubiquity.stop()
    throw error
}
var syncthingVersion: String?
if !options.skipSyncthing {
    // Ubiquity's figures are printed whatever happens to the peer's.
    do {
        let syncthing = try await SyncthingPeer.start(in: options.directory.appendingPathComponent("syncthing"))
        syncthingVersion = syncthing.version
        do {
            results["syncthing"] = try await measure(syncthing, small: options.syncthingSmall, largeMiB: options.largeMiB, largeRuns: options.largeRuns,
                                                     notes: "\(syncthing.version); two instances on loopback; discovery, relays, NAT off; fsWatcherDelayS=1 (its minimum; 10 by default)")
            await syncthing.stop()
        } catch {
            await syncthing.stop()
            throw error
        }
    } catch {
        FileHandle.standardError.write(Data("ubiquity-sync-bench: Syncthing could not be measured: \(error)\n".utf8))
        syncthingVersion = "failed: \(error)"
    }
}

#if DEBUG
let buildConfiguration = "debug"
#else
let buildConfiguration = "release"
#endif

struct Report: Encodable {
    var machine: [String: String]
    var ubiquity: Figures?
    var syncthing: Figures?
    /// Ubiquity's figure divided by Syncthing's (below 1: Ubiquity is better).
    var ratios: [String: Double]
    var goals: [String: Bool]
}

var ratios: [String: Double] = [:]
var goals: [String: Bool] = [:]
if let ours = results["ubiquity"] {
    goals["newSmallFileP50AtMost50ms"] = ours.newSmallFile.p50Ms <= 50
    goals["oneByteEditAtMost64KiB"] = ours.oneByteEditInLargeFile.bytesOnWire <= 65_536
    if let theirs = results["syncthing"] {
        func ratio(_ a: Double, _ b: Double) -> Double { b > 0 ? (a / b).rounded(toPlaces: 3) : 0 }
        ratios["newSmallFileP50"] = ratio(ours.newSmallFile.p50Ms, theirs.newSmallFile.p50Ms)
        ratios["newSmallFileP99"] = ratio(ours.newSmallFile.p99Ms, theirs.newSmallFile.p99Ms)
        ratios["oneByteEditTime"] = ratio(ours.oneByteEditInLargeFile.ms, theirs.oneByteEditInLargeFile.ms)
        ratios["oneByteEditBytes"] = ratio(Double(ours.oneByteEditInLargeFile.bytesOnWire), Double(theirs.oneByteEditInLargeFile.bytesOnWire))
        ratios["newLargeFileTime"] = ratio(ours.newLargeFile.ms, theirs.newLargeFile.ms)
        goals["fasterThanSyncthingOnAllThree"] = ratios["newSmallFileP50"]! < 1 && ratios["oneByteEditTime"]! < 1 && ratios["newLargeFileTime"]! < 1
        goals["fewerBytesThanSyncthingForTheEdit"] = ratios["oneByteEditBytes"]! < 1
    }
}
let report = Report(
    machine: ["cores": "\(ProcessInfo.processInfo.activeProcessorCount)", "memoryGiB": "\(ProcessInfo.processInfo.physicalMemory >> 30)",
              "build": buildConfiguration, "syncthing": syncthingVersion ?? "skipped"],
    ubiquity: results["ubiquity"], syncthing: results["syncthing"], ratios: ratios, goals: goals)
let encoder = JSONEncoder()
encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
print(String(decoding: try encoder.encode(report), as: UTF8.self))
