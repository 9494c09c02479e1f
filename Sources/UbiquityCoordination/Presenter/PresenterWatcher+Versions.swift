import Foundation
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// Version stores seen by the watcher: a store changes (a version added, removed or resolved,
/// here or in another process) → the item's presenters get `presentedItemDidGain`,
/// `presentedItemDidLose` or `presentedItemDidResolveConflict`, and presenters of directories
/// above it the `presentedSubitem(at:…)` forms.
///
/// Every change to a store rewrites its `generation` file, so watching
/// `DIR/.ubiquity-versions` (for stores that appear) and `DIR/.ubiquity-versions/NAME` (for
/// changes) is enough. What changed is found by comparing the store's versions with those last
/// seen.
extension PresenterWatcher {
    /// The store directories to watch for a presented item.
    static func versionStoreDirectories(for item: String) -> [String] {
        // Watching is best effort: a store that cannot be opened or read is not watched, and its
        // versions are still found when an app asks (NSFileVersion reads the disk).
        guard !VersionStore.isInsideStore(item), let store = try? VersionStore(item: URL(fileURLWithPath: item)) else { return [] }
        var found: [String] = []
        if (try? POSIX.status(store.root))??.kind == .directory { found.append(store.root) }
        if (try? POSIX.status(store.folder))??.kind == .directory { found.append(store.folder) }
        return found
    }

    /// The store directories inside `directory` (its `.ubiquity-versions` and the per-item folders in it).
    static func versionStoreDirectories(in directory: String) -> [String] {
        let root = directory + "/" + VersionStore.directoryName
        var found = [root]
        // (No store, or none readable: nothing to watch there.)
        for name in (try? POSIX.directoryEntries(root)) ?? [] where !name.hasPrefix(".") {
            if (try? POSIX.status(root + "/" + name))??.kind == .directory { found.append(root + "/" + name) }
        }
        return found
    }

    /// The item whose store folder `directory` is (`DIR/.ubiquity-versions/NAME` → `DIR/NAME`).
    static func itemOfVersionFolder(_ directory: String) -> String? {
        let parent = (directory as NSString).deletingLastPathComponent
        guard (parent as NSString).lastPathComponent == VersionStore.directoryName else { return nil }
        let name = (directory as NSString).lastPathComponent
        guard !name.hasPrefix(".") else { return nil }
        return (parent as NSString).deletingLastPathComponent + "/" + name
    }

    /// Files an event inside (or creating) a version store.
    static func recordVersionStoreEvent(directory: String, name: String, mask: UInt32, in state: inout State) {
        let appeared = mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0
        let vanished = mask & UInt32(IN_DELETE | IN_MOVED_FROM) != 0
        if name == VersionStore.directoryName {
            // A store root appeared (or went) beside watched items.
            if appeared { state.freshStoreRoots.insert(directory + "/" + name) }
            if appeared || vanished { state.resyncNeeded = true }
        } else if (directory as NSString).lastPathComponent == VersionStore.directoryName, !name.hasPrefix(".") {
            // An item's store folder appeared, went or was renamed.
            let item = (directory as NSString).deletingLastPathComponent + "/" + name
            if appeared || vanished {
                state.resyncNeeded = true
                if appeared && state.versions[item] == nil { state.versions[item] = [:] } // new: all of it is news
                state.versionChecks.insert(item)
            }
        } else if name == VersionStore.generationName, let item = itemOfVersionFolder(directory) {
            state.versionChecks.insert(item)
        }
    }

    /// Records what versions newly watched stores hold, as the baseline for later changes.
    func takeVersionSnapshots(_ items: [String]) {
        for item in items {
            let records = Self.currentVersions(of: item)
            state.withLock { state in
                if state.versions[item] == nil { state.versions[item] = records }
            }
        }
    }

    /// Compares the changed stores with what was last seen and tells presenters.
    func checkVersions() {
        let items: [String] = state.withLock { state in
            defer { state.versionChecks = [] }
            return Array(state.versionChecks)
        }
        for item in items {
            let now = Self.currentVersions(of: item)
            let before: [String: VersionRecord]? = state.withLock { state in
                defer { state.versions[item] = now }
                return state.versions[item]
            }
            // An item whose store cannot be opened now has no versions to tell of this time.
            guard let before, let store = try? VersionStore(item: URL(fileURLWithPath: item)) else { continue }
            let itemURL = URL(fileURLWithPath: item)
            func version(_ record: VersionRecord) -> NSFileVersion { NSFileVersion(item: itemURL, record: record, store: store) }
            var gained: [NSFileVersion] = [], lost: [NSFileVersion] = [], resolved: [NSFileVersion] = []
            for (id, record) in now.sorted(by: { $0.value.addedDate < $1.value.addedDate }) {
                if let old = before[id] {
                    if record.kind == .conflict && record.isResolved && !old.isResolved { resolved.append(version(record)) }
                } else {
                    gained.append(version(record))
                }
            }
            for (id, record) in before where now[id] == nil { lost.append(version(record)) }
            guard !(gained.isEmpty && lost.isEmpty && resolved.isEmpty) else { continue }
            for (presenter, relation, _) in PresenterRegistry.shared.presenters(relatedTo: item, excluding: nil) {
                nonisolated(unsafe) let presenter = presenter // (presenters are not Sendable, as Apple's are not: each is called on its own queue)
                let queue = presenter.presentedItemOperationQueue
                switch relation {
                case .item:
                    for version in gained { queue.addOperation { presenter.presentedItemDidGain(version) } }
                    for version in lost { queue.addOperation { presenter.presentedItemDidLose(version) } }
                    for version in resolved { queue.addOperation { presenter.presentedItemDidResolveConflict(version) } }
                case .ancestor:
                    for version in gained { queue.addOperation { presenter.presentedSubitem(at: itemURL, didGain: version) } }
                    for version in lost { queue.addOperation { presenter.presentedSubitem(at: itemURL, didLose: version) } }
                    for version in resolved { queue.addOperation { presenter.presentedSubitem(at: itemURL, didResolve: version) } }
                case .descendant:
                    continue
                }
            }
        }
    }

    /// The item's versions by identifier, read without coordination (records are replaced
    /// atomically, so a reader sees each whole); empty if there is no store.
    static func currentVersions(of item: String) -> [String: VersionRecord] {
        guard let store = try? VersionStore(item: URL(fileURLWithPath: item)), let records = try? store.listUncoordinated() else { return [:] }
        return Dictionary(records.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
    }
}
