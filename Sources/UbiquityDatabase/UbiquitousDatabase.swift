import Foundation
import GRDB
import Logging
import Synchronization
import UbiquityClient
import UbiquityFiles

/// A database in iCloud, for a shoebox app: a local SQLite store that the app reads and writes
/// through GRDB as usual, and whose committed transactions sync to the account's other devices
/// as change logs in the ubiquity container.
///
/// ```swift
/// var migrator = DatabaseMigrator()
/// migrator.registerMigration("v1") { db in
///     try db.create(table: "recipe") { t in
///         t.primaryKey("id", .text)          // a UUID: the same row on every device
///         t.column("title", .text).notNull()
///     }
/// }
/// let database = try UbiquitousDatabase(container: containerURL, name: "Recipes", migrator: migrator)
/// try database.writer.write { db in
///     try db.execute(sql: "INSERT INTO recipe VALUES (?, ?)", arguments: [UUID().uuidString, "Bread"])
/// }
/// NotificationCenter.default.addObserver(forName: .NSPersistentStoreDidImportUbiquitousContentChanges,
///                                        object: database, queue: .main) { note in … }
/// ```
///
/// Layout in the container (`name` is the database's name):
/// - `<name>.nosync/store.sqlite` — the local store, a cache of what the logs say (a `.nosync`
///   folder stays on this device). Delete it and it is rebuilt from the logs.
/// - `Databases/<name>/logs/<device>/000000000001.ubqlog` … — each device's change log:
///   immutable segments only that device writes (``LogSegment``), synced like any file.
///
/// Each store is a device of its own in the logs (``deviceIdentifier``, made when the store is
/// created). Synchronizing runs on the database's own queue: after each app transaction that
/// changed synced rows, when another device's segment arrives in the container, and on
/// ``synchronize()``.
public final class UbiquitousDatabase: Sendable {
    /// The database's name.
    public let name: String
    /// The local store's file.
    public let storeURL: URL
    /// The folder of the change logs of every device.
    public let logsURL: URL
    /// The store: read and write it as any GRDB database. Transactions that change synced
    /// tables are captured and synced; schema changes go through the migrator given at
    /// opening.
    public let writer: DatabasePool

    /// The user-info key of the whole ``ImportedChanges`` in an import notification.
    public static let importedChangesKey = "UbiquityImportedChanges"

    private let engine: DatabaseSyncEngine
    private let queue: DispatchQueue
    private let logger: Logger
    private let state = Mutex(State())
    private let watcher: Mutex<DirectoryWatcher?> = Mutex(nil)
    private let commitHandlers = Mutex<[@Sendable () -> Void]>([])
    private let imports = Broadcast<ImportedChanges>()
    private let progress = Broadcast<ImportProgress>()
    private let identity = Mutex<(center: NotificationCenter, watcher: UbiquityIdentity?, observer: ObserverToken?)>((NotificationCenter(), nil, nil))

    /// A notification observer's token (NotificationCenter's tokens may be removed from any thread).
    private struct ObserverToken: @unchecked Sendable {
        let token: any NSObjectProtocol
        init(_ token: any NSObjectProtocol) { self.token = token }
    }

    /// Calls `handler` after each transaction of this device that changed synced rows commits
    /// (on the writer's thread: hand the work elsewhere). A managed document marks itself
    /// edited so.
    package func onLocalCommit(_ handler: @escaping @Sendable () -> Void) {
        commitHandlers.withLock { $0.append(handler) }
    }

    private struct State {
        var scheduled = false
        var closed = false
        /// A transition (the account changed, the content was deleted) is closing the store:
        /// the first one found announces it, any other found meanwhile is the same one.
        var transitioning = false
        /// How long until a synchronization that left something waiting (a segment not yet
        /// downloaded, an error) is tried again; doubles up to 30 s while it keeps waiting.
        var retryDelay: Double = 0.25
        var retryScheduled = false
        var lastReport: ImportReport?
        var lastError: String?
    }

    /// The engine (tests take its steps one by one).
    var engineForTests: DatabaseSyncEngine { engine }

    /// This store's id in the change logs.
    public var deviceIdentifier: String { engine.device }

    /// The synced tables and the schema's hash.
    public var schema: SyncedSchema { engine.schema }

    /// Opens (or creates, or rebuilds from the logs) the database `name` in `container`.
    /// - Parameters:
    ///   - container: The ubiquity container's URL (`FileManager.url(forUbiquityContainerIdentifier:)`).
    ///   - name: The database's name: one path component, not hidden.
    ///   - migrator: The app's schema, migrated before anything syncs.
    ///   - configuration: GRDB's configuration of the store.
    ///   - localTables: Tables that stay on this device.
    ///   - automaticallySynchronizes: Whether it synchronizes by itself (after commits, when
    ///     logs arrive); otherwise only on ``synchronize()``.
    ///   - willCommitImport: Runs inside each import transaction, after the imported changes
    ///     and before the commit: repair data there (what it writes syncs as this device's
    ///     change). An error it throws rolls the import back (it is tried again later).
    ///   - containers: The containers' client, whose sync agent is asked for segments another
    ///     device wrote that are listed here but not downloaded (`.NAME.icloud`).
    ///   - willRemoveDuplicate: Runs when an import makes two rows collide on a unique index,
    ///     before the one inserted later is removed (the same one on every device): move what
    ///     refers to it over to the row kept (those writes sync).
    /// - Throws: ``SyncedSchemaError`` for a table that cannot sync; GRDB's and file errors.
    public convenience init(container: URL, name: String, migrator: DatabaseMigrator, configuration: Configuration = Configuration(),
                            localTables: Set<String> = [], automaticallySynchronizes: Bool = true, containers: UbiquityContainers = .shared,
                            willCommitImport: (@Sendable (Database, ImportedChanges) throws -> Void)? = nil,
                            willRemoveDuplicate: (@Sendable (Database, DuplicateRows) throws -> Void)? = nil) throws {
        guard Self.isValidName(name) else {
            throw SyncedSchemaError(table: name, message: "a database's name is one path component, not hidden")
        }
        try self.init(storeURL: container.appendingPathComponent("\(name).nosync", isDirectory: true).appendingPathComponent("store.sqlite"),
                      logsURL: container.appendingPathComponent("Databases", isDirectory: true).appendingPathComponent(name, isDirectory: true).appendingPathComponent("logs", isDirectory: true),
                      name: name, migrator: migrator, configuration: configuration, localTables: localTables,
                      automaticallySynchronizes: automaticallySynchronizes, containers: containers,
                      willCommitImport: willCommitImport, willRemoveDuplicate: willRemoveDuplicate)
    }

    /// Opens (or creates, or rebuilds from the logs) a synced store at `storeURL` whose change
    /// logs are in `logsURL` (what ``ManagedDocument`` uses: the store in its package, the logs
    /// where its options say). The store's folder must not sync (a `.nosync` folder in a
    /// container); the logs' folder must (outside `Documents`, by the reference's advice).
    /// - Parameters: as ``init(container:name:migrator:configuration:localTables:automaticallySynchronizes:containers:willCommitImport:willRemoveDuplicate:)``,
    ///   with `name` only naming the database in logs and errors.
    public init(storeURL: URL, logsURL: URL, name: String, migrator: DatabaseMigrator, configuration: Configuration = Configuration(),
                localTables: Set<String> = [], automaticallySynchronizes: Bool = true, containers: UbiquityContainers = .shared,
                willCommitImport: (@Sendable (Database, ImportedChanges) throws -> Void)? = nil,
                willRemoveDuplicate: (@Sendable (Database, DuplicateRows) throws -> Void)? = nil) throws {
        self.name = name
        self.storeURL = storeURL
        self.logsURL = logsURL
        try FileManager.default.createDirectory(at: storeURL.deletingLastPathComponent(), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: logsURL, withIntermediateDirectories: true)
        let logger = Logger(label: "ubiquity.database.\(name)")
        self.logger = logger
        writer = try DatabasePool(path: storeURL.path, configuration: configuration)
        try migrator.migrate(writer)
        queue = DispatchQueue(label: "ubiquity.database.\(name)")
        let schedule = ScheduleBox()
        engine = try DatabaseSyncEngine(writer: writer, logs: LogFolder(url: logsURL), localTables: localTables, logger: logger,
                                        importHook: willCommitImport, duplicateHook: willRemoveDuplicate,
                                        requestDownload: { try containers.startDownloading(at: $0) }, onCommit: { schedule.fire() })
        schedule.set { [weak self, automaticallySynchronizes] in
            guard let self else { return }
            for handler in commitHandlers.withLock({ $0 }) { handler() }
            if automaticallySynchronizes { scheduleSynchronization() }
        }
        guard automaticallySynchronizes else { return }
        let own = logsURL.appendingPathComponent(engine.device).path + "/"
        do {
            let watching = try DirectoryWatcher(root: logsURL, logger: logger) { [weak self] event in
                if case .changed(let path) = event, path.hasPrefix(own) { return } // this device's own segments
                self?.scheduleSynchronization()
            }
            watcher.withLock { $0 = watching }
        } catch {
            logger.warning("cannot watch the logs folder; synchronizing after commits and on request only",
                           metadata: ["folder": "\(logsURL.path)", "error": "\(error)"])
        }
        followAccount(containers)
        scheduleSynchronization()
    }

    /// Publishes this device's captured transactions and imports the other devices' segments
    /// that arrived, now. Blocks until done; do not call it from inside a database access.
    /// The imports' `.NSPersistentStoreDidImportUbiquitousContentChanges` are posted on the
    /// caller's thread before it returns, once the database's own queue is free — so that a
    /// call from the main queue with an observer on `queue: .main` does not wait on itself.
    /// - Returns: What the import did.
    @discardableResult
    public func synchronize() throws -> ImportReport {
        let imported = UncheckedBox<[ImportedChanges]>([])
        defer { for changes in imported.value { post(changes) } }
        return try queue.sync { try synchronizeOnQueue { imported.value.append($0) } }
    }

    /// ``synchronize()`` without blocking the caller.
    @discardableResult
    public func synchronize() async throws -> ImportReport {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try self.synchronizeOnQueue() }) }
        }
    }

    /// Compares the store with what the change logs say (every device's segments applied here,
    /// and this device's unpublished transactions, merged by the merge rules) and returns the
    /// rows on which they disagree: none for a healthy store. Reads every segment: a check, not
    /// something to run on every launch.
    public func verify() throws -> [StoreDifference] {
        try queue.sync { try engine.verify() }
    }

    /// Each import's changes, after its transaction committed (the same as the
    /// notifications), until the database closes.
    public func importedChanges() -> AsyncStream<ImportedChanges> {
        imports.stream(bufferingNewest: 1_000)
    }

    /// The progress of imports, segment by segment (a new device building its store from a long
    /// history, a device back from a long time offline), until the database closes.
    public func importProgress() -> AsyncStream<ImportProgress> {
        progress.stream(bufferingNewest: 1)
    }

    /// What the last synchronization's import did.
    public var lastImport: ImportReport? { state.withLock(\.lastReport) }

    /// The last error of a synchronization this database ran by itself (nil once one succeeds).
    public var lastError: String? { state.withLock(\.lastError) }

    /// Stops synchronizing and closes the store (what was captured stays in it, and is
    /// published the next time it opens).
    public func close() throws {
        let wasClosed = state.withLock { state in
            defer { state.closed = true }
            return state.closed
        }
        guard !wasClosed else { return }
        imports.finish()
        progress.finish()
        watcher.withLock { $0?.stop(); $0 = nil }
        identity.withLock { identity in
            if let observer = identity.observer { identity.center.removeObserver(observer.token) }
            identity.observer = nil
            identity.watcher = nil
        }
        queue.sync {}
        try writer.writeWithoutTransaction { db in try engine.capture.uninstall(db) }
        try writer.close()
    }

    /// Whether this device has transactions not yet published (captured, or waiting in the
    /// outbox).
    package func hasUnpublishedChanges() throws -> Bool {
        try writer.read { db in
            try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM ubq_captured WHERE kind >= 0) OR EXISTS (SELECT 1 FROM ubq_outbox)") ?? false
        }
    }

    /// Whether the database is closed (by ``close()``, or because the account changed or its
    /// content was deleted: see ``NSNotification/Name/NSPersistentStoreCoordinatorStoresWillChange``).
    public var isClosed: Bool { state.withLock(\.closed) }

    // MARK: Account changes

    /// Follows the signed-in account: when it changes (signed out, or another account) the
    /// store — the old account's — closes, announced by `.NSPersistentStoreCoordinatorStoresWillChange`
    /// and `…DidChange`; what it had not yet published stays in it (and its segments in the old
    /// account's container), for when that account signs in again.
    private func followAccount(_ containers: UbiquityContainers) {
        let paths = containers.paths
        let opened = UbiquityCredentials.signedIn(in: paths)?.identityToken
        let center = NotificationCenter()
        let watcher = UbiquityIdentity(paths: paths, notificationCenter: center)
        watcher.startWatching()
        let observer = center.addObserver(forName: .NSUbiquityIdentityDidChange, object: nil, queue: nil) { [weak self] _ in
            let now = UbiquityCredentials.signedIn(in: paths)?.identityToken
            guard now != opened else { return }
            self?.closeForTransition(now == nil ? .accountRemoved : .accountAdded)
        }
        identity.withLock { $0 = (center, watcher, ObserverToken(observer)) }
    }

    /// Announces `transition`, closes the store, announces it done.
    private func closeForTransition(_ transition: NSPersistentStoreUbiquitousTransitionType) {
        // Claimed at once: two synchronizations that both find the content gone (or an account
        // change heard twice) announce one transition, not two.
        guard state.withLock({ state in
            guard !state.closed, !state.transitioning else { return false }
            state.transitioning = true
            return true
        }) else { return }
        let userInfo = [NSPersistentStoreUbiquitousTransitionTypeKey: NSNumber(value: transition.rawValue)]
        NotificationCenter.default.post(name: .NSPersistentStoreCoordinatorStoresWillChange, object: self, userInfo: userInfo)
        do { try close() } catch { logger.error("the store did not close cleanly", metadata: ["error": "\(error)"]) }
        if transition == .contentRemoved {
            // "Delete All": the store goes too (its data is the deleted content's).
            do { try FileManager.default.removeItem(at: storeURL.deletingLastPathComponent()) } catch {
                logger.error("cannot remove the store of deleted content", metadata: ["store": "\(storeURL.path)", "error": "\(error)"])
            }
        }
        logger.notice("the store closed", metadata: ["transition": "\(transition)"])
        NotificationCenter.default.post(name: .NSPersistentStoreCoordinatorStoresDidChange, object: self, userInfo: userInfo)
    }

    // MARK: Local data

    /// Merges the rows of a store that did not sync (an app's store from while it was signed
    /// out) into this database, as this device's changes: each synced table's rows that are not
    /// here yet (by primary key) are added; rows here are kept. The app chooses: merge (this),
    /// keep the local store as it is, or delete it.
    /// - Parameter url: The other store's file.
    /// - Returns: How many rows were added.
    @discardableResult
    public func mergeLocalStore(at url: URL) throws -> Int {
        try writer.writeWithoutTransaction { db in
            try db.execute(sql: "ATTACH DATABASE ? AS ubq_local", arguments: [url.path])
            defer { try? db.execute(sql: "DETACH DATABASE ubq_local") } // after the transaction: cannot fail while attached
            var added = 0
            try db.inTransaction {
                for table in schema.tables {
                    let theirs = Set(try Row.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?, 'ubq_local')", arguments: [table.name]).map { $0["name"] as String })
                    guard !theirs.isEmpty, table.primaryKey.allSatisfy(theirs.contains) else { continue }
                    let columns = table.columns.filter(theirs.contains).map(\.quotedDatabaseIdentifier).joined(separator: ", ")
                    try db.execute(sql: "INSERT OR IGNORE INTO main.\(table.name.quotedDatabaseIdentifier)(\(columns)) SELECT \(columns) FROM ubq_local.\(table.name.quotedDatabaseIdentifier)")
                    added += db.changesCount
                }
                return .commit
            }
            return added
        }
    }

    /// Whether `name` can name a database (one path component, not hidden).
    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && !name.hasPrefix(".") && !name.contains("/") && !name.contains("\0") && name.utf8.count <= 200
    }

    private func scheduleSynchronization() {
        let schedule = state.withLock { state -> Bool in
            guard !state.closed, !state.scheduled else { return false }
            state.scheduled = true
            return true
        }
        guard schedule else { return }
        queue.async { [weak self] in
            guard let self else { return }
            let closed = state.withLock { state -> Bool in
                state.scheduled = false
                return state.closed
            }
            guard !closed else { return }
            var waiting = false
            do {
                let report = try synchronizeOnQueue()
                waiting = !report.waiting.isEmpty || !report.problems.isEmpty
                state.withLock { $0.lastError = nil }
            } catch {
                logger.error("synchronizing failed", metadata: ["error": "\(error)"])
                state.withLock { $0.lastError = "\(error)" }
                waiting = true
            }
            retry(waiting)
        }
    }

    /// Tries again later while something waits (a download asked for may have been refused
    /// before the agent knew the segment; an error may pass), backing off to every 30 s.
    private func retry(_ waiting: Bool) {
        let delay = state.withLock { state -> Double? in
            guard waiting, !state.closed else {
                state.retryDelay = 0.25
                return nil
            }
            guard !state.retryScheduled else { return nil }
            state.retryScheduled = true
            defer { state.retryDelay = min(state.retryDelay * 2, 30) }
            return state.retryDelay
        }
        guard let delay else { return }
        queue.asyncAfter(deadline: .now() + delay) { [weak self] in
            self?.state.withLock { $0.retryScheduled = false }
            self?.scheduleSynchronization()
        }
    }

    /// How many of its own segments a database publishes before it compacts by itself.
    static let compactionThreshold: Int64 = 256
    /// How long a device that is not heard of keeps holding logs back from compaction.
    public static let defaultRegistration: TimeInterval = 30 * 24 * 3600
    /// How long after its last segment a device that only imports tells the others how far it
    /// has applied their logs (with an empty segment).
    static let heartbeatInterval: TimeInterval = 600

    /// Compacts the logs now: writes a baseline of the store (what a new device starts from)
    /// and deletes this device's segments that a baseline holds and every registered device has
    /// applied. A database does it by itself every ``compactionThreshold`` segments.
    /// - Parameter registration: How long a device not heard of keeps holding segments back;
    ///   back after longer, it catches up from a baseline, keeping what it did meanwhile.
    @discardableResult
    public func compact(registration: TimeInterval = UbiquitousDatabase.defaultRegistration) throws -> CompactionReport {
        try queue.sync { try engine.compact(registration: registration) }
    }

    /// Synchronizes on the database's queue; each import's changes go to `deliver` (by default,
    /// posted from the queue at once).
    private func synchronizeOnQueue(deliver: ((ImportedChanges) -> Void)? = nil) throws -> ImportReport {
        // The logs folder gone while open: the content was deleted (Manage Storage's "Delete
        // All", on any device): so goes the store.
        guard FileManager.default.fileExists(atPath: logsURL.path) else {
            DispatchQueue.global().async { self.closeForTransition(.contentRemoved) }
            return ImportReport()
        }
        try writer.write { db in _ = try engine.flush(db) }
        try engine.publish()
        let report = try engine.importLogs(onImported: { changes in deliver.map { $0(changes) } ?? self.post(changes) }, onProgress: { progress in
            self.progress.yield(progress)
        })
        // What the import hook wrote, and what was captured meanwhile; and, for a device that
        // only imports, now and then an empty segment saying how far it has come.
        let lastPublished = try writer.read { db in try Double.fetchOne(db, sql: "SELECT value FROM ubq_state WHERE key = 'publishedAt'") } ?? 0
        let heartbeat = report.segments > 0 && Date().timeIntervalSince1970 - lastPublished / 1000 > Self.heartbeatInterval
        try engine.publish(heartbeat: heartbeat)
        if try engine.segmentsSinceBaseline() >= Self.compactionThreshold {
            let compaction = try engine.compact(registration: Self.defaultRegistration)
            logger.info("compacted", metadata: ["baseline": "\(compaction.baseline.map(String.init) ?? "-")", "deleted": "\(compaction.deletedSegments)"])
        }
        state.withLock { $0.lastReport = report }
        return report
    }

    private func post(_ changes: ImportedChanges) {
        let userInfo: [AnyHashable: Any] = [
            NSInsertedObjectsKey: changes.inserted,
            NSUpdatedObjectsKey: Set(changes.updated.keys),
            NSDeletedObjectsKey: changes.deleted,
            Self.importedChangesKey: changes,
        ]
        MainQueue.post(Notification(name: .NSPersistentStoreDidImportUbiquitousContentChanges, object: self, userInfo: userInfo))
        imports.yield(changes)
    }
}

/// Lets the engine's commit callback, made before the database exists, reach it once it does.
private final class ScheduleBox: Sendable {
    private let action = Mutex<(@Sendable () -> Void)?>(nil)
    func set(_ action: @escaping @Sendable () -> Void) { self.action.withLock { $0 = action } }
    func fire() { action.withLock { $0 }?() }
}

/// Hands each value to every stream made from it, until finished (then new streams end at once).
final class Broadcast<Element: Sendable>: Sendable {
    private let continuations = Mutex<(open: [UUID: AsyncStream<Element>.Continuation], finished: Bool)>(([:], false))

    /// A new stream of the values from now on, keeping the newest `bufferingNewest` unread.
    func stream(bufferingNewest limit: Int) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: .bufferingNewest(limit))
        let id = UUID()
        let finished = continuations.withLock { state -> Bool in
            if !state.finished { state.open[id] = continuation }
            return state.finished
        }
        if finished { continuation.finish() }
        continuation.onTermination = { [weak self] _ in self?.continuations.withLock { _ = $0.open.removeValue(forKey: id) } }
        return stream
    }

    func yield(_ value: Element) {
        for continuation in continuations.withLock({ Array($0.open.values) }) { continuation.yield(value) }
    }

    func finish() {
        let open = continuations.withLock { state in
            defer { state = ([:], true) }
            return Array(state.open.values)
        }
        for continuation in open { continuation.finish() }
    }
}
