import CUbiquitySystem
import Foundation
import UbiquityClient
import UbiquityCoordination
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

#if canImport(Glibc)
import Glibc
#endif

// What comes down: the folder brought to what the server has (folders, downloads, placeholders,
// moves, deletions). The rounds themselves are in ContainerSync.swift.
extension ContainerSync {
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
    func materialize() async throws -> Int {
        let changed = state.takeShownChanged()
        let moved = shown.update(changed, from: state, onDisk: files.path(of:))
        let everything = materialPending == nil
        let candidates = everything ? Set(state.persisted.remote.keys).union(state.persisted.local.keys)
                                    : (materialPending ?? []).union(changed).union(moved)
        var later = Set<String>() // what this round could not bring in step
        defer { materialPending = (materialPending ?? []).union(later) }
        materialPending = []
        var settled: [(item: String, shown: DeviceSyncState.LocalItem)] = []
        for item in candidates {
            if let remote = state.persisted.remote[item], !remote.conflicts.isEmpty { conflicted.insert(item) } else { conflicted.remove(item) }
            guard !state.hasLocalChanges(item), let visible = state.visible(item) else { continue }
            settled.append((item, visible))
        }
        var wanted: [String: UbiquityPlaceholder] = [:], unwanted = Set<String>()

        var gone: [String] = []
        for (item, visible) in settled where visible.deleted {
            unwanted.insert(item)
            if requested.remove(item) != nil { try store.setDownloadRequested(false, container: container, item: item) }
            guard let local = files.file(of: item), local.fingerprint.kind != .directory else { continue }
            // Deleted elsewhere: its versions go with it (as they do with a file deleted on a Mac).
            let url = root.appendingPathComponent(local.path)
            do {
                try NSFileVersion.removeOtherVersionsOfItem(at: url)
            } catch {
                logger.warning("cannot remove the versions of an item deleted elsewhere", metadata: ["path": "\(local.path)", "error": "\(error)"])
            }
            for revision in conflictCopies.removeValue(forKey: item) ?? [] {
                try store.setConflictCopy(false, container: container, item: item, revision: revision)
            }
            try coordinatedRemove(local.path)
            files[local.path] = nil
            gone.append(local.path)
        }
        try await persist(removed: gone)

        let folders = settled.filter { !$0.shown.deleted && $0.shown.kind == .directory }.compactMap { entry in shown.path(of: entry.item).map { (entry.item, $0) } }
        var made: [AgentStore.File] = []
        for (item, path) in folders.sorted(by: { (LocalContents.depth($0.1), $0.1) < (LocalContents.depth($1.1), $1.1) }) {
            unwanted.insert(item)
            if let local = files.file(of: item) {
                if local.path != path, !(try await relocate(local, to: path)) { later.insert(item) }
                continue
            }
            let url = root.appendingPathComponent(path)
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: url.path, isDirectory: &isFolder) {
                guard isFolder.boolValue, files[path] == nil else { continue } // a local file of that name: the server settles the clash
                // A local folder of that name not sent yet: the same folder (its contents merge).
            } else {
                guard FileManager.default.fileExists(atPath: url.deletingLastPathComponent().path) else {
                    later.insert(item) // its folder comes first
                    continue
                }
                try FileManager.default.createDirectory(at: url, withIntermediateDirectories: false)
            }
            guard let print = scanner.fingerprint(of: path), print.kind == .directory else { continue }
            let file = AgentStore.File(path: path, item: item, fingerprint: print, content: LocalContents.folderToken)
            files[path] = file
            made.append(file)
        }
        try await persist(upsert: made)

        var downloads: [Download] = []
        for (item, remote) in settled.sorted(by: { $0.item < $1.item }) where !remote.deleted && remote.kind != .directory {
            guard let path = shown.path(of: item) else { continue }
            let folder = LocalContents.folder(of: path)
            guard parent(ofFolder: folder) != nil else {
                later.insert(item) // its folder is not here yet
                continue
            }
            let local = files.file(of: item)
            if let local, local.content == remote.content {
                unwanted.insert(item)
                if local.path != path, !(try await relocate(local, to: path)) { later.insert(item) }
                continue
            }
            let snapshot = state.persisted.remote[item]
            let placeholder = UbiquityPlaceholder(name: remote.name, item: item, size: snapshot?.size, modificationDate: snapshot?.modificationDate)
            guard local != nil || greedy || requested.contains(item) else {
                wanted[LocalContents.placeholderPath(for: path)] = placeholder
                continue
            }
            downloads.append(Download(item: item, kind: remote.kind ?? .file, content: remote.content, path: path, previous: local, placeholder: placeholder))
        }
        for (download, outcome) in try await download(downloads) {
            guard case .success(.some) = outcome else {
                if case .failure(let error) = outcome {
                    downloadErrors[download.item] = error.description
                    logger.warning("download failed", metadata: ["container": "\(container)", "item": "\(download.path)", "error": "\(error)"])
                }
                // Not uploaded yet by its device (or failed): listed meanwhile, and tried again.
                if download.previous == nil { wanted[LocalContents.placeholderPath(for: download.path)] = download.placeholder }
                later.insert(download.item)
                continue
            }
            unwanted.insert(download.item)
            downloadErrors[download.item] = nil
            if requested.remove(download.item) != nil { try store.setDownloadRequested(false, container: container, item: download.item) }
        }

        var emptied: [String] = []
        let goneFolders = settled.filter { $0.shown.deleted }.compactMap { files.file(of: $0.item) }.filter { $0.fingerprint.kind == .directory }
        for folder in goneFolders.sorted(by: { LocalContents.depth($0.path) > LocalContents.depth($1.path) }) {
            removeFolderIfEmpty(folder.path)
            files[folder.path] = nil
            emptied.append(folder.path)
        }
        try await persist(removed: emptied)
        later.formUnion(try writePlaceholders(wanted, unwanted: everything ? nil : unwanted))
        return candidates.count
    }

    /// An item to bring down: its contents (`content`) to `path`, over its `previous` copy here if any.
    struct Download {
        var item: String
        var kind: ItemKind
        var content: String
        var path: String
        var previous: AgentStore.File?
        var placeholder: UbiquityPlaceholder
    }

    /// Removes a folder deleted on the server if nothing is left in it but placeholders and the
    /// agent's own leftovers (version stores of items gone); else it stays (and the next scan
    /// sends it as a new folder with what it holds).
    func removeFolderIfEmpty(_ path: String) {
        let url = root.appendingPathComponent(path)
        // Unreadable, or a leftover that cannot go: the folder stays, and the rmdir below says so.
        let names = (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []
        if names.allSatisfy({ UbiquityPlaceholder.itemName(ofPlaceholder: $0) != nil || $0.hasPrefix(".ubiquity-") }) {
            for name in names { try? FileManager.default.removeItem(at: url.appendingPathComponent(name)) } // one left: the rmdir below says so
        }
        if rmdir(url.path) != 0 && errno != ENOENT {
            logger.info("a folder deleted elsewhere still holds local items; it stays", metadata: ["container": "\(container)", "path": "\(path)"])
        }
    }

    /// Brings items down, each recorded as soon as it is in place. New files come many at a
    /// time: one request for their chunk lists, shared chunk batches, each file staged, synced
    /// and put in place; an item with a copy here asks for its chunk list as a difference from
    /// that copy's and fetches only the chunks the copy lacks (a small edit of a large file
    /// moves a few chunks, a package's unchanged members nothing). An outcome of nil: not
    /// uploaded yet, or changed meanwhile (the next round gets it).
    func download(_ downloads: [Download]) async throws -> [(Download, Result<AgentStore.File?, SyncClientError>)] {
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
        if !arrived.isEmpty { outcomes += try await downloadTogether(arrived, given: given) }
        var start = 0
        while start < fresh.count {
            let group = Array(fresh[start..<min(fresh.count, start + ItemsFetchRequest.maximumCount)])
            start += group.count
            let states: [String: ItemState]
            do {
                states = Dictionary(try await client.items(container: container, ids: group.map(\.item)).map { ($0.id, $0) }, uniquingKeysWith: { $1 })
            } catch let error as SyncClientError {
                outcomes += group.map { ($0, .failure(error)) }
                continue
            }
            // Small files in shared batches of about `transferBatchBytes`; large ones on their own.
            var batches: [[(Download, ItemState)]] = [], current: [(Download, ItemState)] = [], currentBytes = 0
            var large: [(Download, ItemState)] = []
            for download in group {
                guard let state = states[download.item], state.uploaded, LocalContents.token(state.manifest, kind: download.kind) == download.content else {
                    outcomes.append((download, .success(nil)))
                    continue
                }
                if state.size > Self.transferBatchBytes {
                    large.append((download, state))
                    continue
                }
                if !current.isEmpty && (currentBytes + Int(state.size) > Self.transferBatchBytes || current.count == ChunkBatch.maximumCount) {
                    batches.append(current)
                    current = []
                    currentBytes = 0
                }
                current.append((download, state))
                currentBytes += Int(state.size)
            }
            if !current.isEmpty { batches.append(current) }
            for batch in batches {
                outcomes += try await downloadTogether(batch.map { download, state in
                    Incoming(download: download, revision: state.revision, savedBy: state.deviceName,
                             members: LocalContents.members(state.manifest, kind: download.kind))
                })
            }
            for (download, state) in large {
                outcomes.append((download, await outcome { try await self.download(download, state: state) }))
            }
        }
        for download in others {
            if let held = inlined(for: download) { // a small file changed elsewhere: its bytes came with the page
                let members = [LocalMember(path: "", chunks: held.chunks)]
                outcomes.append((download, await outcome { try await self.install(download, revision: held.revision, savedBy: held.savedBy, members: members, given: held.pieces) }))
            } else {
                outcomes.append((download, await outcome { try await self.download(download, state: nil) }))
            }
        }
        return outcomes
    }

    /// What a download came to: its file, nil, or the server's error (other errors are thrown).
    private func outcome(_ body: () async throws -> AgentStore.File?) async -> Result<AgentStore.File?, SyncClientError> {
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
    private func downloadTogether(_ group: [Incoming], given: [String: [UInt8]] = [:]) async throws -> [(Download, Result<AgentStore.File?, SyncClientError>)] {
        var writers: [(download: Download, revision: String, savedBy: String, members: [LocalMember], staged: URL, writer: StagedWriter)] = []
        defer {
            for entry in writers {
                entry.writer.close()
                removeStaged(entry.staged)
            }
        }
        var needed: [String] = [], wanted = Set<String>()
        for incoming in group {
            let (download, members) = (incoming.download, incoming.members)
            let staged = root.appendingPathComponent(LocalContents.folder(of: download.path)).appendingPathComponent(Self.stagingName())
            let writer: StagedWriter
            do {
                writer = try StagedWriter(at: staged, members: members, kind: download.kind)
            } catch {
                logger.warning("cannot stage a download", metadata: ["path": "\(download.path)", "error": "\(error)"])
                continue // its folder went meanwhile: the next round sees
            }
            writers.append((download, incoming.revision, incoming.savedBy, members, staged, writer))
            for chunk in members.flatMap(\.chunks) where given[chunk.hash] == nil && wanted.insert(chunk.hash).inserted { needed.append(chunk.hash) }
            transfers[download.item] = Transfer(downloading: true, done: 0, total: Int64(members.reduce(0) { $0 + $1.chunks.reduce(0) { $0 + $1.length } }))
        }
        defer { for incoming in group { transfers[incoming.download.item] = nil } }
        let chunks: [ChunkBatch.Chunk]
        do {
            chunks = needed.isEmpty ? [] : try await client.download(needed)
        } catch let error as SyncClientError {
            return group.map { ($0.download, .failure(error)) }
        }
        var bytes = given
        for chunk in chunks { bytes[chunk.hash] = chunk.bytes }
        var outcomes: [(Download, Result<AgentStore.File?, SyncClientError>)] = []
        func failed(_ download: Download, _ error: any Error) {
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
                written.append((entry.download, entry.revision, entry.members, entry.staged))
            } catch {
                failed(entry.download, error)
            }
        }
        do {
            try flushFileSystem()
        } catch {
            for entry in written { failed(entry.download, error) }
            return outcomes
        }
        var placed: [AgentStore.File] = [], folders = Set<String>()
        for entry in written {
            do {
                localContents[entry.download.content] = entry.members
                let file = try placeNew(entry.staged, as: entry.download, revision: entry.revision)
                if let file {
                    placed.append(file)
                    folders.insert(LocalContents.folder(of: file.path))
                }
                outcomes.append((entry.download, .success(file)))
            } catch {
                failed(entry.download, error)
            }
        }
        // Recorded only once their names are durable: a file the store lists is on the disk.
        for folder in folders.sorted() {
            try POSIX.sync(root.appendingPathComponent(folder).path, directory: true)
        }
        try await persist(upsert: placed)
        return outcomes
    }

    /// Downloads one item (a large file, a package, or an item with a copy here) and records it.
    private func download(_ download: Download, state known: ItemState?) async throws -> AgentStore.File? {
        let (item, kind, content, previous) = (download.item, download.kind, download.content, download.previous)
        var state: ItemState
        if let known {
            state = known
        } else {
            state = try await client.item(container: container, id: item, since: kind == .file ? previous?.revision : nil)
        }
        if let delta = state.manifestDelta {
            // The chunk list as a difference from the revision the local copy is.
            if let previous, state.deltaBase == previous.revision, let old = try localChunks(of: previous),
               let chunks = try? delta.apply(to: old) { // a delta that does not fit: the whole list is asked for below
                state.manifest = Manifest(chunks: chunks.map(\.reference))
            } else {
                state = try await client.item(container: container, id: item)
            }
        }
        guard state.uploaded, LocalContents.token(state.manifest, kind: kind) == content else { return nil }
        return try await install(download, revision: state.revision, savedBy: state.deviceName, members: LocalContents.members(state.manifest, kind: kind))
    }

    /// Stages an item's contents (chunks from `given`, the local copy, else the server), puts
    /// them in place and records the file.
    private func install(_ download: Download, revision: String, savedBy: String, members: [LocalMember], given: [String: [UInt8]] = [:]) async throws -> AgentStore.File? {
        let (path, previous) = (download.path, download.previous)
        let staged = try await stage(members, kind: download.kind, of: download.item, name: path, reusing: previous, given: given)
        defer { removeStaged(staged) } // still there if not moved into place
        NSFileVersion.recordSavingComputer(savedBy, ofItemAt: staged.path)
        localContents[download.content] = members
        guard let file = try place(staged, as: download, revision: revision) else { return nil }
        if let previous, previous.path != path {
            try coordinatedRemove(previous.path)
            files[previous.path] = nil
            try await persist(upsert: [file], removed: [previous.path])
        } else {
            try await persist(upsert: [file])
        }
        return file
    }

    /// Puts a staged download in place by safe save under a coordinated write (an open
    /// document reloads), unless the item was saved over since the round's scan (or made there
    /// meanwhile): then the local edit stays, the next round sends it, and the server keeps both.
    /// Returns the record of the file in place (not yet stored), or nil.
    private func place(_ staged: URL, as download: Download, revision: String) throws -> AgentStore.File? {
        let path = download.path, previous = download.previous
        let url = root.appendingPathComponent(path)
        let scanner = scanner
        let written = try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forReplacing) { url -> Bool in
            let now = scanner.fingerprint(of: path)
            if let previous, previous.path == path, now != previous.fingerprint { return false }
            if previous?.path != path, now != nil { return false }
            let replaced = ReplacedFile(holding: url.path, size: now?.size ?? 0)
            defer { replaced?.release() }
            try SafeSave.replaceItem(at: url) { temporary in
                guard rename(staged.path, temporary.path) == 0 else {
                    throw ContainerSyncError("could not move the download of \(path) into place: \(String(cString: strerror(errno)))")
                }
            }
            return true
        }
        return written ? placed(download, revision: revision) : nil
    }

    /// The record of a download just put in place (not yet stored), or nil if it is gone again.
    private func placed(_ download: Download, revision: String) -> AgentStore.File? {
        guard let print = scanner.fingerprint(of: download.path) else { return nil }
        let file = AgentStore.File(path: download.path, item: download.item, fingerprint: print, content: download.content, revision: revision)
        files[download.path] = file
        return file
    }

    /// Puts a staged new file (its contents durable) in place under a coordinated write,
    /// unless something was made at its path meanwhile (then the local item stays, the next
    /// round sends it, and the server keeps both). Its folder still needs a flush.
    private func placeNew(_ staged: URL, as download: Download, revision: String) throws -> AgentStore.File? {
        let path = download.path, url = root.appendingPathComponent(path)
        let moved = try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forReplacing) { url -> Bool in
            guard ubq_rename_noreplace(staged.path, url.path) == 0 else {
                if errno == EEXIST { return false }
                throw ContainerSyncError("could not move the download of \(path) into place: \(String(cString: strerror(errno)))")
            }
            return true
        }
        return moved ? placed(download, revision: revision) : nil
    }

    /// Makes everything written to the container's file system durable at once (`syncfs`).
    func flushFileSystem() throws {
        let fd = open(root.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StagedWriter.failure("open", root) }
        defer { close(fd) }
        guard ubq_syncfs(fd) == 0 else { throw StagedWriter.failure("flush", root) }
    }

    /// Moves a file, package or folder (with everything in it) to `path`, as a coordinated move.
    /// Returns false if it must wait for its folder to be made; a local item of that name is
    /// said in ``errors`` (the server settles the clash).
    @discardableResult
    func relocate(_ file: AgentStore.File, to path: String) async throws -> Bool {
        let from = root.appendingPathComponent(file.path), to = root.appendingPathComponent(path)
        guard !FileManager.default.fileExists(atPath: to.path) else {
            errors[file.item] = "cannot move \(file.path) to \(path): a local item has that name"
            return true
        }
        guard FileManager.default.fileExists(atPath: to.deletingLastPathComponent().path) else { return false } // its folder comes first
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: from, options: .forMoving) { from in
            try FileManager.default.moveItem(at: from, to: to)
        }
        errors[file.item] = nil
        let before = files.subtree(file.path)
        let scanner = scanner
        var moved: [AgentStore.File] = []
        for var inside in before {
            files[inside.path] = nil
            inside.path = path + inside.path.dropFirst(file.path.count)
            if inside.item == file.item, let print = scanner.fingerprint(of: path) { inside.fingerprint = print } // its status change time moved
            moved.append(inside)
        }
        for inside in moved { files[inside.path] = inside }
        try await persist(upsert: moved, removed: before.map(\.path))
        return true
    }

    func coordinatedRemove(_ path: String) throws {
        logger.debug("removing", metadata: ["container": "\(container)", "path": "\(path)"])
        let url = root.appendingPathComponent(path)
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forDeleting) { url in
            if FileManager.default.fileExists(atPath: url.path) { try FileManager.default.removeItem(at: url) }
        }
    }
}
