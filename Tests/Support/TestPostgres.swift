import Foundation

/// The real PostgreSQL cluster that `.ci/postgres start` runs for the tests: `eval "$(.ci/postgres
/// start)"` before `swift test` exports where it is. Each test server takes a schema of its own.
public enum TestPostgres {
    /// Whether a cluster was started for the tests (under CI always: a missing one fails there).
    public static var configured: Bool {
        let environment = ProcessInfo.processInfo.environment
        return environment["UBIQUITY_TEST_POSTGRES"] != nil || environment["CI"] != nil
    }

    /// The storages a test runs on: SQLite always, PostgreSQL when a cluster is configured.
    public static var storages: [String] { configured ? ["sqlite", "postgres"] : ["sqlite"] }

    /// A database URL of its own: a fresh schema (named `prefix_…`) in the test cluster. A
    /// request waits up to 30 s for a connection (with the whole suite on two cores the
    /// production default of 5 s was met by load alone, seen in CI).
    public static func freshURL(prefix: String = "test") throws -> String {
        guard let url = ProcessInfo.processInfo.environment["UBIQUITY_TEST_POSTGRES"] else { throw TestPostgresMissing() }
        let schema = "\(prefix)_\(getpid())_\(UUID().uuidString.prefix(8).lowercased())"
        return url + (url.contains("?") ? "&" : "?") + "search_path=\(schema)&connect_timeout=30"
    }
}

/// No test cluster: say how to start one.
public struct TestPostgresMissing: Error, CustomStringConvertible {
    public var description: String { "set UBIQUITY_TEST_POSTGRES (eval \"$(.ci/postgres start)\") to test on PostgreSQL" }
}
