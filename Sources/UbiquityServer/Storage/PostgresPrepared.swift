import PostgresNIO
import Synchronization

/// A statement PostgreSQL parses once per connection (and, after a few runs, plans once), not at
/// every run: those every commit runs. A commit's two statements are large (every fact read in
/// one, every write in the other), and parsing and planning them anew took a third of
/// PostgreSQL's time under `ubiquity-load` — about a seventh of the machine (issue 49).
///
/// A statement is written like any query (values interpolated go as binds), wrapped in a type of
/// its own: its first run records its text, and a run whose text differs (it should not) goes
/// as an ordinary query.
protocol PreparedRows: PostgresPreparedStatement where Row == PostgresRandomAccessRow {
    /// This run's statement and its values.
    var query: PostgresQuery { get }
    /// The statement's text, as its first run made it.
    static var text: StatementText { get }
}

/// A prepared statement's text (``PreparedRows/text``).
final class StatementText: Sendable {
    fileprivate let value = Mutex<String?>(nil)

    init() {}
}

extension PreparedRows {
    static var sql: String { text.value.withLock { $0 ?? "" } }

    func makeBindings() -> PostgresBindings { query.binds }

    func decodeRow(_ row: PostgresRow) -> PostgresRandomAccessRow { row.makeRandomAccess() }
}

extension PostgresConnection {
    /// Runs `statement` prepared (once per connection) and returns every row.
    @discardableResult
    func rows<Statement: PreparedRows>(prepared statement: Statement) async throws -> [PostgresRandomAccessRow] {
        let sql = statement.query.sql
        let same = Statement.text.value.withLock { text in
            if text == nil { text = sql }
            return text == sql
        }
        guard same else { return try await rows(statement.query) }
        var rows: [PostgresRandomAccessRow] = []
        for try await row in try await execute(statement, logger: PostgresDatabase.quiet) { rows.append(row) }
        return rows
    }
}

/// The prepared statements (see ``PreparedRows``).
enum Prepared {
    /// A device by its token's hash (every request).
    struct Device: PreparedRows {
        static let text = StatementText()
        let query: PostgresQuery
    }

    /// An account's roster and key envelopes (every plaintext commit, twice).
    struct AccountKeys: PreparedRows {
        static let text = StatementText()
        let query: PostgresQuery
    }

    /// The shares an account owns (every commit: whom to tell).
    struct OwnedShares: PreparedRows {
        static let text = StatementText()
        let query: PostgresQuery
    }

    /// A commit's facts, without manifests.
    struct CommitFacts: PreparedRows {
        static let text = StatementText()
        let query: PostgresQuery
    }

    /// A commit's facts, with manifests.
    struct CommitFactsWithManifests: PreparedRows {
        static let text = StatementText()
        let query: PostgresQuery
    }

    /// A commit's writes.
    struct CommitRecord: PreparedRows {
        static let text = StatementText()
        let query: PostgresQuery
    }
}
