import CUbiquitySystem
import Foundation
import UbiquityKeys
import NIOCore
import ServiceLifecycle
import UbiquityProtocol
import UbiquitySync
import UbiquityObjectStore
import Hummingbird
import HummingbirdBcrypt
import HummingbirdCore
import HummingbirdTLS
import HummingbirdWebSocket
import NIOSSL
import Logging

/// The sync server: iCloud's role, self-hosted. `ubiquity serve` runs it.
///
/// By default everything lives in one data directory: `ubiquity.sqlite` (accounts, devices,
/// containers, items, revisions) and `chunks/` (file contents, content-addressed per account).
/// With ``Configuration/database`` set to a PostgreSQL URL, everything (chunk contents too) is
/// in PostgreSQL instead, and any number of instances serve the same accounts: a change
/// committed through one is pushed to devices connected to any other.
package struct SyncServer: Sendable {
    /// How the server is set up.
    package struct Configuration: Sendable {
        /// The data directory (created if missing; unused with ``database``).
        package var dataDirectory: String
        /// A PostgreSQL URL (see ``PostgresLocation``): keep everything there instead of in
        /// ``dataDirectory``. Default nil (embedded SQLite).
        package var database: String?
        /// The address to listen on. Default 127.0.0.1.
        package var host: String
        /// The port to listen on (0: any free port). Default 8443.
        package var port: Int
        /// bcrypt's cost for passwords (4…31). Default 12.
        package var bcryptCost: UInt8
        /// How long replaced revisions and deleted items stay recoverable. Default 30 days.
        package var retention: TimeInterval = SyncServer.defaultRetention
        /// A PEM certificate chain and private key: serve HTTPS (and WSS) instead of HTTP.
        package var tls: (certificate: String, privateKey: String)?
        /// The oldest TLS version spoken: 1.2 (default) or 1.3. 1.0 and 1.1 never are.
        package var tlsMinimum = MinimumTLSVersion.v1_2
        /// How many sign-in attempts an account name and an address get.
        package var signInPolicy = SignInPolicy()
        /// How many connections at once, and how long one may stay idle.
        package var connectionLimits = ConnectionLimits()
        /// How long a request may take to arrive, and how large its head may be.
        package var requestLimits = RequestLimits()
        /// Reverse proxies whose `X-Forwarded-For` is believed (none by default).
        package var trustedProxies = TrustedProxies()
        /// What an account may hold besides its quota (items).
        package var accountLimits = AccountLimits()
        /// How many of one account's requests are handled at once, and how many may wait.
        package var accountShare = AccountShareLimits()
        /// How long a fetch of what is there waits for the next chunk of an upload in progress
        /// (docs/SyncProtocol.md, "Incoming revisions").
        package var landingWait: Duration = .seconds(2)
        /// How many push messages one account's devices connected to this instance get a second
        /// between them, at most (their pace lengthens past it: docs/Benchmarks.md, "Server load").
        /// Instances on one host may divide the default among them.
        package var pushMessagesPerAccountPerSecond = ChangeNotifier.defaultMessagesPerAccountPerSecond
        /// The escrow key's file (Standard Data Protection): made on first start (mode 0600),
        /// never in the database. Default nil: `escrow.key` in ``dataDirectory`` (also with
        /// ``database``: every instance must have the same file, and one with another is refused).
        package var escrowKeyFile: String?

        /// How often revisions stored before their containers sealed are sealed in place with the
        /// escrow's keys (``SealInPlace``; Standard accounts only). Default every 10 minutes,
        /// from the start; nil: only by `ubiquity seal-in-place`.
        package var sealInPlaceInterval: Duration? = .seconds(600)
        /// Whether items sealed with their account's keys may be shared, sealed again by their
        /// owners' devices with each share's keys (docs/Sharing.md, "Keys"). Default true;
        /// false (`--no-sealed-shares`): refused with 409 `sealedShare`.
        package var sealedShares = true
        /// Chunk contents in an S3-compatible object store instead of the database's rows
        /// (`--object-store`; needs ``database``). Default nil.
        package var objectStore: ObjectStoreSettings?

        /// Where the escrow key's file is.
        package var escrowKeyPath: String { escrowKeyFile ?? (dataDirectory as NSString).appendingPathComponent("escrow.key") }

        /// Creates a configuration.
        package init(dataDirectory: String = "./ubiquity-data", host: String = "127.0.0.1", port: Int = 8443, bcryptCost: UInt8 = 12) {
            self.dataDirectory = dataDirectory
            self.host = host
            self.port = port
            self.bcryptCost = bcryptCost
        }
    }

    let configuration: Configuration
    let services: SyncServices
    let storage: ServerStorage
    let logger: Logger
    /// The connections open now (``Configuration/connectionLimits``).
    let openConnections = OpenConnections()
    /// Requests refused before they reached a route (said in the log).
    let refusals = RefusalLog()

    /// Opens (or creates) the data directory, or connects to PostgreSQL and prepares its schema.
    /// - Throws: ``SyncError`` when the database URL is invalid or PostgreSQL cannot be reached;
    ///   file errors when the data directory cannot be opened.
    package init(configuration: Configuration, logger: Logger = Logger(label: "ubiquity.server")) async throws {
        self.configuration = configuration
        self.logger = logger
        storage = try await ServerStorage.open(dataDirectory: configuration.dataDirectory, database: configuration.database, objectStore: configuration.objectStore, logger: logger)
        let escrow: ServerEscrow
        do {
            try await InstallationMove.refuseUnfinished(storage)
            escrow = try await Self.openEscrow(configuration: configuration, database: storage.database, logger: logger)
        } catch {
            await storage.close() // (its clients must be shut down before they go)
            throw error
        }
        let hasher = PasswordHasher(cost: configuration.bcryptCost)
        let notifier = ChangeNotifier(messagesPerAccountPerSecond: configuration.pushMessagesPerAccountPerSecond)
        var objectStoreRequests: (@Sendable () -> [String: Int])?
        if let store = storage.chunks as? ObjectChunkStore { objectStoreRequests = { store.objects.requestsSent } }
        let metrics = ServerMetrics(objectStoreRequests: objectStoreRequests)
        var services = SyncServices(
            database: storage.database, chunks: VerifiedChunks(base: storage.chunks, database: storage.database, notifier: notifier, logger: logger),
            metrics: metrics, notifier: notifier,
            signIns: SignInGuard(database: storage.database, hasher: hasher, policy: configuration.signInPolicy, logger: logger),
            accountLimits: configuration.accountLimits, retention: configuration.retention, share: AccountShare(limits: configuration.accountShare, metrics: metrics),
            escrow: escrow)
        services.sealedShares = configuration.sealedShares
        services.landingWait = configuration.landingWait
        self.services = services
        Task { await hasher.prepareDecoy() } // before the first unknown account asks
    }

    /// Loads the escrow key (making it on first start and saying where), and makes sure every
    /// instance of the database uses the same one.
    static func openEscrow(configuration: Configuration, database: any SyncDatabase, logger: Logger) async throws -> ServerEscrow {
        let path = configuration.escrowKeyPath
        let loaded: (key: EscrowKey, created: Bool)
        do { loaded = try EscrowKey.loadOrCreate(at: URL(fileURLWithPath: path)) } catch {
            throw SyncError(.internalServerError, "escrowKeyUnusable", "cannot use the escrow key file \(path): \(error)")
        }
        let identifier = loaded.key.publicKeys.deviceIdentifier
        let claimed = try await database.claimSetting("escrowKey", value: identifier)
        guard claimed == identifier else {
            throw SyncError(.internalServerError, "escrowKeyMismatch", """
                the escrow key file \(path) is not the one this database's accounts are sealed to (key \(claimed)): \
                copy the escrow key file of the first instance here, or point --escrow-key at it
                """)
        }
        if loaded.created {
            logger.notice("made the escrow key for Standard Data Protection; back it up with the database, never beside it in one place",
                          metadata: ["file": "\(path)"])
        }
        return ServerEscrow(key: loaded.key)
    }

    /// Delivers changes committed through other instances to this one's devices until
    /// cancelled (``run(onServerRunning:)`` does this; so must whoever runs
    /// ``makeApplication(onServerRunning:)`` on PostgreSQL).
    package func relayChanges() async {
        await storage.database.relayChanges(to: services.notifier)
    }

    /// Called once by a serving process, before it serves: blocks of 1 MiB and more (batch
    /// bodies, packs, fetched ranges) are mapped on their own and given back when freed, and at
    /// most 8 MiB of free memory stays at the top of a heap. glibc otherwise raises its mapping
    /// threshold to the largest block freed (up to 32 MiB), and every later 16 MiB batch then
    /// stays in the heap when freed: the server's memory measured 213 MB where it needs 147
    /// (docs/Benchmarks.md, chunk contents in an object store). Arenas stay glibc's default
    /// number (many requests allocate at once).
    package static func limitRetainedMemory() {
        ubq_limit_retained_memory(0, 1 << 20, 8 << 20)
    }

    /// Closes the database's and the object store's connections.
    package func close() async {
        await storage.close()
    }

    /// The router with every route and middleware (also what tests drive).
    package func makeRouter() -> Router<SyncContext> {
        let router = Router(context: SyncContext.self)
        router.add(middleware: ClientAddressMiddleware(proxies: configuration.trustedProxies))
        router.add(middleware: MetricsCountingMiddleware(metrics: services.metrics))
        router.add(middleware: LogRequestsMiddleware(.debug))
        router.add(middleware: ErrorShapingMiddleware())
        router.add(middleware: DeviceAuthMiddleware(database: services.database, sightings: services.sightings, share: services.share))
        services.addRoutes(to: router)
        services.addWebRoutes(to: router)
        return router
    }

    /// The Hummingbird application.
    /// - Parameter onServerRunning: Called with the bound port once listening.
    /// - Throws: ``SyncError`` when the TLS certificate or key cannot be read.
    package func makeApplication(onServerRunning: (@Sendable (Int) async -> Void)? = nil) throws -> some ApplicationProtocol {
        let router = makeRouter()
        let webSocketResponder = router.buildResponder()
        let (limits, requestLimits, open, refusals) = (configuration.connectionLimits, configuration.requestLimits, openConnections, refusals)
        let decoder = HTTP1Channel.Configuration.DecoderConfiguration(
            maxHeaderFieldSize: requestLimits.maximumHeaderFieldBytes, maxHeaderListSize: requestLimits.maximumHeaderBytes,
            maxHeaderFieldCount: requestLimits.maximumHeaderFields)
        var server = HTTPServerBuilder { responder in
            GuardedChannel(inner: HTTP1WebSocketUpgradeChannel(responder: responder, webSocketResponder: webSocketResponder,
                                                               configuration: .init(http1: .init(httpDecoderConfiguration: decoder))),
                           limits: limits, requestLimits: requestLimits, open: open, refusals: refusals)
        }
        if let tls = configuration.tls {
            do {
                let chain = try NIOSSLCertificate.fromPEMFile(tls.certificate).map { NIOSSLCertificateSource.certificate($0) }
                let key = try NIOSSLPrivateKey(file: tls.privateKey, format: .pem)
                var tlsConfiguration = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
                tlsConfiguration.minimumTLSVersion = configuration.tlsMinimum == .v1_3 ? .tlsv13 : .tlsv12 // 1.0 and 1.1 are retired (RFC 8996)
                server = try .tls(server, tlsConfiguration: tlsConfiguration)
            } catch {
                throw SyncError(.internalServerError, "tlsConfiguration", "cannot use the TLS certificate \(tls.certificate) and key \(tls.privateKey): \(error)")
            }
        }
        return Application(
            router: router,
            server: server,
            configuration: .init(address: .hostname(configuration.host, port: configuration.port)), // no `Server` header: bytes on every answer, and a fingerprint
            services: [PushRevocationService(database: services.database, notifier: services.notifier, logger: logger)],
            onServerRunning: { channel in await onServerRunning?(channel.localAddress?.port ?? 0) },
            logger: logger)
    }

    /// How long a graceful shutdown may take before what is left is cancelled.
    static let gracefulShutdownLimit: Duration = .seconds(10)

    /// Serves until SIGTERM or SIGINT, then shuts down gracefully (at most
    /// ``gracefulShutdownLimit``). Collects garbage (revisions
    /// past ``Configuration/retention``, unreferenced chunks) at start and every hour; on
    /// PostgreSQL, relays other instances' changes to this one's devices.
    /// Sealing in place, when the configuration asks for it and there is an escrow key.
    private var sealingService: [ServiceGroupConfiguration.ServiceConfiguration] {
        guard let interval = configuration.sealInPlaceInterval, let escrow = services.escrow else { return [] }
        return [.init(service: SealInPlaceService(sealing: SealInPlace(database: storage.database, chunks: storage.chunks, escrow: escrow, logger: logger),
                                                  interval: interval))]
    }

    /// With an object store: its housekeeping (packing, collection, compaction, the sweep).
    private var objectStoreService: [ServiceGroupConfiguration.ServiceConfiguration] {
        guard let store = storage.chunks as? ObjectChunkStore else { return [] }
        return [.init(service: ObjectStoreHousekeepingService(store: store, logger: logger))]
    }

    package func run(onServerRunning: (@Sendable (Int) async -> Void)? = nil) async throws {
        // Shut down in reverse order: relaying and collecting stop, then the connections close.
        var group = ServiceGroupConfiguration(
            services: [
                .init(service: try makeApplication(onServerRunning: onServerRunning)),
                .init(service: GarbageCollectionService(storage: storage, retention: configuration.retention, logger: logger)),
                .init(service: ChangeRelayService(database: storage.database, notifier: services.notifier)),
            ] + sealingService + objectStoreService,
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger)
        // Devices keep push connections open and reconnect: after this long the rest is cut, so
        // that a SIGTERM always ends the process (a service manager, an operator, a test waits).
        group.maximumGracefulShutdownDuration = Self.gracefulShutdownLimit
        let services = ServiceGroup(configuration: group)
        // Cancelled (a test, a program embedding the server): shut down gracefully rather than
        // cancel the serving task, whose cancellation traps in NIO when a connection was
        // accepted but not yet served (swift-nio#3481, seen in CI); what is left after
        // ``cancelledShutdownLimit`` is cut.
        let running = Task { try await services.run() }
        try await withTaskCancellationHandler {
            try await running.value
        } onCancel: {
            Task {
                await services.triggerGracefulShutdown()
                try? await Task.sleep(for: Self.cancelledShutdownLimit)
                running.cancel()
            }
        }
        await close()
    }

    /// How long a server whose task was cancelled lets its requests finish before it cuts them.
    static let cancelledShutdownLimit: Duration = .seconds(1)
}

/// The oldest TLS version a server speaks (`ubiquity serve --tls-minimum`).
package enum MinimumTLSVersion: String, Sendable, CaseIterable {
    /// TLS 1.2 and 1.3.
    case v1_2 = "1.2"
    /// TLS 1.3 only.
    case v1_3 = "1.3"
}

/// Account and device administration on a server's storage (the server may be running).
package struct ServerAdministration: Sendable {
    let storage: ServerStorage
    let bcryptCost: UInt8
    var database: any SyncDatabase { storage.database }

    /// Opens the server's database: the data directory's, or PostgreSQL's when `database` is set.
    /// - Parameters:
    ///   - dataDirectory: The server's data directory.
    ///   - database: The server's PostgreSQL URL, if it uses PostgreSQL.
    ///   - bcryptCost: bcrypt's cost for new passwords.
    package init(dataDirectory: String, database: String? = nil, objectStore: ObjectStoreSettings? = nil, bcryptCost: UInt8 = 12) async throws {
        storage = try await ServerStorage.open(dataDirectory: dataDirectory, database: database, objectStore: objectStore, logger: Logger(label: "ubiquity.admin"))
        self.bcryptCost = bcryptCost
    }

    /// Closes the database's and the object store's connections.
    package func close() async {
        await storage.close()
    }

    /// Creates an account.
    /// - Parameters:
    ///   - name: Its sign-in name (1…255 bytes, no `/` or NUL).
    ///   - password: Its password (at least 8 characters); stored as a bcrypt hash.
    ///   - quotaBytes: Its storage quota. Default 5 GiB.
    package func createAccount(name: String, password: String, quotaBytes: Int64 = 5 << 30) async throws -> Account {
        try Validate.name(name, field: "account name")
        guard password.count >= 8, password.utf8.count <= SignInGuard.longestPassword else {
            throw SyncError.badRequest("weakPassword", "passwords are 8 characters to \(SignInGuard.longestPassword) bytes")
        }
        return try await database.createAccount(name: name, passwordHash: PasswordHasher.hashNow(password, cost: bcryptCost), quotaBytes: quotaBytes)
    }

    /// Every account.
    package func accounts() async throws -> [Account] { try await database.accounts() }

    /// Sets an account's storage quota. Returns false if there is no such account.
    /// - Throws: ``SyncError`` `invalidQuota` for a negative quota.
    package func setQuota(ofAccount name: String, bytes: Int64) async throws -> Bool {
        guard bytes >= 0 else { throw SyncError.badRequest("invalidQuota", "a quota is 0 bytes or more") }
        return try await database.setQuota(ofAccount: name, bytes: bytes)
    }

    /// Makes an account an operator of the server (its web interface shows the administration
    /// page: accounts, quotas, devices, health and storage) or takes that away. Returns false if
    /// there is no such account.
    package func setAdmin(ofAccount name: String, admin: Bool) async throws -> Bool {
        try await database.setAdmin(ofAccount: name, admin: admin)
    }

    /// Deletes an account with its devices, items and chunks. Returns false if there is none.
    package func deleteAccount(named name: String) async throws -> Bool {
        guard let account = try await database.accounts().first(where: { $0.name == name }) else { return false }
        let deleted = try await database.deleteAccount(named: name)
        if deleted { try await storage.chunks.removeAccount(account.id) }
        return deleted
    }

    /// An account's devices.
    package func devices(ofAccount name: String) async throws -> [DeviceInfo] { try await database.devices(ofAccount: name) }

    /// Lifts the sign-in block (and forgets the attempts) of the account `name` and of each of
    /// `addresses` (IPv4, or IPv6 — its /64 is what counts); returns whether any was known.
    /// - Throws: ``SyncError`` `invalidAddress` for something that is not an IP address.
    package func unblockSignIn(account name: String?, addresses: [String] = []) async throws -> Bool {
        var keys = name.map { [SignInPolicy.accountKey($0)] } ?? []
        for address in addresses {
            guard let parsed = try? SocketAddress(ipAddress: address, port: 0), let key = SignInPolicy.addressKey(parsed) else {
                throw SyncError.badRequest("invalidAddress", "not an IP address: \(address)")
            }
            keys.append(key)
        }
        return try await database.clearSignInAttempts(keys: keys) > 0
    }

    /// The account names and addresses whose sign-ins are refused now, with until when.
    package func blockedSignIns() async throws -> [(who: String, until: Date)] {
        try await database.blockedSignIns(now: Date()).map { (who: String($0.key.drop { $0 != ":" }.dropFirst()), until: $0.until) }
    }

    /// Revokes a device's token. Returns false if there is no such (unrevoked) device.
    package func revokeDevice(id: String) async throws -> Bool { try await database.revokeDevice(id: id) }

    /// What an account can get back: earlier revisions and deleted items within the retention.
    /// - Parameters:
    ///   - accountName: The account.
    ///   - retention: How far back (default 30 days).
    ///   - now: The time to judge by.
    ///   - escrow: The server's escrow key: under Standard, sealed records are opened with it
    ///     (their names, sizes and dates shown); without it, or under Advanced, a sealed
    ///     revision keeps its name-clash tag and its record.
    package func recoverable(accountName: String, retention: TimeInterval = SyncServer.defaultRetention, now: Date = Date(),
                             escrow: EscrowKey? = nil) async throws -> [RecoverableRevision] {
        let revisions = try await database.recoverable(accountName: accountName, now: now, retention: retention)
        guard let escrow, revisions.contains(where: { $0.record != nil }),
              let account = try await database.accounts().first(where: { $0.name == accountName }),
              let rootKeys = try await ServerEscrow(key: escrow).rootKeys(ofAccount: account.id, database: database) else { return revisions }
        var records: [String: ItemRecords] = [:]
        return revisions.map { revision in
            guard revision.record != nil else { return revision }
            if records[revision.container] == nil { records[revision.container] = ItemRecords.keyed(container: revision.container, rootKeys: rootKeys, sealing: false) }
            return (try? records[revision.container].map { try revision.opened(with: $0) }) ?? revision
        }
    }

    /// Makes an earlier revision (or a deleted item's last one) current again. Devices see it in
    /// their next `changes`. Returns false if there is no such recoverable revision.
    /// - Parameter escrow: The server's escrow key: under Standard Data Protection what the
    ///   restore made is signed with it (as the web page's restores are), so that devices hold
    ///   it to the checks of signed commits.
    package func restore(accountName: String, revision: String, now: Date = Date(), escrow: EscrowKey? = nil) async throws -> Bool {
        // (Where it is, and what was current before, first: what the restore made is signed.)
        var signing: (account: Int64, container: String, item: String, before: String?)?
        if escrow != nil, let account = try await database.accounts().first(where: { $0.name == accountName })?.id,
           let found = try await database.recoverable(accountName: accountName, now: now, retention: 100 * 365 * 86_400).first(where: { $0.revision == revision }) {
            let before = try await database.item(accountId: account, container: found.container, id: found.item, brief: true)
            signing = (account, found.container, found.item, before?.revision)
        }
        guard try await database.restore(accountName: accountName, revision: revision, now: now) != nil else { return false }
        if let escrow, let signing,
           let state = try await database.item(accountId: signing.account, container: signing.container, id: signing.item, brief: true) {
            await EscrowSigner(database: database, keys: escrow.keys).sign([SyncServices.outcome(of: state, replacing: signing.before)], account: signing.account,
                                                                          container: signing.container, logger: Logger(label: "ubiquity.admin"))
        }
        return true
    }

    /// Seals in place what Standard accounts stored before their containers sealed (``SealInPlace``):
    /// every revision without a sealed record (or `account`'s only, by name), however young
    /// when `settle` is 0. Resumable: run it again after a stop and it goes on.
    /// - Parameters:
    ///   - escrow: The server's escrow key (the file `ubiquity serve` made).
    ///   - progress: Hears the totals after each batch.
    package func sealInPlace(escrow: EscrowKey, account: String? = nil, settle: TimeInterval = 600,
                             progress: (@Sendable (SealInPlaceReport) -> Void)? = nil) async throws -> SealInPlaceReport {
        var only: Int64?
        if let account {
            guard let id = try await database.accounts().first(where: { $0.name == account })?.id else {
                throw SyncError(.notFound, "noSuchAccount", "there is no account \(account)")
            }
            only = id
        }
        var sealing = SealInPlace(database: database, chunks: storage.chunks, escrow: ServerEscrow(key: escrow), logger: Logger(label: "ubiquity.admin"))
        sealing.settle = settle
        return try await sealing.run(account: only, progress: progress)
    }

    /// Forgets revisions older than the retention and removes chunks nothing names any more.
    /// - Returns: How many revisions and chunks went, and the bytes freed.
    package func collectGarbage(retention: TimeInterval = SyncServer.defaultRetention, now: Date = Date()) async throws -> (revisions: Int, chunks: Int, bytes: Int64) {
        try await SyncServer.collectGarbage(storage: storage, retention: retention, now: now)
    }
}

extension SyncServer {
    /// How long replaced revisions and deleted items stay recoverable: 30 days.
    package static let defaultRetention: TimeInterval = 30 * 86_400

    static func collectGarbage(storage: ServerStorage, retention: TimeInterval, now: Date) async throws -> (revisions: Int, chunks: Int, bytes: Int64) {
        let collected = try await storage.database.collectGarbage(now: now, retention: retention, grace: 86_400)
        // The database forgot these chunks: each is removed, or said to be left behind.
        let left = await ChunkRemoval.remove(collected.chunks.map { (account: $0.0, hash: $0.1) }, database: storage.database, chunks: storage.chunks,
                                             logger: Logger(label: "ubiquity.server"))
        try await storage.chunks.compact(orphanAge: 3_600)
        if let first = left.first {
            throw SyncError(.internalServerError, "storageFailure",
                            "\(left.count) of \(collected.chunks.count) unused chunks could not be removed (the first, \(first.hash) of account \(first.account): \(first.error))")
        }
        return (collected.revisions, collected.chunks.count, collected.bytes)
    }
}

/// A server's database and chunk contents, wherever they are.
struct ServerStorage: Sendable {
    let database: any SyncDatabase
    let chunks: any ChunkStorage
    /// The data directory's lock, held shared while the embedded storage is open (nil on PostgreSQL).
    var lock: DataDirectoryLock? = nil

    /// Closes the database's connections, and the object store's; lets the data directory go.
    func close() async {
        await database.close()
        if let objects = (chunks as? ObjectChunkStore)?.objects { try? await objects.shutdown() }
        lock?.release()
    }

    /// The data directory's SQLite database and chunk files, or, with `database`, PostgreSQL —
    /// and with `objectStore` too, chunk contents in that object store.
    static func open(dataDirectory: String, database url: String?, objectStore: ObjectStoreSettings? = nil, logger: Logger) async throws -> ServerStorage {
        if let url {
            let database = try await PostgresDatabase(location: try PostgresLocation(url: url), logger: logger)
            guard let objectStore else { return ServerStorage(database: database, chunks: PostgresChunkStore(database: database)) }
            let objects = S3Client(location: objectStore.location, credentials: objectStore.credentials, logger: Logger(label: "ubiquity.objectstore"))
            logger.info("chunk contents in an object store", metadata: ["objectStore": "\(objectStore.location)"])
            return ServerStorage(database: database, chunks: ObjectChunkStore(database: database, objects: objects, logger: logger))
        }
        if objectStore != nil {
            throw SyncError(.badRequest, "objectStoreNeedsDatabase", "an object store keeps its index in PostgreSQL: give --database postgres://… too")
        }
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        keepPrivate(dataDirectory, logger: logger)
        // Shared with every other server and command on the directory; refused while it is
        // being moved to PostgreSQL (`ubiquity storage migrate --from-data`).
        let lock = try DataDirectoryLock(directory: dataDirectory, exclusive: false)
        do {
            prepareDatabaseFile(dataDirectory + "/ubiquity.sqlite", logger: logger)
            let database = try SQLiteDatabase(path: dataDirectory + "/ubiquity.sqlite")
            return ServerStorage(database: database, chunks: try FileChunkStore(directory: dataDirectory + "/chunks", logger: logger), lock: lock)
        } catch {
            lock.release()
            throw error
        }
    }

    /// Makes the SQLite database at `path` this user's alone before SQLite opens it: created
    /// empty with mode 0600 if missing — SQLite gives its `-wal` and `-shm` files the
    /// database's mode, so none of them is ever readable by others, whatever the umask (the
    /// chunk index was made 0644 under umask 022) — and an older one's files tightened.
    static func prepareDatabaseFile(_ path: String, logger: Logger) {
        let made = Glibc.open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        if made >= 0 { Glibc.close(made) } // (SQLite takes an empty file for a new database)
        for file in [path, path + "-wal", path + "-shm"] { keepPrivate(file, logger: logger) }
    }

    /// Makes the data directory (0700) and the database's files (0600) this user's alone — what
    /// is in them is everyone's documents and the accounts' password hashes. A looser mode found
    /// (a directory made by hand, files from an older version) is tightened and said.
    static func keepPrivate(_ path: String, logger: Logger) {
        var info = stat()
        guard stat(path, &info) == 0 else { return } // not there (yet): made private when made
        let wanted: mode_t = (info.st_mode & S_IFMT) == S_IFDIR ? 0o700 : 0o600
        guard info.st_mode & 0o777 != wanted else { return }
        if chmod(path, wanted) == 0 {
            logger.notice("made private", metadata: ["path": "\(path)", "mode": "\(String(wanted, radix: 8))", "was": "\(String(info.st_mode & 0o777, radix: 8))"])
        } else {
            logger.warning("cannot make private", metadata: ["path": "\(path)", "error": "\(String(cString: strerror(errno)))"])
        }
    }
}

/// A server on loopback for demos and benchmarks: a data directory with one account, serving
/// on a free port from a task of its own (fast bcrypt: for throwaway accounts only).
package struct EmbeddedServer: Sendable {
    /// Where it answers (`http://127.0.0.1:PORT`).
    package let url: URL
    let serving: Task<Void, any Error>

    /// Creates the account (and the `others`, with the same password) in `dataDirectory` and
    /// starts serving.
    /// - Throws: storage errors; an error if the server stopped before it listened.
    package static func start(dataDirectory: String, account: String, others: [String] = [], password: String, sealedShares: Bool = true,
                              logger: Logger) async throws -> EmbeddedServer {
        let admin = try await ServerAdministration(dataDirectory: dataDirectory, bcryptCost: 4)
        for name in [account] + others { _ = try await admin.createAccount(name: name, password: password) }
        await admin.close()
        var configuration = SyncServer.Configuration(dataDirectory: dataDirectory, host: "127.0.0.1", port: 0, bcryptCost: 4)
        configuration.sealedShares = sealedShares
        let server = try await SyncServer(configuration: configuration, logger: logger)
        let (ports, announce) = AsyncStream.makeStream(of: Int.self)
        let serving = Task {
            defer { announce.finish() }
            try await server.run { port in announce.yield(port) }
        }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            serving.cancel()
            throw SyncError(.internalServerError, "notStarted", "the embedded server stopped before it listened")
        }
        return EmbeddedServer(url: URL(string: "http://127.0.0.1:\(port)")!, serving: serving)
    }

    /// Tells it to stop serving (without waiting).
    package func cancel() {
        serving.cancel()
    }

    /// Stops serving and waits until it has.
    package func stop() async {
        serving.cancel()
        _ = await serving.result
    }
}
