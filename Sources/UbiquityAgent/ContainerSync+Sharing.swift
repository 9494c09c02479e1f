import Foundation
import UbiquityClient
import UbiquityCoordination
import UbiquityProtocol
import UbiquitySync

// The engines and sharing (docs/Sharing.md): what part of the folder an engine keeps, which of
// the container's items this account shares, and a share that is read-only for this account: the server refuses every change
// made through it, and a file system cannot refuse a write — so what the person changed is kept
// instead, and the share's files are put back as the server has them. Nothing typed is lost.
extension ContainerSync {
    /// The top items of the shares this account owns in the container, as the server says now.
    package func setSharedRoots(_ roots: Set<String>) {
        guard roots != sharedRoots else { return }
        sharedRoots = roots
        statusVersion &+= 1
    }

    /// How `item` is shared, if it is: every item of a share's engine (another account's); an
    /// item of the container's own that is, or is in, one of ``sharedRoots``.
    func sharing(of item: String) -> ItemSharing? {
        if let share { return ItemSharing(owned: false, readOnly: readOnly, owner: share.owner, lastEditor: otherPerson(of: item)) }
        guard !sharedRoots.isEmpty else { return nil }
        var current: String? = item, walked = 0
        while let id = current, walked < 256 {
            if sharedRoots.contains(id) { return ItemSharing(owned: true, readOnly: false, lastEditor: otherPerson(of: item)) }
            current = state.visible(id)?.parent
            walked += 1
        }
        return nil
    }

    /// Passes over `skipped` from now on (the folders of the shares kept here, each by a
    /// share's engine): the container's own engine, told before a share's folder is made or
    /// after it is gone.
    package func passOver(_ skipped: Set<String>) {
        guard share == nil, skipped != border.skipped else { return }
        border.skipped = skipped
    }

    /// Whether this engine keeps a share that is read-only for this account: local changes are
    /// not sent but kept (``keepRefused(_:)``).
    package func setReadOnly(_ readOnly: Bool) {
        guard self.readOnly != readOnly else { return }
        self.readOnly = readOnly
        if !readOnly { refusals = [:] }
        statusVersion &+= 1
    }

    /// Whether anything in this engine's part of the folder is not on the server — every file
    /// looked at now, on the folder's turn: for a share whose access ends, whose folder goes
    /// only when nothing in it would be lost. (When it cannot be told, it is taken as so.)
    package func holdsUnsentChanges() async -> Bool {
        await takeFolderTurn()
        defer { endFolderTurn() }
        finder.noteEverythingChanged()
        do {
            try await finder.scanLocalChanges(in: self)
        } catch {
            return true
        }
        // (A file the look could not settle — the server, which no longer lets this account
        // in, could not be asked whether it holds its contents — may hold the person's edit:
        // found by `ubiquity-chaos --sealed-share` under the whole suite's load, a participant's
        // write made just as access ended deleted with the folder.)
        return finder.unsettled || !state.persisted.local.isEmpty || !state.persisted.sending.isEmpty || !state.persisted.queued.isEmpty
    }

    /// The most refusals ``refusals`` keeps (the oldest go).
    static let refusalsKept = 100

    /// Keeps what `changes` hold, which the server will not take (this share is read-only for
    /// this account), and gives the items back to the server's state:
    /// - a file or package edited here: its bytes become a conflict version of it (an
    ///   `NSFileVersion` an app shows for the person to choose from) and the shared revision
    ///   comes back in its place;
    /// - something made here: moved out of the share's folder to the top of `Documents`, named
    ///   "NAME (not shared)" — this account's own from then on;
    /// - something deleted, renamed or moved here: put back.
    /// Each is said in ``refusals`` (`ubiquity status`).
    func keepRefused(_ changes: [LocalChange]) async throws {
        var movedOut: [String] = [], removed: [String] = []
        for change in changes.sorted(by: { (files.path(of: $0.item) ?? "") < (files.path(of: $1.item) ?? "") }) {
            let item = change.item, remote = state.persisted.remote[item], local = files.file(of: item)
            defer { state.discardLocal(item) }
            guard let local else { continue } // deleted here (or moved out with its folder): put back
            if movedOut.contains(where: { local.path.hasPrefix($0 + "/") }) { continue } // went with its folder
            if remote == nil || remote?.deleted == true, let replaced = materialiser.shown.item(at: local.path), replaced != item,
               state.persisted.remote[replaced]?.deleted == false {
                // A save that put a new file in place of a shared one (a new inode, seen before
                // the old one's record followed it): an edit of that one — kept as a version of it.
                try await keepAsVersion(local.path)
                try FileManager.default.removeItem(at: root.appendingPathComponent(local.path))
                removed.append(local.path)
                state.discardLocal(replaced)
                refuse(local.path, "this share is read-only for you: your version was kept as a conflict version, and the shared one put back")
            } else if remote == nil || remote?.deleted == true {
                let kept = try moveOut(local.path)
                movedOut.append(local.path)
                removed += files.fingerprints.keys.filter { $0 == local.path || $0.hasPrefix(local.path + "/") }
                refuse(local.path, "this share is read-only for you: what you made here was moved to “\(kept)” in your own Documents")
            } else if local.fingerprint.kind != .directory, local.content != remote?.content {
                try await keepAsVersion(local.path)
                refuse(local.path, "this share is read-only for you: your version was kept as a conflict version, and the shared one put back")
            } else {
                refuse(local.path, "this share is read-only for you: the change was undone")
            }
        }
        for path in removed { files[path] = nil }
        try await persist(removed: removed)
        logger.notice("changes in a read-only share kept here and undone", metadata: ["container": "\(container)", "changes": "\(changes.count)"])
    }

    /// Says why a change at `path` was not sent.
    private func refuse(_ path: String, _ reason: String) {
        refusals[path] = reason
        if refusals.count > Self.refusalsKept, let oldest = refusals.keys.sorted().first { refusals[oldest] = nil }
    }

    /// Moves what is at `path` (in the share's folder) to the top of `Documents` under a free
    /// name "NAME (not shared)": returns that name.
    private func moveOut(_ path: String) throws -> String {
        let name = LocalContents.name(of: path)
        let stem = (name as NSString).deletingPathExtension, ext = (name as NSString).pathExtension
        let (front, back) = ext.isEmpty || stem.isEmpty ? (name, "") : (stem, "." + ext)
        for number in 1...999 {
            let candidate = front + " (not shared)" + (number == 1 ? "" : " \(number)") + back
            let target = documents.appendingPathComponent(candidate)
            guard !FileManager.default.fileExists(atPath: target.path) else { continue }
            try FileManager.default.moveItem(at: root.appendingPathComponent(path), to: target)
            return candidate
        }
        throw ContainerSyncError("no free name beside \(name) to keep it by", code: .failed)
    }

    /// Keeps the file or package at `path` as a conflict version of itself.
    private func keepAsVersion(_ path: String) async throws {
        let url = root.appendingPathComponent(path)
        let folder = NSFileVersion.temporaryDirectoryURLForNewVersionOfItem(at: url)
        defer { try? FileManager.default.removeItem(at: folder) }
        let staging = folder.appendingPathComponent(LocalContents.name(of: path))
        try FileManager.default.copyItem(at: url, to: staging)
        let computer = ProcessInfo.processInfo.hostName
        try await coordinated {
            _ = try NSFileVersion.addConflictVersion(ofItemAt: url, withContentsOf: staging, savingComputer: computer, modificationDate: Date(), byMoving: true)
        }
        noteAttributes([.ubiquitousItemHasUnresolvedConflictsKey], at: path)
    }
}
