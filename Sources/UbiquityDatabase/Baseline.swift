import CUbiquitySystem
import Crypto
import Foundation
import UbiquityCoordination
import UbiquityFiles

/// A snapshot of a store's merged state at a frontier (the last segment of each device it had
/// applied): every synced row with its stamps (``RowMeta``) and, for a row that exists, its
/// values. A new device starts from the newest baseline instead of every segment, and a device's
/// segments that a baseline and every registered device cover can be deleted; a device back from
/// longer offline than the logs are kept catches up from it, keeping what it did offline.
///
/// On disk (`<baselines>/<device>/000000000001.ubqbase`, written by that device only, published
/// whole like a segment): a header line, one line per row (JSON), then `sha256:` and the hex
/// digest of everything before. Read one line at a time: memory stays bounded by one row.
struct Baseline {
    /// The first line.
    struct Header: Codable, Equatable, Sendable {
        var format: Int
        /// The device that wrote it.
        var device: String
        /// Its number among that device's baselines.
        var number: Int64
        /// The schema it was written with.
        var schema: String
        /// The last segment of each device (its own included) that the snapshot holds.
        var frontier: [String: LogPosition]
        /// How many rows follow.
        var rows: Int

        /// How much of the logs it holds (the newest baseline holds most).
        var coverage: Int64 { frontier.values.reduce(0) { $0 + $1.number } }
    }

    /// A row line.
    struct Line: Codable {
        var t: String
        var k: [LogValue]
        var m: Data
        var v: [String: LogValue]?
    }

    static let currentFormat = 1

    static func fileName(number: Int64) -> String {
        let digits = String(number)
        return String(repeating: "0", count: max(0, 12 - digits.count)) + digits + ".ubqbase"
    }
}

/// The baselines of one database: a folder per device (beside the logs), each holding that
/// device's baselines.
struct BaselineFolder: Sendable {
    let url: URL

    /// Every baseline's header and file, newest (most coverage, then device id) first; those
    /// that cannot be read are skipped (and reported by `problems`).
    func headers() throws -> (baselines: [(header: Baseline.Header, url: URL)], problems: [String]) {
        guard FileManager.default.fileExists(atPath: url.path) else { return ([], []) }
        var found: [(Baseline.Header, URL)] = [], problems: [String] = []
        for device in try POSIX.directoryEntries(url.path) where !device.hasPrefix(".") {
            let folder = url.appendingPathComponent(device)
            guard (try? POSIX.status(folder.path))??.kind == .directory else { continue } // not a device's folder
            for name in try POSIX.directoryEntries(folder.path) where name.hasSuffix(".ubqbase") {
                let file = folder.appendingPathComponent(name)
                do { found.append((try Self.header(of: file), file)) } catch { problems.append("\(device)/\(name): \(error)") }
            }
        }
        found.sort { ($0.0.coverage, $0.0.device, $0.0.number) > ($1.0.coverage, $1.0.device, $1.0.number) }
        return (found, problems)
    }

    /// The header line of a baseline file.
    static func header(of file: URL) throws -> Baseline.Header {
        let handle = try FileHandle(forReadingFrom: file)
        defer { try? handle.close() }
        var reader = LineReader(handle: handle)
        guard let line = try reader.next() else { throw LogSegmentError(.malformed, "an empty baseline") }
        let header: Baseline.Header
        do { header = try JSONDecoder().decode(Baseline.Header.self, from: line) } catch {
            throw LogSegmentError(.malformed, "not a baseline: \(error)")
        }
        guard header.format <= Baseline.currentFormat else { throw LogSegmentError(.newerFormat, "baseline format \(header.format)") }
        return header
    }

    /// Writes a baseline: `rows` hands each row line to the writer in turn. Written aside and
    /// synced, then moved to its name (never over an existing one).
    /// - Returns: The file.
    @discardableResult
    func publish(_ header: Baseline.Header, rows: ((Baseline.Line) throws -> Void) throws -> Void) throws -> URL {
        try LogFolder.checkDevice(header.device)
        let folder = url.appendingPathComponent(header.device, isDirectory: true)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let staged = folder.appendingPathComponent(".ubiquity-baseline-\(Leftovers.ownedSuffix()).tmp")
        defer { unlink(staged.path) }
        guard FileManager.default.createFile(atPath: staged.path, contents: nil) else {
            throw FileAccessError(operation: "create baseline", path: staged.path, errno: errno)
        }
        let handle = try FileHandle(forWritingTo: staged)
        var hasher = SHA256()
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        var buffer = Data()
        func emit(_ data: Data) throws {
            buffer.append(data)
            buffer.append(UInt8(ascii: "\n"))
            if buffer.count >= 1 << 20 {
                hasher.update(data: buffer)
                try handle.write(contentsOf: buffer)
                buffer.removeAll(keepingCapacity: true)
            }
        }
        do {
            try emit(try encoder.encode(header))
            var count = 0
            try rows { line in
                try emit(try encoder.encode(line))
                count += 1
            }
            guard count == header.rows else { throw LogSegmentError(.malformed, "the baseline was to hold \(header.rows) rows, \(count) were written") }
            hasher.update(data: buffer)
            buffer.append(contentsOf: Array("sha256:\(LogSegment.hex(hasher.finalize()))\n".utf8))
            try handle.write(contentsOf: buffer)
            try handle.synchronize()
            try handle.close()
        } catch {
            try? handle.close() // the write's error is the one reported
            throw error
        }
        let destination = folder.appendingPathComponent(Baseline.fileName(number: header.number))
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: destination, options: .forReplacing) { url in
            guard ubq_rename_noreplace(staged.path, url.path) == 0 else {
                throw FileAccessError(operation: "publish baseline \(header.number)", path: url.path, errno: errno)
            }
        }
        try POSIX.sync(folder.path, directory: true)
        return destination
    }

    /// Reads a baseline's rows one at a time, checking its checksum at the end: `body` runs
    /// inside the caller's transaction, which must roll back if this throws.
    /// - Throws: ``LogSegmentError`` (`damaged` when the checksum does not match, `malformed`).
    static func read(_ file: URL, _ body: (Baseline.Line) throws -> Void) throws {
        let handle = try FileHandle(forReadingFrom: file)
        defer { try? handle.close() }
        var reader = LineReader(handle: handle)
        var hasher = SHA256()
        var first = true
        let decoder = JSONDecoder()
        while let line = try reader.next() {
            if line.starts(with: Array("sha256:".utf8)) {
                let recorded = String(decoding: line.dropFirst(7), as: UTF8.self)
                let actual = LogSegment.hex(hasher.finalize())
                guard recorded == actual else { throw LogSegmentError(.damaged, "baseline \(file.lastPathComponent): checksum \(recorded), bytes hash to \(actual)") }
                guard try reader.next() == nil else { throw LogSegmentError(.malformed, "baseline \(file.lastPathComponent): bytes after its checksum") }
                return
            }
            hasher.update(data: line)
            hasher.update(data: Data([UInt8(ascii: "\n")]))
            if first { first = false; continue }
            do { try body(try decoder.decode(Baseline.Line.self, from: line)) } catch let error as DecodingError {
                throw LogSegmentError(.malformed, "baseline \(file.lastPathComponent): a row cannot be read: \(error)")
            }
        }
        throw LogSegmentError(.malformed, "baseline \(file.lastPathComponent) has no checksum line (cut short)")
    }
}

/// Reads a file one line at a time (without the newline), a megabyte at a time.
struct LineReader {
    let handle: FileHandle
    private var buffer: [UInt8] = []
    private var position = 0
    private var atEnd = false

    init(handle: FileHandle) { self.handle = handle }

    mutating func next() throws -> Data? {
        while true {
            if let newline = buffer[position...].firstIndex(of: UInt8(ascii: "\n")) {
                defer { position = newline + 1 }
                return Data(buffer[position..<newline])
            }
            if atEnd {
                guard position < buffer.count else { return nil }
                defer { position = buffer.count }
                return Data(buffer[position...])
            }
            // Keep the unread part, then read more.
            buffer.removeFirst(position)
            position = 0
            let chunk = try handle.read(upToCount: 1 << 20) ?? Data()
            if chunk.isEmpty { atEnd = true } else { buffer.append(contentsOf: chunk) }
        }
    }
}
