import CUbiquitySystem
import Foundation
import UbiquityTestSupport
import UbiquityFiles
import Synchronization
import Ubiquity

#if canImport(Glibc)
import Glibc
#endif

/// Bytes the process's heap has in use (glibc's count), for memory per query result.
func heapInUse() -> Int {
    Int(ubq_heap_in_use())
}

/// NSMetadataQuery over a ubiquity container of `count` items (90% downloaded files, 10%
/// placeholders: items known by their metadata only), in 100 folders, once with short paths
/// and once with every folder six levels down long-named folders (paths of about 300 bytes):
/// time to the first results against GNU find listing the same files with their sizes and
/// dates (the medians of ``queryRuns`` runs of each, one after the other), memory per result, and how long one new file takes to arrive as an update (which
/// carries that item alone).
func metadataQueryFigures(in directory: URL, count: Int) async throws -> [String: Any] {
    let short = try await metadataQueryFigures(in: directory.appendingPathComponent("short"), count: count, nesting: "")
    let nesting = (1...6).map { "a-folder-whose-name-is-long-as-people-write-\($0)" }.joined(separator: "/") + "/"
    let long = try await metadataQueryFigures(in: directory.appendingPathComponent("long"), count: count, nesting: nesting)
    let ratios = [short, long].compactMap { $0["ratioToPeer"] as? Double }
    let firstRatios = [short, long].compactMap { $0["firstQueryRatioToPeer"] as? Double }
    let heaps = [short, long].compactMap { $0["heapBytesPerResult"] as? Int }
    return [
        "shortPaths": short,
        "longPaths": long,
        "goals": ["firstResultsAtMost1_2xFind": ratios.count == 2 && ratios.allSatisfy { $0 <= 1.2 },
                  "aProcesssFirstQueryAtMost1_2xFind": firstRatios.count == 2 && firstRatios.allSatisfy { $0 <= 1.2 },
                  "atMost250HeapBytesPerResultWhateverThePathLength": heaps.count == 2 && heaps.allSatisfy { $0 <= 250 }],
    ]
}

/// How many times the query and `find` each run (their medians are compared).
let queryRuns = 5

/// One run of ``metadataQueryFigures(in:count:)``: the 100 folders under `nesting` in `Documents`.
func metadataQueryFigures(in directory: URL, count: Int, nesting: String) async throws -> [String: Any] {
    let root = directory.appendingPathComponent("query")
    let paths = UbiquityPaths(configuration: root.appendingPathComponent("config"), data: root.appendingPathComponent("data"))
    try UbiquityCredentials(server: URL(string: "http://127.0.0.1:1")!, account: "bench", deviceId: "bench", deviceName: "bench",
                            token: String(repeating: "t", count: 64), identityToken: "bench-identity").save(to: paths)
    let identifier = "ABCDE12345.com.example.bench"
    let containers = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [identifier]))
    let documents = paths.container(identifier, account: "bench-identity").appendingPathComponent("Documents")
    let folders = 100
    for folder in 0..<folders {
        let url = documents.appendingPathComponent(nesting + "folder-\(folder)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    for index in 0..<count {
        let folder = documents.appendingPathComponent(nesting + "folder-\(index % folders)")
        let name = "item-\(index).txt"
        if index % 10 == 9 {
            try UbiquityPlaceholder(name: name, item: "i\(index)", size: Int64(index), modificationDate: 1_800_000_000).write(in: folder)
        } else {
            _ = FileManager.default.createFile(atPath: folder.appendingPathComponent(name).path, contents: Data([UInt8(index & 0xff)]))
        }
    }

    FileHandle.standardError.write(Data("query: \(count) items written\(nesting.isEmpty ? "" : " (long paths)"); measuring\n".utf8))
    // The peer: GNU find, listing the same names with sizes and dates (warm cache for both).
    func find() throws -> (seconds: Double, lines: Int) {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/find")
        process.arguments = [documents.path, "-name", "*.txt", "-printf", "%s %T@ %p\n"]
        let pipe = Pipe()
        process.standardOutput = pipe
        let start = ContinuousClock.now
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return ((ContinuousClock.now - start).inSeconds, output.reduce(0) { $0 + ($1 == 0x0A ? 1 : 0) })
    }
    // Five of each, one after the other (the first `find` only warms the cache): the medians
    // are compared, so that neither side's one slow moment on a busy machine decides the ratio,
    // and both have run before (a first query of a process also pays for its first threads).
    let peerLines = try find().lines
    var queryTimes: [Double] = [], findTimes: [Double] = []
    var heap = 0, results = 0, pathBytes = 0
    var arrived: (at: ContinuousClock.Instant, added: Int, changed: Int, removed: Int)?
    var created = ContinuousClock.now
    for run in 0..<queryRuns {
        findTimes.append(try find().seconds)
        let before = heapInUse()
        let query = NSMetadataQuery(containers: containers)
        query.searchScopes = [NSMetadataQueryUbiquitousDocumentsScope]
        query.predicate = NSPredicate(format: "%K LIKE '*.txt'", NSMetadataItemFSNameKey)
        query.notificationBatchingInterval = 0
        let finished = Mutex<ContinuousClock.Instant?>(nil)
        let update = Mutex<(at: ContinuousClock.Instant, added: Int, changed: Int, removed: Int)?>(nil)
        let finishObserver = NotificationCenter.default.addObserver(forName: .NSMetadataQueryDidFinishGathering, object: query, queue: nil) { _ in
            finished.withLock { $0 = ContinuousClock.now }
        }
        let updateObserver = NotificationCenter.default.addObserver(forName: .NSMetadataQueryDidUpdate, object: query, queue: nil) { notification in
            let added = (notification.userInfo?[NSMetadataQueryUpdateAddedItemsKey] as? [NSMetadataItem])?.count ?? 0
            let changed = (notification.userInfo?[NSMetadataQueryUpdateChangedItemsKey] as? [NSMetadataItem])?.count ?? 0
            let removed = (notification.userInfo?[NSMetadataQueryUpdateRemovedItemsKey] as? [NSMetadataItem])?.count ?? 0
            update.withLock { $0 = $0 ?? (ContinuousClock.now, added, changed, removed) }
        }
        defer {
            NotificationCenter.default.removeObserver(finishObserver)
            NotificationCenter.default.removeObserver(updateObserver)
            query.stop()
        }
        let start = ContinuousClock.now
        query.start()
        while finished.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(1)) }
        queryTimes.append((finished.withLock { $0! } - start).inSeconds)
        guard run == queryRuns - 1 else { continue }
        // The last run's memory, and its update for one new file.
        results = query.resultCount
        heap = heapInUse() - before
        pathBytes = query.results.reduce(0) { total, result in
            total + ((result as? NSMetadataItem)?.value(forAttribute: NSMetadataItemPathKey) as? String ?? "").utf8.count
        }
        // One new file: how long until it is an update, and what the update carries.
        try await Task.sleep(for: .milliseconds(200))
        created = ContinuousClock.now
        _ = FileManager.default.createFile(atPath: documents.appendingPathComponent(nesting + "folder-0/new.txt").path, contents: Data("new".utf8))
        while update.withLock({ $0 }) == nil && ContinuousClock.now - created < .seconds(10) { try await Task.sleep(for: .milliseconds(1)) }
        arrived = update.withLock { $0 }
    }
    let firstResults = median(queryTimes), peerSeconds = median(findTimes)

    return [
        "scope": "NSMetadataQueryUbiquitousDocumentsScope over \(count) items in \(folders) folders (10% placeholders), predicate kMDItemFSName LIKE '*.txt'",
        "averagePathBytes": results > 0 ? pathBytes / results : 0,
        "items": count,
        "results": results,
        "firstResultsSeconds": round3(firstResults),
        "firstResultsRunsSeconds": queryTimes.map(round3),
        "peer": "GNU find -name '*.txt' -printf '%s %T@ %p' over the same folder (warm cache)",
        "peerSeconds": round3(peerSeconds),
        "peerRunsSeconds": findTimes.map(round3),
        "peerLines": peerLines,
        "ratioToPeer": round3(firstResults / max(peerSeconds, 1e-6)),
        // The process's first query alone (an app's at launch: it also starts the walk's
        // threads and grows the heap for the first time).
        "firstQueryRatioToPeer": round3(queryTimes[0] / max(peerSeconds, 1e-6)),
        "heapBytesPerResult": results > 0 ? heap / results : 0,
        "updateForOneNewFileSeconds": arrived.map { round3(($0.at - created).inSeconds) } ?? -1,
        "updateCarries": arrived.map { ["added": $0.added, "changed": $0.changed, "removed": $0.removed] } ?? [:],
    ]
}
