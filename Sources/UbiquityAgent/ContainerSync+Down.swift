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
    /// Brings the folder to what the server has for every item without local changes, in an
    /// order that never needs a folder before it exists: deleted files and packages go; folders
    /// are made and moved (parents first); files and packages are downloaded (when downloaded
    /// here already, or wanted: asked for, or everything on a greedy device) or listed as
    /// placeholders, and moved; deleted folders go last (items first). A deleted folder that
    /// still holds something the server does not know stays, and is sent again as a new folder:
    /// nothing local is ever removed unseen.
    func materialize() async throws {
        let visible = state.visibleItems
        let paths = Self.paths(of: visible)
        let settled = visible.filter { !state.hasLocalChanges($0.key) }
        var wanted: [String: UbiquityPlaceholder] = [:]

        for (item, shown) in settled where shown.deleted {
            if requested.remove(item) != nil { try store.setDownloadRequested(false, container: container, item: item) }
            guard let local = files.file(of: item), local.fingerprint.kind != .directory else { continue }
            // Deleted elsewhere: its versions go with it (as they do with a file deleted on a Mac).
            try? NSFileVersion.removeOtherVersionsOfItem(at: documents.appendingPathComponent(local.path))
            for revision in conflictCopies.removeValue(forKey: item) ?? [] {
                try store.setConflictCopy(false, container: container, item: item, revision: revision)
            }
            try coordinatedRemove(local.path)
            files[local.path] = nil
            try store.record(container, state: state.persisted, removed: [local.path])
        }

        let folders = settled.filter { !$0.value.deleted && $0.value.kind == .directory }.compactMap { item, _ in paths[item].map { (item, $0) } }
        for (item, path) in folders.sorted(by: { (LocalContents.depth($0.1), $0.1) < (LocalContents.depth($1.1), $1.1) }) {
            if let local = files.file(of: item) {
                if local.path != path { try relocate(local, to: path) }
                continue
            }
            let url = documents.appendingPathComponent(path)
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: url.path, isDirectory: &isFolder) {
                guard isFolder.boolValue, files[path] == nil else { continue } // a local file of that name: the server settles the clash
                // A local folder of that name not sent yet: the same folder (its contents merge).
            } else {
                guard FileManager.default.fileExists(atPath: url.deletingLastPathComponent().path) else { continue }
                try FileManager.default.createDirectory(at: url, withIntermediateDirectories: false)
            }
            guard let print = LocalScanner(root: documents, packageExtensions: packageExtensions).fingerprint(of: path), print.kind == .directory else { continue }
            let file = AgentStore.File(path: path, item: item, fingerprint: print, content: LocalContents.folderToken)
            files[path] = file
            try store.record(container, state: state.persisted, upsert: [file])
        }

        for (item, remote) in settled.sorted(by: { $0.key < $1.key }) where !remote.deleted && remote.kind != .directory {
            guard let path = paths[item] else { continue }
            let folder = LocalContents.folder(of: path)
            guard folder.isEmpty || files[folder]?.fingerprint.kind == .directory else { continue } // its folder is not here yet
            let local = files.file(of: item)
            if let local, local.content == remote.content {
                if local.path != path { try relocate(local, to: path) }
                continue
            }
            let snapshot = state.persisted.remote[item]
            let placeholder = UbiquityPlaceholder(name: remote.name, item: item, size: snapshot?.size, modificationDate: snapshot?.modificationDate)
            let placeholderPath = (folder.isEmpty ? "" : folder + "/") + UbiquityPlaceholder.fileName(for: remote.name)
            guard local != nil || greedy || requested.contains(item) else {
                wanted[placeholderPath] = placeholder
                continue
            }
            let fresh: AgentStore.File?
            do {
                fresh = try await download(item, kind: remote.kind ?? .file, expecting: remote.content, to: path, reusing: local)
                downloadErrors[item] = nil
            } catch let error as SyncClientError {
                downloadErrors[item] = error.description
                logger.warning("download failed", metadata: ["container": "\(container)", "item": "\(path)", "error": "\(error)"])
                fresh = nil
            }
            guard let fresh else {
                if local == nil { wanted[placeholderPath] = placeholder } // not uploaded yet: listed meanwhile
                continue
            }
            if let local, local.path != path {
                try coordinatedRemove(local.path)
                files[local.path] = nil
                try store.record(container, state: state.persisted, removed: [local.path])
            }
            files[path] = fresh
            try store.record(container, state: state.persisted, upsert: [fresh])
            if requested.remove(item) != nil { try store.setDownloadRequested(false, container: container, item: item) }
        }

        let goneFolders = settled.filter { $0.value.deleted }.compactMap { files.file(of: $0.key) }.filter { $0.fingerprint.kind == .directory }
        for folder in goneFolders.sorted(by: { LocalContents.depth($0.path) > LocalContents.depth($1.path) }) {
            removeFolderIfEmpty(folder.path)
            files[folder.path] = nil
            try store.record(container, state: state.persisted, removed: [folder.path])
        }
        try writePlaceholders(wanted)
    }

    /// Where each item not deleted is shown, relative to `Documents`: in its folder, or at the
    /// top level when its folder is gone (an item moved into a folder deleted elsewhere at the
    /// same time is kept, not lost).
    static func paths(of visible: [String: DeviceSyncState.LocalItem]) -> [String: String] {
        var paths: [String: String] = [:]
        func resolve(_ item: String, depth: Int) -> String? {
            if let known = paths[item] { return known }
            guard let shown = visible[item], !shown.deleted else { return nil }
            var path = shown.name
            if let parent = shown.parent, depth < 256, visible[parent]?.kind == .directory, let folder = resolve(parent, depth: depth + 1) {
                path = folder + "/" + shown.name
            }
            paths[item] = path
            return path
        }
        for item in visible.keys { _ = resolve(item, depth: 0) }
        return paths
    }

    /// Removes a folder deleted on the server if nothing is left in it but placeholders and the
    /// agent's own leftovers (version stores of items gone); else it stays (and the next scan
    /// sends it as a new folder with what it holds).
    func removeFolderIfEmpty(_ path: String) {
        let url = documents.appendingPathComponent(path)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []
        if names.allSatisfy({ UbiquityPlaceholder.itemName(ofPlaceholder: $0) != nil || $0.hasPrefix(".ubiquity-") }) {
            for name in names { try? FileManager.default.removeItem(at: url.appendingPathComponent(name)) }
        }
        if rmdir(url.path) != 0 && errno != ENOENT {
            logger.info("a folder deleted elsewhere still holds local items; it stays", metadata: ["container": "\(container)", "path": "\(path)"])
        }
    }

    /// Downloads the item's current contents into `path`; nil if they are not uploaded yet (or
    /// changed meanwhile: the next round gets them). Chunks the local copy (`reusing`) already
    /// has are read from it, not downloaded: a small edit of a large file moves a few chunks,
    /// and a package's unchanged members move nothing.
    func download(_ item: String, kind: ItemKind, expecting content: String, to path: String, reusing previous: AgentStore.File?) async throws -> AgentStore.File? {
        var state = try await client.item(container: container, id: item, since: kind == .file ? previous?.revision : nil)
        if let delta = state.manifestDelta {
            // The chunk list as a difference from the revision the local copy is.
            if let previous, state.deltaBase == previous.revision, let old = try localChunks(of: previous), let chunks = try? delta.apply(to: old) {
                state.manifest = Manifest(chunks: chunks.map(\.reference))
            } else {
                state = try await client.item(container: container, id: item)
            }
        }
        guard state.uploaded, LocalContents.token(state.manifest, kind: kind) == content else { return nil }
        let members = LocalContents.members(state.manifest, kind: kind)
        let staged = try await stage(members, kind: kind, of: item, name: path, reusing: previous)
        defer { try? FileManager.default.removeItem(at: staged) } // still there if not moved into place
        localContents[content] = members
        let url = documents.appendingPathComponent(path)
        let documents = documents, packageExtensions = packageExtensions
        let written = try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forReplacing) { url -> Bool in
            // Saved over since the round's scan (or made there meanwhile)? Then the local edit
            // stays: the next round sends it, and the server keeps both.
            let now = LocalScanner(root: documents, packageExtensions: packageExtensions).fingerprint(of: path)
            if let previous, previous.path == path, now != previous.fingerprint { return false }
            if previous?.path != path, now != nil { return false }
            try SafeSave.replaceItem(at: url) { temporary in
                guard rename(staged.path, temporary.path) == 0 else {
                    throw ContainerSyncError("could not move the download of \(path) into place: \(String(cString: strerror(errno)))")
                }
            }
            return true
        }
        guard written, let print = LocalScanner(root: documents, packageExtensions: packageExtensions).fingerprint(of: path) else { return nil }
        return AgentStore.File(path: path, item: item, fingerprint: print, content: content, revision: state.revision)
    }

    /// The chunks of a local flat file as recorded (cut again if not remembered; nil if it no
    /// longer has the recorded contents).
    func localChunks(of file: AgentStore.File) throws -> [ContentChunk]? {
        if let known = localContents[file.content]?.first { return known.chunks }
        let url = documents.appendingPathComponent(file.path)
        guard let chunks = try? ContentChunker.standard.chunks(ofFileAt: url), LocalContents.token(chunks.map(\.reference)) == file.content else { return nil }
        localContents[file.content] = [LocalMember(path: "", chunks: chunks)]
        return chunks
    }

    /// Writes the item's contents into a staging file (or, for a package, a staging folder)
    /// next to where it goes, named `.ubiquity-download-…` (which scans skip), and returns its
    /// URL. Each chunk comes from the previous local copy where it has it (checked), else from
    /// the server (checked), and is written where it belongs as it arrives: nothing is held
    /// in memory but the batches in flight. Everything staged is `fsync`ed; on failure the
    /// staging goes.
    func stage(_ members: [LocalMember], kind: ItemKind, of item: String, name: String, reusing previous: AgentStore.File?) async throws -> URL {
        var local: [String: (url: URL, chunk: ContentChunk)] = [:]
        if let previous {
            let url = documents.appendingPathComponent(previous.path)
            let scanner = LocalScanner(root: documents, packageExtensions: packageExtensions)
            let known = localContents[previous.content]
                ?? (try? LocalContents.cut(url, kind: previous.fingerprint.kind, scanner: scanner, relative: previous.path)) ?? []
            for member in known {
                for chunk in member.chunks { local[chunk.hash] = (member.path.isEmpty ? url : url.appendingPathComponent(member.path), chunk) }
            }
        }
        let folder = documents.appendingPathComponent(LocalContents.folder(of: name))
        let staged = folder.appendingPathComponent(".ubiquity-download-" + UUID().uuidString.prefix(8).lowercased())
        var done = false
        defer { if !done { try? FileManager.default.removeItem(at: staged) } }
        let writer = try StagedWriter(at: staged, members: members, kind: kind)
        defer { writer.close() }

        defer { transfers[item] = nil }
        transfers[item] = Transfer(downloading: true, done: 0, total: members.reduce(0) { $0 + $1.chunks.reduce(0) { $0 + Int64($1.length) } })
        var needed: [ContentChunk] = [], handled = Set<String>()
        for chunk in members.flatMap(\.chunks) where handled.insert(chunk.hash).inserted {
            if let (url, piece) = local[chunk.hash], let handle = try? FileHandle(forReadingFrom: url) {
                try? handle.seek(toOffset: UInt64(piece.offset))
                let read = [UInt8]((try? handle.read(upToCount: piece.length)) ?? Data())
                try? handle.close()
                if read.withUnsafeBytes({ ContentChunker.hash($0) }) == chunk.hash {
                    try writer.write(read, hash: chunk.hash)
                    transfers[item]?.done += Int64(writer.occurrences(of: chunk.hash) * chunk.length)
                    continue
                }
            }
            needed.append(chunk)
        }
        // The rest from the server, in batches of about `transferBatchBytes`, a few at a time,
        // each chunk checked (by the client) and written as its batch arrives.
        var batches: [[String]] = [], current: [String] = [], currentBytes = 0
        for chunk in needed {
            if !current.isEmpty && (currentBytes + chunk.length > Self.transferBatchBytes || current.count == ChunkBatch.maximumCount) {
                batches.append(current)
                current = []
                currentBytes = 0
            }
            current.append(chunk.hash)
            currentBytes += chunk.length
        }
        if !current.isEmpty { batches.append(current) }
        let client = client
        try await withThrowingTaskGroup(of: [ChunkBatch.Chunk].self) { group in
            var inFlight = 0
            var pending = batches.makeIterator()
            while true {
                while inFlight < Self.transferConcurrency, let hashes = pending.next() {
                    group.addTask {
                        do {
                            return try await client.download(hashes)
                        } catch let error as SyncClientError where error.code == "hashMismatch" {
                            throw SyncClientError(status: 200, code: "hashMismatch", message: "\(error.message) (\(name))")
                        }
                    }
                    inFlight += 1
                }
                guard let fetched = try await group.next() else { break }
                inFlight -= 1
                for chunk in fetched {
                    try writer.write(chunk.bytes, hash: chunk.hash)
                    transfers[item]?.done += Int64(writer.occurrences(of: chunk.hash) * chunk.bytes.count)
                }
            }
        }
        try writer.finish()
        done = true
        return staged
    }

    /// Makes the folder's placeholders exactly `wanted` (path → contents).
    func writePlaceholders(_ wanted: [String: UbiquityPlaceholder]) throws {
        let present = Self.placeholdersOnDisk(in: documents, packageExtensions: packageExtensions)
        for path in present.keys where wanted[path] == nil {
            try? FileManager.default.removeItem(at: documents.appendingPathComponent(path))
        }
        for (path, placeholder) in wanted where present[path] != placeholder {
            let folder = documents.appendingPathComponent(LocalContents.folder(of: path))
            // A local file of that name (made meanwhile) wins the name; the item is listed once the server settles it.
            if FileManager.default.fileExists(atPath: folder.appendingPathComponent(placeholder.name).path) { continue }
            try placeholder.write(in: folder)
        }
        placeholders = wanted.filter { FileManager.default.fileExists(atPath: documents.appendingPathComponent($0.key).path) }.mapValues(\.item)
    }

    /// The placeholders in `folder` and its subfolders (not in packages), by path relative to it.
    static func placeholdersOnDisk(in folder: URL, packageExtensions: Set<String>) -> [String: UbiquityPlaceholder] {
        let scanner = LocalScanner(root: folder, packageExtensions: packageExtensions)
        var found: [String: UbiquityPlaceholder] = [:]
        func walk(_ relative: String) {
            let url = relative.isEmpty ? folder : folder.appendingPathComponent(relative)
            for name in (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? [] {
                let path = relative.isEmpty ? name : relative + "/" + name
                if let itemName = UbiquityPlaceholder.itemName(ofPlaceholder: name) {
                    found[path] = UbiquityPlaceholder.read(for: url.appendingPathComponent(itemName)) ?? UbiquityPlaceholder(name: itemName, item: "", size: nil)
                } else if !LocalScanner.isExcluded(name), !scanner.isPackage(name), scanner.fingerprint(of: path)?.kind == .directory {
                    walk(path)
                }
            }
        }
        walk("")
        return found
    }

    /// Moves a file, package or folder (with everything in it) to `path`, as a coordinated move.
    func relocate(_ file: AgentStore.File, to path: String) throws {
        let from = documents.appendingPathComponent(file.path), to = documents.appendingPathComponent(path)
        guard !FileManager.default.fileExists(atPath: to.path) else {
            errors[file.item] = "cannot move \(file.path) to \(path): a local item has that name"
            return
        }
        guard FileManager.default.fileExists(atPath: to.deletingLastPathComponent().path) else { return } // its folder comes first
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: from, options: .forMoving) { from in
            try FileManager.default.moveItem(at: from, to: to)
        }
        errors[file.item] = nil
        let before = files.subtree(file.path)
        let scanner = LocalScanner(root: documents, packageExtensions: packageExtensions)
        var moved: [AgentStore.File] = []
        for var inside in before {
            files[inside.path] = nil
            inside.path = path + inside.path.dropFirst(file.path.count)
            if inside.item == file.item, let print = scanner.fingerprint(of: path) { inside.fingerprint = print } // its status change time moved
            moved.append(inside)
        }
        for inside in moved { files[inside.path] = inside }
        try store.record(container, state: state.persisted, upsert: moved, removed: before.map(\.path))
    }

    func coordinatedRemove(_ path: String) throws {
        logger.debug("removing", metadata: ["container": "\(container)", "path": "\(path)"])
        let url = documents.appendingPathComponent(path)
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forDeleting) { url in
            if FileManager.default.fileExists(atPath: url.path) { try FileManager.default.removeItem(at: url) }
        }
    }
}

/// Writes downloaded chunks where they belong in a staged file or package (`pwrite` at each
/// offset the chunk has, so they may arrive in any order), then makes it all durable. The
/// owner closes it (``close()``) whatever happens.
struct StagedWriter: Sendable {
    let root: URL
    /// Where each chunk goes: member index and offsets.
    private let places: [String: [Place]]
    private let descriptors: [Int32]

    struct Place: Sendable {
        var member: Int
        var offset: Int
    }

    /// Creates the staged file (or folder with its members and their folders), each member
    /// already at its final length.
    init(at root: URL, members: [LocalMember], kind: ItemKind) throws {
        self.root = root
        var descriptors: [Int32] = [], places: [String: [Place]] = [:]
        if kind == .package { try FileManager.default.createDirectory(at: root, withIntermediateDirectories: false) }
        do {
            for (index, member) in members.enumerated() {
                let url = member.path.isEmpty ? root : root.appendingPathComponent(member.path)
                if kind == .package { try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true) }
                let fd = open(url.path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
                guard fd >= 0 else { throw Self.failure("create", url) }
                descriptors.append(fd)
                let length = member.chunks.reduce(0) { $0 + $1.length }
                guard ftruncate(fd, off_t(length)) == 0 else { throw Self.failure("size", url) }
                for chunk in member.chunks { places[chunk.hash, default: []].append(Place(member: index, offset: chunk.offset)) }
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
    func write(_ bytes: [UInt8], hash: String) throws {
        for place in places[hash] ?? [] {
            var done = 0
            while done < bytes.count {
                let wrote = bytes.withUnsafeBytes { pwrite(descriptors[place.member], $0.baseAddress! + done, bytes.count - done, off_t(place.offset + done)) }
                if wrote < 0 && errno == EINTR { continue }
                guard wrote > 0 else { throw Self.failure("write", root) }
                done += wrote
            }
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
