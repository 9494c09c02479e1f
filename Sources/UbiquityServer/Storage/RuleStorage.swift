import Foundation
import UbiquityProtocol
import UbiquitySync

/// What the rules (``ServerRules``) read and write inside one transaction: the storage
/// primitives each database implements (``SQLiteRuleStorage``, ``PostgresRuleStorage``), and
/// nothing more — no primitive decides anything. Every call is part of the transaction the
/// storage was opened for; a rule that throws leaves nothing written.
protocol RuleStorage {
    // MARK: Accounts

    /// The account's figures, held for the transaction (no other transaction changes them
    /// until it ends); nil if there is no such account.
    func account(_ account: Int64) async throws -> AccountFigures?
    /// Adds to the account's counters (negative to take away).
    func adjust(_ account: Int64, by change: AccountChange) async throws
    /// The id of the account named `name`.
    func accountId(named name: String) async throws -> Int64?

    // MARK: Containers

    /// The container's id, held for the transaction; created when `create` and missing.
    func container(account: Int64, identifier: String, create: Bool) async throws -> Int64?
    /// The container's identifier.
    func containerIdentifier(_ container: Int64) async throws -> String?
    /// The container's next sequence number.
    func nextSequence(of container: Int64) async throws -> Int64
    /// Tells the other server instances sharing this database that the container
    /// or key-value store (`keyValue`) changed, when the transaction commits; nothing where one
    /// process serves the database. The `device` that made the change is not told.
    func announce(account: Int64, container identifier: String, sequence: Int64, keyValue: Bool, device: String?) async throws

    // MARK: Commits

    /// Everything a commit is decided on, read at once (the account and the container held
    /// for the transaction). One round trip where that matters (PostgreSQL).
    func commitFacts(_ question: CommitQuestion) async throws -> CommitFacts
    /// Writes what a commit decided — the revision, its chunk references and reservations, the
    /// revision it demotes, the item's new sequence (and current revision), the account's
    /// counters, and the announcement if asked — and returns the item's new sequence. One round
    /// trip where that matters.
    func record(_ record: CommitRecord) async throws -> Int64

    // MARK: Items and revisions

    /// The chunk hashes a revision names.
    func chunkHashes(of revision: String) async throws -> [String]
    /// The key the item is indexed by in its folder (``NameCollision``: a name's key, or a tag).
    func nameKey(container: Int64, item: String) async throws -> String?
    /// The item's current revision, if the item exists.
    func currentRevision(container: Int64, item: String) async throws -> CurrentRevision?
    /// The live items of a folder whose name keys are `keys` (``NameCollision``); all the
    /// folder's named items when `keys` is nil.
    func siblings(container: Int64, parent: String?, keys: [String]?) async throws -> [(id: String, name: String)]
    /// The revisions of the item in state `state`.
    func revisions(container: Int64, item: String, state: String) async throws -> Set<String>
    /// Records revision `copy` with the contents of `source` (a server-made revision: a rename,
    /// a restore) and the fields of `copy`; returns what the copy counts against the quota
    /// (the source's cost).
    func copy(_ source: String, as copy: CopiedRevision) async throws -> Int64
    /// Sets revisions' state.
    func setState(_ state: String, of revisions: [String]) async throws
    /// Makes `revision` the item's current revision (creating the item's row if needed).
    func setCurrent(container: Int64, item: String, revision: String, sequence: Int64, keys: (parent: String, name: String)) async throws
    /// Sets the item's sequence.
    func setSequence(container: Int64, item: String, sequence: Int64) async throws
    /// A revision's name, folder and whether it deletes its item.
    func naming(of revision: String) async throws -> (name: String, parent: String?, deleted: Bool)?
    /// The item's state; `brief`: with content tokens instead of manifests.
    func itemState(container: Int64, item: String, brief: Bool) async throws -> ItemState?
    /// A revision of the account that may be restored: replaced, resolved or superseded, not a
    /// delete.
    func restorable(account: Int64, revision: String) async throws -> (container: Int64, identifier: String, item: String)?

    // MARK: Shares (docs/Sharing.md)

    /// The shares whose roots are in `container`: each one's id and root.
    func shareRoots(of container: Int64) async throws -> [(share: String, root: String)]
    /// The folder item `item` of `container` is in now (nil: at the top, or no such item).
    func folder(of item: String, in container: Int64) async throws -> String?
    /// Records that `item` left `share` at `sequence` (moved out of it).
    func recordShareExit(share: String, item: String, sequence: Int64) async throws

    // MARK: Chunks

    /// The sizes of the chunks among `hashes` the account holds — or ``StoredChunk/patchSize``
    /// for one stored as a sealed patch (its plaintext size unknown here).
    func storedSizes(account: Int64, hashes: [String]) async throws -> [String: Int64]
    /// Records chunks the account now waits for, with their declared sizes (none is listed).
    func addPending(account: Int64, chunks: [String: Int64]) async throws
    /// Forgets chunks the account waited for; returns the declared sizes of those it did.
    func removePending(account: Int64, hashes: [String]) async throws -> [String: Int64]
    /// Lists chunks as held by the account (none is listed yet), those in `bases` as stored as
    /// sealed patches of the chunk named there.
    func addChunks(account: Int64, chunks: [String: Int64], bases: [String: String], now: Date) async throws
    /// Forgets a chunk the account held; returns its size if it did.
    func removeChunk(account: Int64, hash: String) async throws -> Int64?
    /// The revisions waiting for any of `hashes`, which stop waiting for them.
    func revisionsWaiting(account: Int64, for hashes: [String]) async throws -> [RevisionPlace]
    /// Whether the revision still waits for any chunk.
    func isWaiting(_ revision: String) async throws -> Bool
    /// Sets whether a revision is complete.
    func setComplete(_ revision: String, _ complete: Bool) async throws
    /// The revisions naming chunk `hash`, which now wait for it.
    func revisionsNaming(account: Int64, hash: String) async throws -> [RevisionPlace]

    // MARK: Sealing in place (``ServerRules/sealInPlace(account:container:rewrites:chunks:now:in:)``)

    /// Rewrites a revision that has no record yet as `rewrite` says — its name (the tag), no
    /// type or date, its size, record, manifest, content token, cost and chunk references —
    /// marks it rewritten (devices may hold its old manifest: it is no delta base any more),
    /// gives the item's row its keys when it is current and a public link of it the tag.
    /// Returns its cost and chunks before; nil, writing nothing, when it has a record by now or
    /// is gone.
    func rewrite(_ rewrite: RevisionRewrite, container: Int64) async throws -> (cost: Int64, hashes: [String])?
    /// Whether a revision of the account names chunk `hash`, or a chunk it holds is a sealed
    /// patch of it.
    func isNamed(account: Int64, hash: String) async throws -> Bool
    /// Forgets `hashes` as the container's chunks where none of its revisions names them.
    func forgetContainerChunks(container: Int64, hashes: [String]) async throws

    // MARK: Key-value stores

    /// The store's id, created when missing, and the account's number of stores before.
    func keyValueStore(account: Int64, identifier: String) async throws -> (id: Int64, created: Bool, stores: Int)
    /// The store's next sequence number.
    func nextKeyValueSequence(of store: Int64) async throws -> Int64
    /// The stamp (timestamp and device) and size of the key's entry.
    func keyValueEntry(store: Int64, key: String) async throws -> (timestamp: Double, device: String, size: Int64)?
    /// Writes the key's entry (a nil value removes it, leaving a marker).
    func setKeyValue(store: Int64, key: String, value: Data?, sealed: Data?, size: Int64, timestamp: Double, device: DeviceAuth, sequence: Int64) async throws
    /// Deletes the store's plaintext removals (rows with neither a value nor a sealed change).
    func purgePlaintextRemovals(store: Int64) async throws
    /// The store's live keys and bytes.
    func keyValueTotals(store: Int64) async throws -> (keys: Int, bytes: Int64)
    /// The store's entries for `keys`.
    func keyValueEntries(store: Int64, keys: Set<String>) async throws -> [KeyValueEntry]
}

/// An account's counters (see ``RuleStorage/account(_:)``).
struct AccountFigures: Sendable, Equatable, Codable {
    /// The account's quota in bytes.
    var quota: Int64 = 0
    /// Bytes of chunks held.
    var chunkBytes: Int64 = 0
    /// Bytes of key-value stores (keys and values).
    var keyValueBytes: Int64 = 0
    /// Bytes of revision records kept (manifests, names, a fixed cost each).
    var metadataBytes: Int64 = 0
    /// Declared bytes of chunks that committed revisions name and that are not uploaded yet.
    var pendingBytes: Int64 = 0
    /// Items in all its containers (deleted ones too).
    var items: Int64 = 0

    /// What counts against the quota.
    var used: Int64 { chunkBytes + keyValueBytes + metadataBytes + pendingBytes }
}

/// A change of an account's counters.
struct AccountChange: Sendable, Equatable {
    var keyValueBytes: Int64 = 0
    var metadataBytes: Int64 = 0
    var pendingBytes: Int64 = 0
    var items: Int64 = 0

    var isEmpty: Bool { self == AccountChange() }
}

/// An item's current revision: what a commit is placed against.
struct CurrentRevision: Sendable, Equatable {
    var id: String
    var date: Double
    var device: String
    var deleted: Bool
}

/// A revision and where it is.
struct RevisionPlace: Sendable, Equatable {
    var revision: String
    var container: Int64
    var item: String
    var state: String
}

/// A revision to record (``RuleStorage/insert(_:)``).
struct NewRevision: Sendable {
    var id: String
    var account: Int64
    var container: Int64
    var item: String
    var commit: PreparedCommit
    var device: DeviceAuth
    var name: String
    var state: String
    var created: Date
    /// Chunks it names that are new to its container (all of them, or those not in its base).
    var containerChunks: [String]
    /// What it counts against the quota.
    var cost: Int64
}

/// A server-made revision with another revision's contents (``RuleStorage/copy(_:as:)``).
struct CopiedRevision: Sendable {
    var id: String
    /// Its name; nil: the source's.
    var name: String?
    var base: String?
    var created: Date
}

/// What ``RuleStorage/commitFacts(_:)`` is asked.
struct CommitQuestion: Sendable {
    var account: Int64
    var container: String
    var item: String
    var device: String
    /// The commit's change id: the revision committed earlier with it, if any.
    var change: String?
    /// A base revision whose completeness to tell.
    var base: String?
    /// The chunks whose stored sizes to tell.
    var hashes: [String]
    /// The folder, and the name keys, of the live items to tell.
    var parent: String?
    var nameKeys: [String]
    /// Whether to read the manifests of the item's current revision and conflict versions.
    var manifests: Bool
}

/// What ``RuleStorage/commitFacts(_:)`` tells.
struct CommitFacts: Sendable {
    /// The account's counters; nil if there is no such account.
    var figures: AccountFigures?
    /// The container's id; nil if there is no such container.
    var container: Int64?
    /// The revision committed earlier with the change id.
    var earlier: (id: String, state: String)?
    /// Whether the base revision asked about is complete.
    var baseComplete = false
    /// Sizes of the chunks asked about that the account holds.
    var stored: [String: Int64] = [:]
    /// The item's current revision.
    var current: RevisionRow?
    /// Its conflict versions, oldest first.
    var conflicts: [RevisionRow] = []
    /// The live items of the folder with the name keys asked about.
    var siblings: [(id: String, name: String)] = []
}

/// What ``RuleStorage/record(_:)`` writes.
struct CommitRecord: Sendable {
    var revision: NewRevision
    /// The revision that stops being current, and what it becomes.
    var demoted: (id: String, state: String)?
    /// The item's folder and name keys when the revision becomes current (nil: only the
    /// item's sequence changes).
    var currentKeys: (parent: String, name: String)?
    /// The account's counters' change.
    var change: AccountChange
    /// Announce the change (the container's identifier, the device that made it).
    var announce: (container: String, device: String)?
}

/// A revision's row as the rules read it: what an item's state is made of.
struct RevisionRow: Sendable, Codable, Equatable {
    var id: String
    var name: String
    var parent: String?
    var kind: String
    var size: Int64
    var modificationDate: Double
    var type: String?
    var deleted: Bool
    var complete: Bool
    var deviceId: String
    var deviceName: String
    var digest: String?
    /// The stored manifest, if it was read.
    var manifest: Data?
    /// The revision it was made on.
    var baseRevision: String? = nil
    /// Its sealed item record (``ItemUpdate/record``), if its device sealed one.
    var record: Data? = nil
    /// The share participant's account that made it (nil: the container's owner).
    var editor: String? = nil
}

/// What a change id says of where it was made.
enum ChangeIdentity {
    /// The device an agent's change id (`DEVICE.N`, or `DEVICE.INCARNATION.N`) was first made
    /// on; "" for ids of another form.
    static func madeOn(_ change: String) -> String {
        guard let dot = change.firstIndex(of: ".") else { return "" }
        return String(change[..<dot])
    }
}
