import Foundation
import UbiquityClient
import UbiquityCoordination
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

// What apps ask of a container (downloads, evictions, item states) and its conflict versions on
// disk; the rounds themselves are in ContainerSync.swift.
extension ContainerSync {
    // MARK: Downloads and evictions asked for

    /// Asks for the item named `name` to be downloaded (by the next round). Returns its id.
    /// - Throws: ``ContainerSyncError`` if no such item is known.
    @discardableResult
    public func requestDownload(_ name: String) throws -> String {
        if let file = files[name] { return file.item }
        guard let item = state.visibleItems.first(where: { $0.value.name == name && !$0.value.deleted })?.key else {
            throw ContainerSyncError("\(name) is not an item of \(container)")
        }
        if requested.insert(item).inserted { try store.setDownloadRequested(true, container: container, item: item) }
        downloadErrors[item] = nil
        return item
    }

    /// Returns when the item named `name` is downloaded (asking for it first).
    /// - Throws: ``ContainerSyncError`` if it is unknown, deleted meanwhile, or its download failed.
    public func waitForDownload(_ name: String) async throws {
        let item = try requestDownload(name)
        if files.values.contains(where: { $0.item == item }) { return }
        try await withCheckedThrowingContinuation { downloadWaiters[item, default: []].append($0) }
    }

    func answerDownloadWaiters() {
        for (item, waiters) in downloadWaiters {
            let result: Result<Void, any Error>
            if files.values.contains(where: { $0.item == item }) {
                result = .success(())
            } else if let error = downloadErrors[item] {
                result = .failure(ContainerSyncError("cannot download: \(error)"))
            } else if state.visible(item).map({ $0.deleted }) ?? true {
                result = .failure(ContainerSyncError("the item was deleted"))
            } else {
                continue // not uploaded yet by its device: a later round gets it
            }
            downloadWaiters[item] = nil
            for waiter in waiters { waiter.resume(with: result) }
        }
    }

    /// Removes the local copy of the item named `name`, keeping it listed (a placeholder).
    /// - Throws: ``ContainerSyncError`` when the item has changes the server does not have
    ///   (they would be lost), or is unknown.
    public func evict(_ name: String) throws {
        guard let file = files[name] else {
            if placeholders[UbiquityPlaceholder.fileName(for: name)] != nil { return } // evicted already
            throw ContainerSyncError("\(name) is not an item of \(container)")
        }
        let current = LocalScanner(root: documents).fingerprint(of: name)
        guard !state.hasLocalChanges(file.item), errors[file.item] == nil, current == file.fingerprint, transfers[file.item] == nil else {
            throw ContainerSyncError("\(name) has changes not uploaded yet; it is not evicted")
        }
        let remote = state.persisted.remote[file.item]
        let url = documents.appendingPathComponent(name)
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forDeleting) { url in
            guard LocalScanner(root: documents).fingerprint(of: name) == file.fingerprint else {
                throw ContainerSyncError("\(name) changed while being evicted; it is kept")
            }
            try FileManager.default.removeItem(at: url)
        }
        files[name] = nil
        try store.record(container, state: state.persisted, removed: [name])
        let placeholder = UbiquityPlaceholder(name: name, item: file.item, size: remote?.size ?? file.fingerprint.size, modificationDate: remote?.modificationDate)
        try placeholder.write(in: documents)
        placeholders[UbiquityPlaceholder.fileName(for: name)] = file.item
    }

    // MARK: Conflicts as versions

    /// The persistent identifier of the conflict version for a server revision.
    static func versionIdentifier(_ revision: String) -> String {
        "conflict-" + String(Data(revision.utf8).withUnsafeBytes { ContentChunker.hash($0) }.prefix(40))
    }

    /// Keeps each downloaded item's conflict versions on disk as the server has them: new
    /// conflict revisions are downloaded into its version store; versions resolved here
    /// (removed, or marked resolved) are resolved on the server; those resolved elsewhere go.
    func reconcileConflicts() async throws {
        for (item, remote) in state.persisted.remote where !state.hasLocalChanges(item) && !remote.deleted {
            let known = Set(remote.conflicts.map(\.revision))
            let copies = conflictCopies[item] ?? []
            guard !known.isEmpty || !copies.isEmpty, let path = files.first(where: { $0.value.item == item })?.key else { continue }
            let url = documents.appendingPathComponent(path)
            // Resolved elsewhere: the local copy goes.
            for revision in copies.subtracting(known) {
                try? NSFileVersion.version(itemAt: url, forPersistentIdentifier: NSFileVersion.PersistentIdentifier(Self.versionIdentifier(revision)))?.remove()
                conflictCopies[item]?.remove(revision)
                try store.setConflictCopy(false, container: container, item: item, revision: revision)
            }
            // Resolved here: tell the server.
            var resolved: [String] = []
            for revision in known.intersection(copies) {
                let version = NSFileVersion.version(itemAt: url, forPersistentIdentifier: NSFileVersion.PersistentIdentifier(Self.versionIdentifier(revision)))
                if version == nil || version?.isResolved == true { resolved.append(revision) }
            }
            if !resolved.isEmpty {
                do {
                    let answer = try await client.resolve(container: container, item: item, keep: remote.revision, remove: resolved.sorted())
                    state.learn(Self.snapshot(answer))
                    for revision in resolved {
                        try? NSFileVersion.version(itemAt: url, forPersistentIdentifier: NSFileVersion.PersistentIdentifier(Self.versionIdentifier(revision)))?.remove()
                        conflictCopies[item]?.remove(revision)
                        try store.setConflictCopy(false, container: container, item: item, revision: revision)
                    }
                } catch let error as SyncClientError {
                    errors[item] = error.description
                }
                continue
            }
            // New conflict versions: their contents come down into the version store.
            let missing = known.subtracting(copies)
            guard !missing.isEmpty else { continue }
            let details: ItemState
            do { details = try await client.item(container: container, id: item) } catch let error as SyncClientError {
                downloadErrors[item] = error.description
                continue
            }
            for conflict in details.conflicts where missing.contains(conflict.revision) && conflict.uploaded {
                do {
                    let data = try await assemble(conflict.manifest.chunks ?? [], of: item, name: path, reusing: files[path])
                    let staging = NSFileVersion.temporaryDirectoryURLForNewVersionOfItem(at: url).appendingPathComponent(path)
                    try SafeSave.write(data, to: staging)
                    _ = try NSFileVersion.addConflictVersion(ofItemAt: url, withContentsOf: staging, savingComputer: conflict.deviceName,
                                                             modificationDate: Date(timeIntervalSince1970: conflict.modificationDate), byMoving: true,
                                                             identifier: Self.versionIdentifier(conflict.revision))
                    conflictCopies[item, default: []].insert(conflict.revision)
                    try store.setConflictCopy(true, container: container, item: item, revision: conflict.revision)
                } catch let error as SyncClientError {
                    downloadErrors[item] = error.description
                }
            }
        }
    }

    // MARK: What apps and `ubiquity ls` see

    /// Every item (downloaded or not) with its transfer state.
    public func statuses() -> [UbiquityItemStatus] {
        state.visibleItems.filter { !$0.value.deleted }.sorted { $0.value.name < $1.value.name }.map { status(of: $0.key, $0.value) }
    }

    /// The state of the item named `name`, or nil if there is none.
    public func status(ofName name: String) -> UbiquityItemStatus? {
        guard let (item, visible) = state.visibleItems.first(where: { $0.value.name == name && !$0.value.deleted }) else { return nil }
        return status(of: item, visible)
    }

    func status(of item: String, _ visible: DeviceSyncState.LocalItem) -> UbiquityItemStatus {
        let local = files.first(where: { $0.value.item == item })?.value
        let remote = state.persisted.remote[item]
        let transfer = transfers[item]
        let pending = state.hasLocalChanges(item)
        let uploaded = !pending && errors[item] == nil
        return UbiquityItemStatus(
            container: container, path: documents.appendingPathComponent(visible.name).path,
            size: local?.fingerprint.size ?? remote?.size,
            downloaded: local != nil, current: local != nil && (pending || local?.content == remote?.content),
            downloading: transfer?.downloading == true, downloadRequested: requested.contains(item) && local == nil,
            uploaded: uploaded, uploading: pending,
            percentDownloaded: local != nil ? 100 : transfer.flatMap { $0.downloading ? $0.percent : nil } ?? 0,
            percentUploaded: uploaded ? 100 : transfer.flatMap { $0.downloading ? nil : $0.percent } ?? 0,
            conflicts: state.conflicts(item).count, downloadingError: downloadErrors[item], uploadingError: errors[item])
    }

    /// The container's state for `ubiquity status`.
    public func containerStatus(root: URL) -> ContainerStatus {
        let names = state.visibleItems.mapValues(\.name)
        return ContainerStatus(
            identifier: container, path: root.path, items: state.visibleItems.values.filter { !$0.deleted }.count,
            queued: state.persisted.sending.count + state.persisted.queued.count, idle: isIdle,
            errors: Dictionary(errors.map { (names[$0.key] ?? $0.key, $0.value) } + downloadErrors.map { (names[$0.key] ?? $0.key, "download: " + $0.value) },
                               uniquingKeysWith: { a, b in a + "; " + b }),
            lastSync: lastSync?.timeIntervalSince1970)
    }
}
