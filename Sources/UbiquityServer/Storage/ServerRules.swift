import Foundation
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync

/// The server's rules, written once over the storage primitives of ``RuleStorage`` that each
/// database implements: where a commit's revision goes, names settled, conflicts resolved,
/// revisions restored, chunks arriving and lost, key-value changes merged — and the quota and
/// limits every one of them is held to. Each function runs inside one transaction of the
/// storage it is given; when it throws, nothing it wrote stays.
enum ServerRules {
    // MARK: Commits

    /// Commits a batch of updates to one container, in order (each sees what those before it
    /// wrote). A refused update (over the quota or a limit, declared chunk sizes that are not
    /// the chunks', an item gone) is answered with its error and writes nothing; the others go on.
    /// Each update is read at once and written at once (``RuleStorage/commitFacts(_:)``,
    /// ``RuleStorage/record(_:)``): on PostgreSQL a single commit is four round trips, its
    /// transaction's begin and end included.
    static func commit(_ commits: [PreparedCommit], account: Int64, container identifier: String, device: DeviceAuth, now: Date, brief: Bool,
                       limits: AccountLimits, in storage: some RuleStorage) async throws -> [Result<CommitOutcome, SyncError>] {
        var results: [Result<CommitOutcome, SyncError>] = [], announced = false
        for (index, commit) in commits.enumerated() {
            do {
                let last = index == commits.count - 1
                let outcome = try await self.commit(commit, account: account, container: identifier, device: device, now: now, brief: brief,
                                                    limits: limits, announce: last, in: storage)
                results.append(.success(outcome))
                announced = last && !outcome.repeated
            } catch let error as SyncError where error.status.code < 500 || error.code == "quotaExceeded" || error.code == "tooManyItems" {
                results.append(.failure(error))
            }
        }
        // (The refused ones are in `results` as they were refused.)
        if !announced, let last = results.compactMap({ try? $0.get() }).filter({ !$0.repeated }).map(\.item.sequence).max() {
            try await storage.announce(account: account, container: identifier, sequence: last, keyValue: false, device: device.deviceId)
        }
        return results
    }

    /// One update inside a batch. Everything it checks is checked before it writes anything.
    private static func commit(_ commit: PreparedCommit, account: Int64, container identifier: String, device: DeviceAuth, now: Date, brief: Bool,
                               limits: AccountLimits, announce: Bool, in storage: some RuleStorage) async throws -> CommitOutcome {
        var commit = commit
        // A sealed record keeps the date inside: concurrent edits are ordered by their arrival.
        if commit.update.record != nil { commit.update.modificationDate = now.timeIntervalSince1970 }
        let item = commit.item, update = commit.update
        // An edit of a large file from a complete revision: only its new chunks are looked up
        // (those it keeps are stored, at the sizes its base declared).
        let kept = update.baseRevision.flatMap { ManifestCache.shared.chunkSizes(ofBase: $0, forEditOf: commit.hashes.count) }
        var looked = kept.map { kept in commit.hashes.filter { kept[$0] == nil } } ?? commit.hashes
        // (A plaintext name of an account with keys is looked for by its tags too.)
        let keys = NameCollision.candidateKeys(for: update.name) + (commit.nameTags ?? [])
        var question = CommitQuestion(account: account, container: identifier, item: item, device: device.deviceId, change: update.changeId,
                                      base: kept == nil ? nil : update.baseRevision, hashes: looked, parent: update.parent, nameKeys: keys, manifests: !brief)
        var facts = try await storage.commitFacts(question)
        guard let figures = facts.figures else { throw SyncError.unauthorized }
        if facts.container == nil {
            _ = try await storage.container(account: account, identifier: identifier, create: true)
            facts = try await storage.commitFacts(question)
        }
        guard let container = facts.container else { throw SyncError(.internalServerError, "internal", "the container could not be created") }

        // The same change again (its answer was lost): the first answer, nothing committed twice.
        if let earlier = facts.earlier {
            let chunks = try await storage.chunkHashes(of: earlier.id)
            let stored = try await storage.storedSizes(account: account, hashes: chunks)
            guard let state = try await storage.itemState(container: container, item: item, brief: brief) else { throw SyncError.notFound }
            return CommitOutcome(revision: earlier.id, isCurrent: earlier.state == "current", item: state,
                                 missingChunks: chunks.filter { stored[$0] == nil }.sorted(), repeated: true)
        }
        // The same folder made on two devices before either heard of the other (its id comes
        // from its place, so both name one item): the folder there is the answer, no conflict.
        // (One device's name plaintext, the other's sealed: both index it by its tag.)
        if update.kind == .directory, update.baseRevision == nil, !commit.deleted, let current = facts.current, !current.deleted,
           current.kind == ItemKind.directory.rawValue, current.parent == update.parent {
            let tag = update.record != nil ? update.name : commit.nameTags?.first
            var same = NameCollision.key(current.name) == NameCollision.key(update.name)
            if !same, let tag { same = try await storage.nameKey(container: container, item: item) == tag }
            if same {
                guard let state = try await storage.itemState(container: container, item: item, brief: brief) else { throw SyncError.notFound }
                return CommitOutcome(revision: current.id, isCurrent: true, item: state, missingChunks: [], repeated: true)
            }
        }
        // The item's current contents, name and place sent again on an older base — a device
        // that downloaded them was stopped before it recorded so, and took the file for its own
        // edit (found by `ubiquity-chaos`): nothing changes, so no new revision and no conflict
        // (which would have outlived the author's later delete); the current one is the answer.
        if let base = update.baseRevision, let current = facts.current, current.id != base, !current.deleted, !commit.deleted, current.complete,
           current.digest != nil, current.digest == commit.digest, current.kind == update.kind.rawValue, current.parent == update.parent, current.name == update.name {
            guard let state = try await storage.itemState(container: container, item: item, brief: brief) else { throw SyncError.notFound }
            return CommitOutcome(revision: current.id, isCurrent: true, item: state, missingChunks: [], repeated: true)
        }
        var known: [String: Int64] = [:]
        if let kept {
            if facts.baseComplete {
                for hash in commit.hashes { if let size = kept[hash] { known[hash] = size } }
            } else {
                // The base is not complete after all: its chunks are looked up too.
                question.hashes = commit.hashes.filter { kept[$0] != nil }
                facts.stored.merge(try await storage.storedSizes(account: account, hashes: question.hashes)) { $1 }
                looked = commit.hashes
            }
        }
        // Contents go before the commit that names them: a revision is kept only when the
        // account holds every chunk it names (nothing is counted that is not stored, nothing
        // listed that no device can download).
        let missing = looked.filter { facts.stored[$0] == nil }
        if !missing.isEmpty { throw SyncError.missingChunks(missing.sorted()) }
        known.merge(facts.stored) { $1 }
        try checkDeclaredSizes(commit, against: known)

        let current = facts.current.map { CurrentRevision(id: $0.id, date: $0.modificationDate, device: $0.deviceId, deleted: $0.deleted) }
        if current == nil, figures.items >= limits.maximumItems {
            throw SyncError(.insufficientStorage, "tooManyItems", "an account holds at most \(limits.maximumItems) items")
        }
        // The quota holds what the account stores and what its revisions cost; a delete
        // always goes (it is how room is made).
        let cost = RevisionCost.of(commit)
        if !commit.deleted, figures.used + cost > figures.quota {
            throw SyncError.quotaExceeded(used: figures.used, quota: figures.quota, adding: cost)
        }

        // Where the new revision goes: current, or kept as a conflict version.
        // A collision rename the server made of the revision the change was made on (while it
        // placed another item of that name) is not anyone's edit: the change counts as made on
        // the renamed revision. Otherwise a device's delete lost to the server's own rename and
        // the deleted item came back as "name 2" (found by `ubiquity-chaos`).
        var base = update.baseRevision
        if let made = base, let current = facts.current, current.id != made, current.deviceId == ServerRules.serverDevice, current.baseRevision == made { base = current.id }
        let placement = CommitPlacement(current: current.map { ($0.id, $0.date, $0.device, $0.deleted) }, base: base,
                                        deleted: commit.deleted, date: update.modificationDate, device: device.deviceId)
        var name = update.name, renameOther: (id: String, name: String)?, nameKey: String?
        if placement.state == "current" && !commit.deleted {
            let siblings = facts.siblings.count >= keys.count
                ? try await storage.siblings(container: container, parent: update.parent, keys: nil) // every candidate taken: the whole folder
                : facts.siblings
            if update.record != nil {
                // A sealed record's name is a tag: any other item indexed under it clashes, whatever
                // name it shows (a plaintext one is indexed by its tag too); the server can rename
                // neither (the device picks another name and sends it again).
                if siblings.contains(where: { $0.id != item && (facts.siblings.count < keys.count || $0.name == update.name) }) { throw Self.nameTaken }
            } else if let tags = commit.nameTags {
                (name, nameKey) = try Self.settle(name: update.name, item: item, tags: tags, among: siblings)
            } else {
                (name, renameOther) = SiblingNames(siblings).settle(name: name, id: item)
                if renameOther != nil && Self.isNameTag(NameCollision.key(update.name)) { throw Self.nameTaken }
            }
        }
        let revision = NewRevision(id: RandomIdentifier.make(), account: account, container: container, item: item, commit: commit, device: device, name: name,
                                   state: placement.state, created: now, containerChunks: looked, cost: cost)
        let sequence = try await storage.record(CommitRecord(
            revision: revision, demoted: placement.demoted,
            currentKeys: placement.state != "current" ? nil
                : nameKey.map { (update.parent ?? "", $0) } ?? NameCollision.indexKeys(name: name, parent: update.parent, deleted: commit.deleted),
            change: AccountChange(metadataBytes: cost, items: current == nil ? 1 : 0),
            announce: announce && renameOther == nil ? (identifier, device.deviceId) : nil))
        // An item moved out of a shared folder leaves the share: its participants are told so.
        if placement.state == "current", let before = facts.current, before.parent != update.parent {
            try await ShareExits.note(item, from: before.parent, to: update.parent, container: container, sequence: sequence, in: storage)
        }
        if let renameOther {
            let renamed = try await serverRename(container: container, item: renameOther.id, to: renameOther.name, now: now, in: storage)
            try await storage.adjust(account, by: AccountChange(metadataBytes: renamed.cost))
            if announce { try await storage.announce(account: account, container: identifier, sequence: renamed.sequence, keyValue: false, device: device.deviceId) }
        }
        ManifestCache.shared.remember(update.manifest, of: revision.id, digest: commit.digest) // the base of the next edit's difference
        var state = try itemState(after: revision, placement: placement, facts: facts, sequence: sequence, brief: brief)
        if state == nil { state = try await storage.itemState(container: container, item: item, brief: brief) }
        guard let state else { throw SyncError(.internalServerError, "internal", "the item vanished during its commit") }
        return CommitOutcome(revision: revision.id, isCurrent: placement.state == "current", item: state, missingChunks: [])
    }

    /// The item's state after a commit, from what was read before it and what it wrote; nil
    /// when that is not enough (a revision from before content tokens were stored, in a brief
    /// answer without its manifest).
    static func itemState(after revision: NewRevision, placement: CommitPlacement, facts: CommitFacts, sequence: Int64, brief: Bool) throws -> ItemState? {
        let commit = revision.commit, update = commit.update
        let written = RevisionRow(id: revision.id, name: revision.name, parent: update.parent, kind: update.kind.rawValue, size: commit.size,
                                  modificationDate: update.modificationDate, type: update.type, deleted: commit.deleted, complete: true,
                                  deviceId: revision.device.deviceId, deviceName: revision.device.deviceName, digest: commit.digest, manifest: commit.manifest,
                                  record: update.record, editor: revision.device.editor)
        var conflicts = facts.conflicts
        let current: RevisionRow
        switch placement.state {
        case "current":
            current = written
            if placement.demoted?.state == "conflict", let demoted = facts.current { conflicts.append(demoted) }
        case "conflict":
            guard let existing = facts.current else { return nil }
            current = existing
            conflicts.append(written)
        default:
            guard let existing = facts.current else { return nil }
            current = existing
        }
        conflicts.sort { ($0.modificationDate, $0.id) < ($1.modificationDate, $1.id) }
        return try ItemStates.make(item: revision.item, sequence: sequence, current: current, conflicts: conflicts, brief: brief)
    }

    /// Each chunk a commit names must be declared at the size the account holds it at (or was
    /// told before, for one it waits for): a revision's size is the sum of its chunks', and
    /// what a chunk is waited for counts against the quota. A sealed chunk is declared at its
    /// plaintext size (the file's layout), and is held at its sealed size: that one is known
    /// from this one (``ChunkKeys/sealedSize(ofPlaintext:)``). A commit with a sealed record
    /// declares every chunk at its sealed size — also one stored in plaintext from before.
    /// (What the quota counts is what is stored either way.)
    static func checkDeclaredSizes(_ commit: PreparedCommit, against known: [String: Int64]) throws {
        let sealedRecord = commit.update.record != nil
        func fits(_ size: Int64, _ stored: Int64) -> Bool {
            if stored == size || stored == StoredChunk.patchSize { return true }
            if size >= 0, size <= Validate.maximumChunkSize, Int64(ChunkKeys.sealedSize(ofPlaintext: Int(size))) == stored { return true }
            return sealedRecord && stored >= 0 && stored <= Validate.maximumChunkSize && Int64(ChunkKeys.sealedSize(ofPlaintext: Int(stored))) == size
        }
        let wrong = commit.declaredSizes.filter { hash, size in known[hash].map { !fits(size, $0) } ?? false }.keys.sorted()
        guard wrong.isEmpty else {
            throw SyncError.badRequest("chunkSizeMismatch", "\(wrong.count) chunk(s) declared at a size other than their own: \(wrong.prefix(8).joined(separator: ", "))")
        }
    }

    /// Makes a new current revision of an item, by the server: its contents under another
    /// name. Returns what the revision costs, and the item's new sequence.
    /// The device id (and name) of the revisions the server makes itself: copies for collision
    /// renames and recoveries.
    static let serverDevice = "server"

    /// Whether a stored name is a sealed record's name-clash tag (which the server never renames:
    /// a copy under another name would no longer match its record). A plaintext item whose name
    /// clashes with `"0123…"` in lowercase would look so too, and is refused instead of
    /// renaming the other.
    static func isNameTag(_ name: String) -> Bool { name.utf8.count == 32 && name.utf8.allSatisfy(\.isLowercaseHexDigit) }

    /// Two items of a folder whose names clash, one of them sealed.
    static let nameTaken = SyncError(.conflict, "nameTaken", "another item of the folder has a name that clashes with this one's (case or composition)")

    /// Where a plaintext name goes in a folder of an account with keys, whose names may be tags
    /// (sealed records, or names sealed in place): `name`, or the first of `name 2`, `name 3`, …
    /// that no other item holds — compared by its tag (`tags`, in that order) with every item
    /// indexed by one, and by its name's key with items from before keys. The plaintext item
    /// is the one renamed, whichever came first (a sealed name cannot be). Returns the name and
    /// the key it is indexed by (its tag).
    /// - Throws: 409 `nameTaken` when every name tried is taken.
    static func settle(name: String, item: String, tags: [String], among siblings: [(id: String, name: String)]) throws -> (name: String, key: String) {
        let names = Array(NameCollision.candidateNames(for: name, count: max(0, tags.count - 1)).prefix(tags.count))
        let byTag = Dictionary(tags.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
        let byKey = Dictionary(names.enumerated().map { (NameCollision.key($1), $0) }, uniquingKeysWith: { first, _ in first })
        var taken = Set<Int>()
        for sibling in siblings where sibling.id != item {
            if let index = byTag[sibling.name] ?? byKey[NameCollision.key(sibling.name)] { taken.insert(index) }
        }
        guard let free = names.indices.first(where: { !taken.contains($0) }) else { throw nameTaken }
        return (names[free], tags[free])
    }

    static func serverRename(container: Int64, item: String, to name: String, now: Date, in storage: some RuleStorage) async throws -> (cost: Int64, sequence: Int64) {
        guard let current = try await storage.currentRevision(container: container, item: item),
              let named = try await storage.naming(of: current.id) else { return (0, 0) }
        let revision = RandomIdentifier.make()
        let cost = try await storage.copy(current.id, as: CopiedRevision(id: revision, name: name, base: current.id, created: now))
        try await storage.setState("replaced", of: [current.id])
        let sequence = try await storage.nextSequence(of: container)
        try await storage.setCurrent(container: container, item: item, revision: revision, sequence: sequence,
                                     keys: NameCollision.indexKeys(name: name, parent: named.parent, deleted: named.deleted))
        return (cost, sequence)
    }

    // MARK: Conflicts and recovery

    /// Resolves an item's conflict: `keep` becomes (or stays) current, the versions in
    /// `remove` are resolved.
    static func resolve(account: Int64, container identifier: String, item: String, request: ResolveRequest, in storage: some RuleStorage) async throws -> ItemState {
        guard try await storage.account(account) != nil,
              let container = try await storage.container(account: account, identifier: identifier, create: false),
              let current = try await storage.currentRevision(container: container, item: item) else { throw SyncError.notFound }
        let conflicts = try await storage.revisions(container: container, item: item, state: "conflict")
        guard request.keep == current.id || conflicts.contains(request.keep) else {
            throw SyncError(.conflict, "notAVersion", "\(request.keep) is neither the current revision nor a conflict version of the item")
        }
        for removed in request.remove where !conflicts.contains(removed) && removed != current.id {
            throw SyncError(.conflict, "notAVersion", "\(removed) is not a conflict version of the item")
        }
        let sequence = try await storage.nextSequence(of: container)
        if request.keep != current.id {
            try await storage.setState("conflict", of: [current.id])
            try await storage.setState("current", of: [request.keep])
        }
        let removed = request.remove.filter { $0 != request.keep }
        if !removed.isEmpty { try await storage.setState("resolved", of: removed) }
        guard let named = try await storage.naming(of: request.keep) else { throw SyncError.notFound }
        try await storage.setCurrent(container: container, item: item, revision: request.keep, sequence: sequence,
                                     keys: NameCollision.indexKeys(name: named.name, parent: named.parent, deleted: named.deleted))
        guard let state = try await storage.itemState(container: container, item: item, brief: false) else { throw SyncError.notFound }
        try await storage.announce(account: account, container: identifier, sequence: sequence, keyValue: false, device: nil)
        return state
    }

    /// Makes a replaced, resolved or superseded revision current again (as a new revision made
    /// by the server); nil if the account has no such revision.
    static func restore(accountName: String, revision: String, now: Date, in storage: some RuleStorage) async throws -> (container: String, sequence: Int64)? {
        guard let account = try await storage.accountId(named: accountName), try await storage.account(account) != nil,
              let place = try await storage.restorable(account: account, revision: revision),
              try await storage.container(account: account, identifier: place.identifier, create: false) != nil,
              let named = try await storage.naming(of: revision) else { return nil }
        let current = try await storage.currentRevision(container: place.container, item: place.item)
        let restored = RandomIdentifier.make()
        let cost = try await storage.copy(revision, as: CopiedRevision(id: restored, name: nil, base: current?.id, created: now))
        if let current { try await storage.setState("replaced", of: [current.id]) }
        let sequence = try await storage.nextSequence(of: place.container)
        try await storage.setCurrent(container: place.container, item: place.item, revision: restored, sequence: sequence,
                                     keys: NameCollision.indexKeys(name: named.name, parent: named.parent, deleted: named.deleted))
        try await storage.adjust(account, by: AccountChange(metadataBytes: cost, items: current == nil ? 1 : 0))
        try await storage.announce(account: account, container: place.identifier, sequence: sequence, keyValue: false, device: nil)
        return (place.identifier, sequence)
    }

    // MARK: Chunks

    /// Lists chunks whose contents are now stored, within the quota (a lost chunk revisions
    /// wait for is already counted), and completes the revisions that were
    /// waiting only for them. Returns the sequence each changed container is at, and the chunks
    /// listed only now.
    static func chunksStored(account: Int64, chunks: [StoredChunk], now: Date, in storage: some RuleStorage) async throws -> ChunksRecorded {
        guard let figures = try await storage.account(account) else { throw SyncError.unauthorized }
        let hashes = chunks.map(\.hash)
        let stored = try await storage.storedSizes(account: account, hashes: hashes)
        var fresh: [String: Int64] = [:]
        for chunk in chunks where stored[chunk.hash] == nil { fresh[chunk.hash] = chunk.size }
        if !fresh.isEmpty {
            let released = try await storage.removePending(account: account, hashes: fresh.keys.sorted())
            let reserved = released.values.reduce(0, +), adding = fresh.values.reduce(0, +)
            // One quota check for the whole batch.
            guard adding <= reserved || figures.used + adding - reserved <= figures.quota else {
                throw SyncError.quotaExceeded(used: figures.used, quota: figures.quota, adding: adding - reserved)
            }
            let bases = Dictionary(chunks.compactMap { chunk in chunk.base.map { (chunk.hash, $0) } }) { first, _ in first }.filter { fresh[$0.key] != nil }
            try await storage.addChunks(account: account, chunks: fresh, bases: bases, now: now)
            if reserved != 0 { try await storage.adjust(account, by: AccountChange(pendingBytes: -reserved)) }
        }
        // Revisions waiting for these chunks that now have every chunk become downloadable.
        var changed: [Int64: Int64] = [:]
        for place in try await storage.revisionsWaiting(account: account, for: hashes).sorted(by: { $0.revision < $1.revision }) {
            // Does it wait for anything else? (Stops at the first: a large file's upload must
            // not count all its chunks once per batch.)
            guard try await !storage.isWaiting(place.revision) else { continue }
            try await storage.setComplete(place.revision, true)
            guard place.state == "current" || place.state == "conflict" else { continue }
            changed[place.container] = try await advance(container: place.container, item: place.item, in: storage)
        }
        return ChunksRecorded(sequences: try await announce(changed, account: account, in: storage), listed: Set(fresh.keys))
    }

    /// Forgets a chunk the account lost (found damaged and put aside): the revisions naming it
    /// wait for it again (it stays counted against the quota, at its size, until it is sent
    /// again: its upload always fits), and
    /// their items change so that devices see it. Returns the sequence each changed container is at.
    static func chunkLost(account: Int64, hash: String, in storage: some RuleStorage) async throws -> [String: Int64] {
        guard try await storage.account(account) != nil else { return [:] }
        let size = try await storage.removeChunk(account: account, hash: hash)
        let naming = try await storage.revisionsNaming(account: account, hash: hash)
        if let size, !naming.isEmpty {
            try await storage.addPending(account: account, chunks: [hash: size])
            try await storage.adjust(account, by: AccountChange(pendingBytes: size))
        }
        var changed: [Int64: Int64] = [:]
        for place in naming.sorted(by: { $0.revision < $1.revision }) {
            try await storage.setComplete(place.revision, false)
            guard place.state == "current" || place.state == "conflict" else { continue }
            changed[place.container] = try await advance(container: place.container, item: place.item, in: storage)
        }
        return try await announce(changed, account: account, in: storage)
    }

    /// The item changed without a new revision (its revision completed, or lost a chunk): the
    /// container's next sequence, now the item's too.
    static func advance(container: Int64, item: String, in storage: some RuleStorage) async throws -> Int64 {
        let sequence = try await storage.nextSequence(of: container)
        try await storage.setSequence(container: container, item: item, sequence: sequence)
        return sequence
    }

    /// Announces changed containers (by id) and returns them by identifier.
    private static func announce(_ changed: [Int64: Int64], account: Int64, in storage: some RuleStorage) async throws -> [String: Int64] {
        var named: [String: Int64] = [:]
        for (container, sequence) in changed.sorted(by: { $0.key < $1.key }) {
            guard let identifier = try await storage.containerIdentifier(container) else { continue }
            named[identifier] = sequence
            try await storage.announce(account: account, container: identifier, sequence: sequence, keyValue: false, device: nil)
        }
        return named
    }

    // MARK: Key-value stores

    /// Merges key-value changes into a store, the most recent change of each key winning, within
    /// Apple's limits for a store and the account's quota and number of stores: a change that
    /// would break one changes nothing. Returns the store's sequence and the entries named.
    static func applyKeyValues(account: Int64, store identifier: String, changes: [KeyValueChange], device: DeviceAuth,
                               in storage: some RuleStorage) async throws -> KeyValueResponse {
        // What each change stores: a value's JSON, or for a sealed value an empty marker (the
        // sealed change is kept beside it); a removal stores no value.
        let encoded = try changes.map { change in
            (change, change.sealed != nil ? (change.removed == true ? nil : Data()) : try change.value.map { try JSONEncoder().encode($0) })
        }
        guard let figures = try await storage.account(account) else { throw SyncError.unauthorized }
        let store = try await storage.keyValueStore(account: account, identifier: identifier)
        if store.created { try KeyValueLimits.checkStoreCount(existing: store.stores) }
        let sequence = try await storage.nextKeyValueSequence(of: store.id)
        var growth: Int64 = 0
        for (change, value) in encoded {
            let existing = try await storage.keyValueEntry(store: store.id, key: change.key)
            if let existing, !ConflictRule.winner((change.timestamp, device.deviceId), over: (existing.timestamp, existing.device)) { continue }
            let size = value.map { Int64(change.key.utf8.count + $0.count + (change.sealed?.count ?? 0)) } ?? 0
            try await storage.setKeyValue(store: store.id, key: change.key, value: value, sealed: change.sealed, size: size, timestamp: change.timestamp,
                                          device: device, sequence: sequence)
            growth += size - (existing?.size ?? 0)
        }
        // Apple's limits, over the store as it would be, then the quota.
        let totals = try await storage.keyValueTotals(store: store.id)
        try KeyValueLimits.checkStore(keys: totals.keys, bytes: Int(totals.bytes), sealed: changes.contains { $0.sealed != nil })
        if growth > 0, figures.used + growth > figures.quota {
            throw SyncError(.insufficientStorage, "quotaExceeded",
                            "the key-value store would hold \(totals.bytes) bytes; the account's storage quota leaves it \(max(0, figures.quota - figures.used + totals.bytes - growth))")
        }
        if growth != 0 { try await storage.adjust(account, by: AccountChange(keyValueBytes: growth)) }
        // A store its devices seal: the plaintext removals an upgrade left (each naming its key)
        // go. Devices that seal take no plaintext removal; the names go with them.
        if changes.contains(where: { $0.sealed != nil }) { try await storage.purgePlaintextRemovals(store: store.id) }
        let entries = try await storage.keyValueEntries(store: store.id, keys: Set(changes.map(\.key)))
        try await storage.announce(account: account, container: identifier, sequence: sequence, keyValue: true, device: nil)
        return KeyValueResponse(sequence: sequence, entries: entries)
    }
}

/// Limits on what one account holds, besides its quota.
package struct AccountLimits: Sendable, Equatable {
    /// At most this many items in all its containers. Default 1,000,000.
    package var maximumItems: Int64 = 1_000_000
    /// At most this many bytes of sealed manifests in its links that still open (Advanced Data
    /// Protection: a device seals one per link, up to 6 MiB). Default 64 MiB. Those of revoked
    /// and expired links are dropped as the next one is made.
    package var maximumLinkManifestBytes: Int64 = 64 << 20
    /// How many bytes of signed commits a container keeps past its last checkpoint (and twice
    /// that checkpoint's own) before the devices reading them are asked to sign a new one, after
    /// which the commits before it go (docs/Encryption.md "Checkpoints"). Default 64 MiB.
    package var checkpointAfterBytes: Int64 = 64 << 20

    /// The default limits.
    package init() {}
}

/// What a revision costs against its account's quota, besides its chunks: its record (a fixed
/// amount), its name and its manifest.
enum RevisionCost {
    /// The fixed part: a revision's row, its item's row and their indexes.
    static let record: Int64 = 256

    /// The cost of the revision `commit` makes.
    static func of(_ commit: PreparedCommit) -> Int64 {
        record + Int64(commit.update.name.utf8.count + commit.manifest.count + (commit.update.record?.count ?? 0))
    }
}

extension ConflictVersion {
    /// Gives the version its sealed record, if it has one, with the folder the record is bound to.
    mutating func sealed(_ record: Data?, parent: String?) {
        guard let record else { return }
        self.record = record
        self.parent = parent
    }
}

/// An item's state made from its revisions' rows.
enum ItemStates {
    /// The state of `item` whose current revision is `current`, with `conflicts` (oldest
    /// first); `brief`: content tokens instead of manifests. Nil when a manifest it needs was
    /// not read.
    static func make(item: String, sequence: Int64, current: RevisionRow, conflicts: [RevisionRow], brief: Bool) throws -> ItemState? {
        let kind = ItemKind(rawValue: current.kind) ?? .file
        guard let contents = try contents(of: current, kind: kind, brief: brief) else { return nil }
        var versions: [ConflictVersion] = []
        for conflict in conflicts {
            guard let their = try Self.contents(of: conflict, kind: kind, brief: brief) else { return nil }
            var version = ConflictVersion(revision: conflict.id, deviceName: conflict.deviceName, modificationDate: conflict.modificationDate,
                                          size: conflict.size, uploaded: conflict.complete, manifest: their.manifest)
            version.digest = their.digest
            version.sealed(conflict.record, parent: conflict.parent)
            version.editor = conflict.editor
            versions.append(version)
        }
        var state = ItemState(id: item, revision: current.id, name: current.name, parent: current.parent, kind: kind, size: current.size,
                              modificationDate: current.modificationDate, type: current.type, deleted: current.deleted, uploaded: current.complete,
                              deviceName: current.deviceName, sequence: sequence, manifest: contents.manifest, conflicts: versions)
        state.digest = contents.digest
        state.record = current.record
        state.editor = current.editor
        return state
    }

    /// A revision's manifest — or, `brief`, its content token and an empty manifest; nil when
    /// it needs the manifest and the row has none.
    static func contents(of row: RevisionRow, kind: ItemKind, brief: Bool) throws -> (manifest: Manifest, digest: String?)? {
        if brief, let digest = row.digest { return (Manifest(), digest) }
        let manifest: Manifest
        if let cached = ManifestCache.shared.cached(row.id, digest: row.digest) {
            manifest = cached
        } else if let stored = row.manifest {
            manifest = try ManifestCache.shared.manifest(of: row.id, digest: row.digest, stored: stored)
        } else {
            return nil
        }
        return brief ? (Manifest(), ContentToken.of(manifest, kind: kind).description) : (manifest, nil)
    }
}
