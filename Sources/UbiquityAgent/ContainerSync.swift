import Foundation
import Logging
import UbiquityClient
import UbiquityCoordination
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

/// Keeps one container in step with the server — everything in its folder but names ending in
/// `.nosync` (and what is in such folders): the agent's loop for one container, joining
/// ``LocalScanner`` (what changed here), ``DeviceSyncState`` (what to do), ``SyncClient`` (the
/// server) and ``AgentStore`` (what survives a restart).
///
/// Paths are relative to the container's folder. On the server an item at the top of
/// `Documents` has no parent folder (as since the first version of the protocol) and one at the
/// container's top level has the reserved parent ``ContainerLayout/topLevel``; the `Documents`
/// folder itself is not an item.
///
/// Work follows change: told which folders changed (``noteChange(at:)``, from inotify), a
/// round looks only there; everything is looked at when the container is opened, after events
/// were lost (``noteEverythingChanged()``) and on the agent's slow timer. Many changes go up in
/// one commit request and their chunks in shared batches; many items come down with one request
/// for their chunk lists and shared chunk batches.
///
/// Metadata first: an item from another device is listed at once (a placeholder `.NAME.icloud`,
/// ``UbiquityPlaceholder``) and downloaded when an app asks (``requestDownload(_:)``) — or at
/// once on a ``greedy`` device; once downloaded it is kept current. ``evict(_:)`` frees the
/// local copy of an uploaded item. A download fetches only the chunks the local copy lacks.
/// Conflict versions become the item's `NSFileVersion` conflict versions on every device;
/// resolving them there (removing or marking them resolved) resolves them on the server.
/// Files are read and written under file coordination, so an open document saves before it is
/// uploaded and reloads after a download. Folders are items of their own (an item knows the
/// folder it is in, so moving a folder is one change); a package is one item whose members
/// travel individually (only the chunks of changed members move) and whose conflict versions
/// are whole packages.
package actor ContainerSync {
    /// The container's identifier.
    package let container: String
    /// The container's folder: what is in it syncs (but `.nosync` names).
    package let root: URL
    /// Its `Documents` folder.
    package let documents: URL
    let client: SyncClient
    let store: AgentStore
    let logger: Logger
    var state: DeviceSyncState
    var files: LocalFiles
    /// Chunk lists of local contents (per member for a package), by content token.
    var localContents: [String: [LocalMember]] = [:]
    /// The extensions that make a folder a package.
    package let packageExtensions: Set<String>
    /// The last problem, per item (quota, unreachable server, …; fetching under ``fetchErrorKey``),
    /// for `ubiquity status`.
    package internal(set) var errors: [String: String] = [:] {
        didSet { statusVersion &+= 1 }
    }
    /// Where a failed fetch is reported in ``errors``.
    package static let fetchErrorKey = "(changes)"
    /// Whether every item is downloaded at once (the Mac's behaviour) rather than on demand.
    package let greedy: Bool
    /// Items an app asked to download.
    var requested: Set<String> {
        didSet { statusVersion &+= 1 }
    }
    /// Why an item's last download failed.
    var downloadErrors: [String: String] = [:] {
        didSet { statusVersion &+= 1 }
    }
    /// Transfers under way, by item.
    var transfers: [String: Transfer] = [:] {
        didSet { statusVersion &+= 1 }
    }
    /// Who waits for an item's download.
    var downloadWaiters: [String: [CheckedContinuation<Void, any Error>]] = [:]
    /// The placeholders in the folder (path → what it says), to notice one deleted by a user
    /// and to write only those that change.
    var placeholders = Placeholders()
    /// Per item, the conflict revisions put in its version store.
    var conflictCopies: [String: Set<String>]
    /// The folders (relative paths) to look at in the next round; nil: everything. Without a
    /// watcher (``noteChange(at:)`` never called) every round looks at everything.
    var changedFolders: Set<String>?
    /// Folders made or moved in since the last round, walked whole by the next.
    var changedTrees: Set<String> = []
    /// Whether a watcher tells this container's changes.
    var watched = false
    /// Where each item is shown (kept in step with ``state`` item by item).
    var shown = ShownTree()
    /// Items to bring in step again in the next round, besides those whose state changed
    /// (their folder was not there yet, their download failed…); nil: every item.
    var materialPending: Set<String>?
    /// Items whose server state has conflict versions (with ``conflictCopies``, what
    /// reconciling conflicts looks at).
    var conflicted: Set<String> = []
    /// How many chunk lists were kept when unused ones were last forgotten.
    var contentsKept = 0
    /// Small files' bytes from this round's pages of changes, by item, and their total.
    var inlined: [String: Inlined] = [:]
    var inlinedBytes = 0
    /// Counts what an item's status could show changing (transfers, errors, rounds): the
    /// agent compares it to tell watchers (metadata queries) only when something changed.
    package internal(set) var statusVersion = 0 {
        didSet { statusObserver?() }
    }
    /// Told (on this actor) whenever ``statusVersion`` changes: the agent tells watching
    /// queries then, instead of looking every few milliseconds.
    private let statusObserver: (@Sendable () -> Void)?
    /// Whether a round runs, whether another was asked for meanwhile, and who waits for it.
    private var running = false
    private var rerun = false
    private var roundWaiters: [CheckedContinuation<Void, Never>] = []
    /// When the last round finished.
    package private(set) var lastSync: Date?

    struct Transfer {
        var downloading: Bool
        var done: Int64
        var total: Int64
        var percent: Double { total > 0 ? Double(done) * 100 / Double(total) : 0 }
    }

    /// Resumes (or starts) syncing `container`, whose folder is `root`; `onStatusChange` is
    /// called (and must return at once) whenever an item's status may have changed.
    package init(container: String, root: URL, client: SyncClient, store: AgentStore, device: String, greedy: Bool = false,
                packageExtensions: Set<String> = LocalScanner.standardPackageExtensions,
                logger: Logger = Logger(label: "ubiquity.agent"), onStatusChange: (@Sendable () -> Void)? = nil) throws {
        self.container = container
        statusObserver = onStatusChange
        self.packageExtensions = packageExtensions
        self.greedy = greedy
        self.root = root
        documents = root.appendingPathComponent(ContainerLayout.documentsFolder)
        self.client = client
        self.store = store
        self.logger = logger
        var interner = StringInterner() // ids, revisions, tokens and paths held once, not once a table
        state = try store.state(of: container, interning: &interner).map(DeviceSyncState.init(restoring:)) ?? DeviceSyncState(device: device)
        files = LocalFiles(try store.files(of: container, interning: &interner))
        requested = try store.downloadRequests(of: container)
        conflictCopies = try store.conflictCopies(of: container)
        try FileManager.default.createDirectory(at: documents, withIntermediateDirectories: true)
        placeholders = Placeholders(Self.placeholdersOnDisk(in: root, packageExtensions: packageExtensions))
        shown.update(Set(state.persisted.remote.keys).union(state.persisted.local.keys), from: state, onDisk: files.path(of:))
        Self.removeStagedDownloads(in: root, logger: logger)
    }

    /// A scanner of the container's folder (`Documents` walked through, not an item).
    var scanner: LocalScanner {
        LocalScanner(root: root, packageExtensions: packageExtensions, transparent: [ContainerLayout.documentsFolder])
    }

    /// Downloads a killed agent left half-written (`.ubiquity-download-…`: scans skip them, and
    /// nothing else uses them) are removed when the container is opened again.
    static func removeStagedDownloads(in folder: URL, logger: Logger) {
        guard let walker = FileManager.default.enumerator(atPath: folder.path) else { return }
        while let relative = walker.nextObject() as? String {
            let name = (relative as NSString).lastPathComponent
            guard name.hasPrefix(".ubiquity-download-") else { continue }
            walker.skipDescendants()
            do {
                try FileManager.default.removeItem(at: folder.appendingPathComponent(relative))
                logger.info("removed a download left unfinished", metadata: ["path": "\(relative)"])
            } catch {
                logger.warning("cannot remove a download left unfinished", metadata: ["path": "\(relative)", "error": "\(error)"])
            }
        }
    }

    /// The conflict versions of the item at `path` (relative to the container's folder) as the server last
    /// said (revision and content token).
    package func conflicts(of path: String) -> [ConflictSnapshot] {
        guard let item = item(at: path) else { return [] }
        return state.conflicts(item)
    }

    /// The item shown at `path` (relative to the container's folder), downloaded or not.
    func item(at path: String) -> String? {
        if let file = files[path] { return file.item }
        if let placeholder = placeholders[LocalContents.placeholderPath(for: path)], !placeholder.item.isEmpty { return placeholder.item }
        return shown.item(at: path)
    }

    /// The container's sequence up to which every change has been fetched.
    package var cursor: Int64 { state.persisted.cursor }

    /// Whether everything local is on the server and everything known from it is here.
    package var isIdle: Bool { state.isIdle && errors.isEmpty && !running }

    /// One round: local changes go up (metadata first, then only the chunks the server lacks),
    /// changes from the server come down. Returns after the server answered everything sent.
    /// Called while a round runs, it asks for another and returns when that one is done.
    package func syncOnce() async throws {
        if running {
            rerun = true
            await withCheckedContinuation { roundWaiters.append($0) }
            return
        }
        running = true
        defer {
            running = false
            for waiter in roundWaiters { waiter.resume() }
            roundWaiters = []
        }
        var failure: (any Error)?
        repeat {
            rerun = false
            do {
                try await round()
                failure = nil
            } catch {
                failure = error // a change during the round asked for another: it may succeed
            }
        } while rerun
        if let failure { throw failure }
    }

    private func round() async throws {
        defer {
            forgetInlined()
            statusVersion &+= 1
        }
        let clock = ContinuousClock(), start = clock.now
        var marks: [(String, ContinuousClock.Instant)] = []
        defer {
            // Where a round's time went, for whoever runs the agent at debug level.
            if logger.logLevel <= .debug {
                var metadata: Logger.Metadata = ["container": "\(container)"], last = start
                for (phase, at) in marks {
                    metadata[phase + "Ms"] = "\((at - last).inMilliseconds)"
                    last = at
                }
                logger.debug("round", metadata: metadata)
            }
        }
        try await scanLocalChanges()
        marks.append(("scan", clock.now))
        let committed = try await send(state.requests(fetch: false).compactMap { if case .commit(let change) = $0 { change } else { nil } })
        // A page listing only this round's own commits is not fetched (the answers said it all,
        // and the container is known up to them: an earlier fetch's failure no longer stands).
        if !committed.isEmpty, state.skipOwnChanges(committed) {
            errors[Self.fetchErrorKey] = nil
        } else if let fetch = state.fetchRequest() {
            defer { statusVersion &+= 1 }
            do {
                try await perform(fetch)
            } catch let error as SyncClientError {
                failed(fetch, error)
            }
        }
        marks.append(("up", clock.now))
        let looked = try await materialize()
        marks.append(("down", clock.now))
        try await reconcileConflicts()
        forgetUnusedContents()
        try await persist()
        marks.append(("settle", clock.now))
        lastSync = Date()
        answerDownloadWaiters()
        if looked + committed.count >= FreedMemory.threshold {
            store.releaseMemory()
            FreedMemory.release()
        }
    }

    /// A request the server did not answer or refused: kept for the next round, and said.
    func failed(_ request: SyncRequest, _ error: SyncClientError) {
        state.failed(request)
        switch request {
        case .commit(let change): errors[change.item] = error.description
        case .fetch: errors[Self.fetchErrorKey] = error.description
        case .resolve(let item, _, _): errors[item] = error.description
        }
        logger.warning("sync request failed", metadata: ["container": "\(container)", "error": "\(error)"])
    }

    /// Writes what changed of the sync state, with the files that changed or went, in one
    /// transaction (what a failed write had is written by the next).
    func persist(upsert: [AgentStore.File] = [], removed: [String] = []) async throws {
        let (touched, changed) = state.takeTouched()
        do {
            try await store.record(container, state: state.persisted, touched: touched, changed: changed, upsert: upsert, removed: removed)
        } catch {
            state.markTouched(touched, changed: changed)
            throw error
        }
    }

    // MARK: Up

    /// Cuts the contents of the file or package at `path` into chunks (remembered for the
    /// upload) and returns their token; nil if it vanished meanwhile (a temporary renamed
    /// away: the next scan sees what it became).
    func cut(_ path: String, kind: ItemKind, scanner: LocalScanner) throws -> String? {
        guard kind != .directory else { return LocalContents.folderToken }
        let members: [LocalMember]
        do {
            members = try LocalContents.cut(root.appendingPathComponent(path), kind: kind, scanner: scanner, relative: path)
        } catch where scanner.fingerprint(of: path)?.kind != kind {
            return nil
        }
        let content = LocalContents.token(LocalContents.manifest(members, kind: kind), kind: kind)
        localContents[content] = members
        return content
    }

    func perform(_ request: SyncRequest) async throws {
        switch request {
        case .commit(let change):
            try await send([change])
        case .fetch(let since):
            errors[Self.fetchErrorKey] = nil
            var cursor = since
            while true {
                let page = try await client.changes(container: container, since: cursor, brief: true, inline: inlineLimit)
                keepInlined(page.items)
                state.fetched(page.items.map(Self.snapshot), upTo: page.more ? (page.items.last?.sequence ?? cursor) : page.sequence)
                guard page.more, let last = page.items.last?.sequence else { break }
                cursor = last
            }
        case .resolve(let item, let keep, let remove):
            state.learn(Self.snapshot(try await client.resolve(container: container, item: item, keep: keep, remove: remove)))
        }
        try await persist()
    }

    /// The change's chunk list as a difference from its base revision's, when that list is
    /// known here (a file edited since it was downloaded or sent); nil otherwise.
    func delta(for change: LocalChange, members: [LocalMember]) -> ChunkListDelta? {
        guard change.kind ?? .file == .file, !change.deleted, let base = change.base, let new = members.first,
              let remote = state.persisted.remote[change.item], remote.revision == base,
              let old = localContents[remote.content]?.first else { return nil }
        return ChunkListDelta(from: old.chunks, to: new.chunks)
    }

    /// Forgets the chunk lists of one chunk, which cost more to keep than to cut again (a file
    /// of at most ``ContentChunker/maximumSize`` bytes; kept through the round that cut them),
    /// and those nothing refers to any more (local files, the server's current contents,
    /// changes not acknowledged yet) — once they have grown by half since the last time, so
    /// that a round's cost follows what changed, not how many items there are. What stays is
    /// what a small edit of a large file needs: the chunk list it is a difference from.
    func forgetUnusedContents() {
        localContents = localContents.filter { $0.value.count > 1 || ($0.value.first?.chunks.count ?? 0) > 1 }
        guard localContents.count > contentsKept + max(256, contentsKept / 2) else { return }
        defer { contentsKept = localContents.count }
        var used = Set(files.byPath.values.map(\.content))
        for remote in state.persisted.remote.values { used.insert(remote.content) }
        for change in state.persisted.sending.values { used.insert(change.content) }
        for change in state.persisted.queued.values { used.insert(change.content) }
        localContents = localContents.filter { used.contains($0.key) }
    }

    /// The chunks of a change's contents: known from the scan or a download, else cut again
    /// from the item's file (after a restart). If the file changed meanwhile, its present
    /// contents go: the next scan records them anyway.
    func contents(for change: LocalChange) throws -> [LocalMember] {
        if let known = localContents[change.content] { return known }
        let kind = change.kind ?? .file
        guard kind != .directory, let path = files.path(of: change.item) else { return [] }
        let members = try LocalContents.cut(root.appendingPathComponent(path), kind: kind, scanner: scanner, relative: path)
        localContents[LocalContents.token(LocalContents.manifest(members, kind: kind), kind: kind)] = members
        return members
    }

    // MARK: Mapping

    static func snapshot(_ item: ItemState) -> ItemSnapshot {
        ItemSnapshot(id: item.id, revision: item.revision, name: item.name, content: item.digest ?? LocalContents.token(item.manifest, kind: item.kind),
                     deleted: item.deleted, sequence: item.sequence,
                     conflicts: item.conflicts.map { ConflictSnapshot(revision: $0.revision, content: $0.digest ?? LocalContents.token($0.manifest, kind: item.kind)) },
                     size: item.size, modificationDate: item.modificationDate, parent: item.parent, kind: item.kind)
    }
}

/// A request the agent cannot carry out for a container's item, saying why.
package struct ContainerSyncError: Error, CustomStringConvertible, Equatable {
    /// Why.
    package var reason: String
    /// What an app asking for it is told it was (``AgentError/Code``).
    package var code: AgentError.Code

    /// An error saying `reason`, of `code` for an app that asked.
    package init(_ reason: String, code: AgentError.Code = .failed) {
        self.reason = reason
        self.code = code
    }

    /// The reason.
    package var description: String { reason }
}
