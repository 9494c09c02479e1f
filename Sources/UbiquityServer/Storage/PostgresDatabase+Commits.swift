import Foundation
import PostgresNIO
import UbiquityProtocol

// PostgreSQL's record of devices' signed commits (as the embedded database's).
extension PostgresDatabase {
    func keepCommit(accountId: Int64, container: String, commit: KeptCommit, rosterEntry: Int64?) async throws -> KeptCommitPlacement {
        try await transaction { db in
            // One commit at a time per account (positions follow one another): the account's row
            // is the lock — roster appends take it too.
            _ = try await db.rows("SELECT id FROM account WHERE id = \(accountId) FOR UPDATE")
            if let rosterEntry {
                let last = try await db.rows("SELECT MAX(idx) AS last FROM roster_entry WHERE account_id = \(accountId)").first
                guard try last?.get("last", as: Int64?.self) == rosterEntry else { return .rosterMoved }
            }
            let existing = try await db.rows("""
                SELECT position, hash FROM signed_commit WHERE account_id = \(accountId) AND container = \(container)
                AND device = \(commit.device) AND sequence = \(commit.sequence)
                """).first.map { (position: try $0.get("position", as: Int64.self), hash: try $0.get("hash", as: Data.self)) }
            let last = try await db.rows("""
                SELECT sequence, hash FROM signed_commit WHERE account_id = \(accountId) AND container = \(container) AND device = \(commit.device)
                ORDER BY sequence DESC LIMIT 1
                """).first.map { (sequence: try $0.get("sequence", as: Int64.self), hash: try $0.get("hash", as: Data.self)) }
            if let answer = commit.placement(existing: existing, last: last) { return answer }
            let newest = try await db.rows("""
                SELECT position, total FROM signed_commit WHERE account_id = \(accountId) AND container = \(container) ORDER BY position DESC LIMIT 1
                """).first
            let position = (try newest?.get("position", as: Int64.self) ?? 0) + 1, total = (try newest?.get("total", as: Int64.self) ?? 0) + commit.size
            guard total <= KeptCommit.containerBudget else { return .overBudget }
            _ = try await db.rows("""
                INSERT INTO signed_commit (account_id, container, position, device, sequence, hash, body, content, total)
                VALUES (\(accountId), \(container), \(position), \(commit.device), \(commit.sequence), \(commit.hash), \(commit.body), \(commit.content), \(total))
                """)
            return .kept(position)
        }
    }

    func keptCommits(accountId: Int64, container: String, after position: Int64, limit: Int) async throws -> [StoredSignedCommit] {
        try await read { db in
            try await db.rows("""
                SELECT position, body, content FROM signed_commit WHERE account_id = \(accountId) AND container = \(container) AND position > \(position)
                ORDER BY position LIMIT \(Int64(limit))
                """).map {
                StoredSignedCommit(position: try $0.get("position"), commit: try $0.get("body"), content: try $0.get("content"))
            }
        }
    }

    func lastKeptCommit(accountId: Int64, container: String, device: String) async throws -> Data? {
        try await read { db in
            try await db.rows("""
                SELECT body FROM signed_commit WHERE account_id = \(accountId) AND container = \(container) AND device = \(device)
                ORDER BY sequence DESC LIMIT 1
                """).first.map { try $0.get("body", as: Data.self) }
        }
    }
}
