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

    /// Asks for the item at `name` (a path relative to `Documents`) to be downloaded (by the
    /// next round). Returns its id. A folder is always here.
    /// - Throws: ``ContainerSyncError`` if no such item is known.
    @discardableResult
    package func requestDownload(_ name: String) throws -> String {
        if let file = files[name] { return file.item }
        guard let item = item(at: name) else {
            throw ContainerSyncError("\(name) is not an item of \(container)", code: .unknownItem)
        }
        if requested.insert(item).inserted { try store.setDownloadRequested(true, container: container, item: item) }
        downloadErrors[item] = nil
        materialPending?.insert(item)
        return item
    }

    /// Returns when the item at `name` is downloaded (asking for it first).
    /// - Throws: ``ContainerSyncError`` if it is unknown, deleted meanwhile, or its download failed.
    package func waitForDownload(_ name: String) async throws {
        let item = try requestDownload(name)
        if files.contains(item: item) { return }
        try await withCheckedThrowingContinuation { downloadWaiters[item, default: []].append($0) }
    }

    func answerDownloadWaiters() {
        for (item, waiters) in downloadWaiters {
            let result: Result<Void, any Error>
            if files.contains(item: item) {
                result = .success(())
            } else if let error = downloadErrors[item] {
                result = .failure(ContainerSyncError("cannot download: \(error)", code: .downloadFailed))
            } else if state.visible(item).map({ $0.deleted }) ?? true {
                result = .failure(ContainerSyncError("the item was deleted", code: .unknownItem))
            } else {
                continue // not uploaded yet by its device: a later round gets it
            }
            downloadWaiters[item] = nil
            for waiter in waiters { waiter.resume(with: result) }
        }
    }

    /// Removes the local copy of the file or package at `name` (a path relative to
    /// the container's folder), keeping it listed (a placeholder).
    /// - Throws: ``ContainerSyncError`` when the item has changes the server does not have
    ///   (they would be lost), is a folder, or is unknown.
    package func evict(_ name: String) async throws {
        let folder = LocalContents.folder(of: name)
        let placeholderPath = LocalContents.placeholderPath(for: name)
        guard let file = files[name] else {
            if placeholders[placeholderPath] != nil { return } // evicted already
            throw ContainerSyncError("\(name) is not an item of \(container)", code: .unknownItem)
        }
        guard file.fingerprint.kind != .directory else {
            throw ContainerSyncError("\(name) is a folder; evict the items in it", code: .refused)
        }
        let scanner = scanner
        let current = scanner.fingerprint(of: name)
        guard !state.hasLocalChanges(file.item), errors[file.item] == nil, current == file.fingerprint, transfers[file.item] == nil else {
            throw ContainerSyncError("\(name) has changes not uploaded yet; it is not evicted", code: .refused)
        }
        let remote = state.persisted.remote[file.item]
        let url = root.appendingPathComponent(name)
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forDeleting) { url in
            guard scanner.fingerprint(of: name) == file.fingerprint else {
                throw ContainerSyncError("\(name) changed while being evicted; it is kept", code: .refused)
            }
            try FileManager.default.removeItem(at: url)
        }
        files[name] = nil
        try await persist(removed: [name])
        let placeholder = UbiquityPlaceholder(name: LocalContents.name(of: name), item: file.item, size: remote?.size ?? file.fingerprint.size,
                                              modificationDate: remote?.modificationDate)
        try placeholder.write(in: root.appendingPathComponent(folder))
        placeholders[placeholderPath] = placeholder
    }

    // MARK: Conflicts as versions

    /// The persistent identifier of the conflict version for a server revision.
    static func versionIdentifier(_ revision: String) -> String {
        "conflict-" + String(Data(revision.utf8).withUnsafeBytes { ContentChunker.hash($0) }.prefix(40))
    }

    /// The beginnings of the item errors conflict reconciliation reports (and clears once done).
    static let versionRemovalError = "cannot remove a resolved conflict version"
    static let folderResolutionError = "cannot resolve the folder's concurrent renames"

    /// Removes the local conflict version of server revision `revision` of `item` (at `url`)
    /// (resolved, here or elsewhere); whether it is gone. A failure is logged and named in
    /// ``errors`` (the item's status): the version stays until a later round removes it.
    func removeConflictVersion(_ revision: String, of item: String, at url: URL) -> Bool {
        let identifier = NSFileVersion.PersistentIdentifier(Self.versionIdentifier(revision))
        do {
            try NSFileVersion.version(itemAt: url, forPersistentIdentifier: identifier)?.remove()
            if errors[item]?.hasPrefix(Self.versionRemovalError) == true { errors[item] = nil }
            return true
        } catch {
            errors[item] = "\(Self.versionRemovalError): \(error)"
            logger.warning("cannot remove a resolved conflict version", metadata: ["container": "\(container)", "item": "\(url.path)", "error": "\(error)"])
            return false
        }
    }

    /// Keeps each downloaded item's conflict versions on disk as the server has them: new
    /// conflict revisions are downloaded into its version store; versions resolved here
    /// (removed, or marked resolved) are resolved on the server; those resolved elsewhere go.
    func reconcileConflicts() async throws {
        for item in conflicted.union(conflictCopies.keys).sorted() {
            guard let remote = state.persisted.remote[item], !state.hasLocalChanges(item), !remote.deleted else { continue }
            let known = Set(remote.conflicts.map(\.revision))
            let copies = conflictCopies[item] ?? []
            guard !known.isEmpty || !copies.isEmpty, let path = files.path(of: item) else { continue }
            if remote.kind == .directory {
                // A folder's concurrent renames: its current name stands.
                guard let request = state.resolveKeepingCurrent(item) else { continue }
                do {
                    try await perform(request)
                    if errors[item]?.hasPrefix(Self.folderResolutionError) == true { errors[item] = nil }
                } catch {
                    // Tried again next round; meanwhile `ubiquity status` names it.
                    errors[item] = "\(Self.folderResolutionError): \(error)"
                    logger.warning("cannot resolve a folder's concurrent renames", metadata: ["container": "\(container)", "path": "\(path)", "error": "\(error)"])
                }
                continue
            }
            let url = root.appendingPathComponent(path)
            // Resolved elsewhere: the local copy goes.
            for revision in copies.subtracting(known) {
                guard removeConflictVersion(revision, of: item, at: url) else { continue } // kept; tried again next round
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
                        guard removeConflictVersion(revision, of: item, at: url) else { continue } // kept; tried again next round
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
                    let kind = remote.kind ?? .file
                    let staged = try await stage(LocalContents.members(conflict.manifest, kind: kind), kind: kind, of: item, name: path, reusing: files[path])
                    defer { removeStaged(staged) }
                    let staging = NSFileVersion.temporaryDirectoryURLForNewVersionOfItem(at: url).appendingPathComponent(LocalContents.name(of: path))
                    try FileManager.default.moveItem(at: staged, to: staging)
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

    /// Every item (downloaded or not; folders and what is in them) with its transfer state, by path.
    package func statuses() -> [UbiquityItemStatus] {
        shown.byPath.map { status(of: $0.item, at: $0.path) }
    }

    /// The state of the item at `name` (a path relative to `Documents`), or nil if there is none.
    package func status(ofName name: String) -> UbiquityItemStatus? {
        guard let item = item(at: name) else { return nil }
        return status(of: item, at: name)
    }

    func status(of item: String, at path: String) -> UbiquityItemStatus {
        let local = files.file(of: item)
        let remote = state.persisted.remote[item]
        let transfer = transfers[item]
        let pending = state.hasLocalChanges(item)
        let uploaded = !pending && errors[item] == nil
        return UbiquityItemStatus(
            container: container, path: root.appendingPathComponent(path).path,
            size: local?.fingerprint.size ?? remote?.size,
            downloaded: local != nil, current: local != nil && (pending || local?.content == remote?.content),
            downloading: transfer?.downloading == true, downloadRequested: requested.contains(item) && local == nil,
            uploaded: uploaded, uploading: pending,
            percentDownloaded: local != nil ? 100 : transfer.flatMap { $0.downloading ? $0.percent : nil } ?? 0,
            percentUploaded: uploaded ? 100 : transfer.flatMap { $0.downloading ? nil : $0.percent } ?? 0,
            conflicts: state.conflicts(item).count, downloadingError: downloadErrors[item], uploadingError: errors[item])
    }

    /// The container's state for `ubiquity status`.
    package func containerStatus(root: URL) -> ContainerStatus {
        func name(_ item: String) -> String { state.visible(item)?.name ?? item }
        return ContainerStatus(
            identifier: container, path: root.path, items: shown.count,
            queued: state.persisted.sending.count + state.persisted.queued.count, idle: isIdle,
            errors: Dictionary(errors.map { (name($0.key), $0.value) } + downloadErrors.map { (name($0.key), "download: " + $0.value) },
                               uniquingKeysWith: { a, b in a + "; " + b }),
            lastSync: lastSync?.timeIntervalSince1970, pending: Array(pending.prefix(ContainerStatus.pendingShown)), pendingCount: pending.count)
    }

    /// What is not in step yet and why, by path (one entry an item: the first reason that holds).
    var pending: [PendingItem] {
        var reasons: [String: (PendingItem.Reason, String?)] = [:]
        func note(_ item: String, _ reason: PendingItem.Reason, _ detail: String? = nil) {
            if reasons[item] == nil { reasons[item] = (reason, detail) }
        }
        for (item, error) in errors where item != Self.fetchErrorKey { note(item, .failed, error) }
        for (item, error) in downloadErrors { note(item, .failed, "download: " + error) }
        for (item, transfer) in transfers {
            note(item, transfer.downloading ? .downloading : .uploading, String(format: "%.0f%%", transfer.percent))
        }
        for item in state.persisted.sending.keys { note(item, .sending) }
        for item in state.persisted.queued.keys { note(item, .waitingToSend) }
        for item in requested where files.file(of: item) == nil { note(item, .downloadRequested) }
        return reasons.map { item, reason in
            PendingItem(path: shown.path(of: item) ?? state.visible(item)?.name ?? item, reason: reason.0, detail: reason.1)
        }.sorted { $0.path < $1.path }
    }
}
