import Foundation
import GRDB
import UbiquityProtocol

// The embedded database's record of devices' signed commits (issue 45), and their checkpoints.
extension SQLiteDatabase {
    func keepCommit(accountId: Int64, container: String, commit: KeptCommit, rosterEntry: Int64?) async throws -> KeptCommitPlacement {
        try await pool.write { db in
            if let rosterEntry {
                let last = try Int64.fetchOne(db, sql: "SELECT MAX(idx) FROM rosterEntry WHERE accountId = ?", arguments: [accountId])
                guard last == rosterEntry else { return .rosterMoved }
            }
            let existing = try Row.fetchOne(db, sql: "SELECT position, hash FROM signedCommit WHERE accountId = ? AND container = ? AND device = ? AND sequence = ?",
                                            arguments: [accountId, container, commit.device, commit.sequence]).map { (position: $0["position"] as Int64, hash: $0["hash"] as Data) }
            let lastRow = try Row.fetchOne(db, sql: """
                SELECT sequence, hash, checkpointStart, checkpointPart, checkpointParts FROM signedCommit
                WHERE accountId = ? AND container = ? AND device = ? ORDER BY sequence DESC LIMIT 1
                """, arguments: [accountId, container, commit.device])
            let last = lastRow.map { (sequence: $0["sequence"] as Int64, hash: $0["hash"] as Data) }
            if let answer = commit.placement(existing: existing, last: last) { return answer }
            let newest = try Row.fetchOne(db, sql: "SELECT position, total FROM signedCommit WHERE accountId = ? AND container = ? ORDER BY position DESC LIMIT 1",
                                          arguments: [accountId, container])
            let position = (newest?["position"] as Int64? ?? 0) + 1, total = (newest?["total"] as Int64? ?? 0) + commit.size
            let checkpoint = try Self.commitCheckpoint(db, accountId: accountId, container: container)
            guard CommitCheckpoint.fits(CommitCheckpoint.kept(total: total, since: checkpoint), since: checkpoint) else { return .overBudget }
            // A checkpoint's part: part 0 starts one if its heads are every device's last kept
            // commit; a later part goes on with it if the device's last commit is the part before.
            var start: Int64?
            if let part = commit.checkpoint {
                if part.index == 0, let heads = part.heads {
                    start = KeptCommit.headsMatch(heads, kept: try Self.lastKeptHeads(db, accountId: accountId, container: container)) ? position : nil
                } else if let lastRow, let began = lastRow["checkpointStart"] as Int64?, lastRow["checkpointPart"] as Int64? == part.index - 1,
                          lastRow["checkpointParts"] as Int64? == part.count {
                    start = began
                }
            }
            try db.execute(sql: """
                INSERT INTO signedCommit (accountId, container, position, device, sequence, hash, body, content, total, checkpointStart, checkpointPart, checkpointParts)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [accountId, container, position, commit.device, commit.sequence, commit.hash, commit.body, commit.content, total,
                                 start, commit.checkpoint?.index, commit.checkpoint?.count])
            if let start, let part = commit.checkpoint, part.index + 1 == part.count {
                try Self.completeCheckpoint(db, accountId: accountId, container: container, start: start, total: total)
            }
            return .kept(position)
        }
    }

    /// Each device's last kept commit of the container.
    private static func lastKeptHeads(_ db: Database, accountId: Int64, container: String) throws -> [String: KeptCommit.Head] {
        var heads: [String: KeptCommit.Head] = [:]
        for row in try Row.fetchAll(db, sql: """
            SELECT device, sequence, hash FROM signedCommit AS s WHERE accountId = ? AND container = ?
                AND sequence = (SELECT MAX(sequence) FROM signedCommit AS t WHERE t.accountId = s.accountId AND t.container = s.container AND t.device = s.device)
            """, arguments: [accountId, container]) {
            heads[row["device"]] = KeptCommit.Head(sequence: row["sequence"], hash: row["hash"])
        }
        return heads
    }

    /// The checkpoint starting at `start` is whole (its last part kept, the container's running
    /// total `total` now): the commits before it go but each device's last, and it is the
    /// container's checkpoint from now on.
    private static func completeCheckpoint(_ db: Database, accountId: Int64, container: String, start: Int64, total: Int64) throws {
        guard let first = try Row.fetchOne(db, sql: """
            SELECT total - length(body) - length(content) AS dropped FROM signedCommit WHERE accountId = ? AND container = ? AND position = ?
            """, arguments: [accountId, container, start]) else { return }
        let before: Int64 = first["dropped"]
        try db.execute(sql: """
            DELETE FROM signedCommit WHERE accountId = ?1 AND container = ?2 AND position < ?3 AND EXISTS
                (SELECT 1 FROM signedCommit AS t WHERE t.accountId = ?1 AND t.container = ?2 AND t.device = signedCommit.device AND t.sequence > signedCommit.sequence)
            """, arguments: [accountId, container, start])
        try db.execute(sql: """
            INSERT INTO commitCheckpoint (accountId, container, start, dropped, size) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT(accountId, container) DO UPDATE SET start = excluded.start, dropped = excluded.dropped, size = excluded.size
            """, arguments: [accountId, container, start, before, total - before])
    }

    private static func commitCheckpoint(_ db: Database, accountId: Int64, container: String) throws -> CommitCheckpoint? {
        try Row.fetchOne(db, sql: "SELECT start, dropped, size FROM commitCheckpoint WHERE accountId = ? AND container = ?", arguments: [accountId, container])
            .map { CommitCheckpoint(start: $0["start"], before: $0["dropped"], size: $0["size"]) }
    }

    func commitFigures(accountId: Int64, container: String) async throws -> (total: Int64, checkpoint: CommitCheckpoint?) {
        try await pool.read { db in
            let total = try Int64.fetchOne(db, sql: "SELECT total FROM signedCommit WHERE accountId = ? AND container = ? ORDER BY position DESC LIMIT 1",
                                           arguments: [accountId, container]) ?? 0
            return (total, try Self.commitCheckpoint(db, accountId: accountId, container: container))
        }
    }

    func lastCommitPosition(accountId: Int64, container: String) async throws -> Int64 {
        try await pool.read { db in
            try Int64.fetchOne(db, sql: "SELECT position FROM signedCommit WHERE accountId = ? AND container = ? ORDER BY position DESC LIMIT 1",
                               arguments: [accountId, container]) ?? 0
        }
    }

    func keptCommits(accountId: Int64, container: String, after position: Int64, limit: Int) async throws -> [StoredSignedCommit] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT position, body, content FROM signedCommit WHERE accountId = ? AND container = ? AND position > ? ORDER BY position LIMIT ?
                """, arguments: [accountId, container, position, limit]).map {
                StoredSignedCommit(position: $0["position"], commit: $0["body"], content: $0["content"])
            }
        }
    }

    func lastKeptCommit(accountId: Int64, container: String, device: String) async throws -> Data? {
        try await pool.read { db in
            try Data.fetchOne(db, sql: "SELECT body FROM signedCommit WHERE accountId = ? AND container = ? AND device = ? ORDER BY sequence DESC LIMIT 1",
                              arguments: [accountId, container, device])
        }
    }
}
