import Foundation
import PostgresNIO
import UbiquityProtocol

// PostgreSQL's record of devices' signed commits and their checkpoints (as the embedded database's).
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
            let lastRow = try await db.rows("""
                SELECT sequence, hash, checkpoint_start, checkpoint_part, checkpoint_parts FROM signed_commit
                WHERE account_id = \(accountId) AND container = \(container) AND device = \(commit.device) ORDER BY sequence DESC LIMIT 1
                """).first
            let last = try lastRow.map { (sequence: try $0.get("sequence", as: Int64.self), hash: try $0.get("hash", as: Data.self)) }
            if let answer = commit.placement(existing: existing, last: last) { return answer }
            let newest = try await db.rows("""
                SELECT position, total FROM signed_commit WHERE account_id = \(accountId) AND container = \(container) ORDER BY position DESC LIMIT 1
                """).first
            let position = (try newest?.get("position", as: Int64.self) ?? 0) + 1, total = (try newest?.get("total", as: Int64.self) ?? 0) + commit.size
            let checkpoint = try await Self.commitCheckpoint(db, accountId: accountId, container: container)
            guard CommitCheckpoint.fits(CommitCheckpoint.kept(total: total, since: checkpoint), since: checkpoint) else { return .overBudget }
            // A checkpoint's part: part 0 starts one if its heads are every device's last kept
            // commit; a later part goes on with it if the device's last commit is the part before.
            var start: Int64?
            if let part = commit.checkpoint {
                if part.index == 0, let heads = part.heads {
                    start = KeptCommit.headsMatch(heads, kept: try await Self.lastKeptHeads(db, accountId: accountId, container: container)) ? position : nil
                } else if let lastRow, let began = try lastRow.get("checkpoint_start", as: Int64?.self),
                          try lastRow.get("checkpoint_part", as: Int64?.self) == part.index - 1, try lastRow.get("checkpoint_parts", as: Int64?.self) == part.count {
                    start = began
                }
            }
            _ = try await db.rows("""
                INSERT INTO signed_commit (account_id, container, position, device, sequence, hash, body, content, total, checkpoint_start, checkpoint_part, checkpoint_parts)
                VALUES (\(accountId), \(container), \(position), \(commit.device), \(commit.sequence), \(commit.hash), \(commit.body), \(commit.content), \(total),
                        \(start), \(commit.checkpoint?.index), \(commit.checkpoint?.count))
                """)
            if let start, let part = commit.checkpoint, part.index + 1 == part.count {
                try await Self.completeCheckpoint(db, accountId: accountId, container: container, start: start, total: total)
            }
            return .kept(position)
        }
    }

    /// Each device's last kept commit of the container.
    private static func lastKeptHeads(_ db: PostgresConnection, accountId: Int64, container: String) async throws -> [String: KeptCommit.Head] {
        var heads: [String: KeptCommit.Head] = [:]
        for row in try await db.rows("""
            SELECT DISTINCT ON (device) device, sequence, hash FROM signed_commit WHERE account_id = \(accountId) AND container = \(container)
            ORDER BY device, sequence DESC
            """) {
            heads[try row.get("device", as: String.self)] = KeptCommit.Head(sequence: try row.get("sequence", as: Int64.self), hash: try row.get("hash", as: Data.self))
        }
        return heads
    }

    /// As the embedded database's: the commits before a whole checkpoint go, but each device's last.
    private static func completeCheckpoint(_ db: PostgresConnection, accountId: Int64, container: String, start: Int64, total: Int64) async throws {
        guard let first = try await db.rows("""
            SELECT total - length(body) - length(content) AS dropped FROM signed_commit WHERE account_id = \(accountId) AND container = \(container) AND position = \(start)
            """).first else { return }
        let before = try first.get("dropped", as: Int64.self)
        _ = try await db.rows("""
            DELETE FROM signed_commit AS s WHERE s.account_id = \(accountId) AND s.container = \(container) AND s.position < \(start) AND EXISTS
                (SELECT 1 FROM signed_commit AS t WHERE t.account_id = s.account_id AND t.container = s.container AND t.device = s.device AND t.sequence > s.sequence)
            """)
        _ = try await db.rows("""
            INSERT INTO commit_checkpoint (account_id, container, start, dropped, size) VALUES (\(accountId), \(container), \(start), \(before), \(total - before))
            ON CONFLICT (account_id, container) DO UPDATE SET start = excluded.start, dropped = excluded.dropped, size = excluded.size
            """)
    }

    private static func commitCheckpoint(_ db: PostgresConnection, accountId: Int64, container: String) async throws -> CommitCheckpoint? {
        try await db.rows("SELECT start, dropped, size FROM commit_checkpoint WHERE account_id = \(accountId) AND container = \(container)").first.map {
            CommitCheckpoint(start: try $0.get("start", as: Int64.self), before: try $0.get("dropped", as: Int64.self), size: try $0.get("size", as: Int64.self))
        }
    }

    func commitFigures(accountId: Int64, container: String) async throws -> (total: Int64, checkpoint: CommitCheckpoint?) {
        try await read { db in
            let total = try await db.rows("""
                SELECT total FROM signed_commit WHERE account_id = \(accountId) AND container = \(container) ORDER BY position DESC LIMIT 1
                """).first.map { try $0.get("total", as: Int64.self) } ?? 0
            return (total, try await Self.commitCheckpoint(db, accountId: accountId, container: container))
        }
    }

    func lastCommitPosition(accountId: Int64, container: String) async throws -> Int64 {
        try await read { db in
            try await db.rows("""
                SELECT position FROM signed_commit WHERE account_id = \(accountId) AND container = \(container) ORDER BY position DESC LIMIT 1
                """).first.map { try $0.get("position", as: Int64.self) } ?? 0
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
