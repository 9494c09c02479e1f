import Foundation
import UbiquityTestSupport

#if canImport(Glibc)
import Glibc
#endif

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

func log(_ line: String) {
    FileHandle.standardError.write(Data(("ubiquity-sync-bench: " + line + "\n").utf8))
}

/// A check whose failure is reported (the figures are printed anyway).
func expect(_ condition: Bool, _ message: String) {
    if !condition { log("CHECK FAILED: " + message) }
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
    return sorted[min(sorted.count - 1, max(0, Int((Double(sorted.count) * p).rounded(.up)) - 1))]
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
        // A tail shorter than a word still differs from file to file.
        for index in (words.count * 8)..<buffer.count {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            buffer[index] = UInt8(truncatingIfNeeded: state >> 33)
        }
    }
    return data
}

/// Polls `condition` every `every` until it holds (at most `limit`); the time it took.
func until(_ what: String, limit: Duration = .seconds(120), every: Duration = .milliseconds(1), _ condition: () throws -> Bool) async throws -> Duration {
    let start = ContinuousClock.now
    while !(try condition()) {
        guard ContinuousClock.now - start < limit else { throw BenchError("timed out waiting until \(what)") }
        try await Task.sleep(for: every)
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

/// The names in a folder that are not hidden (a peer's temporary files start with a dot), or
/// nil when there is no such folder. One `getdents` pass, no `stat`.
func visibleNames(in folder: URL) -> [String]? {
    // (Foundation's listing reads each entry's name in place.)
    (try? FileManager.default.contentsOfDirectory(atPath: folder.path))?.filter { !$0.hasPrefix(".") }
}

/// The size of the file at `path`, or nil.
func fileSize(_ path: String) -> Int? {
    var info = stat()
    return stat(path, &info) == 0 ? Int(info.st_size) : nil
}

// MARK: Processes

/// What the kernel says about a set of processes (all their threads): CPU time from
/// `schedstat` (nanoseconds), voluntary context switches (each one a sleep and so a later
/// wake-up), resident memory.
enum ProcessStats {
    /// `pid` and the processes it started, and theirs (`syncthing serve` runs its work in a
    /// child of the process started).
    static func family(_ pid: pid_t) -> [pid_t] {
        var found: [pid_t] = [], pending = [pid]
        while let next = pending.popLast() {
            found.append(next)
            for tid in threads(of: next) {
                let text = (try? String(contentsOfFile: "/proc/\(next)/task/\(tid)/children", encoding: .utf8)) ?? ""
                pending += text.split(separator: " ").compactMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            }
        }
        return found
    }

    /// Nanoseconds on a CPU, all threads of all `pids` and of the processes they started.
    static func cpuNanoseconds(_ pids: [pid_t]) -> Int64 {
        pids.flatMap(family).reduce(0) { total, pid in
            total + threads(of: pid).reduce(0) { sum, tid in
                let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/schedstat", encoding: .utf8)) ?? ""
                return sum + (text.split(separator: " ").first.flatMap { Int64($0) } ?? 0)
            }
        }
    }

    /// Voluntary context switches so far, by thread of `pid` (and of the processes it started).
    static func wakeUps(_ pid: pid_t) -> [String: Int64] {
        var counts: [String: Int64] = [:]
        for process in family(pid) {
            for tid in threads(of: process) { counts[tid] = field("voluntary_ctxt_switches", in: "/proc/\(process)/task/\(tid)/status") ?? 0 }
        }
        return counts
    }

    /// Wake-ups between two ``wakeUps(_:)`` readings: each thread's increase (a thread started
    /// meanwhile counts from zero; one that ended meanwhile is not seen — it undercounts).
    static func wakeUps(from before: [String: Int64], to after: [String: Int64]) -> Int64 {
        after.reduce(0) { $0 + max(0, $1.value - (before[$1.key] ?? 0)) }
    }

    /// CPU time (user and system) of `pid` so far, threads that ended included (/proc/PID/stat).
    static func processCPUNanoseconds(_ pid: pid_t) -> Int64 {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let end = text.lastIndex(of: ")") else { return 0 }
        let fields = text[text.index(after: end)...].split(separator: " ")
        // After the command: state is field 3, so utime (14) and stime (15) are at 11 and 12.
        guard fields.count > 12, let user = Int64(fields[11]), let system = Int64(fields[12]) else { return 0 }
        return (user + system) * 1_000_000_000 / Int64(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Resident set size in bytes (with the processes it started).
    static func residentBytes(_ pid: pid_t) -> Int64 {
        family(pid).reduce(0) { $0 + (field("VmRSS", in: "/proc/\($1)/status") ?? 0) * 1024 }
    }

    private static func threads(of pid: pid_t) -> [String] {
        visibleNames(in: URL(fileURLWithPath: "/proc/\(pid)/task")) ?? []
    }

    private static func field(_ name: String, in path: String) -> Int64? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(name + ":") {
            return line.dropFirst(name.count + 1).split(whereSeparator: { $0 == " " || $0 == "\t" }).first.flatMap { Int64($0) }
        }
        return nil
    }
}

/// Runs a command to its end, feeding it `input`; its exit status and output (standard output
/// and error together).
@discardableResult
func run(_ executable: URL, _ arguments: [String], environment: [String: String]? = nil, input: String? = nil) throws -> (status: Int32, output: String) {
    let process = ChildProcess()
    process.executableURL = executable
    process.arguments = arguments
    if let environment { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    let feed = input.map { _ in Pipe() }
    if let feed { process.standardInput = feed }
    try process.run()
    if let feed, let input {
        feed.fileHandleForWriting.write(Data(input.utf8))
        try feed.fileHandleForWriting.close()
    }
    let output = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: output, as: UTF8.self))
}

// MARK: The reference copy

/// The time to copy `file` to `destination` through a TCP connection on loopback, as the
/// simplest possible sync would: read it, send it, receive it into a new file, `fsync` it.
func loopbackCopy(of file: URL, to destination: URL) async throws -> Duration {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            continuation.resume(with: Result { try blockingLoopbackCopy(of: file, to: destination) })
        }
        thread.start()
    }
}

private func blockingLoopbackCopy(of file: URL, to destination: URL) throws -> Duration {
    let (listener, port) = try loopbackSocket(listening: 1)
    defer { close(listener) }
    let listening = loopback(port: port)
    let start = ContinuousClock.now
    let sender = Thread {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var target = listening
        let connected = withUnsafeMutablePointer(to: &target) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else { return }
        let input = open(file.path, O_RDONLY | O_CLOEXEC)
        defer { close(input) }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let count = read(input, &buffer, buffer.count)
            guard count > 0 else { break }
            var sent = 0
            while sent < count {
                let wrote = buffer.withUnsafeBytes { send(fd, $0.baseAddress! + sent, count - sent, Int32(MSG_NOSIGNAL)) }
                guard wrote > 0 else { return }
                sent += wrote
            }
        }
    }
    sender.start()
    let connection = accept(listener, nil, nil)
    guard connection >= 0 else { throw BenchError("accept: errno \(errno)") }
    defer { close(connection) }
    let output = open(destination.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard output >= 0 else { throw BenchError("open \(destination.path): errno \(errno)") }
    defer { close(output) }
    var buffer = [UInt8](repeating: 0, count: 1 << 20)
    while true {
        let count = recv(connection, &buffer, buffer.count, 0)
        guard count > 0 else { break }
        guard write(output, buffer, count) == count else { throw BenchError("write: errno \(errno)") }
    }
    guard fsync(output) == 0 else { throw BenchError("fsync: errno \(errno)") }
    return ContinuousClock.now - start
}
