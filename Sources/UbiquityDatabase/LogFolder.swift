import CUbiquitySystem
import Foundation
import UbiquityCoordination
import UbiquityFiles

/// The change logs of one database in a container: a folder per device, each holding that
/// device's segments (`<device>/000000000001.ubqlog`, …).
///
/// A segment is published whole — written aside and synced, then moved to its name under a
/// coordinated write, never over an existing segment — so no device (and no sync agent) ever
/// reads half of one, and a published segment never changes. Reading takes each file as it is
/// (a complete segment or none) and checks the chain.
public struct LogFolder: Sendable {
    /// The folder.
    public let url: URL

    /// The logs in `url` (created when the first segment is published).
    public init(url: URL) {
        self.url = url
    }

    /// What reading a device's segments found.
    public struct ReadResult: Equatable, Sendable {
        /// The last segment read (its number and hash), or what reading started after.
        public var last: LogPosition?
        /// Segments that are missing while later ones are here (a segment still on its way
        /// from another device, or lost): reading stopped before them.
        public var missing: ClosedRange<Int64>?
        /// Segments known to the container but not downloaded to this device (their iCloud
        /// placeholders, `.NAME.icloud`, are here): ask for them; reading stopped before the
        /// first.
        public var notDownloaded: [URL] = []

        /// A result.
        public init(last: LogPosition?, missing: ClosedRange<Int64>? = nil, notDownloaded: [URL] = []) {
            self.last = last
            self.missing = missing
            self.notDownloaded = notDownloaded
        }
    }

    /// Publishes `segment` (see the type's description).
    /// - Returns: Its hash, which the device's next segment names.
    /// - Throws: ``LogSegmentError`` (`malformed`) for a device id that cannot be a folder name;
    ///   `FileAccessError` when it cannot be written, or (`EEXIST`) when that segment exists.
    @discardableResult
    public func publish(_ segment: LogSegment) throws -> String {
        try Self.checkDevice(segment.device)
        let folder = url.appendingPathComponent(segment.device, isDirectory: true)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let (data, hash) = try segment.encoded()
        guard data.count <= LogSegment.maximumBytes else {
            throw LogSegmentError(.tooLarge, "segment \(segment.number) would be \(data.count) bytes; a segment has at most \(LogSegment.maximumBytes) (a single row larger than that cannot sync)")
        }
        // A `.ubiquity-` name: the sync agent never takes it for an item.
        let staged = folder.appendingPathComponent(".ubiquity-segment-\(Leftovers.ownedSuffix()).tmp").path
        try POSIX.createFile(staged, contents: data, permissions: 0o644, sync: true)
        defer { unlink(staged) } // gone once moved; removed if the move failed
        let destination = folder.appendingPathComponent(LogSegment.fileName(number: segment.number))
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: destination, options: .forReplacing) { url in
            guard ubq_rename_noreplace(staged, url.path) == 0 else {
                throw FileAccessError(operation: "publish segment \(segment.number)", path: url.path, errno: errno)
            }
        }
        try POSIX.sync(folder.path, directory: true)
        return hash
    }

    /// The devices that have logs here, sorted.
    public func devices() throws -> [String] {
        guard FileManager.default.fileExists(atPath: url.path) else { return [] }
        return try POSIX.directoryEntries(url.path).filter { name in
            !name.hasPrefix(".") && (try? POSIX.status(url.appendingPathComponent(name).path))??.kind == .directory
        }
    }

    /// How many of `device`'s segments are here after `start` (what reading them would apply, at
    /// most): the total a long import's progress counts toward.
    public func segmentCount(_ device: String, after start: LogPosition?) throws -> Int {
        try segmentNumbers(device).count { $0 > (start?.number ?? 0) }
    }

    /// Reads `device`'s segments after `start` in order, checking each and its link to the one
    /// before, and hands each to `body` (one at a time: memory stays bounded by one segment).
    /// Stops before the first missing segment, saying which are missing if later ones are here.
    /// - Parameters:
    ///   - device: Whose segments.
    ///   - start: The last segment already applied (nil: from the first).
    ///   - body: Takes each segment and its position (what a later read starts after); an
    ///     error it throws stops the reading.
    /// - Throws: ``LogSegmentError`` for a damaged, malformed, newer-format or unlinked segment
    ///   (nothing after it is read); what `body` throws.
    public func read(_ device: String, after start: LogPosition? = nil, _ body: (LogSegment, LogPosition) throws -> Void) throws -> ReadResult {
        try Self.checkDevice(device)
        let folder = url.appendingPathComponent(device, isDirectory: true)
        guard FileManager.default.fileExists(atPath: folder.path) else { return ReadResult(last: start) }
        var numbers: [Int64] = []
        var placeholders: [Int64] = []
        for name in try POSIX.directoryEntries(folder.path) {
            if name.hasSuffix(".ubqlog"), let number = Int64(name.dropLast(7)), number > (start?.number ?? 0) {
                numbers.append(number)
            } else if name.hasPrefix("."), name.hasSuffix(".ubqlog.icloud"), let number = Int64(name.dropFirst().dropLast(14)), number > (start?.number ?? 0) {
                placeholders.append(number) // `.000000000007.ubqlog.icloud`: known, not downloaded
            }
        }
        numbers.sort()
        placeholders.sort()
        var chain = SegmentChain(device: device, after: start.map { ($0.number, $0.hash) })
        func position() -> LogPosition? { chain.last.map { LogPosition(number: $0.number, hash: $0.hash) } }
        func waiting(from expected: Int64) -> [URL] {
            placeholders.filter { $0 >= expected }.map { folder.appendingPathComponent(LogSegment.fileName(number: $0)) }
        }
        for number in numbers {
            let expected = (chain.last?.number ?? 0) + 1
            guard number == expected else {
                let notDownloaded = waiting(from: expected)
                let missing = placeholders.contains(expected) ? nil : expected...(number - 1)
                return ReadResult(last: position(), missing: missing, notDownloaded: notDownloaded)
            }
            let file = folder.appendingPathComponent(LogSegment.fileName(number: number)).path
            guard (try POSIX.status(file))?.size ?? 0 <= Int64(LogSegment.maximumBytes) else {
                throw LogSegmentError(.tooLarge, "\(device): segment \(number) is larger than \(LogSegment.maximumBytes) bytes")
            }
            let (segment, hash) = try LogSegment.decode(try POSIX.readFile(file))
            guard segment.number == number else {
                throw LogSegmentError(.malformed, "\(device): the file of segment \(number) holds segment \(segment.number)")
            }
            try chain.append(segment, hash: hash)
            try body(segment, LogPosition(number: number, hash: hash))
        }
        return ReadResult(last: position(), notDownloaded: waiting(from: (chain.last?.number ?? 0) + 1))
    }

    /// A device id names a folder: not empty, no `/` or NUL, not hidden.
    static func checkDevice(_ device: String) throws {
        guard !device.isEmpty, !device.hasPrefix("."), !device.contains("/"), !device.contains("\0"), device.utf8.count <= 200 else {
            throw LogSegmentError(.malformed, "\"\(device)\" cannot be a device's log folder")
        }
    }
}

/// Where a device's log was read up to: a segment's number and hash.
public struct LogPosition: Hashable, Sendable, Codable {
    /// The segment's number.
    public var number: Int64
    /// Its hash (what the next segment names).
    public var hash: String

    /// A position.
    public init(number: Int64, hash: String) {
        self.number = number
        self.hash = hash
    }
}
