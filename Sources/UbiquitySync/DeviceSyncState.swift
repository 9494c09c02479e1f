import Foundation
import UbiquityProtocol

/// An item as the server has it (what `changes` and commit answers carry), reduced to what the
/// sync decisions need. `content` names the contents (a manifest's hash in the agent).
package struct ItemSnapshot: Sendable, Equatable, Codable {
    // Strings first, then words, then bytes: no padding between them (one of these per item).
    /// The item's id (stable; not its name).
    package var id: String
    /// Its current revision.
    package var revision: String
    /// Its name.
    package var name: String
    /// Its contents.
    package var content: ContentToken
    /// The folder item it is in (nil: the container's top level).
    package var parent: String?
    /// The account whose device made the current revision, when that is not the container's
    /// owner (``ItemState/editor``: a share's participant).
    package var editor: String?
    /// The container's sequence at its last change (newer snapshots have greater ones).
    package var sequence: Int64
    /// Its unresolved conflict versions.
    package var conflicts: [ConflictSnapshot]
    /// The size of its contents in bytes, when known (shown for items not downloaded).
    package var size: Int64?
    /// When it was last modified (seconds since 1970), when known.
    package var modificationDate: Double?
    /// Whether it is deleted (a tombstone).
    package var deleted: Bool
    /// File, package or folder (nil: a file).
    package var kind: ItemKind?

    /// Creates a snapshot.
    package init(id: String, revision: String, name: String, content: ContentToken, deleted: Bool, sequence: Int64, conflicts: [ConflictSnapshot],
                size: Int64? = nil, modificationDate: Double? = nil, parent: String? = nil, kind: ItemKind? = nil, editor: String? = nil) {
        self.parent = parent
        self.editor = editor
        self.kind = kind
        self.size = size
        self.modificationDate = modificationDate
        self.id = id
        self.revision = revision
        self.name = name
        self.content = content
        self.deleted = deleted
        self.sequence = sequence
        self.conflicts = conflicts
    }
}

/// A conflict version of an item: a revision made concurrently that lost the conflict rule.
package struct ConflictSnapshot: Sendable, Equatable, Codable {
    /// Its revision.
    package var revision: String
    /// Its contents.
    package var content: ContentToken

    /// Creates a conflict snapshot.
    package init(revision: String, content: ContentToken) {
        self.revision = revision
        self.content = content
    }
}

/// A local change on its way to the server: a commit of the item's name and contents (or its
/// deletion) on top of `base`, the revision the change was made from.
package struct LocalChange: Sendable, Equatable, Codable {
    /// Unique per device: the server answers a repeated change (after a lost answer or a crash)
    /// with what it did the first time, so nothing is committed twice.
    package var changeId: String
    /// The item.
    package var item: String
    /// The revision the local contents were made from (nil for a new item).
    package var base: String?
    /// The item's name.
    package var name: String
    /// Its contents.
    package var content: ContentToken
    /// Whether the change deletes the item.
    package var deleted: Bool
    /// When it was made (the conflict rule's first criterion).
    package var date: Double
    /// The folder item it is in (nil: the container's top level).
    package var parent: String?
    /// File, package or folder (nil: a file).
    package var kind: ItemKind?
}

/// The server's answer to a commit.
package struct CommitAnswer: Sendable, Equatable {
    /// The change answered.
    package var changeId: String
    /// The revision the change became.
    package var revision: String
    /// The item now (its current revision may be another device's, if this change lost).
    package var item: ItemSnapshot

    /// Creates an answer.
    package init(changeId: String, revision: String, item: ItemSnapshot) {
        self.changeId = changeId
        self.revision = revision
        self.item = item
    }
}

/// What a device asks of the server.
package enum SyncRequest: Sendable, Equatable {
    /// Commit a local change.
    case commit(LocalChange)
    /// List the changes after a sequence.
    case fetch(since: Int64)
    /// Keep one revision of an item and remove its conflict versions.
    case resolve(item: String, keep: String, remove: [String])
}

/// One device's sync decisions, as a pure state machine: local saves, renames and deletions go
/// in; requests for the server come out; the server's answers go in. No I/O, no clock: the
/// agent drives it with real files and a real server, the simulation with a model of both.
///
/// What it guarantees (the simulation checks it over thousands of seeded runs with crashes,
/// lost and reordered messages and partitions):
/// - a local change is kept (``Persisted``) until the server acknowledges it, and is sent again
///   after a crash or a lost answer with the same change id;
/// - a change is committed on top of the revision it was made from, so a concurrent change
///   elsewhere makes a conflict (both kept), never a silent overwrite;
/// - while an item has local changes the server has not acknowledged, the device shows them;
///   once it has none, it shows the server's newest state of the item.
package struct DeviceSyncState: Sendable {
    /// What survives a crash (the agent keeps it in SQLite).
    package struct Persisted: Sendable, Equatable, Codable {
        /// The device's id (the conflict rule's tie-breaker).
        package var device: String
        /// The newest server state of each item seen (out of line: there is one per item).
        package var remote = OutOfLineDictionary<ItemSnapshot>()
        /// The local state of items with unacknowledged changes: what the device shows for them.
        package var local: [String: LocalItem] = [:]
        /// Per item, the change sent and not yet acknowledged.
        package var sending: [String: LocalChange] = [:]
        /// Per item, the newest change not sent yet (its base is settled when `sending` is acknowledged).
        package var queued: [String: LocalChange] = [:]
        /// The container sequence up to which every change has been fetched.
        package var cursor: Int64 = 0
        /// For change ids.
        package var changesMade = 0

        /// The durable state of a device with nothing synced yet.
        package init(device: String) {
            self.device = device
        }
    }

    /// An item as a device shows it.
    package struct LocalItem: Sendable, Equatable, Codable {
        /// Its name.
        package var name: String
        /// Its contents.
        package var content: ContentToken
        /// Whether it is deleted.
        package var deleted: Bool
        /// The folder item it is in (nil: the container's top level).
        package var parent: String?
        /// File, package or folder (nil: a file).
        package var kind: ItemKind?

        /// Creates a local item.
        package init(name: String, content: ContentToken, deleted: Bool, parent: String? = nil, kind: ItemKind? = nil) {
            self.parent = parent
            self.kind = kind
            self.name = name
            self.content = content
            self.deleted = deleted
        }
    }

    /// The durable part.
    package private(set) var persisted: Persisted {
        didSet { persistedChanged = true }
    }
    /// The items whose durable part changed since ``takeTouched()`` was last called: what a
    /// store writes again (a row per item), instead of everything.
    package private(set) var touched: Set<String> = []
    /// The items whose shown state (``visible(_:)``) may have changed since
    /// ``takeShownChanged()`` was last called: what a device brings its folder in step for,
    /// instead of every item.
    package private(set) var shownChanged: Set<String> = []
    private var persistedChanged = false
    /// Changes on the wire (lost in a crash).
    private var inFlight: Set<String> = []
    /// Whether a fetch is on the wire.
    private var fetching = false

    /// A device with nothing synced yet.
    package init(device: String) {
        persisted = Persisted(device: device)
    }

    /// A device restarting from what it persisted (after a crash: whatever was on the wire is forgotten).
    package init(restoring persisted: Persisted) {
        self.persisted = persisted
    }

    // MARK: What the device shows

    /// The item as the device shows it: its local changes if it has any, else the server's state.
    package func visible(_ item: String) -> LocalItem? {
        if let local = persisted.local[item] { return local }
        return persisted.remote[item].map { LocalItem(name: $0.name, content: $0.content, deleted: $0.deleted, parent: $0.parent, kind: $0.kind) }
    }

    /// Every item the device knows, as it shows them.
    package var visibleItems: [String: LocalItem] {
        var items: [String: LocalItem] = [:]
        for id in Set(persisted.remote.keys).union(persisted.local.keys) { items[id] = visible(id) }
        return items
    }

    /// The item's conflict versions, as the server last said.
    package func conflicts(_ item: String) -> [ConflictSnapshot] { persisted.remote[item]?.conflicts ?? [] }

    /// Whether the item has changes the server has not acknowledged.
    package func hasLocalChanges(_ item: String) -> Bool { persisted.local[item] != nil }

    /// Whether anything waits to be sent or acknowledged.
    package var isIdle: Bool { persisted.sending.isEmpty && persisted.queued.isEmpty && inFlight.isEmpty && !fetching }

    // MARK: Local changes

    /// The user saved `content` (creating the item if it is new).
    package mutating func save(item: String, name: String? = nil, content: ContentToken, date: Double) {
        let current = visible(item)
        change(item, LocalItem(name: name ?? current?.name ?? item, content: content, deleted: false, parent: current?.parent, kind: current?.kind), date: date)
    }

    /// The user saved `content` as the `kind` named `name` in the folder item `parent` (nil:
    /// the top level), creating the item if it is new.
    package mutating func save(item: String, name: String, parent: String?, kind: ItemKind, content: ContentToken, date: Double) {
        change(item, LocalItem(name: name, content: content, deleted: false, parent: parent, kind: kind), date: date)
    }

    /// The user renamed the item.
    package mutating func rename(item: String, to name: String, date: Double) {
        guard let current = visible(item), !current.deleted else { return }
        change(item, LocalItem(name: name, content: current.content, deleted: false, parent: current.parent, kind: current.kind), date: date)
    }

    /// The user moved the item into the folder item `parent` (nil: the top level) as `name`.
    package mutating func move(item: String, to name: String, parent: String?, date: Double) {
        guard let current = visible(item), !current.deleted else { return }
        change(item, LocalItem(name: name, content: current.content, deleted: false, parent: parent, kind: current.kind), date: date)
    }

    /// The user deleted the item.
    package mutating func delete(item: String, date: Double) {
        guard let current = visible(item), !current.deleted else { return }
        change(item, LocalItem(name: current.name, content: current.content, deleted: true, parent: current.parent, kind: current.kind), date: date)
    }

    private mutating func change(_ item: String, _ state: LocalItem, date: Double) {
        touched.insert(item)
        persisted.changesMade += 1
        let id = "\(persisted.device)#\(persisted.changesMade)"
        // The base: what the shown state was made from. With a change already sent, it is that
        // change's revision, known only when it is acknowledged.
        let base = persisted.sending[item] == nil ? persisted.queued[item]?.base ?? persisted.remote[item]?.revision : nil
        persisted.local[item] = state
        shownChanged.insert(item)
        persisted.queued[item] = LocalChange(changeId: id, item: item, base: base, name: state.name, content: state.content, deleted: state.deleted, date: date,
                                             parent: state.parent, kind: state.kind)
    }

    // MARK: Talking to the server

    /// The requests to send now: changes not on the wire (sent again after a crash or a loss,
    /// with their ids), then a fetch if `fetch` and none is on the wire.
    package mutating func requests(fetch: Bool = true) -> [SyncRequest] {
        var requests: [SyncRequest] = []
        for item in Set(persisted.sending.keys).union(persisted.queued.keys).sorted() {
            if persisted.sending[item] == nil, let queued = persisted.queued.removeValue(forKey: item) {
                persisted.sending[item] = queued
                touched.insert(item)
            }
            guard let change = persisted.sending[item], !inFlight.contains(change.changeId) else { continue }
            inFlight.insert(change.changeId)
            requests.append(.commit(change))
        }
        if fetch && !fetching {
            fetching = true
            requests.append(.fetch(since: persisted.cursor))
        }
        return requests
    }

    /// A request that got no answer (lost, or the connection failed): it will be sent again.
    package mutating func failed(_ request: SyncRequest) {
        switch request {
        case .commit(let change): inFlight.remove(change.changeId)
        case .fetch: fetching = false
        case .resolve: break
        }
    }

    /// The server refused `change` for good, without committing it: it names contents this
    /// device no longer has (the item was written again, or deleted, since the change was
    /// made), so sending it again can never succeed. The newer change of the item takes its
    /// place, made on the same base (the abandoned one never became a revision).
    package mutating func abandoned(_ change: LocalChange) {
        inFlight.remove(change.changeId)
        guard persisted.sending[change.item]?.changeId == change.changeId else { return }
        touched.insert(change.item)
        persisted.sending[change.item] = nil
        if var next = persisted.queued[change.item] {
            next.base = change.base
            persisted.queued[change.item] = next
        }
    }

    /// Forgets every local change of `item` (sent, queued or not): the device shows the
    /// server's state of it again. For a change nobody may make — a read-only share's — whose
    /// bytes the caller kept elsewhere first.
    package mutating func discardLocal(_ item: String) {
        for change in [persisted.sending[item], persisted.queued[item]].compactMap({ $0 }) { inFlight.remove(change.changeId) }
        persisted.sending[item] = nil
        persisted.queued[item] = nil
        persisted.local[item] = nil
        touched.insert(item)
        shownChanged.insert(item)
    }

    /// The round that sent the requests on the wire ended with an error before their answers
    /// were taken in: none is in flight any more, and each is sent again next round (with its
    /// id: the server answers a change it already has as before). Without this, a change
    /// whose round failed part way stayed "in flight" until the agent restarted.
    package mutating func roundFailed() {
        inFlight.removeAll()
        fetching = false
    }

    /// The server's answer to a commit.
    package mutating func committed(_ answer: CommitAnswer) {
        inFlight.remove(answer.changeId)
        learn(answer.item)
        let item = answer.item.id
        guard persisted.sending[item]?.changeId == answer.changeId else { return } // an old duplicate
        touched.insert(item)
        persisted.sending[item] = nil
        if var next = persisted.queued[item] {
            next.base = answer.revision // made on top of the change just acknowledged, whether it won or not
            persisted.queued[item] = next
        } else {
            persisted.local[item] = nil // nothing local left: show the server's state (the winner)
            shownChanged.insert(item)
        }
    }

    /// The fetch to send now, if none is on the wire.
    package mutating func fetchRequest() -> SyncRequest? {
        guard !fetching else { return nil }
        fetching = true
        return .fetch(since: persisted.cursor)
    }

    /// After commits the server answered with these container sequences: when they are every
    /// change after the cursor (nobody else changed the container in between), the cursor moves
    /// past them, since a fetch would only list this device's own changes again. Returns whether
    /// it moved; if not, a fetch brings what happened in between.
    package mutating func skipOwnChanges(_ sequences: some Sequence<Int64>) -> Bool {
        let cursor = persisted.cursor
        let newer = Set(sequences.filter { $0 > cursor })
        guard let last = newer.max(), last - cursor == Int64(newer.count) else { return false }
        persisted.cursor = last
        return true
    }

    /// The server's answer to a fetch: the items changed since the cursor, and the sequence they
    /// bring the container to.
    package mutating func fetched(_ items: [ItemSnapshot], upTo sequence: Int64) {
        fetching = false
        for item in items { learn(item) }
        persisted.cursor = max(persisted.cursor, sequence)
    }

    /// An item's state from any answer (the newest wins; older ones arriving late are ignored).
    package mutating func learn(_ item: ItemSnapshot) {
        if let known = persisted.remote[item.id], known.sequence >= item.sequence { return }
        var item = item
        // Its folder's id is a key here already (siblings share it instead of a copy each).
        if let parent = item.parent, let stored = persisted.remote.storedKey(parent) { item.parent = stored }
        touched.insert(item.id)
        persisted.remote[item.id] = item
        shownChanged.insert(item.id)
    }

    /// An item's state the server changed without a new sequence: the revision this device
    /// knows, sealed in place by the server since (its record sealed, its chunks renamed — the
    /// same contents). Taken only for that revision, and not for an older state.
    package mutating func relearn(_ item: ItemSnapshot) {
        guard let known = persisted.remote[item.id], known.revision == item.revision, known.sequence <= item.sequence else { return }
        var item = item
        if let parent = item.parent, let stored = persisted.remote.storedKey(parent) { item.parent = stored }
        touched.insert(item.id)
        persisted.remote[item.id] = item
        shownChanged.insert(item.id)
    }

    /// The items whose durable part changed since the last call (see ``touched``), and
    /// whether anything durable changed at all (the cursor, the change counter).
    package mutating func takeTouched() -> (items: Set<String>, changed: Bool) {
        defer {
            touched = []
            persistedChanged = false
        }
        return (touched, persistedChanged)
    }

    /// The items whose shown state may have changed since the last call (see ``shownChanged``).
    package mutating func takeShownChanged() -> Set<String> {
        defer { shownChanged = [] }
        return shownChanged
    }

    /// Marks items (and, with `changed`, everything durable) to be written again: what a
    /// failed write had taken with ``takeTouched()``.
    package mutating func markTouched(_ items: Set<String>, changed: Bool) {
        touched.formUnion(items)
        if changed { persistedChanged = true }
    }

    /// The request that keeps the item's current revision and removes its conflict versions, if
    /// it has any and no local changes.
    package func resolveKeepingCurrent(_ item: String) -> SyncRequest? {
        guard let remote = persisted.remote[item], !remote.conflicts.isEmpty, !hasLocalChanges(item) else { return nil }
        return .resolve(item: item, keep: remote.revision, remove: remote.conflicts.map(\.revision))
    }
}
