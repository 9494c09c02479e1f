import Foundation
import UbiquityClient
import UbiquityCoordination
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

// What apps ask of a container: downloads, evictions, item states. The rounds are in
// ContainerSync.swift.
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
        if requested.insert(item).inserted { try store.setDownloadRequested(true, container: storeKey, item: item) }
        downloadErrors[item] = nil
        materialiser.pending?.insert(item)
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
    ///   (they would be lost), is a folder, is unknown, or a presenter of it (an app with the
    ///   document open) does not accommodate the eviction.
    package func evict(_ name: String) async throws {
        await takeFolderTurn() // not in the middle of a round
        defer { endFolderTurn() }
        let folder = LocalContents.folder(of: name)
        let placeholderPath = LocalContents.placeholderPath(for: name)
        guard let file = files[name] else {
            if materialiser.placeholders[placeholderPath] != nil { return } // evicted already
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
        do {
            try await coordinated {
                // Its presenters (an open document, in any process) are asked to accommodate the
                // eviction, as Apple's are; one that does not refuses it, and the copy stays.
                try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forEvicting) { url in
                    guard scanner.fingerprint(of: name) == file.fingerprint else {
                        throw ContainerSyncError("\(name) changed while being evicted; it is kept", code: .refused)
                    }
                    try FileManager.default.removeItem(at: url)
                }
            }
        } catch let error as FileCoordinationError where error.code == .refusedByPresenter {
            throw ContainerSyncError("\(name) is open in an app that keeps its copy; it is not evicted (\(error.message))", code: .refused)
        }
        files[name] = nil
        try await persist(removed: [name])
        let placeholder = UbiquityPlaceholder(name: LocalContents.name(of: name), item: file.item, size: remote?.size ?? file.fingerprint.size,
                                              modificationDate: remote?.modificationDate)
        try placeholder.write(in: root.appendingPathComponent(folder))
        materialiser.placeholders[placeholderPath] = placeholder
        noteAttributes([.ubiquitousItemDownloadingStatusKey], at: name)
        await announceAttributeChanges()
    }

    // MARK: What apps and `ubiquity ls` see

    /// Every item (downloaded or not; folders and what is in them) with its transfer state, by path.
    package func statuses() -> [UbiquityItemStatus] {
        materialiser.shown.byPath.map { status(of: $0.item, at: $0.path) }
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
        let unsent = state.hasLocalChanges(item)
        let uploaded = !unsent && errors[item] == nil
        return UbiquityItemStatus(
            container: container, path: root.appendingPathComponent(path).path,
            size: local?.fingerprint.size ?? remote?.size,
            downloaded: local != nil, current: local != nil && (unsent || local?.content == remote?.content),
            downloading: transfer?.downloading == true, downloadRequested: requested.contains(item) && local == nil,
            uploaded: uploaded, uploading: unsent,
            percentDownloaded: local != nil ? 100 : transfer.flatMap { $0.downloading ? $0.percent : nil } ?? 0,
            percentUploaded: uploaded ? 100 : transfer.flatMap { $0.downloading ? nil : $0.percent } ?? 0,
            conflicts: state.conflicts(item).count, downloadingError: downloadErrors[item], uploadingError: errors[item], sharing: sharing(of: item))
    }

    /// The container's state for `ubiquity status`.
    package func containerStatus(root: URL) -> ContainerStatus {
        func name(_ item: String) -> String { state.visible(item)?.name ?? item }
        return ContainerStatus(
            identifier: container, path: root.path, items: materialiser.shown.count,
            queued: state.persisted.sending.count + state.persisted.queued.count, idle: isIdle,
            errors: Dictionary(errors.map { (name($0.key), $0.value) } + downloadErrors.map { (name($0.key), "download: " + $0.value) }
                                + refusals.map { (LocalContents.name(of: $0.key), $0.value) },
                               uniquingKeysWith: { a, b in a + "; " + b }),
            lastSync: lastSync?.timeIntervalSince1970, pending: Array(pending.prefix(ContainerStatus.pendingShown)), pendingCount: pending.count,
            share: share.map { SharedFolderStatus(id: $0.id, name: $0.name) })
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
            PendingItem(path: materialiser.shown.path(of: item) ?? state.visible(item)?.name ?? item, reason: reason.0, detail: reason.1)
        }.sorted { $0.path < $1.path }
    }
}

// Requests the server did not answer or refused.
extension ContainerSync {
    /// A request the server did not answer or refused: kept for the next round, and said.
    func failed(_ request: SyncRequest, _ error: SyncClientError) {
        state.failed(request)
        if error.code == "sealedOnly" { keysStale = true } // (sealed from the next round on)
        switch request {
        case .commit(let change): errors[change.item] = error.description
        case .fetch: errors[Self.fetchErrorKey] = error.description
        case .resolve(let item, _, _): errors[item] = error.description
        }
        logger.warning("sync request failed", metadata: ["container": "\(container)", "error": "\(error)"])
    }

    /// A batch of commits the server did not answer or refused as a whole: each kept for the
    /// next round, and said once (a batch of a thousand changes is one failure, not a
    /// thousand warnings).
    func failed(commits changes: [LocalChange], _ error: SyncClientError) {
        guard !changes.isEmpty else { return }
        if error.code == "sealedOnly" { keysStale = true } // (sealed from the next round on)
        if error.code == "readOnly", share != nil {
            // The share became read-only for this account since it was last read: the changes
            // are kept here and undone from the next round on.
            readOnly = true
            for change in changes { state.failed(.commit(change)) }
            fetchDue = true
            return
        }
        for change in changes {
            state.failed(.commit(change))
            errors[change.item] = error.description
        }
        logger.warning("sync request failed", metadata: ["container": "\(container)", "changes": "\(changes.count)", "error": "\(error)"])
    }
}

// Ubiquity attributes apps' presenters observe.
extension ContainerSync {
    /// Notes that ubiquity attributes of the item at `path` changed (announced at the round's end).
    func noteAttributes(_ attributes: Set<URLResourceKey>, at path: String) {
        attributeChanges[path, default: []].formUnion(attributes)
    }

    /// Tells the presenters of the items whose ubiquity attributes changed — in every process
    /// of the user, those that observe them — what changed (Apple's
    /// `presentedItemDidChangeUbiquityAttributes(_:)`), in one message per process.
    func announceAttributeChanges() async {
        guard !attributeChanges.isEmpty else { return }
        let changes = Dictionary(uniqueKeysWithValues: attributeChanges.map { (root.appendingPathComponent($0.key), $0.value) })
        attributeChanges = [:]
        await coordination.run { NSFileCoordinator.items(didChangeUbiquityAttributes: changes) }
    }
}
