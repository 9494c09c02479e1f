import Foundation
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

// Each scenario writes on side A, times until side B has every byte, and reads the wire and
// the processes' CPU from the kernel. Byte counts run until the peer has settled (and a
// second more), so acknowledgements and bookkeeping after the change count too.

/// What moving a set of files cost.
struct Transfer: Encodable {
    var ms: Double
    /// CPU time of all the peer's processes, until the other side had everything.
    var cpuMs: Double
    /// The same by process.
    var cpuMsByProcess: [String: Double]
    var bytesOnWire: Int64
    var legs: [String: Int64]
}

/// Takes a transfer's measurements around `body`, which returns when side B is complete.
func transfer(_ peer: some Peer, _ body: () async throws -> Void) async throws -> Transfer {
    try await peer.settle()
    let legs = peer.legs()
    let cpu = peer.processIDs.map { ProcessStats.cpuNanoseconds([$0]) }
    let start = ContinuousClock.now
    try await body()
    let took = ContinuousClock.now - start
    let used = zip(peer.processIDs, cpu).map { ProcessStats.cpuNanoseconds([$0.0]) - $0.1 }
    var byProcess: [String: Double] = [:]
    for (name, nanoseconds) in zip(peer.processNames, used) { byProcess[name] = (Double(nanoseconds) / 1e6).rounded(toPlaces: 1) }
    try await peer.settle()
    try await Task.sleep(for: .seconds(1))
    let after = peer.legs()
    var perLeg: [String: Int64] = [:]
    for (leg, bytes) in after { perLeg[leg] = bytes - (legs[leg] ?? 0) }
    return Transfer(ms: took.inMilliseconds, cpuMs: (Double(used.reduce(0, +)) / 1e6).rounded(toPlaces: 1), cpuMsByProcess: byProcess,
                    bytesOnWire: perLeg.values.reduce(0, +), legs: perLeg)
}

/// Until `folder` on side B lists exactly `names`, each `size` bytes long.
func untilFolder(_ folder: URL, has names: [String], size: Int, limit: Duration = .seconds(900)) async throws {
    let every: Duration = names.count >= 1000 ? .milliseconds(5) : .milliseconds(1)
    _ = try await until("\(folder.lastPathComponent) is complete on the other side", limit: limit, every: every) {
        guard let listed = visibleNames(in: folder), listed.count == names.count else { return false }
        return names.allSatisfy { fileSize(folder.appendingPathComponent($0).path) == size }
    }
}

struct NewFolder: Encodable {
    var files: Int
    var bytesPerFile: Int
    var transfer: Transfer
    /// The budget: twice the content plus 512 bytes per file.
    var wireBudget: Int64
}

/// A new folder of `count` files of `size` bytes written on side A.
func newFolder(_ peer: some Peer, named name: String, count: Int, size: Int, seed: UInt64) async throws -> NewFolder {
    log("\(peer.name): a new folder of \(count) × \(size) B files")
    let names = (0..<count).map { "f-\($0).bin" }
    let contents = names.indices.map { noise(size, seed: seed + UInt64($0)) }
    let source = peer.sideA.appendingPathComponent(name), target = peer.sideB.appendingPathComponent(name)
    let figures = try await transfer(peer) {
        try FileManager.default.createDirectory(at: source, withIntermediateDirectories: false)
        for (name, data) in zip(names, contents) { try data.write(to: source.appendingPathComponent(name)) }
        try await untilFolder(target, has: names, size: size)
    }
    let wrong = zip(names, contents).filter { (try? Data(contentsOf: target.appendingPathComponent($0.0))) != $0.1 }.count
    expect(wrong == 0, "\(peer.name): \(wrong) of \(count) files in \(name) arrived with other content")
    return NewFolder(files: count, bytesPerFile: size, transfer: figures, wireBudget: Int64(2 * count * size + 512 * count))
}

struct Rename: Encodable {
    var files: Int
    var transfer: Transfer
}

/// Renames a folder of `count` files on side A.
func renameFolder(_ peer: some Peer, from old: String, to new: String, count: Int, size: Int) async throws -> Rename {
    log("\(peer.name): renaming a folder of \(count) files")
    let names = (0..<count).map { "f-\($0).bin" }
    let gone = peer.sideB.appendingPathComponent(old)
    let figures = try await transfer(peer) {
        try FileManager.default.moveItem(at: peer.sideA.appendingPathComponent(old), to: peer.sideA.appendingPathComponent(new))
        try await untilFolder(peer.sideB.appendingPathComponent(new), has: names, size: size)
        _ = try await until("\(old) is gone from the other side", limit: .seconds(600)) { visibleNames(in: gone)?.isEmpty ?? true }
    }
    return Rename(files: count, transfer: figures)
}

struct Latency: Encodable { var p50Ms: Double, p99Ms: Double, n: Int }

/// New 4 KiB files one at a time: until each is readable on side B.
func newSmallFiles(_ peer: some Peer, count: Int) async throws -> Latency {
    log("\(peer.name): \(count) new 4 KiB files, one at a time")
    var times: [Double] = []
    for index in 0..<count {
        let data = noise(4096, seed: UInt64(index))
        let name = "small-\(index).bin"
        try data.write(to: peer.sideA.appendingPathComponent(name), options: .atomic)
        let took = try await until("\(peer.name) syncs \(name)") { (try? Data(contentsOf: peer.sideB.appendingPathComponent(name))) == data }
        times.append(took.inMilliseconds)
        try await Task.sleep(for: .milliseconds(20))
    }
    try await peer.settle()
    return Latency(p50Ms: percentile(times, 0.5), p99Ms: percentile(times, 0.99), n: times.count)
}

/// What one more changed file costs each process, with `items` items in the container.
struct ChangeCost: Encodable {
    var items: Int
    var changes: Int
    var msMedian: Double
    /// CPU milliseconds per change, by process.
    var cpuMsPerChange: [String: Double]
}

func changeCost(_ peer: some Peer, items: Int, changes: Int, label: String) async throws -> ChangeCost {
    log("\(peer.name): \(changes) single new files with \(items) items")
    var times: [Double] = []
    var cpu = [Int64](repeating: 0, count: peer.processIDs.count)
    for index in 0..<changes {
        try await peer.settle()
        try await Task.sleep(for: .milliseconds(300))
        let before = peer.processIDs.map { ProcessStats.cpuNanoseconds([$0]) }
        let data = noise(4096, seed: 7_000 + UInt64(index))
        let name = "cost-\(label)-\(index).bin"
        try data.write(to: peer.sideA.appendingPathComponent(name), options: .atomic)
        let took = try await until("\(peer.name) syncs \(name)") { (try? Data(contentsOf: peer.sideB.appendingPathComponent(name))) == data }
        times.append(took.inMilliseconds)
        try await Task.sleep(for: .milliseconds(300))
        for (slot, pid) in peer.processIDs.enumerated() { cpu[slot] += ProcessStats.cpuNanoseconds([pid]) - before[slot] }
    }
    var perProcess: [String: Double] = [:]
    for (slot, name) in peer.processNames.enumerated() { perProcess[name] = (Double(cpu[slot]) / 1e6 / Double(changes)).rounded(toPlaces: 2) }
    return ChangeCost(items: items, changes: changes, msMedian: percentile(times, 0.5), cpuMsPerChange: perProcess)
}

struct LargeFile: Encodable {
    var mib: Int
    /// The median of `runs` new files (each a different one).
    var ms: Double
    var runsMs: [Double]
    /// The median of the runs' CPU times (each run's own: the run in the middle by time may
    /// be any of them by CPU).
    var cpuMs: Double
    /// Every run's CPU time (all processes of the system), in order.
    var runsCpuMs: [Double]
    /// The CPU time by process of the run in the middle by CPU.
    var cpuMsByProcess: [String: Double]
    /// The bytes on the wire of the run in the middle by time.
    var bytesOnWire: Int64
    /// The first run's bytes on device B's link over time (every 100 ms from the file's arrival
    /// in A's folder until it is whole on B): the plot of issue 48.
    var arrival: Arrival?
}

/// Bytes on device B's link over time, from the start of a transfer.
struct Arrival: Encodable {
    var seconds: [Double] = []
    var mib: [Double] = []
}

/// Samples `peer`'s bytes on device B's link every 100 ms while `body` runs.
func sampleArrival(_ peer: some Peer, during body: () async throws -> Transfer) async throws -> (Transfer, Arrival) {
    let base = peer.arrivingBytes(), start = ContinuousClock.now
    let sampler = Task {
        var arrival = Arrival()
        while !Task.isCancelled {
            arrival.seconds.append(((ContinuousClock.now - start).inMilliseconds / 1_000).rounded(toPlaces: 2))
            arrival.mib.append((Double(peer.arrivingBytes() - base) / Double(1 << 20)).rounded(toPlaces: 3))
            try? await Task.sleep(for: .milliseconds(100))
        }
        return arrival
    }
    let transfer: Transfer
    do {
        transfer = try await body()
    } catch {
        sampler.cancel()
        throw error
    }
    sampler.cancel()
    return (transfer, await sampler.value)
}

struct Edit: Encodable {
    /// The middle run (by time).
    var transfer: Transfer
    /// Every run's time, in order.
    var runsMs: [Double]
    /// Every run's bytes on the wire, in order.
    var runsBytes: [Int64]

    init(_ runs: [Transfer]) {
        transfer = runs.sorted { $0.ms < $1.ms }[runs.count / 2]
        runsMs = runs.map(\.ms)
        runsBytes = runs.map(\.bytesOnWire)
    }
}

struct LargeFigures: Encodable {
    var newFile: LargeFile
    /// A 1-byte change saved the safe way: a whole new file renamed over the old one (timed
    /// from the rename).
    var oneByteEditSafeSave: Edit
    /// A 1-byte change written in place (`pwrite` into the file).
    var oneByteEditInPlace: Edit
}

/// New `mib` MiB files, then 1-byte edits in the last one (`runs` of each kind).
func largeFiles(_ peer: some Peer, mib: Int, runs: Int) async throws -> LargeFigures {
    log("\(peer.name): \(runs) new \(mib) MiB files, one at a time")
    let size = mib << 20
    var large = Data()
    var transfers: [Transfer] = [], arrival: Arrival?
    var target = peer.sideB
    for run in 0..<runs {
        let name = "large-\(run).bin"
        large = noise(size, seed: 64 + UInt64(run))
        target = peer.sideB.appendingPathComponent(name)
        let source = peer.sideA.appendingPathComponent(name)
        // Written outside the synced folders, on their file system (untimed: that is the
        // writer's disk — 150–250 ms of this process's CPU for 64 MiB here — not sync, and the
        // loopback copy it is compared with starts from a file at rest too), then moved in:
        // the clock starts with the file whole in the folder.
        let staged = peer.sideA.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(".bench-new-\(run).tmp")
        try large.write(to: staged)
        let (made, sampled) = try await sampleArrival(peer) {
            try await transfer(peer) { [large, target] in
                guard rename(staged.path, source.path) == 0 else { throw BenchError("rename \(staged.path): errno \(errno)") }
                _ = try await until("\(peer.name) syncs \(name)", limit: .seconds(600)) {
                    guard byte(at: size - 1, of: target, size: size) != nil else { return false }
                    return (try? Data(contentsOf: target)) == large
                }
            }
        }
        transfers.append(made)
        if run == 0 { arrival = sampled }
    }
    let middle = transfers.sorted { $0.ms < $1.ms }[transfers.count / 2]
    let middleByCpu = transfers.sorted { $0.cpuMs < $1.cpuMs }[transfers.count / 2]
    let newFile = LargeFile(mib: mib, ms: middle.ms, runsMs: transfers.map(\.ms), cpuMs: middleByCpu.cpuMs, runsCpuMs: transfers.map(\.cpuMs),
                            cpuMsByProcess: middleByCpu.cpuMsByProcess, bytesOnWire: middle.bytesOnWire, arrival: arrival)

    log("\(peer.name): \(runs) 1-byte edits in the \(mib) MiB file, saved safely")
    let source = peer.sideA.appendingPathComponent(target.lastPathComponent)
    var safe: [Transfer] = []
    for run in 0..<runs {
        let offset = size / 2 + 12_345 + run * 7_919
        large[offset] ^= 0x5a
        // The new file is written outside the synced folders, on their file system (untimed:
        // that is the writer's disk, not sync), then renamed over the old one: the clock starts
        // with the save.
        let staged = peer.sideA.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(".bench-save-\(run).tmp")
        try large.write(to: staged)
        safe.append(try await transfer(peer) { [large, target] in
            guard rename(staged.path, source.path) == 0 else { throw BenchError("rename \(staged.path): errno \(errno)") }
            _ = try await until("\(peer.name) syncs the edit", limit: .seconds(600)) { byte(at: offset, of: target, size: size) == large[offset] }
        })
        expect((try? Data(contentsOf: target)) == large, "\(peer.name): the edited file arrived whole")
    }

    log("\(peer.name): \(runs) 1-byte edits in the \(mib) MiB file, written in place")
    var inPlace: [Transfer] = []
    for run in 0..<runs {
        let place = size / 3 + 777 + run * 7_919
        large[place] ^= 0xa5
        inPlace.append(try await transfer(peer) { [large, target] in
            let fd = open(source.path, O_WRONLY | O_CLOEXEC)
            guard fd >= 0 else { throw BenchError("open \(source.path): errno \(errno)") }
            var value = large[place]
            let wrote = pwrite(fd, &value, 1, off_t(place))
            close(fd)
            guard wrote == 1 else { throw BenchError("pwrite: errno \(errno)") }
            _ = try await until("\(peer.name) syncs the edit in place", limit: .seconds(600)) { byte(at: place, of: target, size: size) == large[place] }
        })
        expect((try? Data(contentsOf: target)) == large, "\(peer.name): the file edited in place arrived whole")
    }
    return LargeFigures(newFile: newFile, oneByteEditSafeSave: Edit(safe), oneByteEditInPlace: Edit(inPlace))
}

struct WholeContainer: Encodable {
    /// A file beside `Documents` reached the other device (ms).
    var besideDocumentsMs: Double
    /// A file in a `.nosync` folder was still absent on the other device this long after.
    var noSyncAbsentAfterMs: Double
    var noSyncArrived: Bool
}

/// Files outside `Documents`: one beside it must arrive, one in a `.nosync` folder never.
func wholeContainer(_ peer: UbiquityPeer) async throws -> WholeContainer {
    log("ubiquity: a file beside Documents and one in a .nosync folder")
    let fm = FileManager.default
    try fm.createDirectory(at: peer.rootA.appendingPathComponent("Local.nosync"), withIntermediateDirectories: true)
    try fm.createDirectory(at: peer.rootA.appendingPathComponent("Support"), withIntermediateDirectories: true)
    try Data("kept on this device".utf8).write(to: peer.rootA.appendingPathComponent("Local.nosync/cache.bin"))
    let data = noise(2048, seed: 99)
    try data.write(to: peer.rootA.appendingPathComponent("Support/beside.bin"))
    let took = try await until("the file beside Documents arrives") { (try? Data(contentsOf: peer.rootB.appendingPathComponent("Support/beside.bin"))) == data }
    try await peer.settle()
    try await Task.sleep(for: .seconds(2))
    let arrived = fm.fileExists(atPath: peer.rootB.appendingPathComponent("Local.nosync").path)
    expect(!arrived, "ubiquity: a .nosync folder reached the other device")
    return WholeContainer(besideDocumentsMs: took.inMilliseconds, noSyncAbsentAfterMs: took.inMilliseconds + 2000, noSyncArrived: arrived)
}

struct Idle: Encodable {
    var items: Int
    /// Populating the container (every item on both devices).
    var populateSeconds: Double
    var seconds: Int
    /// Voluntary context switches per second, all threads, of each agent.
    var wakeUpsPerSecond: [String: Double]
    /// CPU time of each agent over those seconds (10 ms resolution).
    var cpuMs: [String: Double]
    var residentMiB: [String: Double]
    var costOfOneChange: ChangeCost
}

/// Fills the container to `items` items (folders of 1,000 files of 64 bytes), measures one
/// change, then leaves both agents idle for `seconds`.
func idleAgents(_ peer: UbiquityPeer, items: Int, seconds: Int, changes: Int) async throws -> Idle {
    log("ubiquity: filling the container to \(items) items")
    let start = ContinuousClock.now
    var folder = 0
    while peer.itemsOnB() < items {
        let have = peer.itemsOnB()
        let target = min(items, have + 10_000)
        var written = have
        while written < target {
            let source = peer.sideA.appendingPathComponent("bulk-\(folder)")
            folder += 1
            try FileManager.default.createDirectory(at: source, withIntermediateDirectories: false)
            written += 1 // the folder
            for index in 0..<min(1000, max(0, target - written)) {
                try noise(64, seed: UInt64(folder * 1000 + index)).write(to: source.appendingPathComponent("i-\(index).bin"))
                written += 1
            }
        }
        _ = try await until("device B has \(target) items", limit: .seconds(1800), every: .milliseconds(200)) { peer.itemsOnB() >= target }
        log("ubiquity: \(peer.itemsOnB()) items")
    }
    try await peer.settle()
    let populated = ContinuousClock.now - start
    let cost = try await changeCost(peer, items: peer.itemsOnB(), changes: changes, label: "idle")

    log("ubiquity: both agents idle for \(seconds) s")
    try await peer.settle()
    try await Task.sleep(for: .seconds(2))
    let agents = Array(zip(peer.processNames, peer.processIDs).dropFirst())
    let before = agents.map { ProcessStats.wakeUps($0.1) }, cpuBefore = agents.map { ProcessStats.processCPUNanoseconds($0.1) }
    try await Task.sleep(for: .seconds(seconds))
    var wakeUps: [String: Double] = [:], resident: [String: Double] = [:], cpu: [String: Double] = [:]
    for (slot, agent) in agents.enumerated() {
        wakeUps[agent.0] = (Double(ProcessStats.wakeUps(from: before[slot], to: ProcessStats.wakeUps(agent.1))) / Double(seconds)).rounded(toPlaces: 2)
        cpu[agent.0] = (Double(ProcessStats.processCPUNanoseconds(agent.1) - cpuBefore[slot]) / 1e6).rounded(toPlaces: 1)
        resident[agent.0] = (Double(ProcessStats.residentBytes(agent.1)) / 1_048_576).rounded(toPlaces: 1)
    }
    return Idle(items: peer.itemsOnB(), populateSeconds: (populated.inMilliseconds / 1000).rounded(toPlaces: 1), seconds: seconds,
                wakeUpsPerSecond: wakeUps, cpuMs: cpu, residentMiB: resident, costOfOneChange: cost)
}
