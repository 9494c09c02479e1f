import Foundation

/// Locks held by the current thread's coordinated accesses, so that coordinating again from
/// inside an accessor does not wait for itself.
final class ThreadHeldLocks: @unchecked Sendable {
    // Only ever touched by the thread that owns it (it lives in that thread's dictionary).
    var stack: [[FileCoordinationLocks.Key: FileCoordinationLocks.Mode]] = []

    static var current: ThreadHeldLocks {
        let key = "org.ubiquity.coordination.held"
        if let existing = Thread.current.threadDictionary[key] as? ThreadHeldLocks { return existing }
        let created = ThreadHeldLocks()
        Thread.current.threadDictionary[key] = created
        return created
    }

    var union: [FileCoordinationLocks.Key: FileCoordinationLocks.Mode] {
        stack.reduce(into: [:]) { result, held in result.merge(held) { max($0, $1) } }
    }
}

extension NSFileCoordinator {
    /// The heart of every coordinated access: ask presenters, lock, run, notify, release.
    func access<T>(
        reading: [(URL, ReadingOptions)],
        writing: [(URL, WritingOptions)],
        _ body: ([URL], [URL]) throws -> T
    ) throws -> T {
        if isCancelled { throw FileCoordinationError(.cancelled, "the coordination was cancelled") }
        let readPaths = reading.map { FileCoordinationLocks.canonicalPath($0.0, resolvingLastComponent: $0.1.contains(.resolvesSymbolicLink)) }
        let writePaths = writing.map { FileCoordinationLocks.canonicalPath($0.0) }
        let timeout = presenterTimeout
        let registry = PresenterRegistry.shared

        // 1. Presenters save and relinquish (before we lock: their saves take our locks too).
        var reacquirers: [(any NSFilePresenter, @Sendable () -> Void)] = []
        defer {
            for (presenter, reacquire) in reacquirers { presenter.presentedItemOperationQueue.addOperation(reacquire) }
        }
        for (index, (_, options)) in reading.enumerated() {
            for (presenter, relation, _) in registry.presenters(relatedTo: readPaths[index], excluding: filePresenter) where relation != .ancestor {
                if !options.contains(.withoutChanges) && !options.contains(.immediatelyAvailableMetadataOnly) {
                    saveChanges(of: presenter, timeout: timeout)
                }
                if let reacquire = relinquish(presenter, toWriter: false, timeout: timeout) { reacquirers.append((presenter, reacquire)) }
            }
        }
        for (index, (_, options)) in writing.enumerated() {
            for (presenter, relation, _) in registry.presenters(relatedTo: writePaths[index], excluding: filePresenter) {
                if options.contains(.contentIndependentMetadataOnly) { continue }
                if options.contains(.forDeleting) {
                    if relation == .ancestor {
                        let url = writing[index].0
                        _ = askPresenter(presenter, "accommodate subitem deletion", timeout: timeout, logger: logger) { (reply: @escaping @Sendable (Bool) -> Void) in
                            presenter.accommodatePresentedSubitemDeletion(at: url) { _ in reply(true) }
                        }
                    } else {
                        _ = askPresenter(presenter, "accommodate deletion", timeout: timeout, logger: logger) { (reply: @escaping @Sendable (Bool) -> Void) in
                            presenter.accommodatePresentedItemDeletion { _ in reply(true) }
                        }
                    }
                    continue
                }
                guard relation != .ancestor else { continue }
                if !options.contains(.forReplacing) { saveChanges(of: presenter, timeout: timeout) }
                if let reacquire = relinquish(presenter, toWriter: true, timeout: timeout) { reacquirers.append((presenter, reacquire)) }
            }
        }

        // 2. Lock (only what this thread does not hold already).
        let plan = locks.plan(reading: readPaths, writing: writePaths)
        let threadLocks = ThreadHeldLocks.current
        var missing = FileCoordinationLocks.Plan()
        let alreadyHeld = threadLocks.union
        for (key, mode) in plan.modes where (alreadyHeld[key].map { $0 < mode } ?? true) { missing.require(key, mode) }
        let held = try locks.acquire(missing, isCancelled: { self.isCancelled })
        threadLocks.stack.append(held.modes)
        defer {
            threadLocks.stack.removeLast()
            held.release()
        }
        if isCancelled { throw FileCoordinationError(.cancelled, "the coordination was cancelled") }

        // 3. Access.
        var readURLs: [URL] = []
        var snapshots: [URL] = []
        defer { for snapshot in snapshots { try? FileManager.default.removeItem(at: snapshot.deletingLastPathComponent()) } }
        for (index, (url, options)) in reading.enumerated() {
            var given = options.contains(.resolvesSymbolicLink) ? URL(fileURLWithPath: readPaths[index]) : url
            if options.contains(.forUploading) {
                given = try snapshot(of: given)
                snapshots.append(given)
            }
            readURLs.append(given)
        }
        state.withLock { $0.moved = [] }
        let result = try body(readURLs, writing.map(\.0))
        let moved = state.withLock { $0.moved }

        // 4. Tell presenters what changed.
        for (index, (url, options)) in writing.enumerated() where options.isDisjoint(with: [.forDeleting, .forMoving, .contentIndependentMetadataOnly]) && !moved.contains(writePaths[index]) {
            for (presenter, relation, _) in registry.presenters(relatedTo: writePaths[index], excluding: filePresenter) {
                let queue = presenter.presentedItemOperationQueue
                switch relation {
                case .item, .descendant: queue.addOperation { presenter.presentedItemDidChange() }
                case .ancestor: queue.addOperation { presenter.presentedSubitemDidChange(at: url) }
                }
            }
        }
        return result
    }

    func saveChanges(of presenter: any NSFilePresenter, timeout: Duration) {
        let error = askPresenter(presenter, "save changes", timeout: timeout, logger: logger) { (reply: @escaping @Sendable (String?) -> Void) in
            presenter.savePresentedItemChanges { error in reply(error.map { "\($0)" }) }
        }
        if let error, let message = error {
            logger.warning("file presenter could not save before another access", metadata: ["item": "\(presenter.presentedItemURL?.path ?? "-")", "error": "\(message)"])
        }
    }

    func relinquish(_ presenter: any NSFilePresenter, toWriter: Bool, timeout: Duration) -> (@Sendable () -> Void)? {
        typealias Reacquirer = (@Sendable () -> Void)?
        let answer = askPresenter(presenter, toWriter ? "relinquish to writer" : "relinquish to reader", timeout: timeout, logger: logger) { (reply: @escaping @Sendable (Reacquirer) -> Void) in
            if toWriter {
                presenter.relinquishPresentedItem(toWriter: { reply($0) })
            } else {
                presenter.relinquishPresentedItem(toReader: { reply($0) })
            }
        }
        return answer ?? nil
    }

    /// A private copy of `url` for `.forUploading` readers.
    func snapshot(of url: URL) throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ubiquity-upload-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let copy = folder.appendingPathComponent(url.lastPathComponent)
        try FileManager.default.copyItem(at: url, to: copy)
        return copy
    }
}
