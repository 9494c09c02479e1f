import Foundation
import UbiquityProtocol
import UbiquitySync

// Sealed shares on their owner's devices (docs/Sharing.md, "Keys"): the container's own engine
// keeps the items of the shares this account owns, as it keeps the rest of the container — but
// what it sends into a sealed share goes sealed with that share's keys, so that its
// participants, who never hold the container's keys, read it. Files in a share's folder are cut
// by the share's keyed chunker; each chunk is sealed with the keys that named it; an item's
// record with the share's key (its top item's as at the top of the share, where its
// participants see it). What was sealed with the container's keys before — an item shared now,
// or moved in — is sealed again: a new revision with the same contents.
extension ContainerSync {
    /// The codecs of the sealed shares this account owns in the container, by top item (each
    /// made from the share's keys this device opened), and the top items of every sealed share
    /// it owns here (`sealedRoots`: those whose keys are not here too). Sealing again what is
    /// inside them and not sealed with their keys yet; what is sent into a sealed share whose
    /// keys are not here waits for them. Returns whether they changed (a round is due).
    @discardableResult
    package func setOwnedShareCodecs(_ codecs: [String: ChunkCodec], sealedRoots: Set<String>) async -> Bool {
        guard share == nil else { return false }
        let roots = sealedRoots.union(codecs.keys)
        var changed = false
        if roots != knownSealedRoots() {
            do {
                try store.setOwnedSealedShareRoots(roots, of: storeKey)
            } catch {
                logger.warning("cannot record which shares are sealed", metadata: ["container": "\(container)", "error": "\(error)"])
            }
            ownedSealedRoots = roots
            changed = true
        }
        guard Set(codecs.keys) != Set(ownedShareCodecs.keys) || codecs.contains(where: { ownedShareCodecs[$0.key]?.heldKeys.count != $0.value.heldKeys.count }) else {
            return changed
        }
        ownedShareCodecs = codecs
        // Files that waited for a share's keys are looked at again (said again if they still wait).
        for (key, value) in errors where value == Self.waitingForShareKeys { errors[key] = nil }
        noteEverythingChanged()
        do {
            try await refreshCodec()
        } catch {
            logger.warning("cannot read the container's keys again", metadata: ["container": "\(container)", "error": "\(error)"])
        }
        // Which of the items in them were sealed with the container's keys is asked of the server
        // at the next round (what this device keeps says what they hold, not how they are sealed).
        let remote = state.persisted.remote
        sealingUnknown = Set(remote.keys.filter { id in remote[id].map { !$0.deleted && ownedShareRoot(of: id, parent: $0.parent) != nil } ?? false })
        return true
    }

    /// The top item of the owned sealed share `item` is in (or is), if any: `item` itself, or
    /// the first of the folders above `parent` that is one.
    func ownedShareRoot(of item: String?, parent: String?) -> String? {
        guard !ownedShareCodecs.isEmpty else { return nil }
        return enclosing(item, parent: parent) { ownedShareCodecs[$0] != nil }
    }

    /// The top item of the sealed share this account owns that `item` is in (or is) and whose
    /// keys are not on this device, if any: what is sent into it waits until they are (after a
    /// start, before the server said which shares are sealed; found by `ubiquity-chaos
    /// --sealed-share`: an edit made then went sealed with the container's keys, and its
    /// conflict version stayed unreadable to the share's other members).
    func sealedShareWithoutKeys(of item: String, parent: String?) -> String? {
        let roots = knownSealedRoots()
        guard !roots.isEmpty else { return nil }
        return enclosing(item, parent: parent) { roots.contains($0) && ownedShareCodecs[$0] == nil }
    }

    /// What a file's status says while it waits for the keys of the sealed share it is in.
    static let waitingForShareKeys = "not sent yet: it is in a sealed share whose keys are not on this device yet"

    /// Whether the file or folder at `path` (relative to the container's folder) is in a sealed
    /// share this account owns whose keys are not on this device: it is not cut (nor sent)
    /// until they are — cut by the container's chunker, its chunks would be sealed with keys the
    /// share's members never hold.
    func waitsForShareKeys(at path: String) -> Bool {
        let roots = knownSealedRoots()
        guard !roots.isEmpty else { return false }
        for root in roots where ownedShareCodecs[root] == nil {
            guard let top = files.path(of: root) else { continue }
            if path == top || path.hasPrefix(top + "/") { return true }
        }
        return false
    }

    /// The top items of the sealed shares this account owns here, as last read (from the store
    /// the first time).
    func knownSealedRoots() -> Set<String> {
        if let ownedSealedRoots { return ownedSealedRoots }
        let stored: Set<String>
        do {
            stored = try store.ownedSealedShareRoots(of: storeKey)
        } catch {
            logger.warning("cannot read which shares are sealed", metadata: ["container": "\(container)", "error": "\(error)"])
            return []
        }
        ownedSealedRoots = stored
        return stored
    }

    /// `item` if `isRoot` says it is one, else the first folder above `parent` that is one.
    private func enclosing(_ item: String?, parent: String?, isRoot: (String) -> Bool) -> String? {
        if let item, isRoot(item) { return item }
        var current = parent, walked = 0
        while let id = current, walked < 256 {
            if isRoot(id) { return id }
            current = state.visible(id)?.parent
            walked += 1
        }
        return nil
    }

    /// The codec that cuts the file at `path` (relative to the container's folder): the
    /// share's, in an owned sealed share's folder; else the container's.
    func codec(at path: String) -> ChunkCodec {
        ownedShareRoot(at: path).flatMap { ownedShareCodecs[$0] } ?? codec
    }

    /// The top item of the owned sealed share whose folder `path` is in (or is), if any.
    func ownedShareRoot(at path: String) -> String? {
        guard !ownedShareCodecs.isEmpty else { return nil }
        for root in ownedShareCodecs.keys {
            guard let top = files.path(of: root) else { continue }
            if path == top || path.hasPrefix(top + "/") { return root }
        }
        return nil
    }

    /// The update as it goes to the server with its record sealed: with the share's key inside
    /// an owned sealed share (its top item's bound as at the top: where the share's members see
    /// it), else with the container's; as it is when this device does not seal.
    func sealedRecord(_ update: ItemUpdate, of item: String, manifest: Manifest) throws -> ItemUpdate {
        if let root = ownedShareRoot(of: item, parent: update.parent), let records = ownedShareCodecs[root]?.records {
            // Contents cut before the share's keys were here (a change made as the folder was
            // shared): sent as they are, then cut again by the share's chunker and sent as a
            // new revision. (A file in a sealed share known here is not cut until its keys are:
            // see ``cut(_:kind:scanner:)``.)
            if update.kind != .directory, !manifest.allChunks.isEmpty, !sharesCut.contains(LocalContents.token(manifest, kind: update.kind)) {
                recutDue.insert(item)
            }
            // Moved in from outside the share: its contents (and what it holds) are sealed again too.
            if let before = state.persisted.remote[item], !before.deleted, item != root, ownedShareRoot(of: item, parent: before.parent) == nil {
                sealingUnknown.insert(item)
                for (id, visible) in state.visibleItems where !visible.deleted && isInside(id, item) { sealingUnknown.insert(id) }
            }
            guard item == root else { return try records.sealed(update, item: item, manifest: manifest) }
            var top = update
            top.parent = nil
            var sealed = try records.sealed(top, item: item, manifest: manifest)
            sealed.parent = update.parent
            return sealed
        }
        if sealedShareWithoutKeys(of: item, parent: update.parent) != nil {
            throw ContainerSyncError("it is in a sealed share whose keys are not on this device yet: it is sent once they are", code: .failed)
        }
        guard let records = codec.records, records.seals else { return update }
        return try records.sealed(update, item: item, manifest: manifest)
    }

    /// `state` opened with the keys of the owned sealed share it is in, when the container's
    /// keys did not open it (`failure`): its top item's record as at the top of the share.
    func openedInOwnedShare(_ state: ItemState, failure: any Error) throws -> ItemState {
        guard let root = ownedShareRoot(of: state.id, parent: state.parent), let records = ownedShareCodecs[root]?.records else {
            throw failure
        }

        do {
            var opened: ItemState
            if state.id == root {
                var top = state
                top.parent = nil
                opened = try records.opened(top)
                opened.parent = state.parent
            } else {
                opened = try records.opened(state)
            }
            // Sealed again once its present record is the share's (a conflict version beside
            // it may be the container's: the owner's alone).
            var present = state
            present.conflicts = []
            if state.record != nil, !state.deleted, let own = codec.records, (try? own.opened(present)) != nil {
                resealDue.insert(state.id)
            } else {
                resealDue.remove(state.id)
            }
            return opened
        } catch let error as ItemRecordError where error.unheldEpoch != nil {
            throw failure // (sealed in none of the share's epochs: what the container's keys said is what matters)
        }
    }

    /// Notes an item the container's keys opened that lies in an owned sealed share: it is
    /// sealed again, with the share's keys, at the start of the next round.
    func noteSealedBeforeSharing(_ state: ItemState) {
        guard !ownedShareCodecs.isEmpty, state.record != nil, !state.deleted, ownedShareRoot(of: state.id, parent: state.parent) != nil else { return }
        resealDue.insert(state.id)
    }

    /// Seals again, with their share's keys, the items of owned sealed shares that were sealed
    /// with the container's keys: a folder's record goes again; a file here is cut again by the
    /// share's chunker (its contents, the same bytes, go as a new revision). A file not here
    /// waits until it is (it is downloaded first on a device that keeps every file).
    func sealAgainInShares() async {
        if !sealingUnknown.isEmpty, let records = codec.records {
            let asked = sealingUnknown.sorted()
            var start = 0
            while start < asked.count {
                let group = Array(asked[start..<min(asked.count, start + ItemsFetchRequest.maximumCount)])
                start += group.count
                do {
                    for raw in try await client.items(container: container, ids: group) where raw.record != nil && !raw.deleted {
                        if (try? records.opened(raw)) != nil { resealDue.insert(raw.id) } // (the container's keys opened it)
                    }
                    sealingUnknown.subtract(group)
                } catch {
                    logger.warning("cannot ask the server how a share's items are sealed", metadata: ["container": "\(container)", "error": "\(error)"])
                    break
                }
            }
        }
        var resealing = 0
        // Files sent with contents cut before the share's keys were here: cut again until what
        // is recorded of them was cut by the share's chunker.
        for item in recutDue.sorted() {
            guard let path = files.path(of: item), let file = files.file(of: item), ownedShareRoot(at: path) != nil else {
                recutDue.remove(item)
                continue
            }
            if sharesCut.contains(file.content) {
                recutDue.remove(item)
                continue
            }
            if state.hasLocalChanges(item) { continue }
            cutAgain(file, at: path)
            resealing += 1
        }
        guard !resealDue.isEmpty else {
            if resealing > 0 { logger.info("cutting again with a share's chunker what was cut before its keys were here", metadata: ["container": "\(container)", "items": "\(resealing)"]) }
            return
        }
        for item in resealDue.sorted() {
            guard ownedShareRoot(of: item, parent: state.visible(item)?.parent) != nil, let remote = state.persisted.remote[item], !remote.deleted else {
                resealDue.remove(item)
                continue
            }
            if state.hasLocalChanges(item) { continue } // (once they are sent: the server's state is looked at again)
            if (remote.kind ?? .file) == .directory {
                state.rename(item: item, to: remote.name, date: remote.modificationDate ?? Date().timeIntervalSince1970)
            } else if let path = files.path(of: item), let file = files.file(of: item) {
                if file.content == remote.content && sharesCut.contains(file.content) {
                    // Cut by the share's chunker already (its chunks sealed with the share's
                    // keys), its record not: the record goes again (found by `ubiquity-chaos
                    // --sealed-share`: a file moved in just before a restart was cut again,
                    // unchanged, every round, and never sent).
                    state.rename(item: item, to: remote.name, date: remote.modificationDate ?? Date().timeIntervalSince1970)
                } else {
                    cutAgain(file, at: path)
                }
            } else {
                continue // not here yet
            }
            resealing += 1
            // (Kept until its record comes back sealed with the share's key: looked at again
            // each round until then — a file whose change was taken for a download's is cut again.)
        }
        if resealing > 0 {
            logger.info("sealing again with a share's keys what was sealed with the container's", metadata: ["container": "\(container)", "items": "\(resealing)"])
        }
    }

    /// A change of `item` was answered: if it was due to be sealed again with its share's keys,
    /// whether the server now holds it so is asked at the next round (a terse answer does not
    /// say; due until then, it was sealed again every round — found by `SharingKeysTests`: the
    /// extra revisions made a member's edit a conflict version).
    func noteSentAgain(_ item: String) {
        if resealDue.remove(item) != nil { sealingUnknown.insert(item) }
    }

    /// Has the next look at the folder take the file at `path` for changed: cut by the share's
    /// chunker, its contents are new (the same bytes, sealed with the share's keys).
    private func cutAgain(_ file: AgentStore.File, at path: String) {
        var file = file
        file.fingerprint = LocalFingerprint(inode: file.fingerprint.inode, size: -1, modified: 0, changed: 0, kind: file.fingerprint.kind)
        files[path] = file
        finder.noteChange(at: path, in: self)
    }

    /// Whether `id` is inside the folder item `folder` (as this device shows them).
    private func isInside(_ id: String, _ folder: String) -> Bool {
        var current = state.visible(id)?.parent, walked = 0
        while let parent = current, walked < 256 {
            if parent == folder { return true }
            current = state.visible(parent)?.parent
            walked += 1
        }
        return false
    }
}
