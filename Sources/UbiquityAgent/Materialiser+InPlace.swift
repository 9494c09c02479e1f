import Foundation
import Logging
import UbiquityCoordination
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync
#if canImport(Glibc)
import Glibc
#endif

// A small edit of a large file, written into the local copy in place (docs/SyncProtocol.md,
// "Downloads"): a 1-byte edit of a 64 MiB file changes a chunk of it, and the staged way copies
// the other 64 MiB into a new file and waits for them to reach the disk (about 60 ms here)
// before the rename. When the local copy is exactly the revision the edit was made from — the
// same size, unchanged since it was recorded, one name for it (no hard link shares the write) —
// and at most ``inPlaceBytes`` change, the changed ranges are written where they are instead,
// under a coordinated write, after a journal of them (the old bytes and the new) has reached
// the disk. A crash between the two leaves the journal: when the container opens again, a write
// the store did not record is undone (the file is the old revision again, and the next round
// downloads the new one); one it recorded is kept.
extension Materialiser {
    /// The most bytes an edit may change for it to be written in place.
    static let inPlaceBytes = 1 << 20

    /// Files smaller than this are staged: copying them costs little.
    static let inPlaceMinimumBytes: Int64 = 4 << 20

    /// What a write in place came to.
    enum InPlaceOutcome {
        /// It does not apply here: the download is staged as usual.
        case staged
        /// Written; the file's record (not yet stored) and the journal to remove once it is.
        case placed(AgentStore.File, journal: URL)
        /// The local copy changed since the scan: the local edit stays (as a staged download would).
        case gaveWay
    }

    /// The journal of a write in place: where, what the bytes were and what they become.
    struct InPlaceJournal: Codable {
        /// This format (1).
        static let currentFormat = 1
        var format: Int
        /// The file, relative to the container's folder.
        var path: String
        /// The content token of the revision the write makes.
        var after: String
        var writes: [Write]

        struct Write: Codable {
            var offset: Int
            var old: Data
            var new: Data
        }
    }

    /// The prefix of a journal's name (at the container's top; scans skip `.ubiquity-` names).
    static let inPlaceJournalPrefix = ".ubiquity-inplace-"

    /// The prefix of the journals of the engine keeping `storeKey` (a container, or a share in
    /// it: engines of one folder settle only their own).
    static func inPlaceJournalPrefix(of storeKey: String) -> String {
        inPlaceJournalPrefix + String(ContentToken(storeKey).description.prefix(12)) + "-"
    }

    /// Writes the contents `members` of `download` into its local copy in place, if that
    /// applies (see above).
    func writeInPlace(_ download: Download, revision: String, savedBy: String, members: [LocalMember], in sync: isolated ContainerSync) async throws -> InPlaceOutcome {
        guard download.kind == .file, let previous = download.previous, previous.path == download.path, previous.fingerprint.kind == .file,
              previous.fingerprint.size >= Self.inPlaceMinimumBytes, members.count == 1, members[0].path.isEmpty,
              let known = sync.localContents[previous.content], known.count == 1, known[0].path.isEmpty,
              sync.prefetches.running[download.item] == nil else { return .staged } // (a prefetch's file is taken up staged)
        let old = known[0].chunks, new = members[0].chunks
        let size = new.reduce(0) { $0 + $1.length }
        guard size == old.reduce(0, { $0 + $1.length }), Int64(size) == previous.fingerprint.size else { return .staged }
        // The chunks that differ where they are; each with the old chunk of the same place, if
        // there is one (a patch's base).
        var oldAt: [Int: ContentChunk] = [:]
        for chunk in old { oldAt[chunk.offset] = chunk }
        let changed = new.filter { chunk in oldAt[chunk.offset].map { $0.hash != chunk.hash || $0.length != chunk.length } ?? true }
        guard !changed.isEmpty, changed.reduce(0, { $0 + $1.length }) <= Self.inPlaceBytes else { return .staged }

        let url = sync.root.appendingPathComponent(download.path)
        // The old bytes of each changed range, read from the copy as recorded (one name for it).
        let fd = open(url.path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return .staged }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0, status.st_nlink == 1, LocalScanner.fingerprint(descriptor: fd) == previous.fingerprint else { return .staged }
        var oldBytes: [Int: [UInt8]] = [:]
        for chunk in changed {
            var bytes = [UInt8](repeating: 0, count: chunk.length)
            let read = bytes.withUnsafeMutableBytes { SystemCall.readFully(fd, into: $0, at: Int64(chunk.offset)) }
            guard read == chunk.length else { return .staged }
            oldBytes[chunk.offset] = bytes
        }
        guard LocalScanner.fingerprint(descriptor: fd) == previous.fingerprint else { return .staged }

        // The new bytes: patches of the old chunks in place (plaintext), the rest whole.
        var newBytes: [String: [UInt8]] = [:]
        if !sync.codec.sealed {
            var wanted: [ChunkPatchRequest.Wanted] = [], bases: [String: [UInt8]] = [:]
            for chunk in changed {
                guard let base = oldAt[chunk.offset], let bytes = oldBytes[chunk.offset], base.length == chunk.length,
                      bytes.withUnsafeBytes({ sync.codec.recognises($0, as: base.hash) }), bases[base.hash] == nil else { continue }
                bases[base.hash] = bytes
                wanted.append(ChunkPatchRequest.Wanted(hash: chunk.hash, base: base.hash))
            }
            if !wanted.isEmpty, let patches = try? await sync.client.downloadPatches(wanted) {
                for patch in patches {
                    if let base = bases[patch.base], let made = patch.made(from: base) { newBytes[patch.hash] = made }
                }
            }
        }
        let rest = Array(Set(changed.map(\.hash)).subtracting(newBytes.keys))
        if !rest.isEmpty {
            // (A chunk the server keeps as a sealed patch is made from the old chunk in place.)
            var localBases: [String: [UInt8]] = [:]
            for chunk in changed {
                if let base = oldAt[chunk.offset], let bytes = oldBytes[chunk.offset], base.length == bytes.count { localBases[base.hash] = bytes }
            }
            let codec = sync.codec, prints = sync.prints, bases = localBases
            var fetched: [String: [UInt8]] = [:]
            _ = try await sync.client.download(rest, codec: codec, localBase: { hash in
                bases[hash].flatMap { bytes in bytes.withUnsafeBytes { codec.recognises($0, as: hash) } ? bytes : nil }
            }) { hash, bytes in
                if codec.sealsPatches { prints.note(bytes, as: hash) } // (its next edit here goes as a sealed patch of it)
                fetched[hash] = Array(bytes)
            }
            newBytes.merge(fetched) { first, _ in first }
        }
        if !sync.codec.sealed { for (hash, bytes) in newBytes { sync.signatures.note(bytes, as: hash) } } // (an edit here next goes as a patch of them)
        var journal = InPlaceJournal(format: InPlaceJournal.currentFormat, path: download.path, after: download.content.description, writes: [])
        for chunk in changed {
            guard let bytes = newBytes[chunk.hash], bytes.count == chunk.length, let before = oldBytes[chunk.offset] else { return .staged }
            journal.writes.append(.init(offset: chunk.offset, old: Data(before), new: Data(bytes)))
        }

        // The journal reaches the disk before the file is touched.
        let journalURL = sync.root.appendingPathComponent(Self.inPlaceJournalPrefix(of: sync.storeKey) + UUID().uuidString.prefix(12).lowercased())
        try Self.writeDurably(try JSONEncoder().encode(journal), to: journalURL)
        let writes = journal.writes, scanner = sync.scanner, path = download.path
        let originator = sync.otherPerson(of: download.item)
        let written: LocalFingerprint?
        do {
            written = try await sync.coordinated {
                try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: []) { url -> LocalFingerprint? in
                    // Saved over since the scan: the local edit stays (the next round sends it).
                    guard scanner.fingerprint(of: path) == previous.fingerprint else { return nil }
                    let fd = open(url.path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
                    guard fd >= 0 else { throw ContainerSyncError("could not open \(path) to write a download in place: \(String(cString: strerror(errno)))") }
                    defer { close(fd) }
                    do {
                        try Self.write(writes.map { ($0.offset, $0.new) }, to: fd, path: path)
                    } catch {
                        try? Self.write(writes.map { ($0.offset, $0.old) }, to: fd, path: path) // (undone: as it was)
                        throw error
                    }
                    NSFileVersion.recordSavingComputer(savedBy, ofItemAt: url.path)
                    NSFileVersion.recordOriginator(originator, ofItemAt: url.path)
                    return scanner.fingerprint(of: path)
                }
            }
        } catch {
            try? FileManager.default.removeItem(at: journalURL)
            throw error
        }
        guard let written else {
            try? FileManager.default.removeItem(at: journalURL)
            sync.logger.debug("a download gave way to the file changed here", metadata: ["path": "\(path)", "item": "\(download.item)", "revision": "\(revision)"])
            return .gaveWay
        }
        sync.localContents[download.content] = members
        guard let file = placed(download, revision: revision, print: written, in: sync) else { return .gaveWay }
        return .placed(file, journal: journalURL)
    }

    /// Writes `ranges` (offset, bytes) into `fd` and makes them durable.
    static func write(_ ranges: [(Int, Data)], to fd: Int32, path: String) throws {
        for (offset, bytes) in ranges {
            let wrote = bytes.withUnsafeBytes { SystemCall.writeAll(fd, $0, at: Int64(offset)) }
            guard wrote == bytes.count else { throw ContainerSyncError("could not write a download into \(path) in place: \(String(cString: strerror(errno)))") }
        }
        guard fdatasync(fd) == 0 else { throw ContainerSyncError("could not flush a download written into \(path) in place: \(String(cString: strerror(errno)))") }
    }

    /// Writes `data` to a new file at `url`, flushed, with its folder.
    static func writeDurably(_ data: Data, to url: URL) throws {
        let fd = open(url.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ContainerSyncError("could not write \(url.lastPathComponent): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let wrote = data.withUnsafeBytes { SystemCall.writeAll(fd, $0, at: 0) }
        guard wrote == data.count, fsync(fd) == 0 else {
            try? FileManager.default.removeItem(at: url)
            throw ContainerSyncError("could not write \(url.lastPathComponent): \(String(cString: strerror(errno)))")
        }
        try POSIX.sync(url.deletingLastPathComponent().path, directory: true)
    }

    /// Settles the writes in place a killed agent left (their journals at the container's top):
    /// one the store recorded (`files`: its records now) stays; one it did not is undone — each
    /// range that holds the old bytes, the new ones or a mix of the two by 4 KiB pages gets its
    /// old bytes back (anything else there was written since, and stays). The journal goes.
    /// `storeKey`: the engine's (only its journals are its own).
    static func settleWritesInPlace(in root: URL, storeKey: String, files: LocalFiles, logger: Logger) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []
        for name in names where name.hasPrefix(inPlaceJournalPrefix(of: storeKey)) {
            let journalURL = root.appendingPathComponent(name)
            guard let data = try? Data(contentsOf: journalURL), let journal = try? JSONDecoder().decode(InPlaceJournal.self, from: data),
                  journal.format == InPlaceJournal.currentFormat else {
                logger.warning("a journal of a write in place does not read: left as it is", metadata: ["file": "\(name)"])
                continue
            }
            if files[journal.path]?.content.description != journal.after {
                let fd = open(root.appendingPathComponent(journal.path).path, O_RDWR | O_NOFOLLOW | O_CLOEXEC)
                if fd >= 0 {
                    let ours = journal.writes.filter { Self.holdsOnly(fd, $0) }.map { ($0.offset, $0.old) }
                    do {
                        try write(ours, to: fd, path: journal.path)
                        logger.info("a download written in place when the agent stopped was undone", metadata: ["ranges": "\(ours.count)"])
                    } catch {
                        logger.error("a download written in place when the agent stopped could not be undone", metadata: ["error": "\(error)"])
                        close(fd)
                        continue // (tried again at the next start)
                    }
                    close(fd)
                }
            }
            try? FileManager.default.removeItem(at: journalURL)
        }
    }

    /// Whether the range `write` names holds its old bytes, its new ones, or a mix of them by
    /// 4 KiB pages (what a write cut short leaves).
    static func holdsOnly(_ fd: Int32, _ write: InPlaceJournal.Write) -> Bool {
        var now = [UInt8](repeating: 0, count: write.old.count)
        guard now.withUnsafeMutableBytes({ SystemCall.readFully(fd, into: $0, at: Int64(write.offset)) }) == now.count else { return false }
        let old = [UInt8](write.old), new = [UInt8](write.new), page = 4096
        var start = 0
        while start < now.count {
            // (Pages of the file, not of the range: a write is cut at the file's pages.)
            let end = min(now.count, ((write.offset + start) / page + 1) * page - write.offset)
            let piece = now[start..<end]
            guard piece.elementsEqual(old[start..<end]) || piece.elementsEqual(new[start..<end]) else { return false }
            start = end
        }
        return true
    }
}
