import Foundation
import UbiquityFiles
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

#if canImport(Glibc)
import Glibc
#endif

// Issue 47's figures (`--storage-only`): the same server on PostgreSQL twice in one run — chunk
// contents in the database's rows, then in an object store (a real SeaweedFS) — with the same
// two agents: a new large file's time, a 4 KiB file's latency, the server's memory, and the
// object store's requests per GiB uploaded (read from the server's /metrics).

/// One side's figures.
struct StorageSide: Encodable {
    /// `rows` or `objectStore`.
    var storage: String
    /// A new large file complete on the other device: the median of the runs, and each run (ms).
    var newFileMs: Double
    var newFileRunsMs: [Double]
    /// New 4 KiB files, one at a time.
    var smallFile: Latency
    /// The server's resident memory at the end, and its peak (bytes).
    var serverRSSBytes: Int64
    var serverPeakRSSBytes: Int64
    /// Requests the server sent the object store, by method (object store only).
    var objectStoreRequests: [String: Int]?
    /// Chunk bytes the server received (its /metrics), and object store requests per GiB of them.
    var chunkBytesReceived: Int64
    /// Every request (writes, and the reads of the other device's fetches) per GiB received.
    var objectStoreRequestsPerGiB: Double?
    /// What uploading costs: every request but GETs (PUTs, and any HEAD, DELETE or listing)
    /// per GiB received.
    var objectStoreWriteRequestsPerGiB: Double?
    /// What one device fetching it all costs: GETs per GiB received (each byte was fetched once,
    /// by the other device).
    var objectStoreGETsPerGiB: Double?
}

/// Both sides, their ratios and the issue's goals.
struct StorageFigures: Encodable {
    var rows: StorageSide
    var objectStore: StorageSide
    /// Object store ÷ rows.
    var newFileRatio: Double
    var smallFileP50Ratio: Double
    var serverPeakRSSRatio: Double
    /// The issue's goals: ≤ 100 requests per GiB uploaded (what uploading costs: the writes; the
    /// other device's fetches are ``StorageSide/objectStoreGETsPerGiB``), a new file ≤ 1.2×, a
    /// small file's p50 ≤ 1.5×.
    var goals: [String: Bool]
    var notes: String
}

/// The figures on `postgres` (a fresh schema per side) and the object store at `objectStore`
/// (a fresh prefix per run) with its credentials file.
func storageFigures(in folder: URL, postgres: String, objectStore: String, credentials: String, mib: Int, runs: Int, small: Int) async throws -> StorageFigures {
    func side(_ name: String, extra: [String]) async throws -> StorageSide {
        let schema = "bench_\(name.lowercased())_\(getpid())"
        let database = postgres + (postgres.contains("?") ? "&" : "?") + "search_path=\(schema)"
        let home = folder.appendingPathComponent(name)
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        let peer = try await UbiquityPeer.start(in: home, storage: ["--database", database] + extra, serving: ["--escrow-key", home.appendingPathComponent("escrow.key").path])
        defer { Task { await peer.stop() } }
        log("\(name): \(runs) new \(mib) MiB files, one at a time")
        var runsMs: [Double] = []
        for run in 0..<runs {
            let data = noise(mib << 20, seed: 4_700 + UInt64(run)), file = "storage-\(run).bin"
            let staged = peer.sideA.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(".bench-storage-\(run).tmp")
            try data.write(to: staged)
            let moved = try await transfer(peer) {
                guard rename(staged.path, peer.sideA.appendingPathComponent(file).path) == 0 else { throw BenchError("rename: errno \(errno)") }
                _ = try await until("\(name) syncs \(file)", limit: .seconds(600)) {
                    byte(at: data.count - 1, of: peer.sideB.appendingPathComponent(file), size: data.count) != nil
                        && (try? Data(contentsOf: peer.sideB.appendingPathComponent(file))) == data
                }
            }
            runsMs.append(moved.ms)
        }
        let latency = try await newSmallFiles(peer, count: small)
        let metrics = try await serverMetrics(port: peer.serverPort)
        let requests = metrics.filter { $0.key.hasPrefix("ubiquity_object_store_requests_total{") }
        let byMethod = Dictionary(uniqueKeysWithValues: requests.map { (String($0.key.split(separator: "\"")[1]), Int($0.value)) })
        let received = Int64(metrics["ubiquity_chunk_bytes_received_total"] ?? 0)
        func perGiB(_ requests: Int) -> Double? {
            byMethod.isEmpty || received == 0 ? nil : (Double(requests) / (Double(received) / Double(1 << 30))).rounded(toPlaces: 1)
        }
        let server = peer.processIDs[0]
        return StorageSide(storage: name, newFileMs: percentile(runsMs, 0.5), newFileRunsMs: runsMs, smallFile: latency,
                           serverRSSBytes: ProcessStats.residentBytes(server), serverPeakRSSBytes: peakResidentBytes(server),
                           objectStoreRequests: byMethod.isEmpty ? nil : byMethod, chunkBytesReceived: received,
                           objectStoreRequestsPerGiB: perGiB(byMethod.values.reduce(0, +)),
                           objectStoreWriteRequestsPerGiB: perGiB(byMethod.filter { $0.key != "GET" }.values.reduce(0, +)),
                           objectStoreGETsPerGiB: perGiB(byMethod["GET"] ?? 0))
    }
    let rows = try await side("rows", extra: [])
    let prefix = "bench-\(getpid())-\(Int(Date().timeIntervalSince1970))"
    let objects = try await side("objectStore", extra: ["--object-store", objectStore + "/" + prefix, "--object-store-credentials", credentials])
    let newFile = (objects.newFileMs / rows.newFileMs).rounded(toPlaces: 2), smallP50 = (objects.smallFile.p50Ms / rows.smallFile.p50Ms).rounded(toPlaces: 2)
    let perGiB = objects.objectStoreWriteRequestsPerGiB ?? .infinity
    return StorageFigures(rows: rows, objectStore: objects, newFileRatio: newFile, smallFileP50Ratio: smallP50,
                          serverPeakRSSRatio: (Double(objects.serverPeakRSSBytes) / Double(rows.serverPeakRSSBytes)).rounded(toPlaces: 2),
                          goals: ["writeRequestsPerGiBUploadedAtMost100": perGiB <= 100, "newFileAtMost1.2x": newFile <= 1.2, "smallFileP50AtMost1.5x": smallP50 <= 1.5],
                          notes: "one ubiquity serve on PostgreSQL (a fresh schema each side), two ubiquity agent --greedy; chunk contents in rows, then in SeaweedFS (weed mini) on loopback; every request counted by the server's /metrics")
}

/// The server's /metrics, name (with labels) → value.
func serverMetrics(port: Int) async throws -> [String: Double] {
    let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/metrics")!)
    var values: [String: Double] = [:]
    for line in String(decoding: data, as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
        let parts = line.split(separator: " ")
        if parts.count == 2, let value = Double(parts[1]) { values[String(parts[0])] = value }
    }
    return values
}

/// The peak resident set of `pid` (VmHWM), in bytes.
func peakResidentBytes(_ pid: pid_t) -> Int64 {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
          let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
          let kilobytes = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first.flatMap({ Int64($0) }) else { return 0 }
    return kilobytes * 1024
}
