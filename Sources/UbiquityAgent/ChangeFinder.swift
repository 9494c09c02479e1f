import Foundation
import UbiquityCoordination
import UbiquityClient
import UbiquityProtocol
import UbiquitySync

/// Sees a container's local changes, for ``ContainerSync``: where to look (the folders a
/// watcher named, or everything), what changed there, and how it goes into the sync decisions.
///
/// One of the rooms of a container's sync, with ``Uploader``, ``Materialiser`` and
/// ``ConflictReconciler``: it owns where to look next; what the rooms share (the sync
/// decisions, the records of local files, the server) belongs to the ``ContainerSync`` whose
/// actor its work runs on (each method takes it as an `isolated` parameter).
final class ChangeFinder {
    /// The folders (relative paths) to look at in the next round; nil: everything. Without a
    /// watcher (``noteChange(at:in:)`` never called) every round looks at everything.
    private var changedFolders: Set<String>?
    /// Folders made or moved in since the last round, walked whole by the next.
    private var changedTrees: Set<String> = []
    /// Whether a watcher tells this container's changes.
    private var watched = false
    /// Files found gone in a look at their folder alone, kept one round more: a move's two
    /// events (gone from one folder, arrived in another) may be read in two rounds, and the
    /// arrival must find the record to move it — else the item was deleted and its file made a
    /// new item (found by `ubiquity-chaos`).
    private var vanished: Set<String> = []

    /// Whether the last look left files it could not settle: files whose bytes may be the
    /// server's contents cut elsewhere, and the server could not be asked. They may hold
    /// changes (``ContainerSync/holdsUnsentChanges()`` counts them).
    private(set) var unsettled = false

    /// Renames the watcher paired, `to` → `from`, for the next round.
    private var renames: [String: String] = [:]

    /// Whether a look is owed: files gone from their folder wait for one more round.
    var owesALook: Bool { !vanished.isEmpty }

    /// The watcher saw `from` renamed to `to` (relative to the container's folder).
    func noteMove(from: String, to: String) {
        if renames.count >= 10_000 { renames = [:] } // bounded; the scan alone still decides what it sees
        renames[to] = from
    }

    /// Applies the renames the watcher paired: the record of a file or package that left
    /// `from` follows it to `to`, even if the file there was replaced since (a move, then a save
    /// over the moved file, before the agent looked — else a delete and a new item).
    private func followRenames(in sync: isolated ContainerSync) -> [(file: AgentStore.File, from: String)] {
        defer { renames = [:] }
        var moved: [(file: AgentStore.File, from: String)] = []
        for (to, from) in renames.sorted(by: { $0.key < $1.key }) {
            guard var file = sync.files[from], file.fingerprint.kind != .directory, sync.files[to] == nil, sync.state.visible(file.item)?.deleted == false,
                  sync.scanner.fingerprint(of: from) == nil, let now = sync.scanner.fingerprint(of: to), now.kind == file.fingerprint.kind,
                  let parent = sync.parent(ofFolder: LocalContents.folder(of: to)) else { continue }
            sync.files[from] = nil
            do {
                try NSFileVersion.carryVersions(ofItemMovedFrom: sync.root.appendingPathComponent(from), to: sync.root.appendingPathComponent(to))
            } catch {
                sync.logger.warning("cannot carry a moved item's versions", metadata: ["from": "\(from)", "to": "\(to)", "error": "\(error)"])
            }
            file.path = to
            sync.files[to] = file // its old fingerprint: the look at `to` sees whether it changed too
            sync.state.move(item: file.item, to: LocalContents.name(of: to), parent: parent, date: Date().timeIntervalSince1970)
            vanished.remove(from)
            moved.append((file, from))
        }
        return moved
    }

    /// A watcher saw something change at `path` (relative to the container's folder): the next
    /// round looks at the folder it is in (for something in a package, at the package's
    /// folder), and only there. Changes inside what stays local (`.nosync` folders, version
    /// stores) are not looked at.
    func noteChange(at path: String, in sync: isolated ContainerSync) {
        watched = true
        guard changedFolders != nil else { return } // everything is looked at anyway
        let parts = path.split(separator: "/").map(String.init)
        guard !parts.isEmpty else {
            changedFolders = nil // the container's folder itself
            return
        }
        if parts.dropLast().contains(where: LocalScanner.isExcluded) { return }
        let scanner = sync.scanner
        let end = parts.indices.dropLast().first { scanner.isPackage(parts[$0]) && !($0 == 0 && parts[0] == ContainerLayout.documentsFolder) } ?? parts.count - 1
        changedFolders?.insert(parts[..<end].joined(separator: "/"))
        // A folder made (or moved) here: what was put in it before the watcher saw it made no
        // event, so it is walked whole — also when an earlier round recorded it still empty.
        if end == parts.count - 1, !LocalScanner.isExcluded(parts[end]), parts != [ContainerLayout.documentsFolder],
           scanner.fingerprint(of: path)?.kind == .directory {
            changedTrees.insert(path)
        }
    }

    /// Events were lost (inotify's queue overflowed) or a slow timer asks for it: the next round
    /// looks at everything.
    func noteEverythingChanged() {
        changedFolders = nil
        changedTrees = []
    }

    /// Feeds what changed since the last look into the sync decisions: new, edited, moved and
    /// removed files, folders and packages (a folder's items follow it). Looks only in the
    /// folders a watcher named, unless everything is to be looked at.
    func scanLocalChanges(in sync: isolated ContainerSync) async throws {
        unsettled = false
        let scope = changedFolders, trees = changedTrees
        changedFolders = watched ? [] : nil
        changedTrees = []
        let followed = followRenames(in: sync)
        if !followed.isEmpty { try await sync.persist(upsert: followed.map(\.file), removed: followed.map(\.from)) }
        if scope?.isEmpty == true && trees.isEmpty { return }
        let wasVanished = vanished
        vanished = []
        let scanner = sync.scanner
        let old: LocalTree, now: LocalTree
        do {
            if let scope {
                (old, now) = try look(at: scope, trees: trees, scanner: scanner, vanishedBefore: wasVanished, in: sync)
                // What vanished is looked at again next round (a look the watcher may not ask for).
                for path in vanished { changedFolders?.insert(LocalContents.folder(of: path)) }
            } else {
                (old, now) = (sync.files.fingerprints, try scanner.scan())
            }
        } catch {
            if let scope, changedFolders != nil {
                changedFolders?.formUnion(scope)
                changedTrees.formUnion(trees)
            } else {
                changedFolders = nil
            }
            throw error
        }
        let changes = LocalScanner.changes(from: old, to: now)
        // The records of what went, as they were (not a copy of every record: that would cost
        // the whole container on the first change below).
        var before: [String: AgentStore.File] = [:]
        for path in changes.removed { before[path] = sync.files[path] }
        if !changes.isEmpty { sync.logger.debug("local changes", metadata: ["container": "\(sync.container)", "changes": "\(changes)"]) }
        if changes.modified.count >= 100, sync.logger.logLevel <= .debug {
            // (What moved in the fingerprints of so many files at once, for whoever reads the log.)
            for path in changes.modified.prefix(3) {
                sync.logger.debug("a file looked at as changed", metadata: ["path": "\(path)", "recorded": "\(old[path].map { "\($0)" } ?? "-")", "now": "\(now[path].map { "\($0)" } ?? "-")"])
            }
        }
        var upsert: [AgentStore.File] = []
        var moved: [String: AgentStore.File] = [:]
        for (from, to) in changes.moved {
            if let file = sync.files.removeValue(forKey: from) { moved[to] = file }
        }
        // The item shown at `path` whose file is not there: a file found where one is (a
        // download a stopped agent had put in place without recording it) is that item, not a
        // new one — also when the item's file was recorded elsewhere (a download that moved it
        // and changed it, cut short by a kill or a sign-out: found by `ubiquity-chaos`) and is
        // gone from there, or still there untouched (the agent's removal of it was cut short).
        func shownElsewhere(_ path: String) -> (item: String, leftover: String?)? {
            guard let item = sync.materialiser.shown.item(at: path) else { return nil }
            guard let recorded = sync.files.file(of: item) else { return (item, nil) }
            guard recorded.path != path, recorded.fingerprint.kind != .directory, !changes.modified.contains(recorded.path) else { return nil }
            let there = scanner.fingerprint(of: recorded.path)
            guard there == nil || there == recorded.fingerprint else { return nil } // edited there: the conflict rules decide
            return (item, there == nil ? nil : recorded.path)
        }
        // Files gone in this look whose items the server last had elsewhere (moved here, the
        // move not sent yet), by that place: one found back there is the item (see below).
        var awayFrom: [ServerPlace: String] = [:]
        for path in changes.removed {
            guard let file = before[path], file.fingerprint.kind != .directory, let remote = sync.state.persisted.remote[file.item], !remote.deleted,
                  let visible = sync.state.visible(file.item), visible.name != remote.name || visible.parent != remote.parent else { continue }
            awayFrom[ServerPlace(parent: remote.parent, name: remote.name)] = file.item
        }
        var adoptedFrom: [String] = []
        // Whether a folder holds a version store, asked once per folder (a folder of 10,000
        // files renamed is 10,000 moves from the same folder).
        var versionStores: [String: Bool] = [:]
        func hasVersions(_ folder: String) -> Bool {
            if let known = versionStores[folder] { return known }
            let store = sync.root.path + "/" + (folder.isEmpty ? "" : folder + "/") + ".ubiquity-versions"
            let found = FileManager.default.fileExists(atPath: store)
            versionStores[folder] = found
            return found
        }
        // An item found to be the file at `path`: recorded as that item (`revision`: the
        // server's it holds; nil: a change made here), its record elsewhere dropped.
        func adopt(_ item: String, at path: String, print: LocalFingerprint, content: ContentToken, leftover: String?, revision: String?) async throws {
            if let old = sync.files.file(of: item) {
                if let leftover { try await sync.materialiser.coordinatedRemove(leftover, in: sync) }
                do {
                    try NSFileVersion.carryVersions(ofItemMovedFrom: sync.root.appendingPathComponent(old.path), to: sync.root.appendingPathComponent(path))
                } catch {
                    sync.logger.warning("cannot carry a moved item's versions", metadata: ["from": "\(old.path)", "to": "\(path)", "error": "\(error)"])
                }
                sync.files[old.path] = nil
                vanished.remove(old.path)
                adoptedFrom.append(old.path)
            }
            let file = AgentStore.File(path: path, item: item, fingerprint: print, content: content, revision: revision)
            sync.files[path] = file
            upsert.append(file)
            sync.materialiser.pending?.insert(item) // its placeholder goes
        }
        // A file arrived at `path` that is no item shown there: the item the server last had
        // here, whose file recorded elsewhere (a move not sent yet) is gone — moved back and
        // saved over (a new file) before the agent looked again, found by `ubiquity-chaos`:
        // else a new item, which collided on the server with the item itself, kept as
        // "a 2.txt" — or a new item.
        func arrivedAnew(_ path: String, print: LocalFingerprint, content: ContentToken, name: String, parent: String?) async throws {
            let date = Double(print.modified) / 1e9
            if print.kind != .directory, let item = awayFrom[ServerPlace(parent: parent, name: name)], let remote = sync.state.persisted.remote[item],
               (remote.kind ?? .file) == print.kind, sync.files.file(of: item).map({ changes.removed.contains($0.path) }) == true {
                try await adopt(item, at: path, print: print, content: content, leftover: nil, revision: nil)
                let visible = sync.state.visible(item)
                if visible?.name != name || visible?.parent != parent { sync.state.move(item: item, to: name, parent: parent, date: date) }
                sync.state.save(item: item, content: content, date: date)
                NSFileVersion.forgetSavingComputer(ofItemAt: sync.root.appendingPathComponent(path).path) // written here
                return
            }
            let item = newItemId(name: name, parent: parent, kind: print.kind, in: sync)
            sync.state.save(item: item, name: name, parent: parent, kind: print.kind, content: content,
                       date: print.kind == .directory ? Date().timeIntervalSince1970 : date)
            let file = AgentStore.File(path: path, item: item, fingerprint: print, content: content)
            sync.files[path] = file
            upsert.append(file)
        }
        // Files that may hold their items' server contents cut elsewhere, checked together below.
        var unproven: [Unproven] = []
        // What arrived (moved here or new), parents before their items.
        let arrivals = (changes.moved.map(\.to) + changes.added).sorted { (LocalContents.depth($0), $0) < (LocalContents.depth($1), $1) }
        for path in arrivals {
            guard let print = now[path] else { continue }
            let name = LocalContents.name(of: path)
            guard let parent = sync.parent(ofFolder: LocalContents.folder(of: path)) else {
                continue // its folder is not recorded (yet): the next scan sees it again
            }
            let date = Double(print.modified) / 1e9
            if let file = moved[path], let replaced = sync.files[path], replaced.item != file.item,
               replaced.fingerprint.kind != .directory, print.kind != .directory {
                // Moved over another item's file, replacing it (a save that writes a new file
                // and renames it over the old one, the new one seen by a look of its own first:
                // found by `ubiquity-chaos` — the new item then clashed with the old one's name
                // and landed as "Name 2", the old one keeping its old contents): the item here
                // keeps its name, identity and history and takes the new contents; the item the
                // moved file was is gone.
                guard let content = try sync.cut(path, kind: print.kind, scanner: scanner) else { continue }
                var kept = replaced
                if kept.content != content {
                    sync.state.save(item: kept.item, content: content, date: date)
                    kept.revision = nil
                    NSFileVersion.forgetSavingComputer(ofItemAt: sync.root.appendingPathComponent(path).path) // written here
                }
                (kept.content, kept.fingerprint) = (content, print)
                sync.files[path] = kept
                upsert.append(kept)
                if !sync.files.contains(item: file.item) { sync.state.delete(item: file.item, date: Date().timeIntervalSince1970) }
                continue
            }
            if var file = moved[path] {
                if file.fingerprint.kind != .directory, hasVersions(LocalContents.folder(of: file.path)) {
                    // Moved without telling (a program that does not coordinate): its versions
                    // follow it, as they do when a coordinated move says so.
                    do {
                        try NSFileVersion.carryVersions(ofItemMovedFrom: sync.root.appendingPathComponent(file.path), to: sync.root.appendingPathComponent(path))
                    } catch {
                        sync.logger.warning("cannot carry a moved item's versions", metadata: ["from": "\(file.path)", "to": "\(path)", "error": "\(error)"])
                    }
                }
                let visible = sync.state.visible(file.item)
                if visible?.name != name || visible?.parent != parent {
                    sync.state.move(item: file.item, to: name, parent: parent, date: print.kind == .directory ? Date().timeIntervalSince1970 : date)
                }
                file.path = path
                file.fingerprint = print
                sync.files[path] = file
                upsert.append(file)
                continue
            }
            guard let content = try sync.cut(path, kind: print.kind, scanner: scanner) else { continue }
            // The item shown here, if this file is it (holding its current contents: a download
            // put in place, not recorded — the agent stopped between).
            if let (item, leftover) = shownElsewhere(path), !sync.state.hasLocalChanges(item), let remote = sync.state.persisted.remote[item], !remote.deleted,
               (remote.kind ?? .file) == print.kind {
                if remote.content == content {
                    try await adopt(item, at: path, print: print, content: content, leftover: leftover, revision: remote.revision)
                    continue
                }
                // Cut elsewhere, its list cannot say: the bytes are checked against it below.
                unproven.append(Unproven(path: path, item: item, revision: remote.revision, print: print, content: content, arrived: (leftover, name, parent)))
                continue
            }
            try await arrivedAnew(path, print: print, content: content, name: name, parent: parent)
        }
        for path in changes.modified {
            guard var file = sync.files[path], let print = now[path] else { continue }
            if print.kind != .directory {
                guard let content = try sync.cut(path, kind: print.kind, scanner: scanner) else { continue }
                if file.content != content, !sync.state.hasLocalChanges(file.item), let remote = sync.state.persisted.remote[file.item],
                   !remote.deleted, remote.content == content {
                    // The server's contents: a download the agent put in place and was stopped
                    // before recording (found by `ubiquity-chaos`), not an edit made here.
                    file.revision = remote.revision
                } else if file.content != content, file.revision != nil, !sync.state.hasLocalChanges(file.item), let remote = sync.state.persisted.remote[file.item],
                          !remote.deleted, remote.revision != file.revision, (remote.kind ?? .file) == print.kind {
                    // Maybe that download, cut elsewhere: the bytes are checked below.
                    unproven.append(Unproven(path: path, item: file.item, revision: remote.revision, print: print, content: content, arrived: nil))
                    continue
                } else if file.content != content, let revision = file.revision, !sync.state.hasLocalChanges(file.item),
                          let remote = sync.state.persisted.remote[file.item], remote.revision == revision, !remote.deleted,
                          (remote.kind ?? .file) == print.kind, case let verdict = unchanged(file, now: content, print: print, in: sync), verdict != false {
                    // Bytes that may be the revision this device knows still, cut elsewhere (by a
                    // device that does not seal, or sealed in place): looked at again — an app
                    // saved them unchanged, say — they are not an edit. Taken for one, they went
                    // on a stale base after another device had moved the item, and undid the
                    // move everywhere (found by `ubiquity-chaos`).
                    if verdict == nil { // (this device cannot tell alone: the server is asked)
                        unproven.append(Unproven(path: path, item: file.item, revision: revision, print: print, content: content, arrived: nil))
                        continue
                    }
                } else if file.content != content {
                    if sync.logger.logLevel <= .debug { noteEdit(file, print: print, in: sync) }
                    sync.state.save(item: file.item, content: content, date: Double(print.modified) / 1e9)
                    file.revision = nil
                    NSFileVersion.forgetSavingComputer(ofItemAt: sync.root.appendingPathComponent(path).path) // written here in place
                }
                file.content = content
            }
            file.fingerprint = print
            sync.files[path] = file
            upsert.append(file)
        }
        if !unproven.isEmpty {
            let held = await proven(unproven, in: sync)
            for file in unproven {
                let folder = LocalContents.folder(of: file.path)
                let proof = held.map { $0[file.item] } ?? .undecided
                var contents: (token: ContentToken, revision: String)?
                switch proof {
                case .undecided:
                    // The server cannot be asked now: the file stays as it was recorded (or
                    // unrecorded), and the next look sees it again.
                    changedFolders?.insert(folder)
                    unsettled = true
                    continue
                case .current(let state):
                    let token = LocalContents.token(state.manifest, kind: state.kind)
                    sync.state.relearn(ContainerSync.snapshot(state)) // (the list the server has now, if sealed in place since)
                    sync.localContents[token] = LocalContents.members(state.manifest, kind: state.kind)
                    contents = (token, state.revision)
                case .known(let revision, let manifest, let kind):
                    sync.logger.debug("bytes cut elsewhere are the revision known here, not an edit", metadata: ["item": "\(file.item)", "revision": "\(revision)"])
                    let token = LocalContents.token(manifest, kind: kind)
                    sync.localContents[token] = LocalContents.members(manifest, kind: kind)
                    contents = (token, revision)
                case nil:
                    break
                }
                if let contents {
                    if let arrived = file.arrived {
                        try await adopt(file.item, at: file.path, print: file.print, content: contents.token, leftover: arrived.leftover, revision: contents.revision)
                    } else if var record = sync.files[file.path] {
                        (record.content, record.revision, record.fingerprint) = (contents.token, contents.revision, file.print)
                        sync.files[file.path] = record
                        upsert.append(record)
                    }
                    continue
                }
                // Not the server's contents: what it is, an edit or a new item.
                if let arrived = file.arrived {
                    try await arrivedAnew(file.path, print: file.print, content: file.content, name: arrived.name, parent: arrived.parent)
                } else if var record = sync.files[file.path] {
                    sync.state.save(item: record.item, content: file.content, date: Double(file.print.modified) / 1e9)
                    NSFileVersion.forgetSavingComputer(ofItemAt: sync.root.appendingPathComponent(file.path).path) // written here in place
                    (record.content, record.revision, record.fingerprint) = (file.content, nil, file.print)
                    sync.files[file.path] = record
                    upsert.append(record)
                }
            }
        }
        // What went, items before their folders.
        for path in changes.removed.sorted(by: { LocalContents.depth($0) > LocalContents.depth($1) }) {
            guard let file = before[path] else { continue }
            if sync.files[path]?.item == file.item { sync.files[path] = nil }
            if sync.files.contains(item: file.item) { continue } // still here under another name
            await sync.reconciler.detach(file.item, at: path, in: sync) // (its conflict versions do not stay for the next file of that name)
            sync.state.delete(item: file.item, date: Date().timeIntervalSince1970)
        }
        // A placeholder removed by someone else than the agent: the item not downloaded was deleted.
        let placeholderPaths = scope.map { $0.reduce(into: Set<String>()) { $0.formUnion(sync.materialiser.placeholders.paths(inFolder: $1)) } } ?? Set(sync.materialiser.placeholders.byPath.keys)
        for path in placeholderPaths {
            guard let placeholder = sync.materialiser.placeholders[path] else { continue }
            guard !FileManager.default.fileExists(atPath: sync.root.appendingPathComponent(path).path) else { continue }
            sync.materialiser.placeholders[path] = nil
            if placeholder.item.isEmpty || sync.files.contains(item: placeholder.item) { continue }
            sync.state.delete(item: placeholder.item, date: Date().timeIntervalSince1970)
        }
        try await sync.persist(upsert: upsert, removed: changes.removed + changes.moved.map(\.from) + adoptedFrom)
    }

    /// The id of an item new here: a folder's comes from where it is
    /// (``FolderIdentity``: the same folder made on two devices is one item), unless that id
    /// already names another item here (a folder renamed away from this place, then a new one
    /// made at it); anything else gets a random id.
    func newItemId(name: String, parent: String?, kind: ItemKind, in sync: isolated ContainerSync) -> String {
        guard kind == .directory else { return RandomIdentifier.make() }
        // (On a device that holds the account's keys, from the name's keyed tag — whether it seals
        // or not, so that both kinds of device make one folder: the id the server sees says
        // nothing of the name.)
        let records = sync.ownedShareRoot(of: nil, parent: parent).flatMap { sync.ownedShareCodecs[$0]?.records } ?? sync.codec.records
        let id = records.map { FolderIdentity.id(nameTag: $0.tag(name, parent: parent)) } ?? FolderIdentity.id(parent: parent, name: name)
        if sync.files.contains(item: id) { return RandomIdentifier.make() }
        if let known = sync.state.visible(id), !known.deleted, known.parent != parent || NameCollision.key(known.name) != NameCollision.key(name) {
            return RandomIdentifier.make()
        }
        return id
    }

    /// The files recorded in `folders` and what is in them now: each folder listed (not its
    /// subfolders, which say when they change), except that a folder new at its path (made, or
    /// moved here) is walked whole (as is each of `trees`), and a folder gone from its path (removed, or moved away)
    /// counts with everything it held — so a folder moved between two named folders is a move
    /// of the folder with its items, not a removal and an addition.
    func look(at folders: Set<String>, trees: Set<String> = [], scanner: LocalScanner, vanishedBefore: Set<String> = [],
              in sync: isolated ContainerSync) throws -> (old: LocalTree, now: LocalTree) {
        var old: LocalTree = [:], now: LocalTree = [:]
        func holdings(of path: String) {
            for file in sync.files.subtree(path) { old[file.path] = file.fingerprint }
        }
        for tree in trees {
            holdings(of: tree)
            guard let print = scanner.fingerprint(of: tree), print.kind == .directory else { continue } // gone again: its folder's listing says so
            now[tree] = print
            try scanner.walk(tree, into: &now)
        }
        var gone: [AgentStore.File] = [] // files missing from their folder's listing
        for folder in folders {
            var listed: LocalTree = [:]
            try scanner.walk(folder, into: &listed, recursive: false)
            for child in sync.files.children(of: folder) {
                if child.fingerprint.kind != .directory, listed[child.path] == nil, !vanishedBefore.contains(child.path), !trees.contains(where: { child.path.hasPrefix($0 + "/") }) {
                    gone.append(child) // decided below, once every folder is listed
                    continue
                }
                old[child.path] = child.fingerprint
                if child.fingerprint.kind == .directory, listed[child.path]?.kind != .directory || listed[child.path]?.inode != child.fingerprint.inode {
                    holdings(of: child.path)
                }
            }
            for (path, print) in listed {
                now[path] = print
                let known = sync.files[path]?.fingerprint
                // Arrived from a folder not looked at this round: its record there joins the look,
                // so that it is seen moved, not made new.
                if known == nil, print.kind != .directory, let was = sync.files.path(withInode: print.inode), was != path, old[was] == nil,
                   let record = sync.files[was], record.fingerprint.kind == print.kind, !folders.contains(LocalContents.folder(of: was)) {
                    old[was] = record.fingerprint
                    if let there = scanner.fingerprint(of: was) { now[was] = there }
                }
                guard print.kind == .directory, known?.kind != .directory || known?.inode != print.inode else { continue }
                try scanner.walk(path, into: &now)
                if let was = sync.files.folder(withInode: print.inode), was != path { holdings(of: was) }
            }
        }
        // A file gone from its folder and found in another folder looked at now moved there (the
        // comparison sees it); one found nowhere waits a round: it may have moved to a folder not
        // looked at yet.
        let inodes = Set(now.values.map(\.inode))
        for child in gone {
            if inodes.contains(child.fingerprint.inode) {
                old[child.path] = child.fingerprint
            } else {
                vanished.insert(child.path)
            }
        }
        return (old, now)
    }
}

/// A place as the server names it: the parent item (nil: the top of `Documents`) and the name.
private struct ServerPlace: Hashable {
    var parent: String?
    var name: String
}
