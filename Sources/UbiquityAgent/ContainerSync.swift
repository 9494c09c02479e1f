import Foundation
import Logging
import UbiquityCoordination
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

/// Keeps one container's `Documents` folder in step with the server: the agent's loop for one
/// container, joining ``LocalScanner`` (what changed here), ``DeviceSyncState`` (what to do),
/// ``SyncClient`` (the server) and ``AgentStore`` (what survives a restart).
///
/// First version: the files directly in `Documents` (subfolders and packages are not synced
/// yet), every item downloaded (the "greedy" behaviour), conflicts kept on the server and
/// visible through ``conflicts(of:)``. Files are read and written under file coordination, so
/// an open document saves before it is uploaded and reloads after a download.
public actor ContainerSync {
    /// The container's identifier.
    public let container: String
    /// Its `Documents` folder.
    public let documents: URL
    let client: SyncClient
    let store: AgentStore
    let logger: Logger
    private var state: DeviceSyncState
    private var files: [String: AgentStore.File]
    /// Chunk lists of local contents not yet uploaded, by content token.
    private var localChunks: [String: [ContentChunk]] = [:]
    /// The last problem, per item (quota, unreachable server, …; fetching under ``fetchErrorKey``),
    /// for `ubiquity status`.
    public private(set) var errors: [String: String] = [:]
    /// Where a failed fetch is reported in ``errors``.
    public static let fetchErrorKey = "(changes)"

    /// Resumes (or starts) syncing `container` into `root/Documents`.
    public init(container: String, root: URL, client: SyncClient, store: AgentStore, device: String, logger: Logger = Logger(label: "ubiquity.agent")) throws {
        self.container = container
        documents = root.appendingPathComponent("Documents")
        self.client = client
        self.store = store
        self.logger = logger
        state = try store.state(of: container).map(DeviceSyncState.init(restoring:)) ?? DeviceSyncState(device: device)
        files = try store.files(of: container)
        try FileManager.default.createDirectory(at: documents, withIntermediateDirectories: true)
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
    public func syncOnce() async throws {
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
        try store.record(container, state: state.persisted)
    }

    // MARK: Up

    /// Feeds what changed in the folder since the last look into the sync decisions.
    func scanLocalChanges() throws {
        let now = try LocalScanner(root: documents).scan().filter { !$0.key.contains("/") } // files directly in Documents
        let before = files.mapValues(\.fingerprint)
        let changes = LocalScanner.changes(from: before, to: now)
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
            let chunks = try ContentChunker.standard.chunks(ofFileAt: documents.appendingPathComponent(path))
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
            state.delete(item: file.item, date: Date().timeIntervalSince1970)
        }
        try store.record(container, state: state.persisted, upsert: upsert, removed: changes.removed)
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
                try await upload(chunks.filter { missing.contains($0.hash) }, from: documents.appendingPathComponent(path))
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

    func upload(_ chunks: [ContentChunk], from url: URL) async throws {
        guard !chunks.isEmpty else { return }
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() }
        for chunk in chunks {
            try handle.seek(toOffset: UInt64(chunk.offset))
            let bytes = [UInt8](try handle.read(upToCount: chunk.length) ?? Data())
            let hash = bytes.withUnsafeBytes { ContentChunker.hash($0) }
            guard hash == chunk.hash else { return } // changed since the scan: the next round sends the new contents
            try await client.upload(bytes, hash: chunk.hash)
        }
    }

    // MARK: Down

    /// Brings the folder to what the server has for every item without local changes:
    /// downloads new and changed contents, follows renames, removes deleted files.
    func materialize() async throws {
        for (item, remote) in state.visibleItems.sorted(by: { $0.key < $1.key }) where !state.hasLocalChanges(item) {
            let local = files.first(where: { $0.value.item == item })
            if remote.deleted {
                if let local {
                    try coordinatedRemove(local.key)
                    files[local.key] = nil
                    try store.record(container, state: state.persisted, removed: [local.key])
                }
                continue
            }
            if let local, local.value.content == remote.content {
                if local.key != remote.name { try rename(local.value, to: remote.name) }
                continue
            }
            guard let fresh = try await download(item, expecting: remote.content, to: remote.name) else { continue }
            if let local, local.key != remote.name {
                try coordinatedRemove(local.key)
                files[local.key] = nil
                try store.record(container, state: state.persisted, removed: [local.key])
            }
            files[remote.name] = fresh
            try store.record(container, state: state.persisted, upsert: [fresh])
        }
    }

    /// Downloads the item's current contents into `name`; nil if they are not uploaded yet (or
    /// changed meanwhile: the next round gets them).
    func download(_ item: String, expecting content: String, to name: String) async throws -> AgentStore.File? {
        let state = try await client.item(container: container, id: item)
        guard state.uploaded, let chunks = state.manifest.chunks, Self.contentToken(chunks) == content else { return nil }
        var data = Data()
        var pieces: [ContentChunk] = []
        for chunk in chunks {
            let bytes = try await client.download(chunk.hash)
            guard bytes.withUnsafeBytes({ ContentChunker.hash($0) }) == chunk.hash else {
                throw SyncClientError(status: 200, code: "hashMismatch", message: "chunk \(chunk.hash) of \(name) arrived damaged")
            }
            pieces.append(ContentChunk(offset: data.count, length: bytes.count, hash: chunk.hash))
            data.append(contentsOf: bytes)
        }
        localChunks[content] = pieces
        let url = documents.appendingPathComponent(name)
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forReplacing) { url in
            try SafeSave.write(data, to: url)
        }
        guard let print = try LocalScanner(root: documents).scan()[name] else { return nil }
        return AgentStore.File(path: name, item: item, fingerprint: print, content: content)
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
                     conflicts: item.conflicts.map { ConflictSnapshot(revision: $0.revision, content: contentToken($0.manifest.chunks ?? [])) })
    }
}
