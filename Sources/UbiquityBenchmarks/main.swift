// ubiquity-bench: prints the document and coordination layers' figures as JSON, each measured against its peer
// in the same run (ratios, not absolute times).
//
//   swift run -c release ubiquity-bench [--iterations N] [--query-items N] [--database-rows N] [--history-rows N] [--only safeSave|package|coordination|query|chunking|database|databaseImport] [--directory DIR]
import Foundation
import UbiquityTestSupport
import Synchronization
import Ubiquity
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// A flat document holding raw bytes.
final class BlobDocument: Document {
    var data = Data()
    override func contents(forType typeName: String) throws -> Any { data }
    override func load(fromContents contents: Any, ofType typeName: String?) throws { data = contents as? Data ?? Data() }
}

/// A package document whose members the benchmark replaces one at a time.
final class MembersDocument: Document {
    var root = FileWrapper(directoryWithFileWrappers: [:])
    func replace(_ name: String, with data: Data) {
        if let old = root.fileWrappers?[name] { root.removeFileWrapper(old) }
        root.addRegularFile(withContents: data, preferredFilename: name)
        updateChangeCount(.done)
    }
    override func contents(forType typeName: String) throws -> Any { root }
    override func load(fromContents contents: Any, ofType typeName: String?) throws {
        guard let wrapper = contents as? FileWrapper else { throw BenchError("not a package") }
        root = wrapper
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Bytes this process passed to read and write system calls so far (`/proc/self/io`).
func ioCounters() -> (read: Int64, written: Int64) { POSIX.ioCounters() ?? (0, 0) }

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
}

func round3(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }

/// A bare write + fsync + rename of `data` to `url`: the floor a safe save is compared with.
func bareWrite(_ data: Data, to url: URL) throws {
    let temporary = url.path + ".bare-tmp"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw BenchError("open failed: \(errno)") }
    try data.withUnsafeBytes { buffer in
        var offset = 0
        while offset < buffer.count {
            let n = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
            guard n > 0 else { throw BenchError("write failed: \(errno)") }
            offset += n
        }
    }
    guard fsync(fd) == 0 else { throw BenchError("fsync failed: \(errno)") }
    close(fd)
    guard rename(temporary, url.path) == 0 else { throw BenchError("rename failed: \(errno)") }
}

@MainActor
func safeSaveFigures(in directory: URL, iterations: Int) async throws -> [String: Any] {
    let documentURL = directory.appendingPathComponent("flat.bin")
    let bareURL = directory.appendingPathComponent("bare.bin")
    let document = BlobDocument(fileURL: documentURL)
    document.data = Data(repeating: 1, count: 1 << 20)
    guard await document.save(to: documentURL, for: .forCreating) else { throw BenchError("create failed") }
    try bareWrite(document.data, to: bareURL)
    var documentTimes: [Double] = []
    var bareTimes: [Double] = []
    let clock = ContinuousClock()
    for i in 0..<iterations {
        var data = Data(count: 1 << 20)
        data.withUnsafeMutableBytes { buffer in
            for j in stride(from: 0, to: buffer.count, by: 4096) { buffer[j] = UInt8(truncatingIfNeeded: i &+ j) }
        }
        document.data = data
        document.updateChangeCount(.done)
        let start = clock.now
        guard await document.save(to: documentURL, for: .forOverwriting) else { throw BenchError("save failed") }
        documentTimes.append((clock.now - start).inSeconds)
        let bareStart = clock.now
        try bareWrite(data, to: bareURL)
        bareTimes.append((clock.now - bareStart).inSeconds)
    }
    let ratio = median(documentTimes) / median(bareTimes)
    return [
        "iterations": iterations,
        "documentSafeSaveMedianSeconds": median(documentTimes),
        "bareWriteFsyncRenameMedianSeconds": median(bareTimes),
        "ratio": round3(ratio),
        "goal": 1.5,
        "meetsGoal": ratio <= 1.5,
    ]
}

@MainActor
func packageFigures(in directory: URL, members: Int, memberSize: Int) async throws -> [String: Any] {
    let url = directory.appendingPathComponent("big.pkg")
    let document = MembersDocument(fileURL: url)
    for i in 0..<members {
        document.root.addRegularFile(withContents: Data(repeating: UInt8(truncatingIfNeeded: i), count: memberSize), preferredFilename: "member-\(i)")
    }
    guard await document.save(to: url, for: .forCreating) else { throw BenchError("create failed") }
    guard await document.close() else { throw BenchError("close failed") }

    // Open without touching members.
    let reopened = MembersDocument(fileURL: url)
    let beforeOpen = ioCounters()
    guard await reopened.open() else { throw BenchError("open failed") }
    let openRead = ioCounters().read - beforeOpen.read

    // Change one member and save.
    let clock = ContinuousClock()
    reopened.replace("member-500", with: Data(repeating: 0xEE, count: memberSize))
    let beforeSave = ioCounters()
    let start = clock.now
    guard await reopened.save(to: url, for: .forOverwriting) else { throw BenchError("save failed") }
    let incrementalTime = (clock.now - start).inSeconds
    let incrementalWritten = ioCounters().written - beforeSave.written

    // Peer: the same package written in full (no original contents to reuse).
    let fullURL = directory.appendingPathComponent("full.pkg")
    let beforeFull = ioCounters()
    let fullStart = clock.now
    try reopened.root.write(to: fullURL, options: .atomic, originalContentsURL: nil)
    let fullTime = (clock.now - fullStart).inSeconds
    let fullWritten = ioCounters().written - beforeFull.written

    let metadataBytes = 0 // a plain package has no index or manifest of its own
    let budget = Double(memberSize + metadataBytes)
    return [
        "members": members,
        "memberBytes": memberSize,
        "packageMetadataBytes": metadataBytes,
        "oneMemberChanged": [
            "writtenBytes": incrementalWritten,
            "ratioToMemberPlusMetadata": round3(Double(incrementalWritten) / budget),
            "goal": 1.1,
            "meetsGoal": Double(incrementalWritten) <= 1.1 * budget,
            "seconds": incrementalTime,
        ],
        "fullRewrite": ["writtenBytes": fullWritten, "seconds": fullTime],
        "incrementalSpeedup": round3(fullTime / incrementalTime),
        "incrementalBytesFraction": round3(Double(incrementalWritten) / Double(max(fullWritten, 1))),
        "openWithoutTouchingMembers": [
            "readBytes": openRead,
            "goalBytes": 65536,
            "meetsGoal": openRead <= 65536,
        ],
    ]
}

/// A presenter that notes the monotonic time of each `presentedItemDidChange` and signals it.
final class SignallingPresenter: NSFilePresenter, @unchecked Sendable {
    let url: URL
    let queue = OperationQueue()
    let changed = DispatchSemaphore(value: 0)
    let changedAt = Mutex<UInt64>(0)
    init(_ url: URL) { self.url = url }
    var presentedItemURL: URL? { url }
    var presentedItemOperationQueue: OperationQueue { queue }
    func presentedItemDidChange() {
        changedAt.withLock { $0 = monotonicNanoseconds() }
        changed.signal()
    }
}

/// CLOCK_MONOTONIC, which every process on the machine shares.
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// `ubiquity-bench --writer PATH`: the other process of the latency figures. For each line on
/// standard input — `c` (coordinated) or `u` (uncoordinated) — it writes the monotonic time
/// (taken just before writing) to PATH; it answers each line with `ok`.
func writerProcess(_ path: String) throws -> Never {
    let url = URL(fileURLWithPath: path)
    let coordinator = NSFileCoordinator()
    while let line = readLine() {
        switch line {
        case "c":
            try coordinator.coordinate(writingItemAt: url, options: .forReplacing) { url in
                try Data(String(monotonicNanoseconds()).utf8).write(to: url)
            }
        case "u":
            try Data(String(monotonicNanoseconds()).utf8).write(to: url)
        default:
            exit(0)
        }
        FileHandle.standardOutput.write(Data("ok\n".utf8))
    }
    exit(0)
}

/// Latencies from another process's write (coordinated, or by a program that does not
/// coordinate) to this process's `presentedItemDidChange`.
func crossProcessLatencies(of url: URL, iterations: Int) throws -> (coordinated: [Double], uncoordinated: [Double]) {
    let presenter = SignallingPresenter(url)
    NSFileCoordinator.addFilePresenter(presenter)
    defer { NSFileCoordinator.removeFilePresenter(presenter) }
    let writer = ChildProcess()
    writer.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    writer.arguments = ["--writer", url.path]
    let input = Pipe(), output = Pipe()
    writer.standardInput = input
    writer.standardOutput = output
    try writer.run()
    defer {
        input.fileHandleForWriting.write(Data("q\n".utf8))
        writer.waitUntilExit()
    }
    var answers = ""
    func ask(_ command: String) -> Double? {
        input.fileHandleForWriting.write(Data("\(command)\n".utf8))
        while !answers.contains("ok\n") {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { return nil }
            answers += String(decoding: chunk, as: UTF8.self)
        }
        answers = String(answers.dropFirst(answers.range(of: "ok\n")!.upperBound.utf16Offset(in: answers)))
        guard presenter.changed.wait(timeout: .now() + 5) == .success,
              let written = (try? String(contentsOf: url, encoding: .utf8)).flatMap({ UInt64($0) }) else { return nil }
        return Double(presenter.changedAt.withLock { $0 } &- written) / 1e9
    }
    var coordinated: [Double] = [], uncoordinated: [Double] = []
    for _ in 0..<iterations {
        if let latency = ask("c") { coordinated.append(latency) }
        if let latency = ask("u") { uncoordinated.append(latency) }
    }
    return (coordinated, uncoordinated)
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    let sorted = values.sorted()
    return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

func coordinationFigures(in directory: URL, iterations: Int) throws -> [String: Any] {
    let url = directory.appendingPathComponent("coordinated.txt")
    try Data(repeating: 7, count: 4096).write(to: url)
    let clock = ContinuousClock()
    let coordinator = NSFileCoordinator()
    var bare: [Double] = [], reads: [Double] = [], writes: [Double] = []
    for _ in 0..<iterations * 10 {
        var start = clock.now
        _ = try Data(contentsOf: url)
        bare.append((clock.now - start).inSeconds)
        start = clock.now
        _ = try coordinator.coordinate(readingItemAt: url) { try Data(contentsOf: $0) }
        reads.append((clock.now - start).inSeconds)
        start = clock.now
        _ = try coordinator.coordinate(writingItemAt: url, options: .contentIndependentMetadataOnly) { try Data(contentsOf: $0) }
        writes.append((clock.now - start).inSeconds)
    }
    // Latency from a coordinated write to the presenter's presentedItemDidChange.
    let presenter = SignallingPresenter(url)
    NSFileCoordinator.addFilePresenter(presenter)
    defer { NSFileCoordinator.removeFilePresenter(presenter) }
    var latencies: [Double] = []
    for i in 0..<iterations * 3 {
        let start = clock.now
        try coordinator.coordinate(writingItemAt: url, options: .forReplacing) { try Data([UInt8(truncatingIfNeeded: i)]).write(to: $0) }
        presenter.changed.wait()
        latencies.append((clock.now - start).inSeconds)
    }
    let p50 = percentile(latencies, 0.5)
    let other = try crossProcessLatencies(of: url, iterations: iterations * 3)
    let otherP50 = percentile(other.coordinated, 0.5)
    return [
        "bareReadMedianSeconds": median(bare),
        "coordinatedReadMedianSeconds": median(reads),
        "coordinatedReadRatio": round3(median(reads) / median(bare)),
        "coordinatedWriteMedianSeconds": median(writes),
        "coordinatedWriteRatio": round3(median(writes) / median(bare)),
        "writeToPresentedItemDidChange": [
            "scope": "coordinated write in this process, whole access timed",
            "samples": latencies.count, "p50Seconds": p50, "p90Seconds": percentile(latencies, 0.9),
        ],
        "otherProcessWriteToPresentedItemDidChange": [
            "scope": "coordinated write in another process, from its write to this process's callback",
            "samples": other.coordinated.count, "p50Seconds": otherP50, "p90Seconds": percentile(other.coordinated, 0.9),
            "goalP50Seconds": 0.010, "meetsGoal": otherP50 <= 0.010 && other.coordinated.count == iterations * 3,
        ],
        "uncoordinatedWriteToPresentedItemDidChange": [
            "scope": "plain write in another process, seen by inotify (includes the watcher's few-millisecond quiet period)",
            "samples": other.uncoordinated.count, "p50Seconds": percentile(other.uncoordinated, 0.5), "p90Seconds": percentile(other.uncoordinated, 0.9),
        ],
    ]
}

@MainActor
func main() async throws {
    var iterations = 30
    var queryItems = 100_000
    var databaseRows = 500_000
    var historyRows = 100_000
    var only: String?
    var directory: URL?
    var arguments = CommandLine.arguments.dropFirst()
    while let argument = arguments.popFirst() {
        switch argument {
        case "--writer": try writerProcess(arguments.popFirst() ?? "")
        case "--database-history":
            try writeDatabaseHistory(container: URL(fileURLWithPath: arguments.popFirst() ?? "."), rows: Int(arguments.popFirst() ?? "") ?? 100_000)
            exit(0)
        case "--iterations": iterations = Int(arguments.popFirst() ?? "") ?? iterations
        case "--directory": directory = arguments.popFirst().map { URL(fileURLWithPath: $0, isDirectory: true) }
        case "--query-items": queryItems = Int(arguments.popFirst() ?? "") ?? queryItems
        case "--database-rows": databaseRows = Int(arguments.popFirst() ?? "") ?? databaseRows
        case "--history-rows": historyRows = Int(arguments.popFirst() ?? "") ?? historyRows
        case "--only": only = arguments.popFirst()
        default:
            FileHandle.standardError.write(Data("usage: ubiquity-bench [--iterations N] [--query-items N] [--database-rows N] [--history-rows N] [--only safeSave|package|coordination|query|chunking|database|databaseImport] [--directory DIR]\n".utf8))
            exit(64)
        }
    }
    let work = (directory ?? FileManager.default.temporaryDirectory).appendingPathComponent("ubiquity-bench-\(UUID().uuidString.prefix(8))")
    try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: work) }

    var report: [String: Any] = [
        "benchmark": "ubiquity document layer",
        "machine": ["cores": ProcessInfo.processInfo.activeProcessorCount, "fileSystemDirectory": work.deletingLastPathComponent().path],
    ]
    if only == nil || only == "safeSave" { report["safeSave1MiB"] = try await safeSaveFigures(in: work, iterations: iterations) }
    if only == nil || only == "package" { report["package1000x16KiB"] = try await packageFigures(in: work, members: 1000, memberSize: 16 * 1024) }
    if only == nil || only == "coordination" { report["coordination"] = try coordinationFigures(in: work, iterations: iterations) }
    if only == nil || only == "chunking" { report["chunking64MiB"] = try chunkingFigures(in: work, mib: 64, iterations: iterations) }
    if only == nil || only == "query" { report["metadataQuery"] = try await metadataQueryFigures(in: work, count: queryItems) }
    if only == "databaseImport" {
        report["databaseFirstImport"] = try firstImportFigures(in: work.appendingPathComponent("database-import"), rows: historyRows)
    }
    if only == nil || only == "database" {
        report["database"] = try databaseFigures(in: work.appendingPathComponent("database"), iterations: iterations, largeRows: databaseRows, historyRows: historyRows)
    }
    let json = try JSONSerialization.data(withJSONObject: report, options: [.prettyPrinted, .sortedKeys])
    FileHandle.standardOutput.write(json + Data("\n".utf8))
}

do {
    try await main()
} catch {
    FileHandle.standardError.write(Data("ubiquity-bench: \(error)\n".utf8))
    exit(1)
}
