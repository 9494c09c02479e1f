import Foundation
import UbiquityProtocol
import NIOSSL
import PostgresNIO

/// Where a PostgreSQL database is, from a URL:
/// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=disable|prefer|require][&search_path=SCHEMA][&host=/socket/dir]`.
///
/// `search_path` puts the server's tables in their own schema (created if missing), so several
/// deployments (or test runs) can share one database; `host=/dir` connects over the Unix socket
/// in that directory. The password can also come from `PGPASSWORD`.
package struct PostgresLocation: Sendable, Equatable {
    /// The TCP host (nil when connecting over a Unix socket).
    package var host: String?
    /// The port (also names the Unix socket). Default 5432.
    package var port: Int
    /// The directory of the server's Unix socket.
    package var socketDirectory: String?
    /// The user to connect as.
    package var username: String
    /// The password, if any.
    package var password: String?
    /// The database (default: the user's name).
    package var database: String?
    /// `disable`, `prefer` (the default) or `require`.
    package var sslMode: String
    /// The schema for the server's tables (default: PostgreSQL's search path, usually `public`).
    package var schema: String?
    /// How long a request waits for a connection before it is answered 503 (libpq's
    /// `connect_timeout`, whole seconds; default ``PostgresDatabase/leaseTimeout``).
    package var connectTimeout: Duration?

    /// Parses a `postgres://` or `postgresql://` URL.
    /// - Throws: ``SyncError`` (`invalidDatabaseURL`) naming what is wrong.
    package init(url: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        func invalid(_ why: String) -> SyncError { SyncError.badRequest("invalidDatabaseURL", "the database URL \(Self.redact(url)) is not usable: \(why)") }
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased() else {
            throw invalid("it is not a URL")
        }
        guard scheme == "postgres" || scheme == "postgresql" else { throw invalid("it must start with postgres://") }
        let query = Dictionary((components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        for name in query.keys where !["sslmode", "search_path", "host", "connect_timeout"].contains(name) {
            throw invalid("unknown parameter \(name) (known: sslmode, search_path, host, connect_timeout)")
        }
        if let text = query["connect_timeout"] {
            guard let seconds = Int(text), (1...300).contains(seconds) else { throw invalid("connect_timeout is whole seconds, 1…300") }
            connectTimeout = .seconds(seconds)
        }
        port = components.port ?? 5432
        guard (1...65_535).contains(port) else { throw invalid("the port must be 1…65535") }
        if let directory = query["host"], directory.hasPrefix("/") {
            socketDirectory = directory
            host = nil
        } else {
            let name = query["host"] ?? components.host ?? ""
            host = name.isEmpty ? "127.0.0.1" : name
            socketDirectory = nil
        }
        username = components.user?.removingPercentEncoding ?? environment["PGUSER"] ?? environment["USER"] ?? "postgres"
        password = components.password?.removingPercentEncoding ?? environment["PGPASSWORD"]
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        database = path.isEmpty ? nil : path.removingPercentEncoding
        sslMode = query["sslmode"] ?? "prefer"
        guard ["disable", "prefer", "require"].contains(sslMode) else { throw invalid("sslmode is disable, prefer or require") }
        schema = query["search_path"]
        if let schema {
            guard !schema.isEmpty, schema.utf8.count <= 48,
                  schema.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_" }),
                  !("0"..."9").contains(schema.unicodeScalars.first!)
            else { throw invalid("search_path is one schema name of lowercase letters, digits and _ (at most 48)") }
        }
    }

    /// The URL with its password replaced by `***`, for logs and errors.
    package var redacted: String {
        var text = "postgres://\(username)@\(host ?? "")"
        if port != 5432 || host == nil { text += ":\(port)" }
        text += "/\(database ?? "")"
        var parameters: [String] = []
        if sslMode != "prefer" { parameters.append("sslmode=\(sslMode)") }
        if let schema { parameters.append("search_path=\(schema)") }
        if let socketDirectory { parameters.append("host=\(socketDirectory)") }
        if let connectTimeout { parameters.append("connect_timeout=\(connectTimeout.components.seconds)") }
        return parameters.isEmpty ? text : text + "?" + parameters.joined(separator: "&")
    }

    static func redact(_ url: String) -> String {
        guard var components = URLComponents(string: url) else { return "(unparsable)" }
        if components.password != nil { components.password = "***" }
        return components.string ?? "(unparsable)"
    }

    var socketPath: String? { socketDirectory.map { "\($0)/.s.PGSQL.\(port)" } }

    var startupParameters: [(String, String)] { schema.map { [("search_path", $0)] } ?? [] }

    /// For the connection pool.
    func clientConfiguration() -> PostgresClient.Configuration {
        var configuration: PostgresClient.Configuration
        if let socketPath {
            configuration = .init(unixSocketPath: socketPath, username: username, password: password, database: database)
        } else {
            let tls: PostgresClient.Configuration.TLS = switch sslMode {
            case "disable": .disable
            case "require": .require(.makeClientConfiguration())
            default: .prefer(.makeClientConfiguration())
            }
            configuration = .init(host: host ?? "127.0.0.1", port: port, username: username, password: password, database: database, tls: tls)
        }
        configuration.options.additionalStartupParameters = startupParameters
        configuration.options.maximumConnections = 16
        return configuration
    }

    /// For one connection (the start-up check, migrations, the change listener).
    func connectionConfiguration() throws -> PostgresConnection.Configuration {
        var configuration: PostgresConnection.Configuration
        if let socketPath {
            configuration = .init(unixSocketPath: socketPath, username: username, password: password, database: database)
        } else {
            let tls: PostgresConnection.Configuration.TLS = switch sslMode {
            case "disable": .disable
            case "require": .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
            default: .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
            }
            configuration = .init(host: host ?? "127.0.0.1", port: port, username: username, password: password, database: database, tls: tls)
        }
        configuration.options.additionalStartupParameters = startupParameters
        return configuration
    }
}
