import CUbiquitySystem
import Foundation
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

#if canImport(Glibc)
import Glibc
#endif

/// Writes downloaded chunks where they belong in a staged file or package (`pwrite` at each
/// offset the chunk has, so they may arrive in any order), then makes it all durable. The
/// owner closes it (``close()``) whatever happens.
struct StagedWriter: Sendable {
    let root: URL
    /// Where each chunk goes: member index, offset and length.
    private let places: [String: [Place]]
    private let descriptors: [Int32]

    struct Place: Sendable {
        var member: Int
        var offset: Int
        var length: Int
    }

    /// Creates the staged file (or folder with its members and their folders), each member
    /// already at its final length — or, `reopening`, opens the staged flat file at `root` as
    /// it is (a download resumed: what it holds is checked before it is trusted).
    init(at root: URL, members: [LocalMember], kind: ItemKind, reopening: Bool = false) throws {
        self.root = root
        var descriptors: [Int32] = [], places: [String: [Place]] = [:]
        if kind == .package { try FileManager.default.createDirectory(at: root, withIntermediateDirectories: false) }
        do {
            for (index, member) in members.enumerated() {
                let url = member.path.isEmpty ? root : root.appendingPathComponent(member.path)
                if kind == .package, member.path.hasSuffix("/") {
                    // An empty folder: made, and held open so that finishing syncs it as the rest.
                    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
                    let fd = open(url.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                    guard fd >= 0 else { throw Self.failure("open", url) }
                    descriptors.append(fd)
                    continue
                }
                if kind == .package { try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true) }
                let fd = reopening && kind == .file ? open(url.path, O_RDWR | O_NOFOLLOW | O_CLOEXEC) : open(url.path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
                guard fd >= 0 else { throw Self.failure(reopening ? "open" : "create", url) }
                descriptors.append(fd)
                let length = member.chunks.reduce(0) { $0 + $1.length }
                guard ftruncate(fd, off_t(length)) == 0 else { throw Self.failure("size", url) }
                for chunk in member.chunks { places[chunk.hash, default: []].append(Place(member: index, offset: chunk.offset, length: chunk.length)) }
            }
        } catch {
            for fd in descriptors { Glibc.close(fd) }
            throw error
        }
        self.descriptors = descriptors
        self.places = places
    }

    /// How many places in the item the chunk fills.
    func occurrences(of hash: String) -> Int { places[hash]?.count ?? 0 }

    /// Writes a chunk (already checked against its hash) everywhere it goes.
    func write(_ bytes: some ContiguousBytes & Collection<UInt8>, hash: String) throws {
        for place in places[hash] ?? [] {
            let wrote = bytes.withUnsafeBytes { SystemCall.writeAll(descriptors[place.member], $0, at: Int64(place.offset)) }
            guard wrote == bytes.count else { throw Self.failure("write", root) }
        }
    }

    /// Copies inside the kernel every chunk of `source` that this item has (`pieces`: where
    /// each chunk is in `source`, by hash) to every place it goes, runs of adjacent chunks in
    /// one copy. The caller has made sure `source` holds those chunks. Returns the hashes
    /// copied.
    func copy(from source: Int32, pieces: [String: ContentChunk]) throws -> Set<String> {
        var runs: [(member: Int, from: Int, to: Int, count: Int)] = [], copied = Set<String>()
        for (hash, targets) in places {
            guard let piece = pieces[hash] else { continue }
            copied.insert(hash)
            for place in targets { runs.append((place.member, piece.offset, place.offset, piece.length)) }
        }
        runs.sort { ($0.member, $0.to) < ($1.member, $1.to) }
        var merged: [(member: Int, from: Int, to: Int, count: Int)] = []
        for run in runs {
            if let last = merged.last, last.member == run.member, last.from + last.count == run.from, last.to + last.count == run.to {
                merged[merged.count - 1].count += run.count
            } else {
                merged.append(run)
            }
        }
        for run in merged {
            guard SystemCall.copyRange(from: source, at: Int64(run.from), to: descriptors[run.member], at: Int64(run.to), count: run.count) == run.count else {
                throw Self.failure("copy the unchanged parts into", root)
            }
            // Written back while the rest is copied: the closing fsync waits less.
            if run.count >= 1 << 20 { ubq_start_writeback(descriptors[run.member], Int64(run.to), Int64(run.count)) }
        }
        return copied
    }

    /// Starts writing back to the disk, without waiting, what the chunks `hashes` filled (a
    /// batch just written): runs of adjacent places of 1 MiB or more. A large download is then
    /// on its way to the disk while the rest arrives, and ``finish()``'s `fsync` waits for the
    /// last batches only (64 MiB written back at once waited about 30 ms here).
    func startWriteback(of hashes: [String]) {
        var runs: [(member: Int, start: Int, end: Int)] = []
        for hash in hashes {
            for place in places[hash] ?? [] { runs.append((place.member, place.offset, place.offset + place.length)) }
        }
        runs.sort { ($0.member, $0.start) < ($1.member, $1.start) }
        var merged: [(member: Int, start: Int, end: Int)] = []
        for run in runs {
            if let last = merged.last, last.member == run.member, last.end >= run.start {
                merged[merged.count - 1].end = max(last.end, run.end)
            } else {
                merged.append(run)
            }
        }
        for run in merged where run.end - run.start >= 1 << 20 {
            ubq_start_writeback(descriptors[run.member], Int64(run.start), Int64(run.end - run.start))
        }
    }

    /// Makes every member durable (a package's folders are synced by the safe save).
    func finish() throws {
        for fd in descriptors {
            guard fsync(fd) == 0 else { throw Self.failure("fsync", root) }
        }
    }

    /// Closes the members.
    func close() {
        for fd in descriptors { Glibc.close(fd) }
    }

    static func failure(_ operation: String, _ url: URL) -> ContainerSyncError {
        ContainerSyncError("could not \(operation) the download at \(url.path): \(String(cString: strerror(errno)))")
    }
}
