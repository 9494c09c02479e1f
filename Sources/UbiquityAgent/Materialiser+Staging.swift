import CUbiquitySystem
import Foundation
import Logging
import UbiquityClient
import UbiquityCoordination
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync
#if canImport(Glibc)
import Glibc
#endif

// Staging a download: where its chunks come from (the previous local copy, copied in the
// kernel when it is as recorded, else read and checked; patches of the chunks they replace; the
// rest from the server), written into a staging file beside where it goes, made durable.
extension Materialiser {
    /// A name for a staged download (`.ubiquity-download-…`, which scans skip).
    static func stagingName() -> String { ".ubiquity-download-" + UUID().uuidString.prefix(8).lowercased() }

    /// Removes a staged download left behind (one moved into place is gone already).
    func removeStaged(_ staged: URL, in sync: isolated ContainerSync) {
        do {
            try FileManager.default.removeItem(at: staged)
        } catch CocoaError.fileNoSuchFile {
            // moved into place: nothing left
        } catch {
            sync.logger.warning("cannot remove a staged download", metadata: ["path": "\(staged.path)", "error": "\(error)"])
        }
    }

    /// The chunks of a local flat file as recorded (cut again if not remembered; nil if it no
    /// longer has the recorded contents).
    func localChunks(of file: AgentStore.File, in sync: isolated ContainerSync) throws -> [ContentChunk]? {
        if let known = sync.localContents[file.content]?.first { return known.chunks }
        let url = sync.root.appendingPathComponent(file.path)
        // Unreadable counts as changed: the caller then takes the whole list from the server.
        guard let chunks = try? sync.codec(at: file.path).chunks(ofFileAt: url), LocalContents.token(chunks.map(\.reference)) == file.content else { return nil }
        sync.localContents[file.content] = [LocalMember(path: "", chunks: chunks)]
        return chunks
    }

    /// Writes the item's contents into a staging file (or, for a package, a staging folder)
    /// next to where it goes, named `.ubiquity-download-…` (which scans skip), and returns its
    /// URL. Each chunk comes from the previous local copy where it has it (checked), else from
    /// the server (checked), and is written where it belongs as it arrives: nothing is held
    /// in memory but the batches in flight. Everything staged is `fsync`ed; on failure the
    /// staging goes.
    func stage(_ members: [LocalMember], kind: ItemKind, of item: String, name: String, reusing previous: AgentStore.File?,
               given: [String: [UInt8]] = [:], in sync: isolated ContainerSync) async throws -> URL {
        var local: [String: (url: URL, chunk: ContentChunk)] = [:], known: [LocalMember] = []
        if let previous {
            let url = sync.root.appendingPathComponent(previous.path)
            let scanner = sync.scanner
            // The previous copy only saves downloading what it has: unreadable, every chunk comes from the server.
            known = sync.localContents[previous.content]
                ?? (try? LocalContents.cut(url, kind: previous.fingerprint.kind, scanner: scanner, relative: previous.path, codec: sync.codec(at: previous.path))) ?? []
            for member in known {
                for chunk in member.chunks { local[chunk.hash] = (member.path.isEmpty ? url : url.appendingPathComponent(member.path), chunk) }
            }
        }
        let folder = sync.root.appendingPathComponent(LocalContents.folder(of: name))
        let staged = folder.appendingPathComponent(Self.stagingName())
        // A large file's download cut short is kept (`.ubiquity-partial-…`, named for the item
        // and these contents) and taken up again by the next attempt, after a restart too: what
        // it holds is checked chunk by chunk, and only the rest is fetched.
        let partial = Self.partial(of: item, members: members, kind: kind).map { folder.appendingPathComponent($0) }
        var resumed = partial.map { rename($0.path, staged.path) == 0 } ?? false
        // An incoming revision fetched ahead of its commit (ContainerSync+Incoming) waits at the
        // container's top: taken up, unread when it is as its fetch left it.
        var fetchedAhead = false
        if kind == .file, members.count == 1 {
            await sync.settlePrefetch(of: item, members: members)
            let name = Self.partialName(of: item, members: members), ahead = sync.root.appendingPathComponent(name)
            let recorded = sync.prefetches.fetched.removeValue(forKey: name)
            if !resumed, FileManager.default.fileExists(atPath: ahead.path) {
                let fd = open(ahead.path, O_RDONLY | O_CLOEXEC)
                let now = fd >= 0 ? LocalScanner.fingerprint(descriptor: fd) : nil
                if fd >= 0 { close(fd) }
                resumed = rename(ahead.path, staged.path) == 0
                fetchedAhead = resumed && recorded != nil && now == recorded
            }
        }
        var done = false
        defer {
            if !done {
                if let partial, rename(staged.path, partial.path) == 0 {
                    sync.logger.info("a large download cut short is kept for the next attempt", metadata: ["container": "\(sync.container)", "item": "\(item)"])
                } else {
                    removeStaged(staged, in: sync)
                }
            }
        }
        let writer = try StagedWriter(at: staged, members: members, kind: kind, reopening: resumed)
        defer { writer.close() }

        defer { sync.transfers[item] = nil }
        sync.transfers[item] = ContainerSync.Transfer(downloading: true, done: 0, total: members.reduce(0) { $0 + $1.chunks.reduce(0) { $0 + Int64($1.length) } })
        var needed: [ContentChunk] = [], handled = Set<String>()
        if let previous, kind == .file, let known = sync.localContents[previous.content], known.count == 1, known[0].path.isEmpty {
            // A file whose chunks are known here, unchanged since: what the new contents share
            // with it is copied in the kernel, unhashed (the verifying way below if not).
            handled = try Self.copyUnchanged(from: sync.root.appendingPathComponent(previous.path), recorded: previous.fingerprint, chunks: known[0].chunks, into: writer)
            if !handled.isEmpty {
                sync.transfers[item]?.done += Int64(members.flatMap(\.chunks).reduce(0) { $0 + (handled.contains($1.hash) ? $1.length : 0) })
            }
        }
        if resumed {
            // What the download cut short brought, where each chunk goes, if it is that chunk
            // (every chunk, unread, of a file fetched ahead whole and untouched since).
            let kept = fetchedAhead ? Set(members[0].chunks.map(\.hash)).subtracting(handled)
                : Self.chunksHeld(by: staged, of: members, codec: sync.codec, skipping: handled)
            handled.formUnion(kept)
            sync.transfers[item]?.done += Int64(members.flatMap(\.chunks).reduce(0) { $0 + (kept.contains($1.hash) ? $1.length : 0) })
            sync.logger.info("a large download cut short goes on", metadata: ["container": "\(sync.container)", "item": "\(item)", "chunksKept": "\(kept.count)"])
        }
        for chunk in members.flatMap(\.chunks) where handled.insert(chunk.hash).inserted {
            if let bytes = given[chunk.hash] {
                try writer.write(bytes, hash: chunk.hash)
                sync.transfers[item]?.done += Int64(writer.occurrences(of: chunk.hash) * chunk.length)
                continue
            }
            // A local piece that cannot be read (or no longer hashes right) comes from the server.
            if let (url, piece) = local[chunk.hash], let read = Self.read(piece, of: url), read.withUnsafeBytes({ sync.codec.recognises($0, as: chunk.hash) }) {
                try writer.write(read, hash: chunk.hash)
                sync.transfers[item]?.done += Int64(writer.occurrences(of: chunk.hash) * chunk.length)
                continue
            }
            needed.append(chunk)
        }
        needed = try await patchIn(needed, of: members, changing: known, local: local, into: writer, item: item, in: sync)
        // The rest from the server, in batches of about `transferBatchBytes`, a few at a time,
        // each chunk checked (by the client) and written as its batch arrives.
        // (Each with the length of its answer, which is gathered into a buffer of that size
        // from the start rather than grown, and copied, as it fills.)
        var batches: [(hashes: [String], answerBytes: Int)] = [], current: [String] = [], currentBytes = 0
        for chunk in needed {
            if !current.isEmpty && (currentBytes + chunk.length > ContainerSync.transferBatchBytes || current.count == ChunkBatch.maximumCount) {
                batches.append((current, currentBytes + current.count * ChunkBatch.framing))
                current = []
                currentBytes = 0
            }
            current.append(chunk.hash)
            currentBytes += chunk.length
        }
        if !current.isEmpty { batches.append((current, currentBytes + current.count * ChunkBatch.framing)) }
        // Each batch written where it goes as it arrives, each chunk checked first (by the
        // client), straight from the answer; the answers' buffers used again by later batches
        // (new large buffers cost a page fault every 4 KiB).
        let client = sync.client, codec = sync.codec, localChunks = local, prints = sync.prints
        // A chunk the server keeps as a sealed patch is made from this device's copy of the
        // chunk it changes, when the local copy has it (else that one is fetched too).
        let localBase: @Sendable (String) -> [UInt8]? = { base in
            guard codec.opensSealed, let (url, piece) = localChunks[base], let bytes = Self.read(piece, of: url),
                  bytes.withUnsafeBytes({ codec.recognises($0, as: base) }) else { return nil }
            return bytes
        }
        let buffers = TransferBuffers()
        try await withThrowingTaskGroup(of: Int64.self) { group in
            var inFlight = 0
            var queued = batches.makeIterator()
            while true {
                while inFlight < ContainerSync.transferConcurrency, let (hashes, answerBytes) = queued.next() {
                    group.addTask {
                        var written: Int64 = 0
                        do {
                            let used = try await client.download(hashes, codec: codec, accumulation: buffers.take(capacity: answerBytes), localBase: localBase) { hash, bytes in
                                // Its next edit, here, goes as a sealed patch made against these.
                                if codec.sealsPatches { prints.note(bytes, as: hash) }
                                try writer.write(bytes, hash: hash)
                                written += Int64(writer.occurrences(of: hash) * bytes.count)
                            }
                            buffers.give(consume used)
                            writer.startWriteback(of: hashes)
                            return written
                        } catch let error as SyncClientError where error.code == "hashMismatch" {
                            throw SyncClientError(status: 200, code: "hashMismatch", message: "\(error.message) (\(name))")
                        }
                    }
                    inFlight += 1
                }
                guard let fetched = try await group.next() else { break }
                inFlight -= 1
                sync.transfers[item]?.done += fetched
            }
        }
        try writer.finish()
        done = true
        return staged
    }

    /// Downloads at least this large are kept when cut short, and taken up again.
    static let resumableBytes = 16 << 20

    /// The name a flat file's download cut short is kept under (nil: not kept — a package, or
    /// contents under ``resumableBytes``): `.ubiquity-partial-` and a digest of the item and its
    /// contents' chunk list, so only a download of the very same contents takes it up.
    static func partial(of item: String, members: [LocalMember], kind: ItemKind) -> String? {
        guard kind == .file, members.count == 1, members[0].path.isEmpty, members[0].chunks.reduce(0, { $0 + $1.length }) >= resumableBytes else { return nil }
        return partialName(of: item, members: members)
    }

    /// The name of a flat file's partial contents (``partial(of:members:kind:)``, and a
    /// revision fetched ahead of its commit), whatever their size.
    static func partialName(of item: String, members: [LocalMember]) -> String {
        let named = ContentToken("partial\n\(item)\n\(ContentToken.of(members.first?.chunks.map(\.reference) ?? []))")
        return ".ubiquity-partial-" + String(named.description.prefix(24))
    }

    /// The chunks of `members` (one flat file) that the staged file at `url` holds where they
    /// go — each read back and checked against its name — leaving out `skipping`.
    static func chunksHeld(by url: URL, of members: [LocalMember], codec: ChunkCodec, skipping: Set<String>) -> Set<String> {
        guard let handle = try? FileHandle(forReadingFrom: url) else { return [] }
        defer { try? handle.close() } // read-only: closing cannot lose anything
        var held = Set<String>(), checked = Set<String>()
        for chunk in members[0].chunks where !skipping.contains(chunk.hash) && checked.insert(chunk.hash).inserted {
            guard (try? handle.seek(toOffset: UInt64(chunk.offset))) != nil, let data = try? handle.read(upToCount: chunk.length), data.count == chunk.length else { continue }
            // (Every place the chunk goes must hold it: a chunk repeated is written everywhere at once.)
            if data.withUnsafeBytes({ codec.recognises($0, as: chunk.hash) }) { held.insert(chunk.hash) }
        }
        // A chunk counts only if each of its places holds it.
        let places = Dictionary(grouping: members[0].chunks.filter { held.contains($0.hash) }, by: \.hash)
        for (hash, chunks) in places where chunks.count > 1 {
            for chunk in chunks.dropFirst() {
                guard (try? handle.seek(toOffset: UInt64(chunk.offset))) != nil, let data = try? handle.read(upToCount: chunk.length),
                      data.withUnsafeBytes({ codec.recognises($0, as: hash) }) else {
                    held.remove(hash)
                    break
                }
            }
        }
        return held
    }

    /// The bytes of `piece` of the file at `url`, or nil if they cannot be read (unchecked).
    static func read(_ piece: ContentChunk, of url: URL) -> [UInt8]? {
        guard let handle = try? FileHandle(forReadingFrom: url) else { return nil }
        defer { try? handle.close() } // read-only: closing cannot lose anything
        guard (try? handle.seek(toOffset: UInt64(piece.offset))) != nil, let data = try? handle.read(upToCount: piece.length) else { return nil }
        return [UInt8](data)
    }

    /// Of the chunks `needed` of the new contents `members`, writes into `writer` those that
    /// change a chunk of the local copy (`previous`, its chunks' places in `local`), made from
    /// patches of those the server sends (``ChunkPartners``; a 1-byte edit: a few hundred
    /// bytes, not a whole chunk of 128 KiB), each checked against its hash. Returns the chunks still needed
    /// (those without such a partner, and any patch that did not make its chunk).
    func patchIn(_ needed: [ContentChunk], of members: [LocalMember], changing previous: [LocalMember], local: [String: (url: URL, chunk: ContentChunk)],
                 into writer: StagedWriter, item: String, in sync: isolated ContainerSync) async throws -> [ContentChunk] {
        // (Sealed, the server cannot make a patch: the chunks come whole.)
        guard !needed.isEmpty, !previous.isEmpty, !sync.codec.sealed else { return needed }
        let old = Dictionary(previous.map { ($0.path, $0.chunks) }, uniquingKeysWith: { first, _ in first })
        var partners: [String: String] = [:]
        for member in members {
            guard let before = old[member.path] else { continue }
            partners.merge(ChunkPartners.of(old: before.map(\.reference), new: member.chunks.map(\.reference))) { first, _ in first }
        }
        var asked = Set<String>()
        let wanted = needed.compactMap { chunk in
            partners[chunk.hash].flatMap { local[$0] != nil && asked.insert(chunk.hash).inserted ? ChunkPatchRequest.Wanted(hash: chunk.hash, base: $0) : nil }
        }
        guard !wanted.isEmpty else { return needed }
        let patches: [ChunkPatch]
        do {
            patches = try await sync.client.downloadPatches(wanted)
        } catch let error as SyncClientError where error.status != 0 {
            sync.logger.debug("chunk patches refused: the chunks come whole", metadata: ["container": "\(sync.container)", "error": "\(error)"])
            return needed
        }
        var made = Set<String>()
        for patch in patches {
            // A base that cannot be read, or a patch that does not make its chunk: the chunk comes whole.
            guard let (url, piece) = local[patch.base], let base = Self.read(piece, of: url), let bytes = patch.made(from: base) else { continue }
            sync.signatures.note(bytes, as: patch.hash) // (an edit here next goes as a patch of it)
            try writer.write(bytes, hash: patch.hash)
            sync.transfers[item]?.done += Int64(writer.occurrences(of: patch.hash) * bytes.count)
            made.insert(patch.hash)
        }
        return needed.filter { !made.contains($0.hash) }
    }

    /// Copies into `writer` the chunks it shares with the local flat file at `url` (whose
    /// chunks are `chunks`), in the kernel and without hashing them, if the file is as it was
    /// recorded (`recorded`) — the same inode, size and modification and status-change times,
    /// before and after the copy (any write changes the last) — the trust the scanner puts in
    /// a fingerprint when it takes a file as unchanged. Returns the hashes copied; none when
    /// the file changed or cannot be opened (then every chunk goes the verifying way).
    static func copyUnchanged(from url: URL, recorded: LocalFingerprint, chunks: [ContentChunk], into writer: StagedWriter) throws -> Set<String> {
        let fd = open(url.path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        func intact() -> Bool { LocalScanner.fingerprint(descriptor: fd) == recorded }
        guard intact() else { return [] }
        var pieces: [String: ContentChunk] = [:]
        for chunk in chunks where pieces[chunk.hash] == nil { pieces[chunk.hash] = chunk }
        let copied = try writer.copy(from: fd, pieces: pieces)
        // Written to while copied: what was copied is written again the verifying way.
        return intact() ? copied : []
    }
}


/// A large file about to be replaced, held open so that its blocks are freed when that
/// descriptor closes — off the round, on a thread of its own — and not inside the rename that
/// replaces it (ext4 took 30–40 ms in the rename over a 64 MiB file, while the new contents
/// waited to be seen).
struct ReplacedFile: Sendable {
    /// Files smaller than this are freed quickly enough where they are.
    static let threshold: Int64 = 4 << 20
    /// Where replaced files are closed (one thread for the process, asleep while none is).
    private static let closer = WorkThread(name: "ubq-close")

    private let descriptor: Int32

    /// Holds the file at `path` if it is at least ``threshold`` bytes (`size`, as last seen).
    init?(holding path: String, size: Int64) {
        guard size >= Self.threshold else { return nil }
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil } // gone or unreadable: nothing to hold, the rename frees it
        descriptor = fd
    }

    /// Lets the replaced file go, in the background.
    func release() {
        let fd = descriptor
        Self.closer.async { close(fd) }
    }
}

extension Materialiser {
    /// Downloads a killed agent left half-written (`.ubiquity-download-…`: scans skip them, and
    /// nothing else uses them) are removed when the container is opened again — and large ones
    /// kept to be taken up again (`.ubiquity-partial-…`) once a day has passed without that.
    static let partialDownloadAge: TimeInterval = 86_400

    /// Removes what ``partialDownloadAge`` says.
    static func removeStagedDownloads(in folder: URL, border: SyncBorder = SyncBorder(), logger: Logger) {
        guard let walker = FileManager.default.enumerator(atPath: folder.path) else { return }
        while let relative = walker.nextObject() as? String {
            guard border.includes(relative) else {
                walker.skipDescendants() // another engine's, which may be downloading there
                continue
            }
            let name = (relative as NSString).lastPathComponent
            if name.hasPrefix(".ubiquity-partial-") {
                let changed = (walker.fileAttributes?[.modificationDate] as? Date) ?? .distantPast
                guard Date().timeIntervalSince(changed) > partialDownloadAge else { continue }
            } else {
                guard name.hasPrefix(".ubiquity-download-") else { continue }
            }
            walker.skipDescendants()
            do {
                try FileManager.default.removeItem(at: folder.appendingPathComponent(relative))
                logger.info("removed a download left unfinished", metadata: ["path": "\(relative)"])
            } catch {
                logger.warning("cannot remove a download left unfinished", metadata: ["path": "\(relative)", "error": "\(error)"])
            }
        }
    }
}
