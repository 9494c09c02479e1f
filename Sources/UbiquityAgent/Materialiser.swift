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

/// Brings a container's folder to what the server has, for ``ContainerSync``: folders made and
/// moved, files and packages downloaded (staged beside where they go, from the local copy
/// where it has the chunks, made durable, put in place under a coordinated write) or listed as
/// placeholders, deletions applied.
///
/// One of the rooms of a container's sync (see ``ChangeFinder``): it owns where each item is
/// shown, the placeholders in the folder, what is left for the next round, and the bytes of
/// small files a page of changes brought.
final class Materialiser {
    /// The placeholders in the folder (path → what it says), to notice one deleted by a user
    /// and to write only those that change.
    var placeholders: Placeholders
    /// Where each item is shown (kept in step with the sync state item by item).
    var shown = ShownTree()
    /// Items to bring in step again in the next round, besides those whose state changed
    /// (their folder was not there yet, their download failed…); nil: every item.
    var pending: Set<String>?
    /// Small files' bytes from this round's pages of changes, by item, and their total.
    var inlined: [String: Inlined] = [:]
    /// For tests: called with a download's path once its coordinated write is over and before
    /// it is recorded (where an app's save made at once after lands).
    var placedForTesting: ((String) -> Void)?
    var inlinedBytes = 0
    /// Files' chunk-list differences a pushed page brought this round, by item (``keepPushedDeltas(_:)``).
    var pushedDeltas: [String: ItemState] = [:]

    /// A materialiser for the folder whose placeholders on disk are `placeholders`.
    init(placeholders: Placeholders) {
        self.placeholders = placeholders
    }

    /// Brings the folder to what the server has for the items whose state changed (and those
    /// left for this round: their folder was not there yet, their download failed; every item
    /// in the first round), in an order that never needs a folder before it exists: deleted
    /// files and packages go; folders are made and moved (parents first); files and packages
    /// are downloaded (when downloaded here already, or wanted: asked for, or everything on a
    /// greedy device) or listed as placeholders, and moved; deleted folders go last (items
    /// first). A deleted folder that still holds something the server does not know stays, and
    /// is sent again as a new folder: nothing local is ever removed unseen. Items with local
    /// changes wait for the server's answer (which counts as a change of their state).
    /// Returns how many items it looked at.
    @discardableResult
    func materialize(in sync: isolated ContainerSync) async throws -> Int {
        let changed = sync.state.takeShownChanged()
        let moved = shown.update(changed, from: sync.state, onDisk: sync.files.path(of:))
        let everything = pending == nil
        let candidates = everything ? Set(sync.state.persisted.remote.keys).union(sync.state.persisted.local.keys)
                                    : (pending ?? []).union(changed).union(moved)
        var later = Set<String>() // what this round could not bring in step
        var finished = false
        // A failure part way (a full disk) leaves every candidate for the next round: those not
        // reached yet would otherwise wait for their next change (found by `ubiquity-chaos`).
        defer { pending = (pending ?? []).union(finished ? later : later.union(candidates)) }
        pending = []
        var settled: [(item: String, shown: DeviceSyncState.LocalItem)] = []
        for item in candidates {
            if let remote = sync.state.persisted.remote[item], !remote.conflicts.isEmpty { sync.reconciler.conflicted.insert(item) } else { sync.reconciler.conflicted.remove(item) }
            guard !sync.state.hasLocalChanges(item), let visible = sync.state.visible(item) else { continue }
            settled.append((item, visible))
        }
        var wanted: [String: UbiquityPlaceholder] = [:], unwanted = Set<String>()

        var gone: [String] = []
        for (item, visible) in settled where visible.deleted {
            unwanted.insert(item)
            sync.downloadErrors[item] = nil // nothing left to download
            if sync.requested.remove(item) != nil { try sync.store.setDownloadRequested(false, container: sync.storeKey, item: item) }
            guard let local = sync.files.file(of: item), local.fingerprint.kind != .directory else { continue }
            // Deleted elsewhere: its versions go with it (as they do with a file deleted on a Mac).
            let url = sync.root.appendingPathComponent(local.path)
            do {
                try await sync.coordinated { try NSFileVersion.removeOtherVersionsOfItem(at: url) }
            } catch {
                sync.logger.warning("cannot remove the versions of an item deleted elsewhere", metadata: ["path": "\(local.path)", "error": "\(error)"])
            }
            for revision in sync.reconciler.conflictCopies.removeValue(forKey: item) ?? [] {
                try sync.store.setConflictCopy(false, container: sync.storeKey, item: item, revision: revision)
            }
            // Unless written since the scan: then it stays, and goes again as a new item.
            try await coordinatedRemove(local.path, ifStill: local.fingerprint, in: sync)
            sync.files[local.path] = nil
            gone.append(local.path)
        }
        try await sync.persist(removed: gone)

        let folders = settled.filter { !$0.shown.deleted && $0.shown.kind == .directory }.compactMap { entry in shown.path(of: entry.item).map { (entry.item, $0) } }
        var made: [AgentStore.File] = []
        for (item, path) in folders.sorted(by: { (LocalContents.depth($0.1), $0.1) < (LocalContents.depth($1.1), $1.1) }) {
            unwanted.insert(item)
            if let local = sync.files.file(of: item) {
                if local.path != path, !(try await relocate(local, to: path, in: sync)) { later.insert(item) }
                continue
            }
            let url = sync.root.appendingPathComponent(path)
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: url.path, isDirectory: &isFolder) {
                guard isFolder.boolValue, sync.files[path] == nil else { continue } // a local file of that name: the server settles the clash
                // A local folder of that name not sent yet: the same folder (its contents merge).
            } else {
                guard FileManager.default.fileExists(atPath: url.deletingLastPathComponent().path) else {
                    later.insert(item) // its folder comes first
                    continue
                }
                try FileManager.default.createDirectory(at: url, withIntermediateDirectories: false)
            }
            guard let print = sync.scanner.fingerprint(of: path), print.kind == .directory else { continue }
            let file = AgentStore.File(path: path, item: item, fingerprint: print, content: LocalContents.folderToken)
            sync.files[path] = file
            made.append(file)
        }
        try await sync.persist(upsert: made)

        var downloads: [Download] = []
        for (item, remote) in settled.sorted(by: { $0.item < $1.item }) where !remote.deleted && remote.kind != .directory {
            guard let path = shown.path(of: item) else { continue }
            let folder = LocalContents.folder(of: path)
            guard sync.parent(ofFolder: folder) != nil else {
                later.insert(item) // its folder is not here yet
                continue
            }
            let local = sync.files.file(of: item)
            if let local, local.content == remote.content {
                unwanted.insert(item)
                // In step (a download that failed was then found in place, or the contents came
                // from here): the failure no longer stands — kept, the agent was never idle
                // again (found by `ubiquity-chaos`).
                sync.downloadErrors[item] = nil
                if local.path != path, !(try await relocate(local, to: path, in: sync)) { later.insert(item) }
                continue
            }
            let snapshot = sync.state.persisted.remote[item]
            let placeholder = UbiquityPlaceholder(name: remote.name, item: item, size: snapshot?.size, modificationDate: snapshot?.modificationDate)
            guard local != nil || sync.greedy || sync.requested.contains(item) else {
                wanted[LocalContents.placeholderPath(for: path)] = placeholder
                continue
            }
            downloads.append(Download(item: item, kind: remote.kind ?? .file, content: remote.content, path: path, previous: local, placeholder: placeholder))
        }
        for (download, outcome) in try await download(downloads, in: sync) {
            guard case .success(.some) = outcome else {
                if case .failure(let error) = outcome {
                    sync.downloadErrors[download.item] = error.description
                    sync.logger.warning("download failed", metadata: ["container": "\(sync.container)", "item": "\(download.path)", "error": "\(error)"])
                }
                // Not uploaded yet by its device, or the server has moved on (the next fetch
                // says to what): an earlier attempt's failure no longer stands.
                if case .success = outcome { sync.downloadErrors[download.item] = nil }
                // Not uploaded yet by its device (or failed): listed meanwhile, and tried again.
                if download.previous == nil { wanted[LocalContents.placeholderPath(for: download.path)] = download.placeholder }
                later.insert(download.item)
                continue
            }
            unwanted.insert(download.item)
            sync.downloadErrors[download.item] = nil
            if sync.requested.remove(download.item) != nil { try sync.store.setDownloadRequested(false, container: sync.storeKey, item: download.item) }
        }

        var emptied: [String] = []
        let goneFolders = settled.filter { $0.shown.deleted }.compactMap { sync.files.file(of: $0.item) }.filter { $0.fingerprint.kind == .directory }
        for folder in goneFolders.sorted(by: { LocalContents.depth($0.path) > LocalContents.depth($1.path) }) {
            removeFolderIfEmpty(folder.path, in: sync)
            sync.files[folder.path] = nil
            emptied.append(folder.path)
        }
        try await sync.persist(removed: emptied)
        later.formUnion(try writePlaceholders(wanted, unwanted: everything ? nil : unwanted, in: sync))
        finished = true
        return candidates.count
    }

    /// An item to bring down: its contents (`content`) to `path`, over its `previous` copy here if any.
    struct Download {
        var item: String
        var kind: ItemKind
        var content: ContentToken
        var path: String
        var previous: AgentStore.File?
        var placeholder: UbiquityPlaceholder
    }

    /// Removes a folder deleted on the server if nothing is left in it but placeholders and the
    /// agent's own leftovers (version stores of items gone); else it stays (and the next scan
    /// sends it as a new folder with what it holds).
    func removeFolderIfEmpty(_ path: String, in sync: isolated ContainerSync) {
        let url = sync.root.appendingPathComponent(path)
        // Unreadable, or a leftover that cannot go: the folder stays, and the rmdir below says so.
        let names = (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []
        if names.allSatisfy({ UbiquityPlaceholder.itemName(ofPlaceholder: $0) != nil || $0.hasPrefix(".ubiquity-") }) {
            for name in names { try? FileManager.default.removeItem(at: url.appendingPathComponent(name)) } // one left: the rmdir below says so
        }
        if rmdir(url.path) != 0 && errno != ENOENT {
            sync.logger.info("a folder deleted elsewhere still holds local items; it stays", metadata: ["container": "\(sync.container)", "path": "\(path)"])
        }
    }

    /// Brings items down, each recorded as soon as it is in place. New files come many at a
    /// time: one request for their chunk lists, shared chunk batches, each file staged, synced
    /// and put in place; an item with a copy here asks for its chunk list as a difference from
    /// that copy's and fetches only the chunks the copy lacks (a small edit of a large file
    /// moves a few chunks, a package's unchanged members nothing). An outcome of nil: not
    /// uploaded yet, or changed meanwhile (the next round gets it).
    func download(_ downloads: [Download], in sync: isolated ContainerSync) async throws -> [(Download, Result<AgentStore.File?, SyncClientError>)] {
        var outcomes: [(Download, Result<AgentStore.File?, SyncClientError>)] = []
        let (new, others) = (downloads.filter { $0.previous == nil && $0.kind == .file }, downloads.filter { $0.previous != nil || $0.kind != .file })
        // New small files whose bytes came with the page of changes: no request at all.
        var given: [String: [UInt8]] = [:], arrived: [Incoming] = [], fresh: [Download] = []
        for download in new {
            guard let held = inlined(for: download) else {
                fresh.append(download)
                continue
            }
            given.merge(held.pieces) { first, _ in first }
            arrived.append(Incoming(download: download, revision: held.revision, savedBy: held.savedBy, members: [LocalMember(path: "", chunks: held.chunks)]))
        }
        if !arrived.isEmpty { outcomes += try await downloadTogether(arrived, given: given, in: sync) }
        var start = 0
        while start < fresh.count {
            let group = Array(fresh[start..<min(fresh.count, start + ItemsFetchRequest.maximumCount)])
            start += group.count
            let states: [String: ItemState]
            do {
                states = Dictionary(try sync.opened(try await sync.client.items(container: sync.container, ids: group.map(\.item))).map { ($0.id, $0) }, uniquingKeysWith: { $1 })
            } catch let error as SyncClientError {
                outcomes += group.map { ($0, .failure(error)) }
                continue
            }
            // Small files in shared batches of about `transferBatchBytes`; large ones on their own.
            var batches: [[(Download, ItemState)]] = [], current: [(Download, ItemState)] = [], currentBytes = 0
            var large: [(Download, ItemState)] = []
            for asked in group {
                guard let itemState = states[asked.item], itemState.uploaded, let download = self.current(asked, as: itemState, in: sync) else {
                    outcomes.append((asked, .success(nil)))
                    continue
                }
                if itemState.size > ContainerSync.transferBatchBytes {
                    large.append((download, itemState))
                    continue
                }
                if !current.isEmpty && (currentBytes + Int(itemState.size) > ContainerSync.transferBatchBytes || current.count == ChunkBatch.maximumCount) {
                    batches.append(current)
                    current = []
                    currentBytes = 0
                }
                current.append((download, itemState))
                currentBytes += Int(itemState.size)
            }
            if !current.isEmpty { batches.append(current) }
            for batch in batches {
                outcomes += try await downloadTogether(batch.map { download, itemState in
                    Incoming(download: download, revision: itemState.revision, savedBy: itemState.deviceName,
                             members: LocalContents.members(itemState.manifest, kind: download.kind))
                }, in: sync)
            }
            for (download, itemState) in large {
                outcomes.append((download, await outcome(in: sync) { try await self.download(download, state: itemState, in: sync) }))
            }
        }
        for download in others {
            if let held = inlined(for: download) { // a small file changed elsewhere: its bytes came with the page
                let members = [LocalMember(path: "", chunks: held.chunks)]
                outcomes.append((download, await outcome(in: sync) { try await self.install(download, revision: held.revision, savedBy: held.savedBy, members: members, given: held.pieces, in: sync) }))
            } else {
                // (A small edit's chunk-list difference that came with its push saves asking for it.)
                let pushed = pushedDelta(for: download)
                outcomes.append((download, await outcome(in: sync) { try await self.download(download, state: pushed, in: sync) }))
            }
        }
        return outcomes
    }

    /// What a download came to: its file, nil, or the server's error (other errors are thrown).
    private func outcome(in sync: isolated ContainerSync, _ body: () async throws -> AgentStore.File?) async -> Result<AgentStore.File?, SyncClientError> {
        do {
            return .success(try await body())
        } catch let error as SyncClientError {
            return .failure(error)
        } catch {
            return .failure(SyncClientError(status: 0, code: "localFailure", message: "\(error)"))
        }
    }

    /// A new file to bring down: which revision, who saved it, and its chunks.
    struct Incoming {
        var download: Download
        var revision: String
        var savedBy: String
        var members: [LocalMember]
    }

    /// Downloads small new files together: their chunks (but those `given`) in shared batches,
    /// each file staged beside where it goes, all made durable with one flush of the file
    /// system, then each renamed into place (never over a file made there meanwhile), their
    /// folders flushed once each, and all recorded in one transaction.
    private func downloadTogether(_ group: [Incoming], given: [String: [UInt8]] = [:], in sync: isolated ContainerSync) async throws -> [(Download, Result<AgentStore.File?, SyncClientError>)] {
        var writers: [(download: Download, revision: String, savedBy: String, members: [LocalMember], staged: URL, writer: StagedWriter)] = []
        defer {
            for entry in writers {
                entry.writer.close()
                removeStaged(entry.staged, in: sync)
            }
        }
        var needed: [String] = [], wanted = Set<String>()
        for incoming in group {
            let (download, members) = (incoming.download, incoming.members)
            let staged = sync.root.appendingPathComponent(LocalContents.folder(of: download.path)).appendingPathComponent(Self.stagingName())
            let writer: StagedWriter
            do {
                writer = try StagedWriter(at: staged, members: members, kind: download.kind)
            } catch {
                sync.logger.warning("cannot stage a download", metadata: ["path": "\(download.path)", "error": "\(error)"])
                continue // its folder went meanwhile: the next round sees
            }
            writers.append((download, incoming.revision, incoming.savedBy, members, staged, writer))
            for chunk in members.flatMap(\.chunks) where given[chunk.hash] == nil && wanted.insert(chunk.hash).inserted { needed.append(chunk.hash) }
            sync.transfers[download.item] = ContainerSync.Transfer(downloading: true, done: 0, total: Int64(members.reduce(0) { $0 + $1.chunks.reduce(0) { $0 + $1.length } }))
        }
        defer { for incoming in group { sync.transfers[incoming.download.item] = nil } }
        let chunks: [ChunkBatch.Chunk]
        do {
            chunks = needed.isEmpty ? [] : try await sync.client.download(needed, codec: sync.codec)
        } catch let error as SyncClientError {
            return group.map { ($0.download, .failure(error)) }
        }
        var bytes = given
        for chunk in chunks { bytes[chunk.hash] = Array(chunk.bytes) }
        var outcomes: [(Download, Result<AgentStore.File?, SyncClientError>)] = []
        func fail(_ download: Download, _ error: any Error) {
            outcomes.append((download, .failure(SyncClientError(status: 0, code: "localFailure", message: "\(error)"))))
        }
        var written: [(download: Download, revision: String, members: [LocalMember], staged: URL)] = []
        for entry in writers {
            do {
                for chunk in entry.members.flatMap(\.chunks) {
                    guard let data = bytes[chunk.hash] else { throw ContainerSyncError("chunk \(chunk.hash) did not arrive") }
                    try entry.writer.write(data, hash: chunk.hash)
                }
                NSFileVersion.recordSavingComputer(entry.savedBy, ofItemAt: entry.staged.path)
                NSFileVersion.recordOriginator(sync.otherPerson(of: entry.download.item), ofItemAt: entry.staged.path)
                written.append((entry.download, entry.revision, entry.members, entry.staged))
            } catch {
                fail(entry.download, error)
            }
        }
        do {
            try flushFileSystem(in: sync)
        } catch {
            for entry in written { fail(entry.download, error) }
            return outcomes
        }
        var placed: [AgentStore.File] = [], folders = Set<String>()
        let moves = try await placeNew(written.map { ($0.staged, $0.download.path) }, in: sync)
        for (entry, moved) in zip(written, moves) {
            do {
                sync.localContents[entry.download.content] = entry.members
                let print = try moved.get()
                if print == nil {
                    sync.logger.debug("a new download gave way to a file made here", metadata: ["path": "\(entry.download.path)", "item": "\(entry.download.item)"])
                }
                let file = print.flatMap { self.placed(entry.download, revision: entry.revision, print: $0, in: sync) }
                if let file {
                    placed.append(file)
                    folders.insert(LocalContents.folder(of: file.path))
                }
                outcomes.append((entry.download, .success(file)))
            } catch {
                fail(entry.download, error)
            }
        }
        // Recorded only once their names are durable: a file the store lists is on the disk.
        for folder in folders.sorted() {
            try POSIX.sync(sync.root.appendingPathComponent(folder).path, directory: true)
        }
        try await sync.persist(upsert: placed)
        return outcomes
    }

    /// Downloads one item (a large file, a package, or an item with a copy here) and records it.
    private func download(_ download: Download, state known: ItemState?, in sync: isolated ContainerSync) async throws -> AgentStore.File? {
        let (item, kind, previous) = (download.item, download.kind, download.previous)
        var current: ItemState
        if let known {
            current = known
        } else {
            current = try sync.opened(try await sync.client.item(container: sync.container, id: item, since: kind == .file ? previous?.revision : nil))
        }
        if let delta = current.manifestDelta {
            // The chunk list as a difference from the revision the local copy is.
            // (One that came with a push is taken only if it makes the contents the page named.)
            if let previous, current.deltaBase == previous.revision, let old = try localChunks(of: previous, in: sync),
               let chunks = try? delta.apply(to: old), known == nil || LocalContents.token(chunks.map(\.reference)) == download.content {
                // (a delta that does not fit: the whole list is asked for below)
                current.manifest = Manifest(chunks: chunks.map(\.reference))
            } else {
                current = try sync.opened(try await sync.client.item(container: sync.container, id: item))
            }
        }
        guard current.uploaded, let download = self.current(download, as: current, in: sync) else { return nil }
        return try await install(download, revision: current.revision, savedBy: current.deviceName, members: LocalContents.members(current.manifest, kind: kind), in: sync)
    }

    /// `download` if `state` — the server's state of its item now, opened — has the contents it
    /// was asked for; or, when `state` is the revision this device knows with another chunk list
    /// (the server sealed it in place since: its record sealed now, its chunks under their keyed
    /// names, the same bytes — the one honest cause), `download` of that list, the state learnt
    /// (the page that showed the item is not shown again). No more is believed than before: a
    /// sealed list was checked against its record, a plaintext one is the server's word anyway.
    /// Nil when the server has moved on (the next fetch says to what).
    func current(_ download: Download, as state: ItemState, in sync: isolated ContainerSync) -> Download? {
        let token = LocalContents.token(state.manifest, kind: download.kind)
        if token == download.content { return download }
        guard let known = sync.state.persisted.remote[download.item], known.revision == state.revision, known.content == download.content else { return nil }
        sync.state.relearn(ContainerSync.snapshot(state))
        var resealed = download
        resealed.content = token
        return resealed
    }

    /// Stages an item's contents (chunks from `given`, the local copy, else the server), puts
    /// them in place and records the file.
    private func install(_ download: Download, revision: String, savedBy: String, members: [LocalMember], given: [String: [UInt8]] = [:], in sync: isolated ContainerSync) async throws -> AgentStore.File? {
        let (path, previous) = (download.path, download.previous)
        if given.isEmpty {
            // A small edit of a large file: written into the local copy where it changed.
            switch try await writeInPlace(download, revision: revision, savedBy: savedBy, members: members, in: sync) {
            case .placed(let file, let journal):
                try await sync.persist(upsert: [file])
                try? FileManager.default.removeItem(at: journal) // (recorded: nothing to settle)
                return file
            case .gaveWay:
                return nil
            case .staged:
                break
            }
        }
        let staged = try await stage(members, kind: download.kind, of: download.item, name: path, reusing: previous, given: given, in: sync)
        defer { removeStaged(staged, in: sync) } // still there if not moved into place
        NSFileVersion.recordSavingComputer(savedBy, ofItemAt: staged.path)
        NSFileVersion.recordOriginator(sync.otherPerson(of: download.item), ofItemAt: staged.path)
        sync.localContents[download.content] = members
        guard let file = try await place(staged, as: download, revision: revision, in: sync) else { return nil }
        if let previous, previous.path != path {
            // The copy at the old name goes, unless it was written since (then it stays and the
            // next scan sends it as a new item: nothing of it is lost).
            try await coordinatedRemove(previous.path, ifStill: previous.fingerprint, in: sync)
            sync.files[previous.path] = nil
            try await sync.persist(upsert: [file], removed: [previous.path])
        } else {
            try await sync.persist(upsert: [file])
        }
        return file
    }

    /// Puts a staged download in place by safe save under a coordinated write (an open
    /// document reloads), unless the item was saved over since the round's scan (or made there
    /// meanwhile): then the local edit stays, the next round sends it, and the server keeps both.
    /// Returns the record of the file in place (not yet stored), or nil.
    private func place(_ staged: URL, as download: Download, revision: String, in sync: isolated ContainerSync) async throws -> AgentStore.File? {
        let path = download.path, previous = download.previous
        let url = sync.root.appendingPathComponent(path)
        let scanner = sync.scanner
        // The fingerprint in place is read while the write is still coordinated (see `placeNew`).
        let written = try await sync.coordinated {
            try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forReplacing) { url -> LocalFingerprint? in
                let now = scanner.fingerprint(of: path)
                if let previous, previous.path == path, now != previous.fingerprint { return nil }
                if previous?.path != path, now != nil { return nil }
                // Moving to a new name: the copy at the old one saved over since the scan makes
                // the download give way too (the edit goes next round; the server keeps both).
                if let previous, previous.path != path, scanner.fingerprint(of: previous.path) != previous.fingerprint { return nil }
                let replaced = ReplacedFile(holding: url.path, size: now?.size ?? 0)
                defer { replaced?.release() }
                try SafeSave.replaceItem(at: url) { temporary in
                    guard rename(staged.path, temporary.path) == 0 else {
                        throw ContainerSyncError("could not move the download of \(path) into place: \(String(cString: strerror(errno)))")
                    }
                }
                return scanner.fingerprint(of: path)
            }
        }
        guard let written else {
            sync.logger.debug("a download gave way to the file changed here", metadata: ["path": "\(path)", "item": "\(download.item)", "revision": "\(revision)"])
            return nil
        }
        return placed(download, revision: revision, print: written, in: sync)
    }

    /// The record of a download just put in place (`print`: its fingerprint there, read while
    /// its write was coordinated), not yet stored.
    func placed(_ download: Download, revision: String, print: LocalFingerprint, in sync: isolated ContainerSync) -> AgentStore.File? {
        placedForTesting?(download.path)
        sync.logger.debug("a download is in place", metadata: ["path": "\(download.path)", "item": "\(download.item)", "revision": "\(revision)",
                                                            "over": "\(download.previous?.path ?? "nothing")"])
        let file = AgentStore.File(path: download.path, item: download.item, fingerprint: print, content: download.content, revision: revision)
        sync.files[download.path] = file
        sync.noteAttributes([.ubiquitousItemDownloadingStatusKey, .ubiquitousItemIsDownloadingKey], at: download.path)
        return file
    }

    /// Puts staged new files (their contents durable) at their paths (relative to the
    /// container's folder), each under a coordinated write, all in one trip to the thread
    /// coordinated accesses run on — unless something was made at a path meanwhile (then the
    /// local item stays, the next round sends it, and the server keeps both): for each, whether
    /// it was moved, or why it could not be. Their folders still need a flush.
    /// Each file's fingerprint in place is read while the write is still coordinated: read
    /// after, it could be of an app's save made at once after (the save then looked like the
    /// download, and the next download replaced it — an edit lost, found by `ubiquity-chaos`).
    private func placeNew(_ files: [(staged: URL, path: String)], in sync: isolated ContainerSync) async throws -> [Result<LocalFingerprint?, any Error>] {
        guard !files.isEmpty else { return [] }
        let root = sync.root, scanner = sync.scanner
        return try await sync.coordinated {
            files.map { staged, path in
                Result {
                    try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: root.appendingPathComponent(path), options: .forReplacing) { url -> LocalFingerprint? in
                        guard ubq_rename_noreplace(staged.path, url.path) == 0 else {
                            if errno == EEXIST { return nil }
                            throw ContainerSyncError("could not move the download of \(path) into place: \(String(cString: strerror(errno)))")
                        }
                        return scanner.fingerprint(of: path)
                    }
                }
            }
        }
    }

    /// Makes everything written to the container's file system durable at once (`syncfs`).
    func flushFileSystem(in sync: isolated ContainerSync) throws {
        let fd = open(sync.root.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StagedWriter.failure("open", sync.root) }
        defer { close(fd) }
        guard ubq_syncfs(fd) == 0 else { throw StagedWriter.failure("flush", sync.root) }
    }
}
