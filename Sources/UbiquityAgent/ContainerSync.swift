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
/// uploaded and reloads after a download. The files directly in `Documents` are synced
/// (subfolders and packages are not yet).
public actor ContainerSync {
    /// The container's identifier.
    public let container: String
    /// Its `Documents` folder.
    public let documents: URL
    let client: SyncClient
    let store: AgentStore
    let logger: Logger
    var state: DeviceSyncState
    var files: [String: AgentStore.File]
    /// Chunk lists of local contents not yet uploaded, by content token.
    private var localChunks: [String: [ContentChunk]] = [:]
    /// The last problem, per item (quota, unreachable server, …; fetching under ``fetchErrorKey``),
    /// for `ubiquity status`.
    public internal(set) var errors: [String: String] = [:]
    /// Where a failed fetch is reported in ``errors``.
    public static let fetchErrorKey = "(changes)"
    /// Whether every item is downloaded at once (the Mac's behaviour) rather than on demand.
    public let greedy: Bool
    /// Items an app asked to download.
    var requested: Set<String>
    /// Why an item's last download failed.
    var downloadErrors: [String: String] = [:]
    /// Transfers under way, by item.
    var transfers: [String: Transfer] = [:]
    /// Who waits for an item's download.
    var downloadWaiters: [String: [CheckedContinuation<Void, any Error>]] = [:]
    /// The placeholders in the folder (file name → item), to notice one deleted by a user.
    var placeholders: [String: String] = [:]
    /// Per item, the conflict revisions put in its version store.
    var conflictCopies: [String: Set<String>]
    /// Whether a round runs, whether another was asked for meanwhile, and who waits for it.
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
                logger: Logger = Logger(label: "ubiquity.agent")) throws {
        self.container = container
        self.greedy = greedy
        documents = root.appendingPathComponent("Documents")
        self.client = client
        self.store = store
        self.logger = logger
        state = try store.state(of: container).map(DeviceSyncState.init(restoring:)) ?? DeviceSyncState(device: device)
        files = try store.files(of: container)
        requested = try store.downloadRequests(of: container)
        conflictCopies = try store.conflictCopies(of: container)
        try FileManager.default.createDirectory(at: documents, withIntermediateDirectories: true)
        placeholders = Self.placeholdersOnDisk(in: documents).mapValues(\.item)
    }

    /// The item's conflict versions as the server last said (revision and content token).
    public func conflicts(of name: String) -> [ConflictSnapshot] {
        guard let item = state.visibleItems.first(where: { $0.value.name == name && !$0.value.deleted })?.key else { return [] }
        return state.conflicts(item)
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
        try scanLocalChanges()
        for request in state.requests(fetch: true) {
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
        try store.record(container, state: state.persisted)
        lastSync = Date()
        answerDownloadWaiters()
    }

    // MARK: Up

    /// Feeds what changed in the folder since the last look into the sync decisions.
    func scanLocalChanges() throws {
        let now = try LocalScanner(root: documents).scan().filter { !$0.key.contains("/") } // files directly in Documents
        let before = files.mapValues(\.fingerprint)
        let changes = LocalScanner.changes(from: before, to: now)
        if !changes.isEmpty { logger.debug("local changes", metadata: ["container": "\(container)", "changes": "\(changes)"]) }
        var upsert: [AgentStore.File] = []
        for (from, to) in changes.moved {
            guard var file = files.removeValue(forKey: from) else { continue }
            state.rename(item: file.item, to: to, date: Double(now[to]!.modified) / 1e9)
            file.path = to
            file.fingerprint = now[to]!
            files[to] = file
            upsert.append(file)
        }
        for path in changes.added + changes.modified {
            let chunks: [ContentChunk]
            do {
                chunks = try ContentChunker.standard.chunks(ofFileAt: documents.appendingPathComponent(path))
            } catch where LocalScanner(root: documents).fingerprint(of: path) == nil {
                continue // gone since the listing (a temporary file renamed away): the next scan sees what it became
            }
            let content = Self.contentToken(chunks.map { ChunkReference(hash: $0.hash, size: Int64($0.length)) })
            localChunks[content] = chunks
            let item = files[path]?.item ?? "i" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
            if files[path]?.content != content {
                state.save(item: item, name: path, content: content, date: Double(now[path]!.modified) / 1e9)
            }
            let file = AgentStore.File(path: path, item: item, fingerprint: now[path]!, content: content)
            files[path] = file
            upsert.append(file)
        }
        for path in changes.removed {
            guard let file = files.removeValue(forKey: path) else { continue }
            if files.values.contains(where: { $0.item == file.item }) { continue } // still here under another name
            state.delete(item: file.item, date: Date().timeIntervalSince1970)
        }
        // A placeholder removed by someone else than the agent: the item not downloaded was deleted.
        for (name, item) in placeholders where !FileManager.default.fileExists(atPath: documents.appendingPathComponent(name).path) {
            placeholders[name] = nil
            if files.values.contains(where: { $0.item == item }) { continue }
            state.delete(item: item, date: Date().timeIntervalSince1970)
        }
        try store.record(container, state: state.persisted, upsert: upsert, removed: changes.removed + changes.moved.map(\.from))
    }

    func perform(_ request: SyncRequest) async throws {
        switch request {
        case .commit(let change):
            let chunks = change.deleted ? [] : try chunks(for: change)
            let references = chunks.map { ChunkReference(hash: $0.hash, size: Int64($0.length)) }
            let update = ItemUpdate(baseRevision: change.base, name: change.name, kind: .file, modificationDate: change.date,
                                    manifest: Manifest(chunks: change.deleted ? [] : references), deleted: change.deleted,
                                    changeId: change.changeId.replacingOccurrences(of: "#", with: "."))
            let answer = try await client.commit(container: container, item: change.item, update: update)
            // Only the chunks the server lacks travel; read back from the file and checked, so
            // contents changed since the scan are never sent under the old hash.
            if !answer.missingChunks.isEmpty, let path = files.first(where: { $0.value.item == change.item })?.key {
                let missing = Set(answer.missingChunks)
                try await upload(chunks.filter { missing.contains($0.hash) }, of: change.item, from: documents.appendingPathComponent(path))
            }
            errors[change.item] = nil
            state.committed(CommitAnswer(changeId: change.changeId, revision: answer.revision, item: Self.snapshot(answer.item)))
        case .fetch(let since):
            errors[Self.fetchErrorKey] = nil
            var cursor = since
            while true {
                let page = try await client.changes(container: container, since: cursor)
                state.fetched(page.items.map(Self.snapshot), upTo: page.more ? (page.items.last?.sequence ?? cursor) : page.sequence)
                guard page.more, let last = page.items.last?.sequence else { break }
                cursor = last
            }
        case .resolve(let item, let keep, let remove):
            state.learn(Self.snapshot(try await client.resolve(container: container, item: item, keep: keep, remove: remove)))
        }
        try store.record(container, state: state.persisted)
    }

    /// The chunks of a change's contents: known from the scan or a download, else cut again
    /// from the item's file (after a restart). If the file changed meanwhile, its present
    /// contents go: the next scan records them anyway.
    func chunks(for change: LocalChange) throws -> [ContentChunk] {
        if let known = localChunks[change.content] { return known }
        guard let path = files.first(where: { $0.value.item == change.item })?.key else { return [] }
        let chunks = try ContentChunker.standard.chunks(ofFileAt: documents.appendingPathComponent(path))
        localChunks[Self.contentToken(chunks.map { ChunkReference(hash: $0.hash, size: Int64($0.length)) })] = chunks
        return chunks
    }

    func upload(_ chunks: [ContentChunk], of item: String, from url: URL) async throws {
        guard !chunks.isEmpty else { return }
        let handle = try FileHandle(forReadingFrom: url)
        defer {
            try? handle.close()
            transfers[item] = nil
        }
        transfers[item] = Transfer(downloading: false, done: 0, total: chunks.reduce(0) { $0 + Int64($1.length) })
        for chunk in chunks {
            try handle.seek(toOffset: UInt64(chunk.offset))
            let bytes = [UInt8](try handle.read(upToCount: chunk.length) ?? Data())
            let hash = bytes.withUnsafeBytes { ContentChunker.hash($0) }
            guard hash == chunk.hash else { return } // changed since the scan: the next round sends the new contents
            try await client.upload(bytes, hash: chunk.hash)
            transfers[item]?.done += Int64(bytes.count)
        }
    }

    // MARK: Down

    /// Brings the folder to what the server has for every item without local changes:
    /// downloads new and changed contents of items that are downloaded here (or wanted: asked
    /// for, or everything on a greedy device), lists the others as placeholders, follows
    /// renames, removes deleted files.
    func materialize() async throws {
        var wanted: [String: UbiquityPlaceholder] = [:]
        for (item, remote) in state.visibleItems.sorted(by: { $0.key < $1.key }) where !state.hasLocalChanges(item) {
            let local = files.first(where: { $0.value.item == item })
            let snapshot = state.persisted.remote[item]
            let placeholder = UbiquityPlaceholder(name: remote.name, item: item, size: snapshot?.size, modificationDate: snapshot?.modificationDate)
            if remote.deleted {
                if let local {
                    try coordinatedRemove(local.key)
                    files[local.key] = nil
                    try store.record(container, state: state.persisted, removed: [local.key])
                }
                if requested.remove(item) != nil { try store.setDownloadRequested(false, container: container, item: item) }
                continue
            }
            if let local, local.value.content == remote.content {
                if local.key != remote.name { try rename(local.value, to: remote.name) }
                continue
            }
            guard local != nil || greedy || requested.contains(item) else {
                wanted[UbiquityPlaceholder.fileName(for: remote.name)] = placeholder
                continue
            }
            let fresh: AgentStore.File?
            do {
                fresh = try await download(item, expecting: remote.content, to: remote.name, reusing: local?.value)
                downloadErrors[item] = nil
            } catch let error as SyncClientError {
                downloadErrors[item] = error.description
                logger.warning("download failed", metadata: ["container": "\(container)", "item": "\(remote.name)", "error": "\(error)"])
                fresh = nil
            }
            guard let fresh else {
                if local == nil { wanted[UbiquityPlaceholder.fileName(for: remote.name)] = placeholder } // not uploaded yet: listed meanwhile
                continue
            }
            if let local, local.key != remote.name {
                try coordinatedRemove(local.key)
                files[local.key] = nil
                try store.record(container, state: state.persisted, removed: [local.key])
            }
            files[remote.name] = fresh
            try store.record(container, state: state.persisted, upsert: [fresh])
            if requested.remove(item) != nil { try store.setDownloadRequested(false, container: container, item: item) }
        }
        try writePlaceholders(wanted)
    }

    /// Downloads the item's current contents into `name`; nil if they are not uploaded yet (or
    /// changed meanwhile: the next round gets them). Chunks the local copy (`reusing`) already
    /// has are read from it, not downloaded: a small edit of a large file moves a few chunks.
    func download(_ item: String, expecting content: String, to name: String, reusing previous: AgentStore.File?) async throws -> AgentStore.File? {
        let state = try await client.item(container: container, id: item)
        guard state.uploaded, let chunks = state.manifest.chunks, Self.contentToken(chunks) == content else { return nil }
        let data = try await assemble(chunks, of: item, name: name, reusing: previous)
        localChunks[content] = Self.pieces(chunks)
        let url = documents.appendingPathComponent(name)
        let documents = documents
        let written = try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forReplacing) { url -> Bool in
            // Saved over since the round's scan (or made there meanwhile)? Then the local edit
            // stays: the next round sends it, and the server keeps both.
            let now = LocalScanner(root: documents).fingerprint(of: name)
            if let previous, previous.path == name, now != previous.fingerprint { return false }
            if previous?.path != name, now != nil { return false }
            try SafeSave.write(data, to: url)
            return true
        }
        guard written else { return nil }
        guard let print = LocalScanner(root: documents).fingerprint(of: name) else { return nil }
        return AgentStore.File(path: name, item: item, fingerprint: print, content: content)
    }

    /// The bytes of `chunks`: from the previous local copy where it has them (checked), else
    /// from the server (checked).
    func assemble(_ chunks: [ChunkReference], of item: String, name: String, reusing previous: AgentStore.File?) async throws -> Data {
        var local: [String: ContentChunk] = [:]
        var handle: FileHandle?
        if let previous {
            let url = documents.appendingPathComponent(previous.path)
            let known = localChunks[previous.content] ?? (try? ContentChunker.standard.chunks(ofFileAt: url)) ?? []
            for chunk in known { local[chunk.hash] = chunk }
            handle = try? FileHandle(forReadingFrom: url)
        }
        defer {
            try? handle?.close()
            transfers[item] = nil
        }
        transfers[item] = Transfer(downloading: true, done: 0, total: chunks.reduce(0) { $0 + $1.size })
        var data = Data()
        for chunk in chunks {
            var bytes: [UInt8]?
            if let handle, let piece = local[chunk.hash] {
                try? handle.seek(toOffset: UInt64(piece.offset))
                let read = [UInt8]((try? handle.read(upToCount: piece.length)) ?? Data())
                if read.withUnsafeBytes({ ContentChunker.hash($0) }) == chunk.hash { bytes = read }
            }
            if bytes == nil {
                let fetched = try await client.download(chunk.hash)
                guard fetched.withUnsafeBytes({ ContentChunker.hash($0) }) == chunk.hash else {
                    throw SyncClientError(status: 200, code: "hashMismatch", message: "chunk \(chunk.hash) of \(name) arrived damaged")
                }
                bytes = fetched
            }
            data.append(contentsOf: bytes!)
            transfers[item]?.done += chunk.size
        }
        return data
    }

    /// Chunk positions for a chunk list.
    static func pieces(_ chunks: [ChunkReference]) -> [ContentChunk] {
        var offset = 0
        return chunks.map { chunk in
            defer { offset += Int(chunk.size) }
            return ContentChunk(offset: offset, length: Int(chunk.size), hash: chunk.hash)
        }
    }

    /// Makes the folder's placeholders exactly `wanted` (file name → contents).
    func writePlaceholders(_ wanted: [String: UbiquityPlaceholder]) throws {
        let present = Self.placeholdersOnDisk(in: documents)
        for name in present.keys where wanted[name] == nil {
            try? FileManager.default.removeItem(at: documents.appendingPathComponent(name))
        }
        for (name, placeholder) in wanted where present[name] != placeholder {
            // A local file of that name (made meanwhile) wins the name; the item is listed once the server settles it.
            if FileManager.default.fileExists(atPath: documents.appendingPathComponent(placeholder.name).path) { continue }
            try placeholder.write(in: documents)
        }
        placeholders = wanted.filter { FileManager.default.fileExists(atPath: documents.appendingPathComponent($0.key).path) }.mapValues(\.item)
    }

    /// The placeholders in `folder`, by file name.
    static func placeholdersOnDisk(in folder: URL) -> [String: UbiquityPlaceholder] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        var found: [String: UbiquityPlaceholder] = [:]
        for name in names {
            guard let itemName = UbiquityPlaceholder.itemName(ofPlaceholder: name) else { continue }
            found[name] = UbiquityPlaceholder.read(for: folder.appendingPathComponent(itemName))
                ?? UbiquityPlaceholder(name: itemName, item: "", size: nil)
        }
        return found
    }

    func rename(_ file: AgentStore.File, to name: String) throws {
        let from = documents.appendingPathComponent(file.path), to = documents.appendingPathComponent(name)
        guard !FileManager.default.fileExists(atPath: to.path) else {
            errors[file.item] = "cannot rename \(file.path) to \(name): a local file has that name"
            return
        }
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: from, options: .forMoving) { from in
            try FileManager.default.moveItem(at: from, to: to)
        }
        var moved = file
        moved.path = name
        files[file.path] = nil
        files[name] = moved
        try store.record(container, state: state.persisted, upsert: [moved], removed: [file.path])
    }

    func coordinatedRemove(_ path: String) throws {
        logger.debug("removing", metadata: ["container": "\(container)", "path": "\(path)"])
        let url = documents.appendingPathComponent(path)
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forDeleting) { url in
            if FileManager.default.fileExists(atPath: url.path) { try FileManager.default.removeItem(at: url) }
        }
    }

    // MARK: Mapping

    /// What names a file's contents for the sync decisions: SHA-256 of its chunk list.
    static func contentToken(_ chunks: [ChunkReference]) -> String {
        let text = chunks.map { "\($0.hash):\($0.size)" }.joined(separator: ",")
        return Data(text.utf8).withUnsafeBytes { ContentChunker.hash($0) }
    }

    static func snapshot(_ item: ItemState) -> ItemSnapshot {
        ItemSnapshot(id: item.id, revision: item.revision, name: item.name, content: contentToken(item.manifest.chunks ?? []),
                     deleted: item.deleted, sequence: item.sequence,
                     conflicts: item.conflicts.map { ConflictSnapshot(revision: $0.revision, content: contentToken($0.manifest.chunks ?? [])) },
                     size: item.size, modificationDate: item.modificationDate)
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
