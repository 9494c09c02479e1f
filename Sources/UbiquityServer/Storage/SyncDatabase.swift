import Foundation
import UbiquityProtocol
import UbiquitySync

/// An account as the administration commands see it.
package struct Account: Sendable, Equatable {
    /// The account's number.
    package var id: Int64
    /// Its sign-in name.
    package var name: String
    /// Its stable, opaque identity (a client's `ubiquityIdentityToken`).
    package var identityToken: String
    /// Its storage quota in bytes.
    package var quotaBytes: Int64
    /// Whether it may use the operator's pages of the web interface (`ubiquity account admin`).
    package var admin = false
}

/// A key-value store as the web interface lists it.
struct KeyValueStoreSummary: Sendable, Equatable, Codable {
    var identifier: String
    var keys: Int64
    var bytes: Int64
}

/// A container as the web interface lists it.
struct ContainerSummary: Sendable, Equatable, Codable {
    /// The container's identifier (`TEAMID.com.example.app`).
    var identifier: String
    /// Its change sequence.
    var sequence: Int64
    /// Items not deleted (files, packages and folders).
    var items: Int64
    /// Bytes of the current revisions of those items.
    var bytes: Int64
}

/// An item as a folder's listing shows it (its current revision, without its contents); the web
/// interface's `WebItem`.
struct FolderEntry: Codable, Sendable, Equatable {
    var id: String
    var name: String
    var kind: ItemKind
    var size: Int64
    var modificationDate: Double
    var deviceName: String
    /// Whether its contents are all on the server.
    var uploaded: Bool
    /// Its unresolved conflict versions.
    var conflicts: Int
    /// Its sealed item record, if its device sealed one (opened before a page shows it:
    /// ``WebRecords``).
    var record: Data? = nil
}

/// A signed-in device, found by its token.
package struct DeviceAuth: Sendable, Equatable {
    /// The device's id.
    package var deviceId: String
    /// Its name.
    package var deviceName: String
    /// Its account.
    package var accountId: Int64
    /// The containers its token may use (nil: all).
    package var containers: [String]?
    /// The account it acts for when that is not the container's owner (a share's
    /// participant): its name, kept with each revision it makes (``ItemState/editor``).
    package var editor: String? = nil
    /// Its account's generation when it was looked up: counts every change of the account's
    /// roster, key envelopes and owned shares (what ``AccountFacts`` keeps; nil: not known).
    package var generation: Int64? = nil

    /// Whether the token may use `container`.
    func allows(_ container: String) -> Bool { containers?.contains(container) ?? true }
}

/// A device as the administration commands list it.
package struct DeviceInfo: Sendable, Equatable {
    /// The device's id.
    package var id: String
    /// Its name.
    package var name: String
    /// Whether its token was revoked.
    package var revoked: Bool
    /// When it signed in (seconds since 1970).
    package var created: Double = 0
    /// When it was last heard from (seconds since 1970, to the minute), if ever.
    package var lastSeen: Double?
}

/// A revision that is no longer current but can be restored (`ubiquity recover`).
package struct RecoverableRevision: Sendable, Equatable {
    /// The revision's id (what `--restore` takes).
    package var revision: String
    /// Its container.
    package var container: String
    /// Its item's id.
    package var item: String
    /// The item's name in that revision.
    package var name: String
    /// The device that made it.
    package var deviceName: String
    /// Bytes of contents.
    package var size: Int64
    /// Its modification date (seconds since 1970).
    package var modificationDate: Double
    /// When it was committed (seconds since 1970).
    package var replacedAt: Double
    /// Whether its item is deleted now.
    package var itemDeleted: Bool
    /// Whether all its chunks are on the server.
    package var uploaded: Bool
    /// Its sealed item record, if its device sealed one: ``name``, ``size`` and
    /// ``modificationDate`` are then what the server knows.
    package var record: Data? = nil
    /// Its folder (what a sealed record is bound to).
    package var parent: String? = nil
}

/// An account's keys as stored: its roster's entries (encoded) and sealed root keys.
struct StoredAccountKeys: Sendable, Equatable {
    var roster: [Data]
    var envelopes: [KeyEnvelopeRecord]
}

/// A chunk of an account: its hash, its size and since when it is kept.
struct ChunkEntry: Sendable, Equatable {
    var account: Int64
    var hash: String
    var size: Int64
    var created: Date
}

/// A chunk an uploaded revision names that the database does not list (``SyncDatabase/unlistedReferences()``).
package struct UnlistedReference: Sendable, Equatable {
    /// The account.
    package var account: Int64
    /// The chunk's hash.
    package var hash: String
    /// The container of an item that names it.
    package var container: String
    /// That item's id and name.
    package var item: String, name: String
}

/// A chunk whose contents are stored: its hash and size.
struct StoredChunk: Sendable, Equatable {
    var hash: String
    var size: Int64
    /// The chunk a sealed patch changes, for a chunk stored as one (issue 45: a device makes
    /// the patch, the server cannot); nil for a chunk stored whole.
    var base: String? = nil

    /// What ``RuleStorage/storedSizes(account:hashes:)`` says of a chunk stored as a sealed
    /// patch: the size a commit declares for it (the chunk's) cannot be checked.
    static let patchSize: Int64 = -1
}

/// The outcome of committing a revision.
struct CommitOutcome: Sendable {
    var revision: String
    var isCurrent: Bool
    var item: ItemState
    var missingChunks: [String]
    /// The change had been committed before (same change id): nothing new happened.
    var repeated = false
}

/// An item update ready to be committed: its manifest encoded, its chunks and size summed.
struct PreparedCommit: Sendable {
    var item: String
    var update: ItemUpdate
    var manifest: Data
    var digest: String
    var hashes: [String]
    /// The size the manifest gives each chunk.
    var declaredSizes: [String: Int64]
    var size: Int64
    var deleted: Bool
    /// For a plaintext name in an account whose keys the server holds (Standard): the name-clash
    /// tags of the name and of the names settling it would try (``NameCollision/candidateNames(for:count:)``),
    /// so that it is compared with sealed names — and indexed — by its tag. Nil otherwise.
    var nameTags: [String]?

    /// - Throws: ``SyncError`` `chunkSizeMismatch` (400) when the manifest gives one chunk two sizes.
    init(_ commit: ItemCommit) throws {
        item = commit.item
        update = commit.update
        manifest = try Self.stored(update.manifest)
        digest = ContentToken.of(update.manifest, kind: update.kind).description
        let chunks = update.manifest.allChunks
        var declared: [String: Int64] = [:]
        for chunk in chunks where declared.updateValue(chunk.size, forKey: chunk.hash).map({ $0 != chunk.size }) ?? false {
            throw SyncError.badRequest("chunkSizeMismatch", "chunk \(chunk.hash) is listed at two sizes")
        }
        declaredSizes = declared
        hashes = declared.keys.sorted()
        size = chunks.reduce(Int64(0)) { $0 + $1.size }
        deleted = update.deleted ?? false
    }
}

extension PreparedCommit {
    /// A manifest as stored: JSON. A flat file's list of hexadecimal hashes and sizes is
    /// written directly (a 64 MiB file's 4,000 entries in about a millisecond, where
    /// `JSONEncoder` took ten); anything else goes through `JSONEncoder`. Both read back with
    /// `JSONDecoder`.
    static func stored(_ manifest: Manifest) throws -> Data {
        guard manifest.members == nil, let chunks = manifest.chunks,
              chunks.allSatisfy({ $0.hash.utf8.allSatisfy(\.isLowercaseHexDigit) }) else {
            return try JSONEncoder().encode(manifest)
        }
        var json: [UInt8] = []
        json.reserveCapacity(16 + chunks.count * 90)
        json += Array(#"{"chunks":["#.utf8)
        for (index, chunk) in chunks.enumerated() {
            if index > 0 { json.append(UInt8(ascii: ",")) }
            json += Array(#"{"hash":""#.utf8)
            json += Array(chunk.hash.utf8)
            json += Array(#"","size":"#.utf8)
            json += Array(String(chunk.size).utf8)
            json.append(UInt8(ascii: "}"))
        }
        json += Array("]}".utf8)
        return Data(json)
    }
}

extension SyncDatabase {
    /// Commits one item's update.
    /// - Throws: ``SyncError`` when it is refused (``ServerRules``).
    func commit(accountId: Int64, container: String, itemId: String, update: ItemUpdate, device: DeviceAuth, now: Date, brief: Bool,
                limits: AccountLimits = AccountLimits(), nameTags: [String]? = nil) async throws -> CommitOutcome {
        try await commit(accountId: accountId, container: container, commits: [ItemCommit(item: itemId, update: update)], device: device, now: now, brief: brief,
                         limits: limits, nameTags: nameTags.map { [itemId: $0] } ?? [:])[0].get()
    }
}

/// Where sign-in attempts stand for one key (an account name, or an address).
package struct SignInAttempts: Sendable, Equatable {
    /// Attempts in the current window.
    package var attempts: Int
    /// Until when sign-in is refused (seconds since 1970); in the past: not blocked.
    package var blockedUntil: Double
}

/// Where the server keeps accounts, devices, containers, items and revisions. Implemented by
/// ``SQLiteDatabase`` (embedded, the default) and ``PostgresDatabase``; every implementation
/// gives the same answers (the server tests run against both).
protocol SyncDatabase: Sendable {
    /// Keeps `commit` after the container's last, if it is the next of its device's chain
    /// (``KeptCommit/placement(existing:last:)``) and the container's commits stay within
    /// ``KeptCommit/containerBudget`` — and, given `rosterEntry`, only while the account's
    /// roster still ends at that entry (checked in the same transaction as roster appends are
    /// made in: what the escrow signed is never kept after a switch to Advanced).
    func keepCommit(accountId: Int64, container: String, commit: KeptCommit, rosterEntry: Int64?) async throws -> KeptCommitPlacement
    /// The container's kept commits after `position`, in the order they came, at most `limit`.
    func keptCommits(accountId: Int64, container: String, after position: Int64, limit: Int) async throws -> [StoredSignedCommit]
    /// The bytes of `device`'s last kept commit of the container (its chain's head), if any.
    func lastKeptCommit(accountId: Int64, container: String, device: String) async throws -> Data?
    /// The running total of the container's kept commits (its newest's), and its last whole
    /// checkpoint, if any (the commits before it are dropped).
    func commitFigures(accountId: Int64, container: String) async throws -> (total: Int64, checkpoint: CommitCheckpoint?)
    /// The place of the container's newest kept signed commit (0: none).
    func lastCommitPosition(accountId: Int64, container: String) async throws -> Int64

    /// The account's roster entries in order, and its envelopes for `recipients`.
    func accountKeys(accountId: Int64, recipients: [String]) async throws -> StoredAccountKeys
    /// Appends `entries` to the account's roster after its first `after` and keeps `envelopes`
    /// (replacing those for the same epoch and recipient), all in one transaction — if the roster
    /// still has exactly `after` entries (false otherwise: another device appended first) and
    /// `check` accepts the whole roster that results (its error otherwise, nothing changed). When
    /// `check` answers true (the custody is Advanced), the escrow's envelopes are deleted with it.
    /// Refused (``KeyLimits/tooManyEnvelopes``) when the account would keep more than
    /// `envelopeLimit` envelopes.
    func appendKeys(accountId: Int64, after: Int, entries: [Data], envelopes: [KeyEnvelopeRecord], envelopeLimit: Int,
                    check: @escaping @Sendable ([Data]) throws -> Bool) async throws -> Bool
    /// Keeps a request to join made by `deviceId`, unless the account has `limit` requests made
    /// after `since` (false then); older ones are removed.
    func addKeyRequest(accountId: Int64, deviceId: String, request: KeyRequestRecord, since: Double, limit: Int) async throws -> Bool
    /// The account's requests made after `since`, oldest first, with the device that made each.
    func keyRequests(accountId: Int64, since: Double) async throws -> [(deviceId: String, request: KeyRequestRecord)]
    /// Records an answer to a request that has none (false: none such, or answered already).
    func answerKeyRequest(accountId: Int64, id: String, answerer: String, nonce: Data, since: Double) async throws -> Bool
    /// Records the nonce the device that made the request reveals, once it is answered (false:
    /// none such of that device, not answered, or revealed already).
    func revealKeyRequest(accountId: Int64, id: String, deviceId: String, nonce: Data, since: Double) async throws -> Bool
    /// Removes a request (answered with, or given up).
    func removeKeyRequest(accountId: Int64, id: String) async throws
    /// Keeps a device's grant for the browser whose request `id` (made after `since`, answered
    /// and revealed) it answers, for that browser's session until `grant.expires` (replacing
    /// the session's grant before), and removes the request. False: no such browser request.
    func keepWebGrant(accountId: Int64, id: String, grant: WebGrantUpload, since: Double) async throws -> Bool
    /// The grant kept for the session `deviceId`, unless it expired by `now`.
    func webGrant(accountId: Int64, deviceId: String, now: Double) async throws -> WebGrantUpload?
    // MARK: Shares (issue 46, docs/Sharing.md)

    /// The share whose root is `item` of the account's `container`; made (with `id`, epoch 1)
    /// when there is none.
    func makeShare(accountId: Int64, container: String, item: String, id: String, now: Double) async throws -> StoredShare
    /// The share `id`, whoever owns it.
    func share(id: String) async throws -> StoredShare?
    /// The account's shares, oldest first.
    func ownedShares(accountId: Int64) async throws -> [StoredShare]
    /// The roots of the account's shares in `container`.
    func shareRoots(accountId: Int64, container: String) async throws -> [String]
    /// Stops the account's share `id`: it and every invitation to it go. False: no such share.
    func stopShare(accountId: Int64, id: String) async throws -> Bool
    /// Invites `name` to the owner's share `shareId` as `role` (the account of that name, if any,
    /// found in the same transaction) — or answers the unanswered invitation of that name to
    /// that share, as it was. Nil when the owner made `limits.perHour` invitations in the hour
    /// before `now`, or has `limits.pending` unanswered ones.
    func invite(shareId: String, ownerId: Int64, name: String, role: ShareRole, id: String, now: Double, limits: InvitationLimits) async throws -> StoredParticipant?
    /// Every invitation to the share, oldest first.
    func participants(shareId: String) async throws -> [StoredParticipant]
    /// The account's invitations and participations, each with its share, oldest first.
    func participations(accountId: Int64) async throws -> [(share: StoredShare, participant: StoredParticipant)]
    /// Moves the invitation `match` names from one of the states `from` to `to` (nil: stays)
    /// and sets its role (nil: stays); an unanswered one only while it has not expired by
    /// `now`. False: no such invitation in those states.
    func updateParticipant(_ match: ParticipantMatch, from: [ShareParticipantState], to: ShareParticipantState?, role: ShareRole?, now: Double) async throws -> Bool

    /// The ids of `root` and every item of the account's `container` inside it (deleted ones
    /// too: their deletions are news), read by folder on the item index; at most `limit` (nil:
    /// more than that).
    func subtree(accountId: Int64, container: String, root: String, limit: Int) async throws -> Set<String>?

    /// The items that left the share by a move after sequence `after` and at or before
    /// `through`, each with its move's sequence, in sequence order.
    func shareExits(shareId: String, after: Int64, through: Int64) async throws -> [(item: String, sequence: Int64)]

    /// Which of `hashes` a revision of `root` of the account's `container`, or of an item
    /// inside it, names (what a share's participants may read of the owner's chunks).
    func chunksNamed(accountId: Int64, container: String, inside root: String, hashes: [String]) async throws -> Set<String>

    // MARK: Sharing keys (issue 46, docs/Sharing.md "Keys")

    /// The account's published sharing identity.
    func sharingIdentity(accountId: Int64) async throws -> StoredSharingIdentity?
    /// Publishes the account's sharing identity unless one is published whose signing key is
    /// not `replacing` (nil: none may be). Returns the one published afterwards.
    func publishSharingIdentity(accountId: Int64, _ identity: StoredSharingIdentity, replacing: Data?, now: Double) async throws -> StoredSharingIdentity
    /// The key envelopes of the share sealed to the account, oldest epoch first.
    func shareKeyEnvelopes(shareId: String, accountId: Int64) async throws -> [(epoch: Int64, envelope: Data)]
    /// The accounts that hold an envelope of the share's key of `epoch`.
    func shareKeyHolders(shareId: String, epoch: Int64) async throws -> Set<Int64>
    /// Keeps envelopes of the share's keys, each to an account and of an epoch up to `epoch`
    /// (the share's current one): the owner's own of `epoch` first — the first one kept stands
    /// — and those to others once it is there.
    func keepShareKeyEnvelopes(shareId: String, ownerId: Int64, epoch: Int64, envelopes: [(accountId: Int64, epoch: Int64, envelope: Data)]) async throws -> ShareKeyKeeping
    /// Starts the share's next epoch; the envelopes sealed to `removed` go.
    func advanceShareEpoch(shareId: String, removed: Int64?) async throws

    /// The server setting `name`, set to `value` first if it has none.
    func claimSetting(_ name: String, value: String) async throws -> String
    func createAccount(name: String, passwordHash: String, quotaBytes: Int64) async throws -> Account
    func accounts() async throws -> [Account]
    func deleteAccount(named name: String) async throws -> Bool
    /// The account numbered `id`, or nil.
    func account(id: Int64) async throws -> Account?
    /// The account's containers with their item counts and the bytes of their current files.
    func containers(ofAccount id: Int64) async throws -> [ContainerSummary]
    /// The account's key-value stores with their keys (those with values) and bytes.
    func keyValueStores(ofAccount id: Int64) async throws -> [KeyValueStoreSummary]

    /// Records a published link (its token kept only as a hash), with the manifest its device
    /// sealed (Advanced Data Protection; ``PublishedLink/sealed`` then true). With a manifest,
    /// first drops those of the account's links that no longer open (revoked, expired), then
    /// holds the rest and this one to `manifestBudget` bytes.
    /// - Throws: ``SyncError`` 409 `tooManyLinks` past the budget (nothing recorded).
    func addLink(_ link: PublishedLink, accountId: Int64, tokenHash: String, manifest: Data?, manifestBudget: Int64) async throws
    /// The link whose token hashes to `tokenHash`, if it is not revoked, with its account.
    func link(tokenHash: String) async throws -> (accountId: Int64, link: PublishedLink)?
    /// The sealed manifest of the link whose token hashes to `tokenHash`, if it has one and is
    /// not revoked.
    func linkManifest(tokenHash: String) async throws -> Data?
    /// The account's links not revoked, newest first.
    func links(ofAccount id: Int64) async throws -> [PublishedLink]
    /// Revokes one of the account's links; false if it has no such link.
    func revokeLink(id: String, accountId: Int64) async throws -> Bool
    /// Sets the account's quota; false if there is no such account. (Lowering it below what
    /// the account uses refuses its uploads and new contents until it deletes enough.)
    func setQuota(ofAccount name: String, bytes: Int64) async throws -> Bool
    /// Makes the account an operator (or not); false if there is no such account.
    func setAdmin(ofAccount name: String, admin: Bool) async throws -> Bool
    /// The account's id and password hash, for sign-in.
    func credentials(of name: String) async throws -> (id: Int64, passwordHash: String, identityToken: String)?

    func identityToken(ofAccount id: Int64) async throws -> String?
    /// The account's quota and what counts against it (``AccountFigures/used``: chunks stored,
    /// each once; key-value stores; revision records; chunks committed revisions wait for); all
    /// zero if there is no such account.
    func usage(ofAccount id: Int64) async throws -> AccountFigures

    func addDevice(accountId: Int64, name: String, tokenHash: String, containers: [String]?) async throws -> String
    func device(tokenHash: String) async throws -> DeviceAuth?
    func devices(ofAccount name: String) async throws -> [DeviceInfo]
    func revokeDevice(id: String) async throws -> Bool
    /// Notes that device `id` was heard from at `date`.
    func deviceSeen(id: String, at date: Date) async throws
    /// Which of `ids` are devices still signed in (not revoked, their account not deleted).
    func activeDevices(among ids: Set<String>) async throws -> Set<String>

    /// The items changed after `since`; `brief`: with content tokens instead of manifests.
    func changes(accountId: Int64, container: String, since: Int64, limit: Int, brief: Bool) async throws -> ChangesResponse
    /// The items, not deleted, whose parent is `parent` (nil: the top of the container's
    /// `Documents`), in no particular order: one query on the item index, however many items
    /// the rest of the container holds.
    func folderEntries(accountId: Int64, container: String, parent: String?) async throws -> [FolderEntry]
    /// An item's state; `brief`: with content tokens instead of manifests.
    func item(accountId: Int64, container: String, id: String, brief: Bool) async throws -> ItemState?
    /// The kind and manifest of one revision of an item (current, conflict or past), or nil if the
    /// item has no such revision: the base of chunk-list deltas. Nil too for a revision the server
    /// sealed in place: a device may hold the manifest it had before, so it is no delta base.
    func revisionManifest(accountId: Int64, container: String, item: String, revision: String) async throws -> (kind: ItemKind, manifest: Manifest)?

    // Sealing old revisions in place (``SealInPlace``).

    /// Up to `limit` complete revisions of the container that have no sealed record, after
    /// `cursor` (older, or as old with a greater id), newest first.
    func unsealedRevisions(accountId: Int64, container: String, below cursor: UnsealedCursor, limit: Int) async throws -> [UnsealedRevision]
    /// The accounts that have keys (a roster) and revisions without a sealed record, found by
    /// the index of unsealed revisions alone — what a sealing round looks at, however many
    /// accounts the server keeps.
    func accountsWithUnsealedRevisions() async throws -> [Int64]
    /// What the account still holds in plaintext: revisions but deletions without a sealed
    /// record (current, conflict or earlier, finished or not), and key-value values without a
    /// sealed change — none may be left before its devices require everything sealed.
    func plaintextLeft(accountId: Int64) async throws -> (revisions: Int, values: Int)
    /// Lists `chunks` (sealed, stored already, at their sizes) and rewrites the revisions as
    /// `rewrites` say, in one transaction (``ServerRules/sealInPlace(account:container:rewrites:chunks:now:in:)``).
    func sealInPlace(accountId: Int64, container: String, rewrites: [RevisionRewrite], chunks: [String: Int64], now: Date) async throws -> SealedInPlace
    /// Empties the database's write-ahead log of earlier page images (names sealed in place
    /// since), where it keeps one.
    func scrubLog() async throws
    /// The container's live items whose current revision has a plaintext name: id, name,
    /// folder and the key they are indexed by.
    func plaintextNamedItems(accountId: Int64, container: String) async throws -> [(id: String, name: String, parent: String?, key: String)]
    /// Indexes items by the keys given (their names' tags), where they still show `name`.
    func reindex(accountId: Int64, container: String, keys: [(id: String, name: String, key: String)]) async throws
    /// An item's earlier revisions (replaced, resolved, superseded; not deletions, not folders)
    /// made at or after `since` (seconds since 1970), newest first, at most `limit`; nil if the
    /// container has no such item.
    func itemRevisions(accountId: Int64, container: String, item: String, since: Double, limit: Int) async throws -> [ItemRevision]?
    /// One revision of an item (current, conflict or earlier) with its manifest, to download
    /// it; nil if the item has no such revision (or it is a deletion or a folder).
    func revisionContents(accountId: Int64, container: String, item: String, revision: String) async throws -> RevisionContentsResponse?
    /// The chunk lists of these revisions of flat files in the container, by revision, leaving
    /// out those `device` made (and revisions that are not there): what a page of changes
    /// sends inline.
    func chunkLists(accountId: Int64, container: String, revisions: [String], notMadeBy device: String) async throws -> [String: [ChunkReference]]
    /// Several items' present states with their manifests, in the order asked (unknown ids left out).
    func items(accountId: Int64, container: String, ids: [String]) async throws -> [ItemState]
    /// Commits updates of several items (each at most once) in one transaction, in order, by
    /// ``ServerRules``: each the outcome of its commit, or why it was refused (it wrote nothing).
    /// Commits updates in one transaction (``ServerRules``); `nameTags` gives, by item, the
    /// tags of a plaintext update's name (``PreparedCommit/nameTags``).
    func commit(accountId: Int64, container: String, commits: [ItemCommit], device: DeviceAuth, now: Date, brief: Bool,
                limits: AccountLimits, nameTags: [String: [String]]) async throws -> [Result<CommitOutcome, SyncError>]
    func resolve(accountId: Int64, container: String, itemId: String, request: ResolveRequest) async throws -> ItemState

    /// Applies key-value changes (all or none; the most recent timestamp wins per key), within
    /// Apple's limits, the account's number of stores and its quota (``ServerRules``).
    func applyKeyValues(accountId: Int64, store: String, changes: [KeyValueChange], device: DeviceAuth) async throws -> KeyValueResponse
    func keyValueChanges(accountId: Int64, store: String, since: Int64) async throws -> KeyValueResponse

    func missingChunks(accountId: Int64, hashes: [String]) async throws -> [String]
    func hasChunk(accountId: Int64, hash: String) async throws -> Bool
    /// Which of `hashes` some revision (current or kept) of an item in `containers` names — what
    /// a device whose token is limited to those containers may read.
    func chunksNamed(accountId: Int64, containers: [String], hashes: [String]) async throws -> Set<String>
    /// Of `hashes`, the chunks stored as sealed patches, each with the chunk its patch changes.
    func chunkBases(accountId: Int64, hashes: [String]) async throws -> [String: String]
    /// The chunks stored as sealed patches of any of `bases`, each with its base.
    func chunksPatching(accountId: Int64, bases: [String]) async throws -> [String: String]
    /// Records stored chunks, all or none, with one quota check for those the account did not
    /// have; returns the containers whose items became downloadable, with their sequences now,
    /// and which chunks were listed only now.
    /// - Throws: ``SyncError`` `quotaExceeded` (nothing recorded) when the new ones do not fit.
    func chunksStored(accountId: Int64, chunks: [StoredChunk], now: Date) async throws -> ChunksRecorded
    /// Forgets a chunk found damaged (and put aside): the account no longer holds it (it stops
    /// counting against the quota, and `missingChunks` names it, so a device sends it again), and
    /// every revision naming it waits for it again, not uploaded. Returns the containers whose
    /// items changed, with their sequences now.
    func chunkLost(accountId: Int64, hash: String) async throws -> [String: Int64]
    /// Every chunk the database lists as held (`ubiquity fsck`).
    func listedChunks() async throws -> [ChunkEntry]
    /// Chunks that revisions marked uploaded name but the database does not list as held —
    /// damage (`ubiquity fsck`): each once, with one item that names it.
    func unlistedReferences() async throws -> [UnlistedReference]

    /// What an account can still get back: revisions no longer current (replaced, resolved,
    /// superseded) and deleted items, made within `retention` seconds before `now`.
    func recoverable(accountName: String, now: Date, retention: TimeInterval) async throws -> [RecoverableRevision]
    /// Makes a recoverable revision its item's current one again (a new revision by the server).
    /// Returns the container and its sequence, or nil if there is no such revision.
    func restore(accountName: String, revision: String, now: Date) async throws -> (container: String, sequence: Int64)?
    /// Forgets revisions no longer current that are older than `retention`, then chunks no
    /// revision names (older than `grace`, so a chunk uploaded just before its manifest stays).
    /// Returns the removed chunks (account, hash) for their contents to go, and how many revisions went.
    func collectGarbage(now: Date, retention: TimeInterval, grace: TimeInterval) async throws -> (revisions: Int, chunks: [(Int64, String)], bytes: Int64)

    // Sign-in attempts (the rules are ``SignInGuard``'s; these are the primitives).

    /// Where each of `keys` stands (those never tried are left out).
    func signInAttempts(keys: [String]) async throws -> [String: SignInAttempts]
    /// Counts one more sign-in attempt for each of `keys` — a count starts again when the
    /// key's last attempt was before `windowStart` — and returns where each key stands, in one
    /// atomic step, so that attempts made at the same time are all counted.
    func countSignInAttempt(keys: [String], now: Date, windowStart: Date) async throws -> [String: SignInAttempts]
    /// Refuses sign-in for `key` until `until` (a longer block already there stays).
    func blockSignIn(key: String, until: Date) async throws
    /// After a sign-in succeeded: forgets the attempts of `clearing`, and takes back one
    /// attempt from each of `forgiving`.
    func signInSucceeded(clearing: [String], forgiving: [String]) async throws
    /// Forgets the attempts and block of `keys` (an operator lifting a block); how many keys had any.
    func clearSignInAttempts(keys: [String]) async throws -> Int
    /// The keys blocked at `now`, with until when.
    func blockedSignIns(now: Date) async throws -> [(key: String, until: Date)]
    /// Forgets keys neither tried since `before` nor blocked after it; how many went.
    func pruneSignInAttempts(before: Date) async throws -> Int
    /// Replaces an account's password hash (an old hash upgraded at sign-in).
    func setPasswordHash(accountId: Int64, hash: String) async throws

    /// Delivers changes committed by other server instances to this one's connected devices,
    /// until cancelled (returns at once where there are no other instances).
    func relayChanges(to notifier: ChangeNotifier) async
    /// Tells the other server instances of a share's event (``ChangeNotifier/publishShare(share:sequence:accounts:container:except:)``),
    /// for the devices connected to them (nothing where there are no other instances).
    /// - Throws: When the other instances cannot be told (their devices catch up on their slow timers).
    func relayShare(share: String?, sequence: Int64?, accounts: [Int64], container: String, except origin: String?) async throws
    /// Throws unless the database answers (`/health`).
    func ping() async throws
    /// Closes connections (the database is not used afterwards).
    func close() async
}

/// What recording stored chunks did (``SyncDatabase/chunksStored(accountId:chunks:now:)``).
struct ChunksRecorded: Sendable {
    /// The containers whose items became downloadable, with their sequences now.
    var sequences: [String: Int64]
    /// The chunks the account did not list until now.
    var listed: Set<String>
}
