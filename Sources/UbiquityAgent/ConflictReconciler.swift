import Foundation
import UbiquityClient
import UbiquityCoordination
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

/// Keeps a container's conflict versions on disk as the server has them, for
/// ``ContainerSync``: each downloaded item's unresolved conflict revisions are its
/// `NSFileVersion` conflict versions here; resolving one here (removing it, or marking it
/// resolved) resolves it on the server, and one resolved elsewhere goes.
///
/// One of the rooms of a container's sync (see ``ChangeFinder``): it owns which conflict
/// versions are on disk and which items have conflicts.
final class ConflictReconciler {
    /// Per item, the conflict revisions put in its version store.
    var conflictCopies: [String: Set<String>]
    /// Items whose server state has conflict versions (with ``conflictCopies``, what
    /// reconciling looks at).
    var conflicted: Set<String> = []
    /// Downloaded items whose conflict versions on disk are not (yet) those the server lists
    /// after the last reconciling (a version not uploaded yet, one the server no longer
    /// describes as this device last heard): the container is not idle, and the next round
    /// fetches first.
    private(set) var owed: Set<String> = []
    /// Items whose conflict versions failed to come down, with how many times in a row and
    /// when they are tried again: not every round — a version whose contents cannot be opened
    /// (damaged, or sealed with keys this device does not hold) was fetched again at every
    /// round the download's own staging files set off, several times a second (found by
    /// `ubiquity-chaos --sealed-share`).
    private var retries: [String: (failures: Int, after: ContinuousClock.Instant)] = [:]

    /// A reconciler that knows the conflict versions `copies` are on disk (as recorded).
    init(copies: [String: Set<String>]) {
        conflictCopies = copies
    }

    /// The persistent identifier of the conflict version for a server revision.
    static func versionIdentifier(_ revision: String) -> String {
        "conflict-" + String(Data(revision.utf8).withUnsafeBytes { ContentChunker.hash($0) }.prefix(40))
    }

    /// The beginnings of the item errors conflict reconciliation reports (and clears once done).
    static let versionRemovalError = "cannot remove a resolved conflict version"
    static let folderResolutionError = "cannot resolve the folder's concurrent renames"
    static let resolutionError = "cannot resolve the conflict"

    /// Removes the local conflict version of server revision `revision` of `item` (at `url`)
    /// (resolved, here or elsewhere); whether it is gone. A failure is logged and named in
    /// ``errors`` (the item's status): the version stays until a later round removes it.
    func removeConflictVersion(_ revision: String, of item: String, at url: URL, in sync: isolated ContainerSync) async -> Bool {
        let identifier = NSFileVersion.PersistentIdentifier(Self.versionIdentifier(revision))
        do {
            try await sync.coordinated { try NSFileVersion.version(itemAt: url, forPersistentIdentifier: identifier)?.remove() }
            if sync.errors[item]?.hasPrefix(Self.versionRemovalError) == true { sync.errors[item] = nil }
            return true
        } catch {
            sync.errors[item] = "\(Self.versionRemovalError): \(error)"
            sync.logger.warning("cannot remove a resolved conflict version", metadata: ["container": "\(sync.container)", "item": "\(url.path)", "error": "\(error)"])
            return false
        }
    }

    /// Takes the conflict versions put in the version store at `path` for `item` out of it: the
    /// item's file went from there without a move the agent saw (removed, or moved by a
    /// program that does not coordinate and seen as removed). They are copies of revisions the
    /// server keeps — nothing is lost — and come down again wherever the item is next. Left,
    /// they became the conflict versions of whatever file next had that name, unknown to the
    /// reconciler and never removed (found by `ubiquity-chaos --sealed-share`, seed 30: a new
    /// file at the name, renamed for a clash, carried the old item's three conflict versions
    /// to a name no other device had them at).
    func detach(_ item: String, at path: String, in sync: isolated ContainerSync) async {
        guard let copies = conflictCopies[item], !copies.isEmpty else { return }
        let url = sync.root.appendingPathComponent(path)
        for revision in copies.sorted() {
            guard await removeConflictVersion(revision, of: item, at: url, in: sync) else { continue } // kept; its record stays (tried again with the next removal)
            conflictCopies[item]?.remove(revision)
            do {
                try sync.store.setConflictCopy(false, container: sync.storeKey, item: item, revision: revision)
            } catch {
                sync.logger.warning("cannot record a conflict version taken away", metadata: ["container": "\(sync.container)", "item": "\(item)", "error": "\(error)"])
            }
        }
        if conflictCopies[item]?.isEmpty == true { conflictCopies[item] = nil }
        if sync.errors[item]?.hasPrefix(Self.versionRemovalError) == true { sync.errors[item] = nil } // (the item is gone from here)
        sync.noteAttributes([.ubiquitousItemHasUnresolvedConflictsKey], at: path)
    }

    /// Keeps each downloaded item's conflict versions on disk as the server has them: new
    /// conflict revisions are downloaded into its version store; versions resolved here
    /// (removed, or marked resolved) are resolved on the server; those resolved elsewhere go.
    func reconcileConflicts(in sync: isolated ContainerSync) async throws {
        let items = conflicted.union(conflictCopies.keys)
        defer { settle(items, in: sync) }
        // Conflicts gone (resolved here or elsewhere): an earlier attempt's failure no longer stands.
        for (item, message) in sync.errors where message.hasPrefix(Self.resolutionError) && !items.contains(item) { sync.errors[item] = nil }
        for item in items.sorted() {
            guard let remote = sync.state.persisted.remote[item], !sync.state.hasLocalChanges(item), !remote.deleted else { continue }
            let known = Set(remote.conflicts.map(\.revision))
            let copies = conflictCopies[item] ?? []
            guard !known.isEmpty || !copies.isEmpty, let path = sync.files.path(of: item) else {
                if known.isEmpty && copies.isEmpty && sync.errors[item]?.hasPrefix(Self.resolutionError) == true { sync.errors[item] = nil }
                continue
            }
            if remote.kind == .directory {
                // A folder's concurrent renames: its current name stands.
                guard let request = sync.state.resolveKeepingCurrent(item) else { continue }
                do {
                    try await sync.perform(request)
                    if sync.errors[item]?.hasPrefix(Self.folderResolutionError) == true { sync.errors[item] = nil }
                } catch {
                    // Tried again next round; meanwhile `ubiquity status` names it.
                    sync.errors[item] = "\(Self.folderResolutionError): \(error)"
                    sync.logger.warning("cannot resolve a folder's concurrent renames", metadata: ["container": "\(sync.container)", "path": "\(path)", "error": "\(error)"])
                }
                continue
            }
            let url = sync.root.appendingPathComponent(path)
            // Resolved elsewhere: the local copy goes.
            for revision in copies.subtracting(known) {
                guard await removeConflictVersion(revision, of: item, at: url, in: sync) else { continue } // kept; tried again next round
                conflictCopies[item]?.remove(revision)
                try sync.store.setConflictCopy(false, container: sync.storeKey, item: item, revision: revision)
                sync.noteAttributes([.ubiquitousItemHasUnresolvedConflictsKey], at: path)
            }
            // Resolved here: tell the server.
            var resolved: [String] = []
            let kept = known.intersection(copies)
            if !kept.isEmpty {
                resolved = try await sync.coordinated {
                    kept.filter { revision in
                        let version = NSFileVersion.version(itemAt: url, forPersistentIdentifier: NSFileVersion.PersistentIdentifier(Self.versionIdentifier(revision)))
                        return version == nil || version?.isResolved == true
                    }
                }
            }
            if !resolved.isEmpty {
                do {
                    let raw = try await sync.client.resolve(container: sync.container, item: item, keep: remote.revision, remove: resolved.sorted())
                    let answer = try sync.opened(raw)
                    sync.state.learn(ContainerSync.snapshot(answer))
                    await sync.signResolution(raw, replaced: remote.revision)
                    if sync.errors[item]?.hasPrefix(Self.resolutionError) == true { sync.errors[item] = nil }
                    for revision in resolved {
                        guard await removeConflictVersion(revision, of: item, at: url, in: sync) else { continue } // kept; tried again next round
                        conflictCopies[item]?.remove(revision)
                        try sync.store.setConflictCopy(false, container: sync.storeKey, item: item, revision: revision)
                        sync.noteAttributes([.ubiquitousItemHasUnresolvedConflictsKey], at: path)
                    }
                } catch {
                    // Tried again next round. Refused as `notAVersion`, this device's view of the
                    // item is behind the server's (another device saved or resolved meanwhile):
                    // the next round fetches first. (An answer whose record is refused: the same.)
                    sync.errors[item] = "\(Self.resolutionError): \(error)"
                    if (error as? SyncClientError)?.code == "notAVersion" || error is ItemRecordError { sync.fetchAgain() }
                }
                continue
            }
            // Nothing (left) to resolve here: an earlier attempt's failure no longer stands.
            if sync.errors[item]?.hasPrefix(Self.resolutionError) == true { sync.errors[item] = nil }
            // New conflict versions: their contents come down into the version store.
            let missing = known.subtracting(copies)
            guard !missing.isEmpty else {
                retries[item] = nil
                continue
            }
            if let retry = retries[item], retry.after > .now { continue } // (its error stands meanwhile)
            let details: ItemState
            do { details = try sync.opened(try await sync.client.item(container: sync.container, id: item)) } catch {
                sync.downloadErrors[item] = "\(error)"
                backOff(item)
                continue
            }
            sync.downloadErrors[item] = nil // an earlier attempt's failure no longer stands (set again below if one fails)
            for conflict in details.conflicts where missing.contains(conflict.revision) && conflict.uploaded {
                let identifier = NSFileVersion.PersistentIdentifier(Self.versionIdentifier(conflict.revision))
                if NSFileVersion.version(itemAt: url, forPersistentIdentifier: identifier) != nil {
                    // Put there by an agent stopped before it recorded so: it is that version
                    // (adding it again failed every round, for good — found by `ubiquity-chaos`).
                    conflictCopies[item, default: []].insert(conflict.revision)
                    try sync.store.setConflictCopy(true, container: sync.storeKey, item: item, revision: conflict.revision)
                    sync.noteAttributes([.ubiquitousItemHasUnresolvedConflictsKey], at: path)
                    NSFileVersion.removeAbandonedStaging(nearItemAt: url) // the killed agent's staging folder
                    continue
                }
                do {
                    let kind = remote.kind ?? .file
                    let staged = try await sync.materialiser.stage(LocalContents.members(conflict.manifest, kind: kind), kind: kind, of: item, name: path, reusing: sync.files[path], in: sync)
                    defer { sync.materialiser.removeStaged(staged, in: sync) }
                    let folder = NSFileVersion.temporaryDirectoryURLForNewVersionOfItem(at: url)
                    // The staging folder goes once the version is in (or could not be): left, each
                    // conflict version left an empty folder behind for a day (found by `ubiquity-chaos`).
                    defer { try? FileManager.default.removeItem(at: folder) } // (a leftover is swept by the store after a day)
                    let staging = folder.appendingPathComponent(LocalContents.name(of: path))
                    try FileManager.default.moveItem(at: staged, to: staging)
                    let (savedBy, date) = (conflict.deviceName, Date(timeIntervalSince1970: conflict.modificationDate))
                    let originator = sync.otherPerson(conflict.editor)
                    try await sync.coordinated {
                        _ = try NSFileVersion.addConflictVersion(ofItemAt: url, withContentsOf: staging, savingComputer: savedBy,
                                                                 modificationDate: date, byMoving: true, identifier: identifier.rawValue,
                                                                 originator: originator)
                    }
                    conflictCopies[item, default: []].insert(conflict.revision)
                    try sync.store.setConflictCopy(true, container: sync.storeKey, item: item, revision: conflict.revision)
                    sync.noteAttributes([.ubiquitousItemHasUnresolvedConflictsKey], at: path)
                } catch let error as SyncClientError {
                    sync.downloadErrors[item] = error.description
                }
            }
            if sync.downloadErrors[item] != nil { backOff(item) } else { retries[item] = nil }
        }
    }

    /// Puts off the next try of `item`'s conflict versions: a second, then twice as long each
    /// time, at most a minute.
    private func backOff(_ item: String) {
        let failures = (retries[item]?.failures ?? 0) + 1
        retries[item] = (failures, .now + .seconds(min(60, 1 << min(failures - 1, 6))))
    }

    /// Notes which of `items` still differ from the server's list of conflict versions (see
    /// ``owed``): a device that said it was idle with a conflict version missing disagreed with
    /// the others for good (found by `ubiquity-chaos`).
    private func settle(_ items: Set<String>, in sync: isolated ContainerSync) {
        owed = items.filter { item in
            guard let remote = sync.state.persisted.remote[item], !remote.deleted, remote.kind != .directory,
                  sync.files.contains(item: item), !sync.state.hasLocalChanges(item) else { return false }
            return Set(remote.conflicts.map(\.revision)) != (conflictCopies[item] ?? [])
        }
        if !owed.isEmpty {
            sync.logger.debug("conflict versions not in step yet", metadata: ["container": "\(sync.container)", "items": "\(owed.sorted())"])
            sync.fetchAgain()
        }
    }
}
