import Foundation
import UbiquityCoordination

extension Materialiser {
    /// Moves a file, package or folder (with everything in it) to `path`, as a coordinated move.
    /// Returns false if it must wait: for its folder to be made, or for a local item of that
    /// name (said in ``errors``) to go — the server settles a clash, or that item moves on; the
    /// move is tried again each round until then (tried once and dropped, it never came when
    /// the name was freed by another item's move — found by `ubiquity-chaos --sealed-share`
    /// seed 12).
    @discardableResult
    func relocate(_ file: AgentStore.File, to path: String, in sync: isolated ContainerSync) async throws -> Bool {
        let from = sync.root.appendingPathComponent(file.path), to = sync.root.appendingPathComponent(path)
        guard !FileManager.default.fileExists(atPath: to.path) else {
            sync.errors[file.item] = "cannot move \(file.path) to \(path): a local item has that name"
            return false
        }
        guard FileManager.default.fileExists(atPath: to.deletingLastPathComponent().path) else { return false } // its folder comes first
        let scanner = sync.scanner, recorded = file.fingerprint, oldPath = file.path
        // Whether the file was as recorded when it moved: written since the round's scan, its
        // record keeps the old fingerprint so that the next scan sends the edit (else the move's
        // fresh fingerprint hid the edit for good — found by `ubiquity-chaos`).
        // Its fingerprint at the new place is read while the move is still coordinated: read
        // after, it could be of an app's save made at once after (found by `ubiquity-chaos`).
        let (unchanged, moved) = try await sync.coordinated {
            let coordinator = NSFileCoordinator(filePresenter: nil)
            return try coordinator.coordinate(writingItemAt: from, options: .forMoving) { from -> (Bool, LocalFingerprint?) in
                let unchanged = scanner.fingerprint(of: oldPath) == recorded
                try FileManager.default.moveItem(at: from, to: to)
                // Its presenters learn its new place, and its versions go with it (left behind,
                // they became the versions of whatever next had the old name — found by
                // `ubiquity-chaos`).
                coordinator.item(at: from, didMoveTo: to)
                return (unchanged, scanner.fingerprint(of: path))
            }
        }
        sync.errors[file.item] = nil
        let before = sync.files.subtree(file.path)
        var records: [AgentStore.File] = []
        for var inside in before {
            sync.files[inside.path] = nil
            inside.path = path + inside.path.dropFirst(file.path.count)
            if inside.item == file.item, unchanged, let moved { inside.fingerprint = moved } // its status change time moved
            records.append(inside)
        }
        for inside in records { sync.files[inside.path] = inside }
        try await sync.persist(upsert: records, removed: before.map(\.path))
        return true
    }

    /// Removes the item at `path` (relative to the container's folder) under a coordinated
    /// write (an app presenting it is told), if it is there — and, given its `recorded`
    /// fingerprint, only if it is still as recorded: a file written since (an app's save just
    /// before the removal) stays, for the next scan to send (found by `ubiquity-chaos`: a file
    /// saved as a download moved its item to a new name was removed with the old name).
    /// Returns false when it stayed.
    @discardableResult
    func coordinatedRemove(_ path: String, ifStill recorded: LocalFingerprint? = nil, in sync: isolated ContainerSync) async throws -> Bool {
        sync.logger.debug("removing", metadata: ["container": "\(sync.container)", "path": "\(path)"])
        let url = sync.root.appendingPathComponent(path), scanner = sync.scanner
        let removed = try await sync.coordinated {
            try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forDeleting) { url -> Bool in
                guard FileManager.default.fileExists(atPath: url.path) else { return true }
                if let recorded, scanner.fingerprint(of: path) != recorded { return false }
                try FileManager.default.removeItem(at: url)
                return true
            }
        }
        if !removed {
            sync.logger.notice("a file written since the agent last looked is kept, not removed; it goes as a new item",
                               metadata: ["container": "\(sync.container)", "path": "\(path)"])
        }
        return removed
    }
}
