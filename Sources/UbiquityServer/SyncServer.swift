import Foundation
import Hummingbird
import HummingbirdBcrypt
import HummingbirdCore
import HummingbirdTLS
import HummingbirdWebSocket
import NIOSSL
import Logging

/// The sync server: iCloud's role, self-hosted. `ubiquity serve` runs it.
///
/// Everything lives in one data directory: `ubiquity.sqlite` (accounts, devices, containers,
/// items, revisions) and `chunks/` (file contents, content-addressed per account).
public struct SyncServer: Sendable {
    /// How the server is set up.
    public struct Configuration: Sendable {
        /// The data directory (created if missing).
        public var dataDirectory: String
        /// The address to listen on. Default 127.0.0.1.
        public var host: String
        /// The port to listen on (0: any free port). Default 8443.
        public var port: Int
        /// bcrypt's cost for passwords (4…31). Default 12.
        public var bcryptCost: UInt8
        /// How long replaced revisions and deleted items stay recoverable. Default 30 days.
        public var retention: TimeInterval = SyncServer.defaultRetention
        /// A PEM certificate chain and private key: serve HTTPS (and WSS) instead of HTTP.
        public var tls: (certificate: String, privateKey: String)?

        /// Creates a configuration.
        public init(dataDirectory: String = "./ubiquity-data", host: String = "127.0.0.1", port: Int = 8443, bcryptCost: UInt8 = 12) {
            self.dataDirectory = dataDirectory
            self.host = host
            self.port = port
            self.bcryptCost = bcryptCost
        }
    }

    let configuration: Configuration
    let services: SyncServices
    let database: SQLiteDatabase
    let logger: Logger

    /// Opens (or creates) the data directory.
    /// - Throws: When the directory or database cannot be opened.
    public init(configuration: Configuration, logger: Logger = Logger(label: "ubiquity.server")) throws {
        self.configuration = configuration
        self.logger = logger
        try FileManager.default.createDirectory(atPath: configuration.dataDirectory, withIntermediateDirectories: true)
        database = try SQLiteDatabase(path: configuration.dataDirectory + "/ubiquity.sqlite")
        services = SyncServices(
            database: database, chunks: try ChunkStore(directory: configuration.dataDirectory + "/chunks"),
            metrics: ServerMetrics(), notifier: ChangeNotifier(), bcryptCost: configuration.bcryptCost)
    }

    /// The router with every route and middleware (also what tests drive).
    public func makeRouter() -> Router<SyncContext> {
        let router = Router(context: SyncContext.self)
        router.add(middleware: MetricsCountingMiddleware(metrics: services.metrics))
        router.add(middleware: LogRequestsMiddleware(.debug))
        router.add(middleware: ErrorShapingMiddleware())
        router.add(middleware: DeviceAuthMiddleware(database: services.database))
        services.addRoutes(to: router)
        return router
    }

    /// The Hummingbird application.
    /// - Parameter onServerRunning: Called with the bound port once listening.
    /// - Throws: ``SyncError`` when the TLS certificate or key cannot be read.
    public func makeApplication(onServerRunning: (@Sendable (Int) async -> Void)? = nil) throws -> some ApplicationProtocol {
        let router = makeRouter()
        var server: HTTPServerBuilder = .http1WebSocketUpgrade(webSocketRouter: router)
        if let tls = configuration.tls {
            do {
                let chain = try NIOSSLCertificate.fromPEMFile(tls.certificate).map { NIOSSLCertificateSource.certificate($0) }
                let key = try NIOSSLPrivateKey(file: tls.privateKey, format: .pem)
                server = try .tls(server, tlsConfiguration: .makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key)))
            } catch {
                throw SyncError(.internalServerError, "tlsConfiguration", "cannot use the TLS certificate \(tls.certificate) and key \(tls.privateKey): \(error)")
            }
        }
        return Application(
            router: router,
            server: server,
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "ubiquity"),
            onServerRunning: { channel in await onServerRunning?(channel.localAddress?.port ?? 0) },
            logger: logger)
    }

    /// Serves until SIGTERM or SIGINT, then shuts down gracefully. Collects garbage (revisions
    /// past ``Configuration/retention``, unreferenced chunks) at start and every hour.
    public func run(onServerRunning: (@Sendable (Int) async -> Void)? = nil) async throws {
        let maintenance = Task { [database, services, logger, configuration] in
            while !Task.isCancelled {
                do {
                    let collected = try await Self.collectGarbage(database: database, chunks: services.chunks, retention: configuration.retention, now: Date())
                    if collected.revisions + collected.chunks > 0 {
                        logger.info("collected garbage", metadata: ["revisions": "\(collected.revisions)", "chunks": "\(collected.chunks)", "bytes": "\(collected.bytes)"])
                    }
                } catch {
                    logger.error("garbage collection failed", metadata: ["error": "\(error)"])
                }
                try? await Task.sleep(for: .seconds(3_600))
            }
        }
        defer { maintenance.cancel() }
        try await makeApplication(onServerRunning: onServerRunning).runService()
    }
}

/// Account and device administration on a data directory (the server may be running).
public struct ServerAdministration: Sendable {
    let database: SQLiteDatabase
    let chunks: ChunkStore
    let bcryptCost: UInt8

    /// Opens the data directory's database.
    /// - Parameters:
    ///   - dataDirectory: The server's data directory.
    ///   - bcryptCost: bcrypt's cost for new passwords.
    public init(dataDirectory: String, bcryptCost: UInt8 = 12) throws {
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        database = try SQLiteDatabase(path: dataDirectory + "/ubiquity.sqlite")
        chunks = try ChunkStore(directory: dataDirectory + "/chunks")
        self.bcryptCost = bcryptCost
    }

    /// Creates an account.
    /// - Parameters:
    ///   - name: Its sign-in name (1…255 bytes, no `/` or NUL).
    ///   - password: Its password (at least 8 characters); stored as a bcrypt hash.
    ///   - quotaBytes: Its storage quota. Default 5 GiB.
    public func createAccount(name: String, password: String, quotaBytes: Int64 = 5 << 30) async throws -> Account {
        try Validate.name(name, field: "account name")
        guard password.count >= 8, password.utf8.count <= 72 else {
            throw SyncError.badRequest("weakPassword", "passwords are 8 characters to 72 bytes")
        }
        return try await database.createAccount(name: name, passwordHash: Bcrypt.hash(password, cost: bcryptCost), quotaBytes: quotaBytes)
    }

    /// Every account.
    public func accounts() async throws -> [Account] { try await database.accounts() }

    /// Deletes an account with its devices, items and chunks. Returns false if there is none.
    public func deleteAccount(named name: String) async throws -> Bool {
        guard let account = try await database.accounts().first(where: { $0.name == name }) else { return false }
        let deleted = try await database.deleteAccount(named: name)
        if deleted { chunks.removeAccount(account.id) }
        return deleted
    }

    /// An account's devices.
    public func devices(ofAccount name: String) async throws -> [DeviceInfo] { try await database.devices(ofAccount: name) }

    /// Revokes a device's token. Returns false if there is no such (unrevoked) device.
    public func revokeDevice(id: String) async throws -> Bool { try await database.revokeDevice(id: id) }

    /// What an account can get back: earlier revisions and deleted items within the retention.
    /// - Parameters:
    ///   - accountName: The account.
    ///   - retention: How far back (default 30 days).
    ///   - now: The time to judge by.
    public func recoverable(accountName: String, retention: TimeInterval = SyncServer.defaultRetention, now: Date = Date()) async throws -> [RecoverableRevision] {
        try await database.recoverable(accountName: accountName, now: now, retention: retention)
    }

    /// Makes an earlier revision (or a deleted item's last one) current again. Devices see it in
    /// their next `changes`. Returns false if there is no such recoverable revision.
    public func restore(accountName: String, revision: String, now: Date = Date()) async throws -> Bool {
        try await database.restore(accountName: accountName, revision: revision, now: now) != nil
    }

    /// Forgets revisions older than the retention and removes chunks nothing names any more.
    /// - Returns: How many revisions and chunks went, and the bytes freed.
    public func collectGarbage(retention: TimeInterval = SyncServer.defaultRetention, now: Date = Date()) async throws -> (revisions: Int, chunks: Int, bytes: Int64) {
        try await SyncServer.collectGarbage(database: database, chunks: chunks, retention: retention, now: now)
    }
}

extension SyncServer {
    /// How long replaced revisions and deleted items stay recoverable: 30 days.
    public static let defaultRetention: TimeInterval = 30 * 86_400

    static func collectGarbage(database: SQLiteDatabase, chunks: ChunkStore, retention: TimeInterval, now: Date) async throws -> (revisions: Int, chunks: Int, bytes: Int64) {
        let collected = try await database.collectGarbage(now: now, retention: retention, grace: 86_400)
        for (account, hash) in collected.chunks { chunks.remove(hash: hash, account: account) }
        return (collected.revisions, collected.chunks.count, collected.bytes)
    }
}
