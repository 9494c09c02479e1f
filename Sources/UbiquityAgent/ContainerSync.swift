import Foundation
import Logging
import UbiquityClient
import UbiquityCoordination
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

/// Keeps one container's `Documents` folder in step with the server: the agent's loop for one
/// container, joining ``LocalScanner`` (what changed here), ``DeviceSyncState`` (what to do),
/// ``SyncClient`` (the server) and ``AgentStore`` (what survives a restart).
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
public actor ContainerSync {
    /// The container's identifier.
    public let container: String
    /// Its `Documents` folder.
    public let documents: URL
    let client: SyncClient
    let store: AgentStore
    let logger: Logger
    var state: DeviceSyncState
    var files: LocalFiles
    /// Chunk lists of local contents (per member for a package), by content token.
    var localContents: [String: [LocalMember]] = [:]
    /// The extensions that make a folder a package.
    public let packageExtensions: Set<String>
    /// The last problem, per item (quota, unreachable server, …; fetching under ``fetchErrorKey``),
    /// for `ubiquity status`.
    public internal(set) var errors: [String: String] = [:] {
        didSet { statusVersion &+= 1 }
    }
    /// Where a failed fetch is reported in ``errors``.
    public static let fetchErrorKey = "(changes)"
    /// Whether every item is downloaded at once (the Mac's behaviour) rather than on demand.
    public let greedy: Bool
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
    /// The placeholders in the folder (path → item), to notice one deleted by a user.
    var placeholders: [String: String] = [:]
    /// Per item, the conflict revisions put in its version store.
    var conflictCopies: [String: Set<String>]
    /// Whether a round runs, whether another was asked for meanwhile, and who waits for it.
    /// Counts what an item's status could show changing (transfers, errors, rounds): the
    /// agent compares it to tell watchers (metadata queries) only when something changed.
    public private(set) var statusVersion = 0
    private var running = false
    private var rerun = false
    private var roundWaiters: [CheckedContinuation<Void, Never>] = []
    /// When the last round finished.
    public private(set) var lastSync: Date?

    struct Transfer {
        var downloading: Bool
        var done: Int64
        var total: Int64
        var percent: Double { total > 0 ? Double(done) * 100 / Double(total) : 0 }
    }

    /// Resumes (or starts) syncing `container` into `root/Documents`.
    public init(container: String, root: URL, client: SyncClient, store: AgentStore, device: String, greedy: Bool = false,
                packageExtensions: Set<String> = LocalScanner.standardPackageExtensions,
                logger: Logger = Logger(label: "ubiquity.agent")) throws {
        self.container = container
        self.packageExtensions = packageExtensions
        self.greedy = greedy
        documents = root.appendingPathComponent("Documents")
        self.client = client
        self.store = store
        self.logger = logger
        state = try store.state(of: container).map(DeviceSyncState.init(restoring:)) ?? DeviceSyncState(device: device)
        files = LocalFiles(try store.files(of: container))
        requested = try store.downloadRequests(of: container)
        conflictCopies = try store.conflictCopies(of: container)
        try FileManager.default.createDirectory(at: documents, withIntermediateDirectories: true)
        placeholders = Self.placeholdersOnDisk(in: documents, packageExtensions: packageExtensions).mapValues(\.item)
        Self.removeStagedDownloads(in: documents, logger: logger)
    }

    /// Downloads a killed agent left half-written (`.ubiquity-download-…`: scans skip them, and
    /// nothing else uses them) are removed when the container is opened again.
    static func removeStagedDownloads(in documents: URL, logger: Logger) {
        guard let walker = FileManager.default.enumerator(atPath: documents.path) else { return }
        while let relative = walker.nextObject() as? String {
            let name = (relative as NSString).lastPathComponent
            guard name.hasPrefix(".ubiquity-download-") else { continue }
            walker.skipDescendants()
            do {
                try FileManager.default.removeItem(at: documents.appendingPathComponent(relative))
                logger.info("removed a download left unfinished", metadata: ["path": "\(relative)"])
            } catch {
                logger.warning("cannot remove a download left unfinished", metadata: ["path": "\(relative)", "error": "\(error)"])
            }
        }
    }

    /// The conflict versions of the item at `path` (relative to `Documents`) as the server last
    /// said (revision and content token).
    public func conflicts(of path: String) -> [ConflictSnapshot] {
        guard let item = item(at: path) else { return [] }
        return state.conflicts(item)
    }

    /// The item shown at `path` (relative to `Documents`), downloaded or not.
    func item(at path: String) -> String? {
        if let file = files[path] { return file.item }
        return Self.paths(of: state.visibleItems).first { $0.value == path }?.key
    }

    /// Whether everything local is on the server and everything known from it is here.
    public var isIdle: Bool { state.isIdle && errors.isEmpty }

    /// One round: local changes go up (metadata first, then only the chunks the server lacks),
    /// changes from the server come down. Returns after the server answered everything sent.
    /// Called while a round runs, it asks for another and returns when that one is done.
    public func syncOnce() async throws {
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
        defer { statusVersion &+= 1 }
        try scanLocalChanges()
        for request in state.requests(fetch: true) {
            defer { statusVersion &+= 1 }
            do {
                try await perform(request)
            } catch let error as SyncClientError {
                state.failed(request)
                switch request {
                case .commit(let change): errors[change.item] = error.description
                case .fetch: errors[Self.fetchErrorKey] = error.description
                case .resolve(let item, _, _): errors[item] = error.description
                }
                logger.warning("sync request failed", metadata: ["container": "\(container)", "error": "\(error)"])
            }
        }
        try await materialize()
        try await reconcileConflicts()
        forgetUnusedContents()
        try store.record(container, state: state.persisted)
        lastSync = Date()
        answerDownloadWaiters()
    }

    // MARK: Up

    /// Feeds what changed in the folder since the last look into the sync decisions: new,
    /// edited, moved and removed files, folders and packages (a folder's items follow it).
    func scanLocalChanges() throws {
        let scanner = LocalScanner(root: documents, packageExtensions: packageExtensions)
        let now = try scanner.scan()
        let before = files
        let changes = LocalScanner.changes(from: before.fingerprints, to: now)
        if !changes.isEmpty { logger.debug("local changes", metadata: ["container": "\(container)", "changes": "\(changes)"]) }
        var upsert: [AgentStore.File] = []
        var moved: [String: AgentStore.File] = [:]
        for (from, to) in changes.moved {
            if let file = files.removeValue(forKey: from) { moved[to] = file }
        }
        // What arrived (moved here or new), parents before their items.
        let arrivals = (changes.moved.map(\.to) + changes.added).sorted { (LocalContents.depth($0), $0) < (LocalContents.depth($1), $1) }
        for path in arrivals {
            guard let print = now[path] else { continue }
            let folder = LocalContents.folder(of: path), name = LocalContents.name(of: path)
            let parent: String?
            if folder.isEmpty {
                parent = nil
            } else if let record = files[folder], record.fingerprint.kind == .directory {
                parent = record.item
            } else {
                continue // its folder is not recorded (yet): the next scan sees it again
            }
            let date = Double(print.modified) / 1e9
            if var file = moved[path] {
                let shown = state.visible(file.item)
                if shown?.name != name || shown?.parent != parent {
                    state.move(item: file.item, to: name, parent: parent, date: print.kind == .directory ? Date().timeIntervalSince1970 : date)
                }
                file.path = path
                file.fingerprint = print
                files[path] = file
                upsert.append(file)
                continue
            }
            guard let content = try cut(path, kind: print.kind, scanner: scanner) else { continue }
            let item = "i" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
            state.save(item: item, name: name, parent: parent, kind: print.kind, content: content,
                       date: print.kind == .directory ? Date().timeIntervalSince1970 : date)
            let file = AgentStore.File(path: path, item: item, fingerprint: print, content: content)
            files[path] = file
            upsert.append(file)
        }
        for path in changes.modified {
            guard var file = files[path], let print = now[path] else { continue }
            if print.kind != .directory {
                guard let content = try cut(path, kind: print.kind, scanner: scanner) else { continue }
                if file.content != content {
                    state.save(item: file.item, content: content, date: Double(print.modified) / 1e9)
                    file.revision = nil
                }
                file.content = content
            }
            file.fingerprint = print
            files[path] = file
            upsert.append(file)
        }
        // What went, items before their folders.
        for path in changes.removed.sorted(by: { LocalContents.depth($0) > LocalContents.depth($1) }) {
            guard let file = before[path] else { continue }
            if files[path]?.item == file.item { files[path] = nil }
            if files.contains(item: file.item) { continue } // still here under another name
            state.delete(item: file.item, date: Date().timeIntervalSince1970)
        }
        // A placeholder removed by someone else than the agent: the item not downloaded was deleted.
        for (path, item) in placeholders where !FileManager.default.fileExists(atPath: documents.appendingPathComponent(path).path) {
            placeholders[path] = nil
            if files.contains(item: item) { continue }
            state.delete(item: item, date: Date().timeIntervalSince1970)
        }
        try store.record(container, state: state.persisted, upsert: upsert, removed: changes.removed + changes.moved.map(\.from))
    }

    /// Cuts the contents of the file or package at `path` into chunks (remembered for the
    /// upload) and returns their token; nil if it vanished meanwhile (a temporary renamed
    /// away: the next scan sees what it became).
    func cut(_ path: String, kind: ItemKind, scanner: LocalScanner) throws -> String? {
        guard kind != .directory else { return LocalContents.folderToken }
        let members: [LocalMember]
        do {
            members = try LocalContents.cut(documents.appendingPathComponent(path), kind: kind, scanner: scanner, relative: path)
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
            let kind = change.kind ?? .file
            let members = change.deleted ? [] : try contents(for: change)
            var update = ItemUpdate(baseRevision: change.base, name: change.name, parent: change.parent, kind: kind, modificationDate: change.date,
                                    manifest: LocalContents.manifest(members, kind: kind),
                                    deleted: change.deleted, changeId: change.changeId.replacingOccurrences(of: "#", with: "."))
            let answer: CommitResponse
            if let delta = delta(for: change, members: members) {
                // Only the difference from the base revision's chunk list travels.
                var brief = update
                brief.manifest = Manifest()
                brief.manifestDelta = delta
                do {
                    answer = try await client.commit(container: container, item: change.item, update: brief, brief: true)
                } catch let error as SyncClientError where error.code == "deltaBaseUnknown" {
                    answer = try await client.commit(container: container, item: change.item, update: update, brief: true)
                }
            } else {
                update.manifestDelta = nil
                answer = try await client.commit(container: container, item: change.item, update: update, brief: true)
            }
            // Only the chunks the server lacks travel; read back from the file and checked, so
            // contents changed since the scan are never sent under the old hash.
            if !answer.missingChunks.isEmpty, let path = files.path(of: change.item) {
                try await upload(members, missing: Set(answer.missingChunks), of: change.item, from: documents.appendingPathComponent(path))
            }
            errors[change.item] = nil
            if var file = files.file(of: change.item), file.content == change.content, !change.deleted {
                file.revision = answer.revision
                files[file.path] = file
                try store.record(container, state: state.persisted, upsert: [file])
            }
            state.committed(CommitAnswer(changeId: change.changeId, revision: answer.revision, item: Self.snapshot(answer.item)))
        case .fetch(let since):
            errors[Self.fetchErrorKey] = nil
            var cursor = since
            while true {
                let page = try await client.changes(container: container, since: cursor, brief: true)
                state.fetched(page.items.map(Self.snapshot), upTo: page.more ? (page.items.last?.sequence ?? cursor) : page.sequence)
                guard page.more, let last = page.items.last?.sequence else { break }
                cursor = last
            }
        case .resolve(let item, let keep, let remove):
            state.learn(Self.snapshot(try await client.resolve(container: container, item: item, keep: keep, remove: remove)))
        }
        try store.record(container, state: state.persisted)
    }

    /// The change's chunk list as a difference from its base revision's, when that list is
    /// known here (a file edited since it was downloaded or sent); nil otherwise.
    func delta(for change: LocalChange, members: [LocalMember]) -> ChunkListDelta? {
        guard change.kind ?? .file == .file, !change.deleted, let base = change.base, let new = members.first,
              let remote = state.persisted.remote[change.item], remote.revision == base,
              let old = localContents[remote.content]?.first else { return nil }
        return ChunkListDelta(from: old.chunks, to: new.chunks)
    }

    /// Forgets the chunk lists nothing refers to any more (local files, the server's current
    /// contents, changes not acknowledged yet).
    func forgetUnusedContents() {
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
        let scanner = LocalScanner(root: documents, packageExtensions: packageExtensions)
        let members = try LocalContents.cut(documents.appendingPathComponent(path), kind: kind, scanner: scanner, relative: path)
        localContents[LocalContents.token(LocalContents.manifest(members, kind: kind), kind: kind)] = members
        return members
    }

    /// Uploads the `missing` chunks of an item's contents at `url` (a file, or a package's
    /// members), ``transferConcurrency`` at a time.
    func upload(_ members: [LocalMember], missing: Set<String>, of item: String, from url: URL) async throws {
        var sent = Set<String>()
        let wanted = members.map { member in (member, member.chunks.filter { missing.contains($0.hash) && sent.insert($0.hash).inserted }) }
        transfers[item] = Transfer(downloading: false, done: 0, total: wanted.reduce(0) { $0 + $1.1.reduce(0) { $0 + Int64($1.length) } })
        defer { transfers[item] = nil }
        // Chunks go in batches of about `transferBatchBytes`, a few batches at a time.
        let client = client
        try await withThrowingTaskGroup(of: Int.self) { group in
            var inFlight = 0
            var batch = ChunkBatch(), batchBytes = 0
            func dispatch() async throws {
                guard !batch.chunks.isEmpty else { return }
                if inFlight == Self.transferConcurrency, let done = try await group.next() {
                    transfers[item]?.done += Int64(done)
                    inFlight -= 1
                }
                let sending = batch, size = batchBytes
                group.addTask {
                    try await client.upload(sending)
                    return size
                }
                inFlight += 1
                batch = ChunkBatch()
                batchBytes = 0
            }
            reading: for (member, chunks) in wanted where !chunks.isEmpty {
                let handle = try FileHandle(forReadingFrom: member.path.isEmpty ? url : url.appendingPathComponent(member.path))
                defer { try? handle.close() }
                for chunk in chunks {
                    try handle.seek(toOffset: UInt64(chunk.offset))
                    let bytes = [UInt8](try handle.read(upToCount: chunk.length) ?? Data())
                    // Changed since the scan: the next round sends the new contents.
                    guard bytes.withUnsafeBytes({ ContentChunker.hash($0) }) == chunk.hash else { break reading }
                    if batchBytes + bytes.count > Self.transferBatchBytes || batch.chunks.count == ChunkBatch.maximumCount { try await dispatch() }
                    batch.chunks.append(.init(hash: chunk.hash, bytes: bytes))
                    batchBytes += bytes.count
                }
            }
            try await dispatch()
            while let done = try await group.next() { transfers[item]?.done += Int64(done) }
        }
    }

    /// How many batches of chunks travel at once, each way.
    static let transferConcurrency = 4

    /// About how many bytes of chunks one request carries, each way (``ChunkBatch``).
    static let transferBatchBytes = 4 << 20

    // MARK: Mapping

    static func snapshot(_ item: ItemState) -> ItemSnapshot {
        ItemSnapshot(id: item.id, revision: item.revision, name: item.name, content: item.digest ?? LocalContents.token(item.manifest, kind: item.kind),
                     deleted: item.deleted, sequence: item.sequence,
                     conflicts: item.conflicts.map { ConflictSnapshot(revision: $0.revision, content: $0.digest ?? LocalContents.token($0.manifest, kind: item.kind)) },
                     size: item.size, modificationDate: item.modificationDate, parent: item.parent, kind: item.kind)
    }
}

/// A request the agent cannot carry out for a container's item, saying why.
public struct ContainerSyncError: Error, CustomStringConvertible, Equatable {
    /// Why.
    public var reason: String

    /// An error saying `reason`.
    public init(_ reason: String) {
        self.reason = reason
    }

    /// The reason.
    public var description: String { reason }
}
