import Foundation
import GRDB
import UbiquityProtocol

// Shares and their invitations (issue 46, docs/Sharing.md).
extension SQLiteDatabase {
    private static let shareColumns = "share.id, share.accountId, account.name AS owner, share.container, share.item, share.epoch, share.created"

    private static func share(_ row: Row) -> StoredShare {
        StoredShare(id: row["id"], accountId: row["accountId"], owner: row["owner"], container: row["container"], item: row["item"],
                    epoch: row["epoch"], created: row["created"])
    }

    private static func participant(_ row: Row, prefix: String = "") -> StoredParticipant {
        StoredParticipant(id: row[prefix + "id"], shareId: row[prefix + "shareId"], accountId: row[prefix + "accountId"], name: row[prefix + "name"],
                          role: ShareRole(rawValue: row[prefix + "role"]) ?? .readOnly,
                          state: ShareParticipantState(rawValue: row[prefix + "state"]) ?? .removed,
                          invited: row[prefix + "invited"], expires: row[prefix + "expires"])
    }

    func makeShare(accountId: Int64, container: String, item: String, id: String, now: Double) async throws -> StoredShare {
        try await pool.write { db in
            try db.execute(sql: """
                INSERT INTO share (id, accountId, container, item, epoch, created) VALUES (?, ?, ?, ?, 1, ?)
                ON CONFLICT (accountId, container, item) DO NOTHING
                """, arguments: [id, accountId, container, item, now])
            let row = try Row.fetchOne(db, sql: """
                SELECT \(Self.shareColumns) FROM share JOIN account ON account.id = share.accountId
                WHERE share.accountId = ? AND share.container = ? AND share.item = ?
                """, arguments: [accountId, container, item])
            return Self.share(row!) // (just made, or there already: the row is there)
        }
    }

    func share(id: String) async throws -> StoredShare? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT \(Self.shareColumns) FROM share JOIN account ON account.id = share.accountId WHERE share.id = ?",
                             arguments: [id]).map(Self.share)
        }
    }

    func ownedShares(accountId: Int64) async throws -> [StoredShare] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT \(Self.shareColumns) FROM share JOIN account ON account.id = share.accountId WHERE share.accountId = ? ORDER BY share.created, share.id
                """, arguments: [accountId]).map(Self.share)
        }
    }

    func shareRoots(accountId: Int64, container: String) async throws -> [String] {
        try await pool.read { db in
            try String.fetchAll(db, sql: "SELECT item FROM share WHERE accountId = ? AND container = ?", arguments: [accountId, container])
        }
    }

    func stopShare(accountId: Int64, id: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM shareParticipant WHERE shareId IN (SELECT id FROM share WHERE id = ? AND accountId = ?)", arguments: [id, accountId])
            try db.execute(sql: "DELETE FROM shareExit WHERE shareId IN (SELECT id FROM share WHERE id = ? AND accountId = ?)", arguments: [id, accountId])
            try db.execute(sql: "DELETE FROM shareKey WHERE shareId IN (SELECT id FROM share WHERE id = ? AND accountId = ?)", arguments: [id, accountId])
            try db.execute(sql: "DELETE FROM share WHERE id = ? AND accountId = ?", arguments: [id, accountId])
            return db.changesCount > 0
        }
    }

    func invite(shareId: String, ownerId: Int64, name: String, role: ShareRole, id: String, now: Double, limits: InvitationLimits) async throws -> StoredParticipant? {
        try await pool.write { db in
            if let pending = try Row.fetchOne(db, sql: """
                SELECT shareParticipant.* FROM shareParticipant JOIN share ON share.id = shareParticipant.shareId
                WHERE shareParticipant.shareId = ? AND share.accountId = ? AND shareParticipant.name = ? AND shareParticipant.state = 'invited'
                AND shareParticipant.expires > ?
                """, arguments: [shareId, ownerId, name, now]) {
                return Self.participant(pending)
            }
            let owned = "SELECT id FROM share WHERE accountId = \(ownerId)"
            let lastHour = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM shareParticipant WHERE shareId IN (\(owned)) AND invited > ?", arguments: [now - 3_600]) ?? 0
            let unanswered = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM shareParticipant WHERE shareId IN (\(owned)) AND state = 'invited' AND expires > ?",
                                              arguments: [now]) ?? 0
            guard lastHour < limits.perHour, unanswered < limits.pending else { return nil }
            let invited = StoredParticipant(id: id, shareId: shareId, accountId: try Int64.fetchOne(db, sql: "SELECT id FROM account WHERE name = ?", arguments: [name]),
                                            name: name, role: role, state: .invited, invited: now, expires: now + limits.lifetime)
            // (A participant who had left, declined or was removed is invited again: a row of its own.)
            try db.execute(sql: """
                INSERT INTO shareParticipant (id, shareId, accountId, name, role, state, invited, expires, changed) VALUES (?, ?, ?, ?, ?, 'invited', ?, ?, ?)
                """, arguments: [invited.id, shareId, invited.accountId, name, role.rawValue, now, invited.expires, now])
            return invited
        }
    }

    func participants(shareId: String) async throws -> [StoredParticipant] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM shareParticipant WHERE shareId = ? ORDER BY invited, id", arguments: [shareId]).map { Self.participant($0) }
        }
    }

    func participations(accountId: Int64) async throws -> [(share: StoredShare, participant: StoredParticipant)] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT \(Self.shareColumns), shareParticipant.id AS p_id, shareParticipant.shareId AS p_shareId, shareParticipant.accountId AS p_accountId,
                    shareParticipant.name AS p_name, shareParticipant.role AS p_role, shareParticipant.state AS p_state,
                    shareParticipant.invited AS p_invited, shareParticipant.expires AS p_expires
                FROM shareParticipant JOIN share ON share.id = shareParticipant.shareId JOIN account ON account.id = share.accountId
                WHERE shareParticipant.accountId = ? ORDER BY shareParticipant.invited, shareParticipant.id
                """, arguments: [accountId]).map { (Self.share($0), Self.participant($0, prefix: "p_")) }
        }
    }

    func updateParticipant(_ match: ParticipantMatch, from: [ShareParticipantState], to: ShareParticipantState?, role: ShareRole?, now: Double) async throws -> Bool {
        guard !from.isEmpty else { return false }
        return try await pool.write { db in
            var conditions = ["state IN (\(from.map { _ in "?" }.joined(separator: ", ")))", "(state <> 'invited' OR expires > ?)"]
            var arguments: [any DatabaseValueConvertible] = from.map(\.rawValue) + [now]
            if let id = match.id { conditions.append("id = ?"); arguments.append(id) }
            if let share = match.share { conditions.append("shareId = ?"); arguments.append(share) }
            if let participant = match.participant { conditions.append("accountId = ?"); arguments.append(participant) }
            if let owner = match.owner { conditions.append("shareId IN (SELECT id FROM share WHERE accountId = ?)"); arguments.append(owner) }
            try db.execute(sql: "UPDATE shareParticipant SET state = COALESCE(?, state), role = COALESCE(?, role), changed = ? WHERE " + conditions.joined(separator: " AND "),
                           arguments: StatementArguments([to?.rawValue, role?.rawValue, now] as [(any DatabaseValueConvertible)?]) + StatementArguments(arguments))
            return db.changesCount > 0
        }
    }

    func shareExits(shareId: String, after: Int64, through: Int64) async throws -> [(item: String, sequence: Int64)] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT item, sequence FROM shareExit WHERE shareId = ? AND sequence > ? AND sequence <= ? ORDER BY sequence, item",
                             arguments: [shareId, after, through]).map { ($0["item"], $0["sequence"]) }
        }
    }

    func chunksNamed(accountId: Int64, container: String, inside root: String, hashes: [String]) async throws -> Set<String> {
        guard !hashes.isEmpty else { return [] }
        return try await pool.read { db in
            guard let containerId = try Int64.fetchOne(db, sql: "SELECT id FROM container WHERE accountId = ? AND identifier = ?", arguments: [accountId, container]) else {
                return []
            }
            var named = Set<String>()
            for start in stride(from: 0, to: hashes.count, by: 500) {
                let batch = Array(hashes[start..<min(start + 500, hashes.count)])
                let marks = Array(repeating: "?", count: batch.count).joined(separator: ",")
                named.formUnion(try String.fetchAll(db, sql: """
                    WITH RECURSIVE inside(id) AS (
                        SELECT id FROM item WHERE containerId = ? AND id = ?
                        UNION SELECT item.id FROM item JOIN inside ON item.containerId = ? AND item.parentKey = inside.id)
                    SELECT DISTINCT revisionChunk.hash FROM inside JOIN revision ON revision.containerId = ? AND revision.itemId = inside.id
                    JOIN revisionChunk ON revisionChunk.revisionId = revision.id AND revisionChunk.hash IN (\(marks))
                    """, arguments: StatementArguments([containerId, root, containerId, containerId] as [any DatabaseValueConvertible] + batch)))
            }
            return named
        }
    }

    func subtree(accountId: Int64, container: String, root: String, limit: Int) async throws -> Set<String>? {
        try await pool.read { db in
            guard let containerId = try Int64.fetchOne(db, sql: "SELECT id FROM container WHERE accountId = ? AND identifier = ?", arguments: [accountId, container]) else {
                return nil
            }
            let ids = try String.fetchAll(db, sql: """
                WITH RECURSIVE inside(id) AS (
                    SELECT id FROM item WHERE containerId = ? AND id = ?
                    UNION SELECT item.id FROM item JOIN inside ON item.containerId = ? AND item.parentKey = inside.id)
                SELECT id FROM inside LIMIT ?
                """, arguments: [containerId, root, containerId, limit + 1])
            return ids.count > limit ? nil : Set(ids)
        }
    }
}

// What the rules read and write of shares, in the commit's transaction.
extension SQLiteRuleStorage {
    func shareRoots(of container: Int64) throws -> [(share: String, root: String)] {
        try Row.fetchAll(db.cachedStatement(sql: """
            SELECT share.id, share.item FROM share JOIN container ON container.accountId = share.accountId AND container.identifier = share.container
            WHERE container.id = ?
            """), arguments: [container]).map { ($0["id"], $0["item"]) }
    }

    func folder(of item: String, in container: Int64) throws -> String? {
        let key = try String.fetchOne(db.cachedStatement(sql: "SELECT parentKey FROM item WHERE containerId = ? AND id = ?"), arguments: [container, item])
        return key.flatMap { $0.isEmpty ? nil : $0 }
    }

    func recordShareExit(share: String, item: String, sequence: Int64) throws {
        try db.execute(sql: "INSERT OR IGNORE INTO shareExit (shareId, item, sequence) VALUES (?, ?, ?)", arguments: [share, item, sequence])
    }
}
