import Crypto
import Foundation

/// Why a log segment cannot be used: each a named error, never a silent stall.
public struct LogSegmentError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A kind of problem.
    public enum Code: String, Sendable {
        /// Its bytes do not match its own checksum (damaged in storage or in transit).
        case damaged
        /// It is not a segment (no checksum line, not JSON, fields missing).
        case malformed
        /// It was written by a newer format than this build reads: apply it after an upgrade.
        case newerFormat
        /// It is larger than a segment may be.
        case tooLarge
        /// A segment is missing before it (numbers must follow each other).
        case gap
        /// It does not name the segment before it as its predecessor.
        case brokenChain
        /// It was found among another device's segments.
        case wrongDevice
    }

    /// What went wrong.
    public var code: Code
    /// Which segment, and how.
    public var message: String

    /// An error.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// `code: message`.
    public var description: String { "\(code.rawValue): \(message)" }
}

/// An immutable piece of one device's change log: the transactions it committed, in order.
///
/// Only its device writes its segments, each once and whole, so the file layer never sees two
/// devices change one file. Segments are numbered 1, 2, 3 … per device; each names the SHA-256
/// of the one before it (``previous``) and carries the device's version-vector frontier when it
/// was written (the last segment of every other device it had applied), and ends with a
/// checksum of itself — so a missing, reordered or damaged segment is found and named.
///
/// On disk: the segment's JSON (keys sorted) on one line, then `sha256:` and the hex SHA-256
/// of that line.
public struct LogSegment: Equatable, Sendable, Codable {
    /// The format this build writes and reads.
    public static let currentFormat = 1
    /// The largest segment read (a writer starts a new segment well before).
    public static let maximumBytes = 64 << 20

    /// The format it was written in.
    public var format: Int
    /// The device that wrote it.
    public var device: String
    /// Its number among its device's segments, from 1.
    public var number: Int64
    /// The SHA-256 (hex) of the previous segment's JSON; nil for the first.
    public var previous: String?
    /// The last segment number of each other device that its device had applied.
    public var frontier: [String: Int64]
    /// The transactions, in the order they were committed.
    public var records: [ChangeLogRecord]
    /// When it was written (milliseconds since 1970, the writer's clock): how recently its device
    /// was heard of, for deciding which devices still hold logs back from compaction.
    public var written: Int64?

    /// A segment.
    public init(device: String, number: Int64, previous: String?, frontier: [String: Int64], records: [ChangeLogRecord], written: Int64? = nil) {
        self.format = Self.currentFormat
        self.device = device
        self.number = number
        self.previous = previous
        self.frontier = frontier
        self.records = records
        self.written = written
    }

    /// The file name of segment `number` (sorting by name sorts by number).
    public static func fileName(number: Int64) -> String {
        let digits = String(number)
        return String(repeating: "0", count: max(0, 12 - digits.count)) + digits + ".ubqlog"
    }

    /// Its bytes on disk, and the hash the next segment names.
    public func encoded() throws -> (data: Data, hash: String) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let body = try encoder.encode(self)
        let hash = Self.hex(SHA256.hash(data: body))
        var data = body
        data.append(contentsOf: Array("\nsha256:\(hash)\n".utf8))
        return (data, hash)
    }

    /// Reads a segment's bytes: the segment, and its hash (what the next segment names).
    /// - Throws: ``LogSegmentError`` — damaged, malformed, too large or of a newer format.
    public static func decode(_ data: Data) throws(LogSegmentError) -> (segment: LogSegment, hash: String) {
        guard data.count <= maximumBytes else { throw LogSegmentError(.tooLarge, "\(data.count) bytes; a segment has at most \(maximumBytes)") }
        let trailerLength = 8 + 64 + 1 // "\nsha256:", the hex digest, "\n"
        guard data.count > trailerLength, data.last == UInt8(ascii: "\n") else { throw LogSegmentError(.malformed, "no checksum line") }
        let body = data.prefix(data.count - trailerLength)
        let trailer = String(decoding: data.suffix(trailerLength), as: UTF8.self)
        guard trailer.hasPrefix("\nsha256:") else { throw LogSegmentError(.malformed, "no checksum line") }
        let recorded = String(trailer.dropFirst(8).dropLast())
        let hash = hex(SHA256.hash(data: body))
        guard recorded == hash else { throw LogSegmentError(.damaged, "its checksum is \(recorded), its bytes hash to \(hash)") }
        struct Header: Decodable { var format: Int }
        guard let header = try? JSONDecoder().decode(Header.self, from: body) else { throw LogSegmentError(.malformed, "not a segment") }
        guard header.format <= currentFormat else {
            throw LogSegmentError(.newerFormat, "format \(header.format); this build reads up to \(currentFormat)")
        }
        let segment: LogSegment
        do { segment = try JSONDecoder().decode(LogSegment.self, from: body) } catch {
            throw LogSegmentError(.malformed, "not a segment: \(error)")
        }
        guard segment.number >= 1, !segment.device.isEmpty else { throw LogSegmentError(.malformed, "segment \(segment.number) of device \"\(segment.device)\"") }
        return (segment, hash)
    }

    static func hex(_ digest: SHA256.Digest) -> String { digest.map { String(format: "%02x", $0) }.joined() }
}

/// Checks one device's segments as they are read, one after another: they must be that
/// device's, numbered without a gap, each naming the one before it.
public struct SegmentChain: Sendable {
    /// The device whose segments these are.
    public let device: String
    /// The last segment accepted, and its hash (nil: none yet).
    public private(set) var last: (number: Int64, hash: String)?

    /// A chain continuing after `last` (what was applied before; nil to start from segment 1).
    public init(device: String, after last: (number: Int64, hash: String)? = nil) {
        self.device = device
        self.last = last
    }

    /// Accepts the next segment.
    /// - Throws: ``LogSegmentError`` — `wrongDevice`, `gap` (naming the missing numbers) or
    ///   `brokenChain`; nothing is accepted then.
    public mutating func append(_ segment: LogSegment, hash: String) throws(LogSegmentError) {
        guard segment.device == device else { throw LogSegmentError(.wrongDevice, "segment \(segment.number) of \(segment.device) among \(device)'s") }
        let expected = (last?.number ?? 0) + 1
        guard segment.number == expected else {
            if segment.number > expected {
                throw LogSegmentError(.gap, "\(device): segment \(segment.number) came after \(expected - 1); \(expected)…\(segment.number - 1) missing")
            }
            throw LogSegmentError(.gap, "\(device): segment \(segment.number) again after \(expected - 1)")
        }
        guard segment.previous == last?.hash else {
            throw LogSegmentError(.brokenChain, "\(device): segment \(segment.number) names \(segment.previous ?? "no predecessor"), segment \(expected - 1) hashes to \(last?.hash ?? "nothing")")
        }
        last = (segment.number, hash)
    }
}
