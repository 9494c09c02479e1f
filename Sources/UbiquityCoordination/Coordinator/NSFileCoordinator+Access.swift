import Foundation
import UbiquityFiles

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
        // 0. Items to read that are not downloaded yet are downloaded first (see `ubiquitousItemDownloader`).
        try downloadMissingItems(reading)
        let readPaths = reading.map { FileCoordinationLocks.canonicalPath($0.0, resolvingLastComponent: $0.1.contains(.resolvesSymbolicLink)) }
        let writePaths = writing.map { FileCoordinationLocks.canonicalPath($0.0) }
        let timeout = presenterTimeout

        // 1. Presenters — this process's and other processes' — save and relinquish. This
        //    happens before locking, because their saves are coordinated writes too.
        let description = AccessDescription(
            reading: zip(reading, readPaths).map { AccessDescription.Item(path: $1, url: $0.0.path, options: $0.1.rawValue) },
            writing: zip(writing, writePaths).map { AccessDescription.Item(path: $1, url: $0.0.path, options: $0.1.rawValue) })
        let local = PresenterSession(description, excluding: filePresenter, timeout: timeout, logger: logger)
        let (remote, remoteRefusals) = PresenterChannel.shared.prepareRemote(description, timeout: timeout, logger: logger)
        let refusals = local.refusals + remoteRefusals
        if !refusals.isEmpty {
            // A presenter refused (an eviction): nothing runs, and everyone gets their items back.
            local.finish(moved: [], changed: false)
            for session in remote { session.finish(moves: [], changed: false) }
            throw FileCoordinationError(.refusedByPresenter, refusals.joined(separator: "; "), path: writePaths.first)
        }
        state.withLock { $0.moves = [] }
        var accessed = false
        defer {
            // 4. After the locks are released: what changed (if the accessor ran), then the items back.
            let moves = state.withLock { $0.moves }
            local.finish(moved: Set(moves.flatMap { [$0[0], FileCoordinationLocks.canonicalPath(URL(fileURLWithPath: $0[2]))] }), changed: accessed)
            for session in remote { session.finish(moves: moves, changed: accessed) }
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
        // Snapshots live in the temporary directory: one left behind is the system's to clean.
        defer { for snapshot in snapshots { try? FileManager.default.removeItem(at: snapshot.deletingLastPathComponent()) } }
        for (index, (url, options)) in reading.enumerated() {
            var given = options.contains(.resolvesSymbolicLink) ? URL(fileURLWithPath: readPaths[index]) : url
            if options.contains(.forUploading) {
                given = try snapshot(of: given)
                snapshots.append(given)
            }
            readURLs.append(given)
        }
        let result = try body(readURLs, writing.map(\.0))
        accessed = true
        removeVersionsOfDeletedItems(writing)
        return result
    }

    /// An item deleted by a `.forDeleting` write takes its versions with it.
    func removeVersionsOfDeletedItems(_ writing: [(URL, WritingOptions)]) {
        for (url, options) in writing where options.contains(.forDeleting) {
            // Only an item surely gone (not one that cannot be read) loses its versions.
            guard (try? POSIX.status(url.standardizedFileURL.path)) == .some(nil), let store = try? VersionStore(item: url) else { continue }
            do { try store.deleteStore() } catch {
                logger.warning("could not remove the versions of a deleted item", metadata: ["item": "\(url.path)", "error": "\(error)"])
            }
        }
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
