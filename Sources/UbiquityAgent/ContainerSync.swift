import Foundation
import Logging
import UbiquityClient
import UbiquityCoordination
import UbiquityFiles
import UbiquityProtocol
import UbiquityKeys
import UbiquitySync

/// Keeps one container in step with the server — everything in its folder but names ending in
/// `.nosync` (and what is in such folders): the agent's loop for one container, joining
/// ``LocalScanner`` (what changed here), ``DeviceSyncState`` (what to do), ``SyncClient`` (the
/// server) and ``AgentStore`` (what survives a restart).
///
/// Paths are relative to the container's folder. On the server an item at the top of
/// `Documents` has no parent folder (as since the first version of the protocol) and one at the
/// container's top level has the reserved parent ``ContainerLayout/topLevel``; the `Documents`
/// folder itself is not an item.
///
/// Work follows change: told which folders changed (``noteChange(at:)``, from inotify), a
/// round looks only there; everything is looked at when the container is opened, after events
/// were lost (``noteEverythingChanged()``) and on the agent's slow timer. Many changes go up in
/// one commit request and their chunks in shared batches; many items come down with one request
/// for their chunk lists and shared chunk batches.
///
/// Metadata first: an item from another device is listed at once (a placeholder `.NAME.icloud`,
/// ``UbiquityPlaceholder``) and downloaded when an app asks (``requestDownload(_:)``) — or at
/// once on a ``greedy`` device; once downloaded it is kept current. ``evict(_:)`` frees the
/// local copy of an uploaded item. A download fetches only the chunks the local copy lacks.
/// Conflict versions become the item's `NSFileVersion` conflict versions on every device;
/// resolving them there (removing or marking them resolved) resolves them on the server.
/// Files are read and written under file coordination, so an open document saves before it is
/// uploaded and reloads after a download. Folders are items of their own (an item knows the
/// folder it is in, so moving a folder is one change); a package is one item whose members
/// travel individually (only the chunks of changed members move) and whose conflict versions
/// are whole packages.
///
/// A round's work is done in four rooms, each the one owner of its own state: the
/// ``ChangeFinder`` (where to look, what changed), the ``Uploader`` (commits and chunks up),
/// the ``Materialiser`` (the folder brought to the server's state: shown paths, placeholders,
/// downloads) and the ``ConflictReconciler`` (conflict versions on disk). What they share —
/// the sync decisions (``DeviceSyncState``), the records of local files, the chunk lists known
/// here, what apps asked for and what `ubiquity status` shows — is this actor's, and their
/// work runs on it (each takes it as an `isolated` parameter).
package actor ContainerSync {
    /// The container's identifier.
    package let container: String
    /// The container's folder: what is in it syncs (but `.nosync` names).
    package let root: URL
    /// Its `Documents` folder.
    package let documents: URL
    /// The share this engine keeps in step, through the share's routes, in the share's folder
    /// at the top of `Documents` (nil: the container's own items, in the rest of its folder).
    package let share: ShareScope?
    /// The account this device is signed in to (whose own changes no one is named for).
    package let account: String?
    /// What this engine's records are kept under in the agent's store: the container, or the
    /// container and the share (`CONTAINER#SHARE`).
    package let storeKey: String
    /// The top items of the shares this account owns in the container (for Apple's shared-item
    /// values of them and of what they hold; a container's own engine).
    package internal(set) var sharedRoots: Set<String> = []
    /// The codecs of the sealed shares this account owns here, by top item; the items in them
    /// to seal again with their keys, those not known to be, the contents their codecs cut and
    /// the files sent with contents cut otherwise, and the top items of every sealed share it owns
    /// here as last read (kept in the store; nil: not read from it yet) (``setOwnedShareCodecs(_:sealedRoots:)``).
    var (ownedShareCodecs, resealDue, sealingUnknown, sharesCut, recutDue, ownedSealedRoots): ([String: ChunkCodec], Set<String>, Set<String>, Set<ContentToken>, Set<String>, Set<String>?) = ([:], [], [], [], [], nil)
    /// Whether the share this engine keeps is read-only for this account (see ``setReadOnly(_:)``).
    package internal(set) var readOnly = false
    /// Why changes made here were not sent, by path: a read-only share's (``keepRefused(_:)``),
    /// shown by `ubiquity status` (not problems: the engine is idle with them).
    package internal(set) var refusals: [String: String] = [:] {
        didSet { statusVersion &+= 1 }
    }
    /// What part of the folder this engine keeps: the container's own engine passes over the
    /// folders of the shares kept here; a share's engine keeps only its share's folder.
    package internal(set) var border: SyncBorder
    let client: SyncClient
    let store: AgentStore
    let logger: Logger
    var state: DeviceSyncState
    var files: LocalFiles
    /// Chunk lists of local contents (per member for a package), by content token.
    /// The block prints of the container's chunks this device held in plaintext lately (sent
    /// or received), which its sealed patches are made against (in memory: after a restart an
    /// edit of a chunk not seen since goes whole).
    let prints = BlockPrintCache()
    /// The block signatures of plaintext chunks this device made or received by an edit lately,
    /// which its next patches of them are made against without asking the server.
    let signatures = ChunkSignatureCache()
    var localContents: [ContentToken: [LocalMember]] = [:]
    /// How this container's chunks are cut, named and carried now (sealed once the account's
    /// keys are held and sealing is on: ``refreshCodec()``).
    private(set) var codec = ChunkCodec.plain
    /// This device's newest signed commit of the container kept in its store (nil: not read
    /// from the store yet; `.some(nil)`: none made).
    var signedHead: SignedCommit??
    /// Signed commits whose write failed: they go with the next (their outcomes are recorded in
    /// memory, and nothing else would sign them).
    var unsavedSigned: [(commit: SignedCommit, content: CommitPayload)] = []
    /// The latest states the signed commits read since the last write name, by item: kept with
    /// the next write (``AgentStore/signedOutcomes(of:items:)`` holds the rest).
    var unsavedOutcomes: [String: SignedOutcome] = [:]
    /// Items whose latest state is held back until a signed commit names it (under Advanced),
    /// with that state as served (opened) and its record's hash: once a commit names it, it is
    /// taken as it is, not asked for again (for a large file, its whole chunk list).
    var awaitingSignature: [String: (state: ItemState, recordHash: [UInt8])] = [:]
    /// Whether states are held back until signed commits name them (a push that commits were
    /// kept then starts a round).
    package var isAwaitingSignatures: Bool { !awaitingSignature.isEmpty }
    /// What this device has read of the container's signed commits (nil: nothing yet, or
    /// not read from the store's checkpoint yet).
    var signedHistory: SignedHistory?
    /// How many times ``signedHistory`` changed (or was forgotten), and at which of those the
    /// store last kept it.
    var signedHistoryChanges = 0, signedHistoryKept = 0
    /// Whether this run looked for the store's checkpoint of ``signedHistory`` yet.
    var signedHistoryLoaded = false
    /// The ended terms this run signed a closing commit for (so that it signs one once, before
    /// its ledger reads the commit back).
    var closingsSigned: Set<Roster.EndedTerm> = []
    /// How many signed commits this device read from the server since it started (for tests
    /// and `ubiquity status`'s curious).
    package internal(set) var signedCommitsRead = 0
    /// How many checkpoints' parts this device read, and how many checkpoints it signed (for tests).
    package internal(set) var checkpointsRead = 0, checkpointsSigned = 0
    /// Whether the server said a checkpoint is due (at the end of the commits last read), and
    /// when this device may try to sign one again (``signCheckpointIfDue()``).
    var (checkpointDue, checkpointNotBefore) = (false, ContinuousClock.now)
    /// Reads the codec of a container from the account's keys (nil: always plain).
    private let codecs: (@Sendable (String) async throws -> ChunkCodec)?
    /// Says the account's keys are to be read again (a record of an epoch this device does not
    /// hold came: the roster moved — a switch to Advanced, a device removed — and no push said so).
    private let keysOutdated: (@Sendable () async -> Void)?
    /// Whether the server said, since the last round, that this device sends what it no longer
    /// takes (`sealedOnly`: the account turned Advanced): its keys are read again first.
    var keysStale = false
    /// The extensions that make a folder a package.
    package let packageExtensions: Set<String>
    /// The last problem, per item (quota, unreachable server, …; fetching under ``fetchErrorKey``),
    /// for `ubiquity status`.
    package internal(set) var errors: [String: String] = [:] {
        didSet { statusVersion &+= 1 }
    }
    /// Where a failed fetch is reported in ``errors``.
    package static let fetchErrorKey = "(changes)"
    /// Whether every item is downloaded at once (the Mac's behaviour) rather than on demand.
    package let greedy: Bool
    /// Items an app asked to download.
    var requested: Set<String> {
        didSet { statusVersion &+= 1 }
    }
    /// Why an item's last download failed.
    var downloadErrors: [String: String] = [:] {
        didSet { statusVersion &+= 1 }
    }
    /// Transfers under way, by item.
    var transfers: [String: Transfer] = [:] {
        didSet { statusVersion &+= 1 }
    }
    /// Ubiquity attributes of items that changed since they were last announced, by path
    /// relative to the container's folder: told to the items' presenters (in the apps'
    /// processes) at the end of the round (``announceAttributeChanges()``).
    var attributeChanges: [String: Set<URLResourceKey>] = [:]
    /// Who waits for an item's download.
    var downloadWaiters: [String: [CheckedContinuation<Void, any Error>]] = [:]
    /// How many chunk lists were kept when unused ones were last forgotten.
    var contentsKept = 0
    /// The rooms of the work: seeing local changes, sending them, bringing the folder in step,
    /// keeping conflict versions (each owns its own state; what they share is this actor's,
    /// and their work runs on it).
    let finder = ChangeFinder()
    let uploader = Uploader()
    let materialiser: Materialiser
    /// Incoming revisions fetched ahead of their commits (ContainerSync+Incoming).
    var prefetches = IncomingPrefetches()
    let reconciler: ConflictReconciler
    /// Counts what an item's status could show changing (transfers, errors, rounds): the
    /// agent compares it to tell watchers (metadata queries) only when something changed.
    package internal(set) var statusVersion = 0 {
        didSet { statusObserver?() }
    }
    /// Told (on this actor) whenever ``statusVersion`` changes: the agent tells watching
    /// queries then, instead of looking every few milliseconds.
    private let statusObserver: (@Sendable () -> Void)?
    /// Whether a round runs, whether another was asked for meanwhile, and who waits for it.
    private var running = false
    private var rerun = false
    private var roundWaiters: [CheckedContinuation<Void, Never>] = []
    /// Whether a round or an eviction is changing the folder (it has the folder's turn), and
    /// who waits for it: coordinated accesses are awaited, so without turns an eviction could
    /// run in the middle of a round, between a change on disk and its record.
    private var folderBusy = false
    private var turnWaiters: [CheckedContinuation<Void, Never>] = []
    /// Where coordinated accesses to the folder run, which may wait for an app's presenters to
    /// save or let go: a thread of their own, so that a slow presenter never holds one of Swift
    /// concurrency's few threads.
    let coordination = WorkThread(name: "ubq-coordinate")
    /// When the last round finished.
    package private(set) var lastSync: Date?
    /// Whether a live push connection tells this container's changes: then a round fetches the
    /// page of changes only when a push told of something newer than the cursor (or pushes may
    /// have been missed); without one, every round fetches.
    var pushesLive = false
    /// The newest container sequence a push told of.
    var heardOf: Int64 = 0
    /// The page of changes after a sequence that a push brought (``notePushedPage(_:since:)``).
    var pushedPage: (since: Int64, page: ChangesResponse)?
    /// How many pages of changes came with pushes instead of being fetched.
    package private(set) var pushedChanges = 0
    /// Whether the next round fetches whatever pushes said: when the container is opened, when
    /// pushes (re)connect, when events may have been lost, after a failed fetch.
    var fetchDue = true
    /// File records (nil: removed) a failed ``persist(upsert:removed:)`` could not write yet.
    private var unsavedFiles: [String: AgentStore.File?] = [:]

    /// Makes the next round fetch the server's changes (this device's view is known stale).
    func fetchAgain() { fetchDue = true }
    /// Items whose current revision is this device's own contents but which the server says are
    /// not uploaded (it lost or found damaged a chunk of them since): sent again this round.
    var unuploadedOwn: Set<String> = []

    struct Transfer {
        var downloading: Bool
        var done: Int64
        var total: Int64
        var percent: Double { total > 0 ? Double(done) * 100 / Double(total) : 0 }
    }

    /// Resumes (or starts) syncing `container`, whose folder is `root`; `onStatusChange` is
    /// called (and must return at once) whenever an item's status may have changed.
    package init(container: String, root: URL, client: SyncClient, store: AgentStore, device: String, greedy: Bool = false,
                packageExtensions: Set<String> = LocalScanner.standardPackageExtensions,
                logger: Logger = Logger(label: "ubiquity.agent"), codecs: (@Sendable (String) async throws -> ChunkCodec)? = nil,
                keysOutdated: (@Sendable () async -> Void)? = nil, onStatusChange: (@Sendable () -> Void)? = nil,
                share: ShareScope? = nil, border: SyncBorder = SyncBorder(), account: String? = nil, streamsUploads: Bool = true) throws {
        prefetches.streams = streamsUploads
        self.container = container
        self.account = account
        self.share = share
        storeKey = share.map { "\(container)#\($0.id)" } ?? container
        self.border = share.map { SyncBorder(only: ContainerLayout.documentsFolder + "/" + $0.name) } ?? border
        self.codecs = codecs
        self.keysOutdated = keysOutdated
        statusObserver = onStatusChange
        self.packageExtensions = packageExtensions
        self.greedy = greedy
        self.root = root
        documents = root.appendingPathComponent(ContainerLayout.documentsFolder)
        self.client = client
        self.store = store
        self.logger = logger
        var interner = StringInterner() // ids, revisions, tokens and paths held once, not once a table
        // A new state's change ids carry an incarnation of their own: the server answers a
        // change id it has seen with that change's first answer, and a state begun again (a
        // share accepted again after its records went, a store rebuilt) counts from 1 again
        // (found by `ubiquity-chaos --share`: an edit answered as an old one, then lost).
        state = try store.state(of: storeKey, interning: &interner).map(DeviceSyncState.init(restoring:))
            ?? DeviceSyncState(device: "\(device).\(RandomIdentifier.make())")
        files = LocalFiles(try store.files(of: storeKey, interning: &interner))
        requested = try store.downloadRequests(of: storeKey)
        reconciler = ConflictReconciler(copies: try store.conflictCopies(of: storeKey))
        try FileManager.default.createDirectory(at: documents, withIntermediateDirectories: true)
        materialiser = Materialiser(placeholders: Placeholders(Materialiser.placeholdersOnDisk(in: root, packageExtensions: packageExtensions, border: self.border)))
        materialiser.shown.update(Set(state.persisted.remote.keys).union(state.persisted.local.keys), from: state, onDisk: files.path(of:))
        Materialiser.removeStagedDownloads(in: root, border: self.border, logger: logger)
        Materialiser.settleWritesInPlace(in: root, storeKey: storeKey, files: files, logger: logger)
    }

    /// A scanner of the container's folder (`Documents` walked through, not an item), within
    /// this engine's border.
    var scanner: LocalScanner {
        var scanner = LocalScanner(root: root, packageExtensions: packageExtensions, transparent: [ContainerLayout.documentsFolder])
        scanner.border = border
        return scanner
    }

    /// The conflict versions of the item at `path` (relative to the container's folder) as the server last
    /// said (revision and content token).
    package func conflicts(of path: String) -> [ConflictSnapshot] {
        guard let item = item(at: path) else { return [] }
        return state.conflicts(item)
    }

    /// The item shown at `path` (relative to the container's folder), downloaded or not.
    func item(at path: String) -> String? {
        if let file = files[path] { return file.item }
        if let placeholder = materialiser.placeholders[LocalContents.placeholderPath(for: path)], !placeholder.item.isEmpty { return placeholder.item }
        return materialiser.shown.item(at: path)
    }

    /// The container's sequence up to which every change has been fetched.
    package var cursor: Int64 { state.persisted.cursor }

    /// Whether everything local is on the server and everything known from it is here.
    package var isIdle: Bool { state.isIdle && errors.isEmpty && downloadErrors.isEmpty && !running && !finder.owesALook && reconciler.owed.isEmpty }

    /// One round: local changes go up (the chunks the server lacks, then their commits),
    /// changes from the server come down. Returns after the server answered everything sent.
    /// Called while a round runs, it asks for another and returns when that one is done.
    package func syncOnce() async throws {
        if running {
            rerun = true
            await withCheckedContinuation { roundWaiters.append($0) }
            return
        }
        running = true
        await takeFolderTurn()
        defer {
            endFolderTurn()
            running = false
            for waiter in roundWaiters { waiter.resume() }
            roundWaiters = []
        }
        var failure: (any Error)?
        repeat {
            rerun = false
            do {
                try await round()
                failure = nil
            } catch {
                state.roundFailed() // what it had sent goes again next round
                failure = error // a change during the round asked for another: it may succeed
            }
        } while rerun
        if let failure { throw failure }
    }

    /// Waits until nothing else changes the folder, then has it to itself until
    /// ``endFolderTurn()``.
    func takeFolderTurn() async {
        while folderBusy { await withCheckedContinuation { turnWaiters.append($0) } }
        folderBusy = true
    }

    /// Lets the next one waiting change the folder.
    func endFolderTurn() {
        folderBusy = false
        for waiter in turnWaiters { waiter.resume() }
        turnWaiters = []
    }

    /// Runs `work` — coordinated accesses to the folder, which wait for presenters and locks —
    /// on a thread of its own, and returns what it returned (or throws what it threw). The
    /// caller has the folder's turn: nothing else in this agent changes the folder meanwhile.
    func coordinated<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await coordination.run(work)
    }

    /// Brings ``codec`` in line with the account's keys (read again at most once a minute, and
    /// when they change).
    /// - Throws: ``ContainerSyncError`` when the account has keys this device does not hold
    ///   (nothing is sent or taken until it does).
    func refreshCodec() async throws {
        guard let codecs else { return }
        var now = try await codecs(container)
        if !ownedShareCodecs.isEmpty { now = now.alsoSealing(ownedShareCodecs.keys.sorted().compactMap { ownedShareCodecs[$0] }) }
        if now.sealed != codec.sealed {
            logger.info(now.sealed ? "this container's chunks go sealed from now on" : "this container's chunks go in plaintext",
                        metadata: ["container": "\(container)"])
        }
        codec = now
    }

    private func round() async throws {
        defer {
            materialiser.forgetInlined()
            statusVersion &+= 1
        }
        if keysStale {
            keysStale = false
            await keysOutdated?()
        }
        do {
            try await refreshCodec()
        } catch {
            errors[Self.fetchErrorKey] = "\(error)"
            throw error
        }
        let clock = ContinuousClock(), start = clock.now
        var marks: [(String, ContinuousClock.Instant)] = []
        defer {
            // Where a round's time went, for whoever runs the agent at debug level.
            if logger.logLevel <= .debug {
                var metadata: Logger.Metadata = ["container": "\(container)"], last = start
                for (phase, at) in marks {
                    metadata[phase + "Ms"] = "\((at - last).inMilliseconds)"
                    last = at
                }
                logger.debug("round", metadata: metadata)
            }
        }
        await sealAgainInShares()
        try await finder.scanLocalChanges(in: self)
        marks.append(("scan", clock.now))
        var sending = state.requests(fetch: false).compactMap { if case .commit(let change) = $0 { change } else { nil } }
        if readOnly, !sending.isEmpty {
            try await keepRefused(sending) // (nothing of it may go: kept here, undone)
            sending = []
        }
        // Written ahead: a change goes on the wire only once it is recorded as sent. An agent
        // killed after the server made the commit, before the round's end, otherwise came back
        // with the change still queued — and a newer edit replaced it on a stale base, which the
        // server took for a conflict with the device's own commit.
        if !sending.isEmpty { try await persist() }
        let committed = try await uploader.send(sending, in: self)
        // A page listing only this round's own commits is not fetched (the answers said it all,
        // and the container is known up to them: an earlier fetch's failure no longer stands).
        if !committed.isEmpty, state.skipOwnChanges(committed) {
            errors[Self.fetchErrorKey] = nil
        } else if !pushesLive || fetchDue || heardOf > state.persisted.cursor, let fetch = state.fetchRequest() {
            defer { statusVersion &+= 1 }
            fetchDue = false
            do {
                try await perform(fetch)
            } catch let error as SyncClientError {
                fetchDue = true
                failed(fetch, error)
            }
        }
        if !unuploadedOwn.isEmpty {
            let items = unuploadedOwn
            unuploadedOwn = []
            do {
                try await uploader.uploadAgain(items, in: self)
            } catch let error as SyncClientError {
                unuploadedOwn.formUnion(items) // the next round tries again
                logger.warning("cannot upload again what the server lacks", metadata: ["container": "\(container)", "error": "\(error)"])
            }
        }
        marks.append(("up", clock.now))
        let looked = try await materialiser.materialize(in: self)
        marks.append(("down", clock.now))
        try await reconciler.reconcileConflicts(in: self)
        await closeEndedTerms()
        await signCheckpointIfDue()
        forgetUnusedContents()
        try await persist()
        await announceAttributeChanges()
        marks.append(("settle", clock.now))
        lastSync = Date()
        answerDownloadWaiters()
        if looked + committed.count >= FreedMemory.threshold {
            store.releaseMemory()
            FreedMemory.release()
        }
    }

    /// Writes what changed of the sync state, with the files that changed or went, in one
    /// transaction (what a failed write had is written by the next).
    func persist(upsert: [AgentStore.File] = [], removed: [String] = [], signed: (commit: SignedCommit, content: CommitPayload)? = nil) async throws {
        let (touched, changed) = state.takeTouched()
        // A signed commit a failed write had goes with this one, as its file records do.
        if let signed { unsavedSigned.append(signed) }
        let commits = unsavedSigned
        // The file records a failed write had go with this one (found by `ubiquity-chaos`: a
        // full disk failed a scan's write, the records were dropped while the sync state was
        // written later, and after a restart a moved file's item was taken for deleted).
        for path in removed { unsavedFiles[path] = .some(nil) }
        for file in upsert { unsavedFiles[file.path] = file }
        let files = unsavedFiles
        let (checkpoint, generation) = (ledgerCheckpointToKeep(), signedHistoryChanges)
        let outcomes = unsavedOutcomes
        do {
            try await store.record(storeKey, state: state.persisted, touched: touched, changed: changed,
                                   upsert: files.values.compactMap { $0 }, removed: files.filter { $0.value == nil }.map(\.key),
                                   signed: commits.map { (Int64(clamping: $0.commit.sequence), SignedCommitUpload(commit: $0.commit.encoded, content: $0.content.encoded)) },
                                   checkpoint: checkpoint, outcomes: Array(outcomes.values))
            if checkpoint != nil { signedHistoryKept = max(signedHistoryKept, generation) }
            for (item, outcome) in outcomes where unsavedOutcomes[item] == outcome { unsavedOutcomes[item] = nil }
            unsavedFiles = [:]
            unsavedSigned = []
            if let last = commits.last { signedHead = .some(last.commit) }
        } catch {
            state.markTouched(touched, changed: changed)
            throw error
        }
    }

    // MARK: Requests

    func perform(_ request: SyncRequest) async throws {
        switch request {
        case .commit(let change):
            try await uploader.send([change], in: self)
        case .fetch(let since):
            errors[Self.fetchErrorKey] = nil
            var cursor = since
            while true {
                var page: ChangesResponse
                var pushed = false
                if let kept = pushedPage, kept.since == cursor {
                    page = kept.page // brought by the push that told of it
                    pushedChanges += 1
                    pushed = true
                } else {
                    page = try await client.changes(container: container, since: cursor, brief: true, inline: inlineLimit)
                }
                pushedPage = nil
                // (Items asked for by id are added after it; through a share, the page may have
                // passed over more than it lists: `next`.)
                let pageEnd = page.next ?? page.items.last?.sequence
                do {
                    // (The sealed records' hashes, which signed commits name, before they are opened.)
                    let recordHashes = Self.recordHashes(of: page.items)
                    page.items = try opened(page.items)
                    page.items = try await checkSigned(page.items, recordHashes: recordHashes, since: cursor,
                                                       upTo: page.more ? (pageEnd ?? cursor) : page.sequence, final: !page.more, readUpTo: page.signedCommits)
                } catch let error as SyncClientError {
                    throw error // (reading the commits failed: the round fails as a fetch does)
                } catch {
                    // A record the server changed, moved or swapped: nothing of the page is
                    // taken (the cursor stays), and the status says why.
                    logger.error("a page of changes was refused", metadata: ["container": "\(container)", "error": "\(error)"])
                    errors[Self.fetchErrorKey] = "\(error)"
                    if let refused = error as? ItemRecordError, refused.unheldEpoch != nil { await keysOutdated?() }
                    throw error
                }
                materialiser.keepInlined(page.items, in: self)
                materialiser.keepPushedDeltas(page.items)
                for item in page.items where !item.uploaded && !item.deleted && item.kind != .directory && files.file(of: item.id)?.revision == item.revision {
                    unuploadedOwn.insert(item.id)
                }
                state.fetched(page.items.map(Self.snapshot), upTo: page.more ? (pageEnd ?? cursor) : page.sequence)
                if page.more, let last = pageEnd {
                    cursor = last
                } else if pushed, heardOf > page.sequence {
                    cursor = page.sequence // pushes told of more than the pushed pages brought: fetched now
                } else {
                    break
                }
            }
        case .resolve(let item, let keep, let remove):
            let replaced = state.persisted.remote[item]?.revision
            let raw = try await client.resolve(container: container, item: item, keep: keep, remove: remove)
            state.learn(Self.snapshot(try opened(raw)))
            await signResolution(raw, replaced: replaced)
        }
        try await persist()
    }

    // MARK: What a watcher saw

    /// A watcher saw the file or package at `from` renamed to `to` (paths relative to the
    /// container's folder): the next round keeps its item for what is at `to`.
    package func noteMove(from: String, to: String) {
        finder.noteMove(from: from, to: to)
    }

    /// A watcher saw something change at `path` (relative to the container's folder): the next
    /// round looks at the folder it is in (for something in a package, at the package's
    /// folder), and only there. Changes inside what stays local (`.nosync` folders, version
    /// stores) are not looked at.
    package func noteChange(at path: String) {
        finder.noteChange(at: path, in: self)
    }

    /// Events were lost (inotify's queue overflowed) or a slow timer asks for it: the next round
    /// looks at everything, here and on the server.
    package func noteEverythingChanged() {
        finder.noteEverythingChanged()
        fetchDue = true
    }
}
