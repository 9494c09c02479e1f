import Foundation
import Synchronization
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

/// Wakes one waiting task, or the next one to wait (a wake-up given while none waits is kept).
final class WakeUp: Sendable {
    private let state = Mutex<(pending: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    /// Wakes the waiting task (or the next one to wait).
    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.pending = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns when woken, or after `limit`.
    func wait(upTo limit: Duration) async {
        let timer = Task { [weak self] in
            // (Cancelled — woken before — it says nothing: a wake-up from it would be kept and
            // end the next wait at once, and waits in a row would spin.)
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            self?.signal()
        }
        defer { timer.cancel() }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.pending {
                    state.pending = false
                    return true
                }
                state.waiter = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }
}

/// The incoming revisions this device fetches ahead of their commits (``ContainerSync``).
struct IncomingPrefetches {
    /// One announced revision being fetched into `.ubiquity-partial-…` at the container's top.
    final class Prefetch: @unchecked Sendable { // its variables are the container's actor's
        let item: String
        /// The partial file's name (``Materialiser/partialName(of:members:)``).
        let name: String
        let members: [LocalMember]
        /// Until when its device keeps it announced (it goes on while told more landed).
        var expires: Double
        /// Withdrawn (committed or given up), or this device's download of the item began.
        var withdrawn = false
        /// This device's download of the item began: it takes the file up.
        var takenOver = false
        var task: Task<Void, Never>?
        let wakeUp = WakeUp()

        init(item: String, name: String, members: [LocalMember], expires: Double) {
            self.item = item
            self.name = name
            self.members = members
            self.expires = expires
        }
    }

    /// Whether this device announces its large uploads and fetches the others' ahead
    /// (``AgentConfiguration/streamUploads``).
    var streams = true
    var running: [String: Prefetch] = [:]
    /// How long after an incoming revision is withdrawn its commit may take to be read here
    /// before what was fetched of it goes (a commit and its withdrawal are pushed apart).
    var commitGrace: Duration = .seconds(15)
    /// How long after that a committed revision's file waits for its download to take it up.
    var takeUpGrace: Duration = .seconds(60)
    /// Partial files fetched whole, with their fingerprints then: taken up unread if unchanged.
    var fetched: [String: LocalFingerprint] = [:]
    var looking = false, lookAgain = false
}

// Incoming revisions, the fetching side (docs/SyncProtocol.md, "Incoming revisions"): a file
// another device is uploading is fetched as its chunks land, into a partial file at the
// container's top; when its commit comes, the download takes that file up (Materialiser's
// staging) and only places it. Nothing is shown before the commit; a revision withdrawn without
// a commit, or replaced by another, leaves nothing behind.
extension ContainerSync {
    /// Files larger than this are fetched ahead of their commits (what the download fetches
    /// in one batch takes little longer after it).
    static let prefetchedBytes = transferBatchBytes

    /// How long a prefetch waits before it asks again for chunks not there yet (unless told
    /// sooner that more landed): the server answers from chunks as they land, not only from
    /// whole stored batches.
    static let prefetchPatience: Duration = .milliseconds(250)

    /// Reads the container's incoming revisions (a push said they changed) and fetches ahead
    /// those this device would download at their commit; tells the running ones that more
    /// landed, and stops those no longer announced.
    package func noteIncoming() async {
        guard share == nil, prefetches.streams else { return }
        if prefetches.looking {
            prefetches.lookAgain = true
            return
        }
        prefetches.looking = true
        defer { prefetches.looking = false }
        repeat {
            prefetches.lookAgain = false
            let listed: [IncomingRevision]
            do {
                listed = try await client.incoming(container: container)
            } catch {
                logger.debug("cannot read incoming revisions", metadata: ["container": "\(container)", "error": "\(error)"])
                return
            }
            var announced = Set<String>()
            for entry in listed {
                guard let members = prefetchedMembers(of: entry) else { continue }
                announced.insert(entry.item)
                let name = Materialiser.partialName(of: entry.item, members: members)
                if let running = prefetches.running[entry.item] {
                    if running.name == name {
                        running.expires = entry.expires
                        running.wakeUp.signal()
                        continue
                    }
                    await stopPrefetch(of: entry.item, keeping: false) // another revision of it comes instead
                }
                let prefetch = IncomingPrefetches.Prefetch(item: entry.item, name: name, members: members, expires: entry.expires)
                prefetches.running[entry.item] = prefetch
                prefetch.task = Task { await self.prefetch(prefetch) }
            }
            for (item, running) in prefetches.running where !announced.contains(item) {
                running.withdrawn = true
                running.wakeUp.signal()
            }
        } while prefetches.lookAgain
    }

    /// The contents of an announced revision, if this device fetches it ahead: a flat file of
    /// at least ``prefetchedBytes`` that it would download at the commit (it is greedy, holds
    /// the item, or was asked for it), and whose record (if sealed) opens here.
    func prefetchedMembers(of entry: IncomingRevision) -> [LocalMember]? {
        let update = entry.update
        guard update.kind == .file, update.deleted != true, greedy || files.file(of: entry.item) != nil || requested.contains(entry.item) else { return nil }
        var state = ItemState(id: entry.item, revision: "incoming", name: update.name, parent: update.parent, kind: .file, size: 0,
                              modificationDate: update.modificationDate, type: update.type, deleted: false, uploaded: false,
                              deviceName: entry.deviceName, sequence: 0, manifest: update.manifest, conflicts: [])
        state.record = update.record
        guard let opened = try? self.opened(state) else { return nil }
        let members = LocalContents.members(opened.manifest, kind: .file)
        guard members.count == 1, members[0].chunks.reduce(0, { $0 + $1.length }) > Self.prefetchedBytes,
              files.file(of: entry.item)?.content != LocalContents.token(opened.manifest, kind: .file) else { return nil }
        return members
    }

    /// Fetches the announced revision's chunks as they land (``fetchAhead(_:)``), then waits
    /// for its commit: the download takes the file up. Withdrawn or lapsed without a commit
    /// (after ``IncomingPrefetches/commitGrace`` for the commit's change to be read), the file goes.
    func prefetch(_ prefetch: IncomingPrefetches.Prefetch) async {
        let url = root.appendingPathComponent(prefetch.name)
        await fetchAhead(prefetch)
        while !Task.isCancelled && !prefetch.takenOver && !prefetch.withdrawn && Date().timeIntervalSince1970 <= prefetch.expires {
            await prefetch.wakeUp.wait(upTo: Self.prefetchPatience)
        }
        // Withdrawn or lapsed: committed, the download of it (soon) takes the file up; else it goes.
        let token = Self.token(of: prefetch), end = ContinuousClock.now + prefetches.commitGrace
        var committed = false
        while !Task.isCancelled && !prefetch.takenOver {
            committed = committed || state.persisted.remote[prefetch.item]?.content == token
            if ContinuousClock.now >= end + (committed ? prefetches.takeUpGrace : .zero) { break }
            await prefetch.wakeUp.wait(upTo: .milliseconds(250))
        }
        guard !Task.isCancelled, !prefetch.takenOver, prefetches.running[prefetch.item] === prefetch else { return }
        prefetches.running[prefetch.item] = nil
        prefetches.fetched[prefetch.name] = nil
        try? FileManager.default.removeItem(at: url)
        logger.info("an incoming revision was not committed: what was fetched of it is gone", metadata: ["container": "\(container)", "item": "\(prefetch.item)"])
    }

    /// Sets how long a withdrawn revision's commit may take to be read here (tests wait less).
    func setPrefetchCommitGrace(_ grace: Duration) {
        prefetches.commitGrace = grace
    }

    /// Fetches the revision's chunks into its partial file as they land: each round asks for
    /// the rest and gets what is there now (``SyncClient/downloadAvailable(_:codec:each:)``, up
    /// to 16 MiB); a round that gets nothing waits for word of more (or ``prefetchPatience``). Ends when every chunk is here (the file synced), or when the revision is
    /// withdrawn or lapses and the next chunks are not there.
    func fetchAhead(_ prefetch: IncomingPrefetches.Prefetch) async {
        let url = root.appendingPathComponent(prefetch.name)
        let reopening = FileManager.default.fileExists(atPath: url.path)
        let writer: StagedWriter
        do {
            writer = try StagedWriter(at: url, members: prefetch.members, kind: .file, reopening: reopening)
        } catch {
            logger.debug("cannot fetch an incoming revision ahead", metadata: ["container": "\(container)", "item": "\(prefetch.item)", "error": "\(error)"])
            return
        }
        defer { writer.close() }
        var held = reopening ? Materialiser.chunksHeld(by: url, of: prefetch.members, codec: codec, skipping: []) : []
        let client = client, codec = codec
        while !Task.isCancelled {
            var needed: [String] = [], seen = Set<String>()
            for chunk in prefetch.members[0].chunks where !held.contains(chunk.hash) && seen.insert(chunk.hash).inserted { needed.append(chunk.hash) }
            if needed.isEmpty {
                do {
                    try writer.finish()
                    let fd = open(url.path, O_RDONLY | O_CLOEXEC)
                    if fd >= 0 {
                        if let fingerprint = LocalScanner.fingerprint(descriptor: fd) { prefetches.fetched[prefetch.name] = fingerprint }
                        close(fd)
                    }
                    logger.info("an incoming revision is here before its commit", metadata: ["container": "\(container)", "item": "\(prefetch.item)"])
                } catch {
                    logger.warning("cannot keep an incoming revision", metadata: ["container": "\(container)", "item": "\(prefetch.item)", "error": "\(error)"])
                }
                return
            }
            // What is there of the rest now (stored, or landing from the upload), in one answer.
            let got: Set<String>
            do {
                got = try await client.downloadAvailable(needed, codec: codec) { hash, bytes in try writer.write(bytes, hash: hash) }
            } catch {
                got = [] // the link failed: the next round sees
            }
            held.formUnion(got)
            // (Written back as it comes: the file's last sync, just before the commit is placed, is then short.)
            if !got.isEmpty { writer.startWriteback(of: Array(got)) }
            if !got.isEmpty { continue }
            if prefetch.withdrawn || Date().timeIntervalSince1970 > prefetch.expires { return }
            await prefetch.wakeUp.wait(upTo: Self.prefetchPatience)
        }
    }

    /// The contents token of a prefetched revision.
    static func token(of prefetch: IncomingPrefetches.Prefetch) -> ContentToken {
        LocalContents.token(LocalContents.manifest(prefetch.members, kind: .file), kind: .file)
    }

    /// Before the item is downloaded: a prefetch of the same contents is let finish (its
    /// chunks are all on the server now: it ends without waiting); one of other contents is
    /// stopped and its file removed. `members`: the contents downloaded.
    func settlePrefetch(of item: String, members: [LocalMember]) async {
        guard let running = prefetches.running[item] else { return }
        if running.name == Materialiser.partialName(of: item, members: members) {
            running.withdrawn = true
            running.takenOver = true
            running.wakeUp.signal()
            await running.task?.value
            prefetches.running[item] = nil
        } else {
            await stopPrefetch(of: item, keeping: false)
        }
    }

    /// Stops the item's prefetch; its file goes unless `keeping`.
    func stopPrefetch(of item: String, keeping: Bool) async {
        guard let running = prefetches.running.removeValue(forKey: item) else { return }
        running.withdrawn = true
        running.task?.cancel()
        running.wakeUp.signal()
        await running.task?.value
        prefetches.fetched[running.name] = nil
        if !keeping { try? FileManager.default.removeItem(at: root.appendingPathComponent(running.name)) }
    }
}
