import Logging
import PostgresNIO
import Testing
import UbiquityTestSupport
@testable import UbiquityServer

/// Statements every commit runs are prepared once per connection (``PreparedRows``): they give
/// the same rows as the query they wrap, whatever their values (nulls among them), on each
/// pooled connection; one whose text differs from its first run's goes as an ordinary query.
@Suite struct PostgresPreparedTests {
    struct Doubled: PreparedRows {
        static let text = StatementText()
        let query: PostgresQuery
    }

    @Test(.enabled(if: Backend.all.contains(.postgres))) func aPreparedStatementAnswersAsItsQuery() async throws {
        let database = try await PostgresDatabase(location: try PostgresLocation(url: try Backend.postgresURL()), logger: Logger(label: "test"))
        do {
            // At once, so that several pooled connections prepare it.
            let answers = try await withThrowingTaskGroup(of: (Int64?, Int64?).self) { group in
                for value in 0..<40 {
                    let given: Int64? = value % 3 == 0 ? nil : Int64(value)
                    group.addTask {
                        let rows = try await database.read { db in
                            try await db.rows(prepared: Doubled(query: "SELECT \(given)::BIGINT * 2 AS doubled"))
                        }
                        return (given, try rows.first?.get("doubled", as: Int64?.self))
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.count == 40)
            for (given, doubled) in answers { #expect(doubled == given.map { $0 * 2 }) }
            // Prepared on the connection, not parsed anew.
            let prepared = try await database.read { db in
                try await db.rows(prepared: Doubled(query: "SELECT \(Int64(1))::BIGINT * 2 AS doubled"))
                return try await db.rows("SELECT count(*) AS n FROM pg_prepared_statements WHERE statement LIKE '%* 2 AS doubled%'").first?.get("n", as: Int64.self)
            }
            #expect(prepared == 1)
            // Another text under the same type is not run as the prepared one.
            let other = try await database.read { db in try await db.rows(prepared: Doubled(query: "SELECT \(Int64(5))::BIGINT * 3 AS doubled")) }
            #expect(try other.first?.get("doubled", as: Int64.self) == 15)
        } catch {
            await database.close()
            throw error
        }
        await database.close()
    }
}
