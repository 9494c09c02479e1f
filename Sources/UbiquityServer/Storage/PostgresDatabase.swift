import Foundation
import UbiquityProtocol
import Logging
import PostgresNIO
import Synchronization

/// The database for more than one server instance: PostgreSQL through postgres-nio.
///
/// It answers exactly as ``SQLiteDatabase`` does: the rules are the same code
/// (``ServerRules`` over ``PostgresRuleStorage``). Where SQLite runs one writer at a time,
/// PostgreSQL runs transactions side by side, so each one locks what it decides on, always in
/// the same order (account, then container): a commit, an upload, a resolution and a restore
/// hold their account exclusively (its quota counters) and a commit its container too (one
/// sequence at a time per container); garbage collection holds every account. Every change is announced with `pg_notify` inside its transaction, so other
/// instances hear of it exactly when it is visible (``relayChanges(to:)``).
final class PostgresDatabase: SyncDatabase {
    let location: PostgresLocation
    let client: PostgresClient
    let logger: Logger
    /// Tells this instance's announcements apart from other instances'.
    let instance = UUID().uuidString.lowercased()
    /// The notification channel: one per schema, so deployments sharing a database stay apart.
    let channel: String
    private let runner: Task<Void, Never>

    /// Connects, creates or upgrades the schema, and starts the connection pool.
    /// - Throws: ``SyncError`` (`databaseUnavailable`) when PostgreSQL cannot be reached or refuses.
    init(location: PostgresLocation, logger: Logger) async throws {
        self.location = location
        self.logger = logger
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: try location.connectionConfiguration(), id: 0, logger: logger)
        } catch {
            throw SyncError(.serviceUnavailable, "databaseUnavailable", "cannot connect to PostgreSQL at \(location.redacted): \(Self.describe(error))")
        }
        do {
            // One migration at a time per database in this process (the lock is per schema: a
            // process serving many schemas — the test suite's servers — would otherwise flood
            // PostgreSQL with every schema's DDL at once, and starve everything else of both
            // cores, seen in CI).
            let database = "\(location.socketPath ?? location.host ?? ""):\(location.port)/\(location.database ?? "")"
            _ = await Self.migrationTurns.take(database)
            defer { Self.migrationTurns.giveBack(database) }
            let schema = try await Self.migrate(connection, location: location)
            channel = String("ubiquity_\(schema)".prefix(63))
            try? await connection.close() // the migration's own connection: the pool opens others
        } catch {
            try? await connection.close() // the first error is the one to report
            throw SyncError(.serviceUnavailable, "databaseUnavailable", "cannot prepare the schema in \(location.redacted): \(Self.describe(error))")
        }
        let client = PostgresClient(configuration: location.clientConfiguration(), backgroundLogger: logger)
        self.client = client
        runner = Task { await client.run() }
    }

    func ping() async throws {
        try await read { db in _ = try await db.rows("SELECT 1 AS one") }
    }

    func close() async {
        runner.cancel()
        await runner.value
    }

    /// The error's message from the server when there is one.
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            if let underlying = error.underlying { return "\(underlying)" }
            return "\(error.code)"
        }
        return "\(error)"
    }

    // MARK: Running queries

    /// Runs `body` in a transaction, retrying (up to 5 times) when PostgreSQL found a deadlock or
    /// a serialization failure; ``SyncError``s pass through and roll back.
    @discardableResult
    func transaction<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await pooled { [logger] connection in
                    try await connection.query("BEGIN", logger: logger)
                    do {
                        let result = try await body(connection)
                        try await connection.query("COMMIT", logger: logger)
                        return result
                    } catch {
                        _ = try? await connection.query("ROLLBACK", logger: logger) // a broken connection rolls back by itself
                        throw error
                    }
                }
            } catch let error as PSQLError where attempt < 5 && ["40001", "40P01"].contains(error.serverInfo?[.sqlState] ?? "") {
                logger.debug("retrying a transaction", metadata: ["reason": "\(Self.describe(error))"])
                try await Task.sleep(for: .milliseconds(Int.random(in: 1...20) * attempt))
            }
        }
    }

    /// Runs `body` on a pooled connection (one statement at a time, each seeing the latest commits).
    func read<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await pooled(body)
    }

    /// Whose turn it is to migrate a schema of a database in this process.
    static let migrationTurns = Turns<String>(slots: 1, waitingLimit: .max)

    /// How long a request waits for a connection before it is answered 503 `databaseUnavailable`,
    /// unless the URL's `connect_timeout` says otherwise.
    static let leaseTimeout: Duration = .seconds(5)

    /// Runs `body` on a connection from the pool. When PostgreSQL is down, the pool keeps trying
    /// to connect and requests would wait for ever: after ``leaseTimeout`` (or the URL's
    /// `connect_timeout`) without a connection the request gives up with 503
    /// `databaseUnavailable`, as does one whose connection fails.
    func pooled<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let leased = LeaseFlag(), leaseTimeout = location.connectTimeout ?? Self.leaseTimeout
        do {
            return try await withThrowingTaskGroup(of: T?.self) { group in
                group.addTask { [client] in
                    try await client.withConnection { connection in
                        leased.value.withLock { $0 = true }
                        return try await body(connection)
                    }
                }
                group.addTask {
                    try await Task.sleep(for: leaseTimeout)
                    guard leased.value.withLock({ $0 }) else { throw Self.unavailable("no connection within \(leaseTimeout)") }
                    return nil // connected in time: the work may take as long as it takes
                }
                while let result = try await group.next() {
                    if let result {
                        group.cancelAll()
                        return result
                    }
                }
                throw Self.unavailable("the request was cancelled")
            }
        } catch let error as PSQLError where error.serverInfo == nil {
            // Not an answer from PostgreSQL but a failure to reach it.
            throw Self.unavailable(Self.describe(error))
        }
    }

    static func unavailable(_ why: String) -> SyncError {
        SyncError(.serviceUnavailable, "databaseUnavailable", "the database is not available: \(why)")
    }

    /// Announces a change to every instance (delivered when the transaction commits); the
    /// `device` that made it is not told.
    func announce(_ db: PostgresConnection, account: Int64, container: String, sequence: Int64, keyValue: Bool = false, device: String? = nil,
                  type: String? = nil) async throws {
        let change = RelayedChange(instance: instance, account: account, container: container, sequence: sequence, keyValue: keyValue, device: device, type: type)
        let payload = String(decoding: try JSONEncoder().encode(change), as: UTF8.self)
        try await db.rows("SELECT pg_notify(\(channel), \(payload))")
    }
}

/// Whether a request got its pooled connection (see ``PostgresDatabase/pooled(_:)``).
private final class LeaseFlag: Sendable {
    let value = Mutex(false)
}

extension PostgresConnection {
    /// Runs `query` and returns every row (for statements without rows: none).
    @discardableResult
    func rows(_ query: PostgresQuery) async throws -> [PostgresRandomAccessRow] {
        try await self.query(query, logger: PostgresDatabase.quiet).collect().map { $0.makeRandomAccess() }
    }
}

extension PostgresRandomAccessRow {
    /// The value of the column named `name`.
    func get<T: PostgresDecodable>(_ name: String, as type: T.Type = T.self) throws -> T {
        try self[name].decode(T.self)
    }
}

extension PostgresDatabase {
    /// Queries log nothing of their own (errors reach the request's log as responses).
    static let quiet = Logger(label: "ubiquity.server.postgres", factory: { _ in SwiftLogNoOpLogHandler() })
}

