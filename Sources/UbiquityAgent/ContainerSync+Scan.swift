import Foundation
import UbiquityCoordination
import UbiquityClient
import UbiquityProtocol
import UbiquitySync

// Seeing local changes: where to look (the folders a watcher named, or everything), what changed
// there, and how it goes into the sync decisions. The rounds themselves are in ContainerSync.swift.
extension ContainerSync {
    /// A watcher saw something change at `path` (relative to the container's folder): the next
    /// round looks at the folder it is in (for something in a package, at the package's
    /// folder), and only there. Changes inside what stays local (`.nosync` folders, version
    /// stores) are not looked at.
    package func noteChange(at path: String) {
        watched = true
        guard changedFolders != nil else { return } // everything is looked at anyway
        let parts = path.split(separator: "/").map(String.init)
        guard !parts.isEmpty else {
            changedFolders = nil // the container's folder itself
            return
        }
        if parts.dropLast().contains(where: LocalScanner.isExcluded) { return }
        let scanner = scanner
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
    package func noteEverythingChanged() {
        changedFolders = nil
        changedTrees = []
    }

    /// Feeds what changed since the last look into the sync decisions: new, edited, moved and
    /// removed files, folders and packages (a folder's items follow it). Looks only in the
    /// folders a watcher named, unless everything is to be looked at.
    func scanLocalChanges() async throws {
        let scope = changedFolders, trees = changedTrees
        changedFolders = watched ? [] : nil
        changedTrees = []
        if scope?.isEmpty == true && trees.isEmpty { return }
        let scanner = scanner
        let old: LocalTree, now: LocalTree
        do {
            if let scope {
                (old, now) = try look(at: scope, trees: trees, scanner: scanner)
            } else {
                (old, now) = (files.fingerprints, try scanner.scan())
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
        for path in changes.removed { before[path] = files[path] }
        if !changes.isEmpty { logger.debug("local changes", metadata: ["container": "\(container)", "changes": "\(changes)"]) }
        var upsert: [AgentStore.File] = []
        var moved: [String: AgentStore.File] = [:]
        for (from, to) in changes.moved {
            if let file = files.removeValue(forKey: from) { moved[to] = file }
        }
        // Items shown here but not downloaded, by path: a file found where one is (a download a
        // killed agent had put in place without recording it) is that item, not a new one.
        func shownElsewhere(_ path: String) -> String? { shown.item(at: path).flatMap { files.contains(item: $0) ? nil : $0 } }
        // What arrived (moved here or new), parents before their items.
        let arrivals = (changes.moved.map(\.to) + changes.added).sorted { (LocalContents.depth($0), $0) < (LocalContents.depth($1), $1) }
        for path in arrivals {
            guard let print = now[path] else { continue }
            let name = LocalContents.name(of: path)
            guard let parent = self.parent(ofFolder: LocalContents.folder(of: path)) else {
                continue // its folder is not recorded (yet): the next scan sees it again
            }
            let date = Double(print.modified) / 1e9
            if var file = moved[path] {
                let shown = state.visible(file.item)
                if shown?.name != name || shown?.parent != parent {
                    state.move(item: file.item, to: name, parent: parent, date: print.kind == .directory ? Date().timeIntervalSince1970 : date)
                }
                file.path = path
                file.fingerprint = print
                files[path] = file
                upsert.append(file)
                continue
            }
            guard let content = try cut(path, kind: print.kind, scanner: scanner) else { continue }
            if let item = shownElsewhere(path), !state.hasLocalChanges(item), let remote = state.persisted.remote[item],
               remote.content == content, (remote.kind ?? .file) == print.kind {
                let file = AgentStore.File(path: path, item: item, fingerprint: print, content: content, revision: remote.revision)
                files[path] = file
                upsert.append(file)
                materialPending?.insert(item) // its placeholder goes
                continue
            }
            let item = RandomIdentifier.make()
            state.save(item: item, name: name, parent: parent, kind: print.kind, content: content,
                       date: print.kind == .directory ? Date().timeIntervalSince1970 : date)
            let file = AgentStore.File(path: path, item: item, fingerprint: print, content: content)
            files[path] = file
            upsert.append(file)
        }
        for path in changes.modified {
            guard var file = files[path], let print = now[path] else { continue }
            if print.kind != .directory {
                guard let content = try cut(path, kind: print.kind, scanner: scanner) else { continue }
                if file.content != content {
                    state.save(item: file.item, content: content, date: Double(print.modified) / 1e9)
                    file.revision = nil
                    NSFileVersion.forgetSavingComputer(ofItemAt: root.appendingPathComponent(path).path) // written here in place
                }
                file.content = content
            }
            file.fingerprint = print
            files[path] = file
            upsert.append(file)
        }
        // What went, items before their folders.
        for path in changes.removed.sorted(by: { LocalContents.depth($0) > LocalContents.depth($1) }) {
            guard let file = before[path] else { continue }
            if files[path]?.item == file.item { files[path] = nil }
            if files.contains(item: file.item) { continue } // still here under another name
            state.delete(item: file.item, date: Date().timeIntervalSince1970)
        }
        // A placeholder removed by someone else than the agent: the item not downloaded was deleted.
        let placeholderPaths = scope.map { $0.reduce(into: Set<String>()) { $0.formUnion(placeholders.paths(inFolder: $1)) } } ?? Set(placeholders.byPath.keys)
        for path in placeholderPaths {
            guard let placeholder = placeholders[path] else { continue }
            guard !FileManager.default.fileExists(atPath: root.appendingPathComponent(path).path) else { continue }
            placeholders[path] = nil
            if placeholder.item.isEmpty || files.contains(item: placeholder.item) { continue }
            state.delete(item: placeholder.item, date: Date().timeIntervalSince1970)
        }
        try await persist(upsert: upsert, removed: changes.removed + changes.moved.map(\.from))
    }

    /// The files recorded in `folders` and what is in them now: each folder listed (not its
    /// subfolders, which say when they change), except that a folder new at its path (made, or
    /// moved here) is walked whole (as is each of `trees`), and a folder gone from its path (removed, or moved away)
    /// counts with everything it held — so a folder moved between two named folders is a move
    /// of the folder with its items, not a removal and an addition.
    func look(at folders: Set<String>, trees: Set<String> = [], scanner: LocalScanner) throws -> (old: LocalTree, now: LocalTree) {
        var old: LocalTree = [:], now: LocalTree = [:]
        func holdings(of path: String) {
            for file in files.subtree(path) { old[file.path] = file.fingerprint }
        }
        for tree in trees {
            holdings(of: tree)
            guard let print = scanner.fingerprint(of: tree), print.kind == .directory else { continue } // gone again: its folder's listing says so
            now[tree] = print
            try scanner.walk(tree, into: &now)
        }
        for folder in folders {
            var listed: LocalTree = [:]
            try scanner.walk(folder, into: &listed, recursive: false)
            for child in files.children(of: folder) {
                old[child.path] = child.fingerprint
                if child.fingerprint.kind == .directory, listed[child.path]?.kind != .directory || listed[child.path]?.inode != child.fingerprint.inode {
                    holdings(of: child.path)
                }
            }
            for (path, print) in listed {
                now[path] = print
                let known = files[path]?.fingerprint
                guard print.kind == .directory, known?.kind != .directory || known?.inode != print.inode else { continue }
                try scanner.walk(path, into: &now)
                if let was = files.folder(withInode: print.inode), was != path { holdings(of: was) }
            }
        }
        return (old, now)
    }

    /// The parent an item in `folder` (relative to the container's folder) has on the server:
    /// nil for the top of `Documents`, ``ContainerLayout/topLevel`` for the container's top
    /// level, else the folder's item; `.none` when the folder is not recorded (yet).
    func parent(ofFolder folder: String) -> String?? {
        if folder.isEmpty { return .some(ContainerLayout.topLevel) }
        if folder == ContainerLayout.documentsFolder { return .some(nil) }
        guard let record = files[folder], record.fingerprint.kind == .directory else { return .none }
        return .some(record.item)
    }
}
