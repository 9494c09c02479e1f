import Foundation
import GRDB
import UbiquityProtocol

// The embedded database's record of devices' signed commits (issue 45).
extension SQLiteDatabase {
    func keepCommit(accountId: Int64, container: String, commit: KeptCommit, rosterEntry: Int64?) async throws -> KeptCommitPlacement {
        try await pool.write { db in
            if let rosterEntry {
                let last = try Int64.fetchOne(db, sql: "SELECT MAX(idx) FROM rosterEntry WHERE accountId = ?", arguments: [accountId])
                guard last == rosterEntry else { return .rosterMoved }
            }
            let existing = try Row.fetchOne(db, sql: "SELECT position, hash FROM signedCommit WHERE accountId = ? AND container = ? AND device = ? AND sequence = ?",
                                            arguments: [accountId, container, commit.device, commit.sequence]).map { (position: $0["position"] as Int64, hash: $0["hash"] as Data) }
            let last = try Row.fetchOne(db, sql: """
                SELECT sequence, hash FROM signedCommit WHERE accountId = ? AND container = ? AND device = ? ORDER BY sequence DESC LIMIT 1
                """, arguments: [accountId, container, commit.device]).map { (sequence: $0["sequence"] as Int64, hash: $0["hash"] as Data) }
            if let answer = commit.placement(existing: existing, last: last) { return answer }
            let newest = try Row.fetchOne(db, sql: "SELECT position, total FROM signedCommit WHERE accountId = ? AND container = ? ORDER BY position DESC LIMIT 1",
                                          arguments: [accountId, container])
            let position = (newest?["position"] as Int64? ?? 0) + 1, total = (newest?["total"] as Int64? ?? 0) + commit.size
            guard total <= KeptCommit.containerBudget else { return .overBudget }
            try db.execute(sql: """
                INSERT INTO signedCommit (accountId, container, position, device, sequence, hash, body, content, total) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [accountId, container, position, commit.device, commit.sequence, commit.hash, commit.body, commit.content, total])
            return .kept(position)
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
