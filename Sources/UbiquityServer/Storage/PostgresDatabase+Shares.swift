import Foundation
import PostgresNIO
import UbiquityProtocol

// Shares and their invitations (issue 46, docs/Sharing.md), as the embedded database's.
extension PostgresDatabase {
    private static func share(_ row: PostgresRandomAccessRow) throws -> StoredShare {
        StoredShare(id: try row.get("id"), accountId: try row.get("account_id"), owner: try row.get("owner"), container: try row.get("container"),
                    item: try row.get("item"), epoch: try row.get("epoch"), created: try row.get("created"))
    }

    private static func participant(_ row: PostgresRandomAccessRow, prefix: String = "") throws -> StoredParticipant {
        StoredParticipant(id: try row.get(prefix + "id"), shareId: try row.get(prefix + "share_id"), accountId: try row.get(prefix + "account_id"),
                          name: try row.get(prefix + "name"), role: ShareRole(rawValue: try row.get(prefix + "role")) ?? .readOnly,
                          state: ShareParticipantState(rawValue: try row.get(prefix + "state")) ?? .removed,
                          invited: try row.get(prefix + "invited"), expires: try row.get(prefix + "expires"))
    }

    func makeShare(accountId: Int64, container: String, item: String, id: String, now: Double) async throws -> StoredShare {
        try await transaction { db in
            _ = try await db.rows("""
                INSERT INTO share (id, account_id, container, item, epoch, created) VALUES (\(id), \(accountId), \(container), \(item), 1, \(now))
                ON CONFLICT (account_id, container, item) DO NOTHING
                """)
            let rows = try await db.rows("""
                SELECT share.id, share.account_id, account.name AS owner, share.container, share.item, share.epoch, share.created
                FROM share JOIN account ON account.id = share.account_id WHERE share.account_id = \(accountId) AND share.container = \(container) AND share.item = \(item)
                """)
            return try Self.share(rows[0]) // (just made, or there already: the row is there)
        }
    }

    func share(id: String) async throws -> StoredShare? {
        try await read { db in
            try await db.rows("""
                SELECT share.id, share.account_id, account.name AS owner, share.container, share.item, share.epoch, share.created
                FROM share JOIN account ON account.id = share.account_id WHERE share.id = \(id)
                """).first.map(Self.share)
        }
    }

    func ownedShares(accountId: Int64) async throws -> [StoredShare] {
        try await read { db in
            try await db.rows(prepared: Prepared.OwnedShares(query: """
                SELECT share.id, share.account_id, account.name AS owner, share.container, share.item, share.epoch, share.created
                FROM share JOIN account ON account.id = share.account_id WHERE share.account_id = \(accountId) ORDER BY share.created, share.id
                """)).map(Self.share)
        }
    }

    func shareRoots(accountId: Int64, container: String) async throws -> [String] {
        try await read { db in
            try await db.rows("SELECT item FROM share WHERE account_id = \(accountId) AND container = \(container)").map { try $0.get("item", as: String.self) }
        }
    }

    func stopShare(accountId: Int64, id: String) async throws -> Bool {
        try await transaction { db in
            !(try await db.rows("DELETE FROM share WHERE id = \(id) AND account_id = \(accountId) RETURNING id")).isEmpty // (its invitations go with it)
        }
    }

    func invite(shareId: String, ownerId: Int64, name: String, role: ShareRole, id: String, now: Double, limits: InvitationLimits) async throws -> StoredParticipant? {
        try await transaction { db in
            // (The owner's account held: two invitations at once count each other.)
            _ = try await db.rows("SELECT id FROM account WHERE id = \(ownerId) FOR UPDATE")
            if let pending = try await db.rows("""
                SELECT share_participant.* FROM share_participant JOIN share ON share.id = share_participant.share_id
                WHERE share_participant.share_id = \(shareId) AND share.account_id = \(ownerId) AND share_participant.name = \(name)
                AND share_participant.state = 'invited' AND share_participant.expires > \(now)
                """).first {
                return try Self.participant(pending)
            }
            let hourAgo = now - 3_600
            let counts = try await db.rows("""
                SELECT COUNT(*) FILTER (WHERE invited > \(hourAgo)) AS recent, COUNT(*) FILTER (WHERE state = 'invited' AND expires > \(now)) AS unanswered
                FROM share_participant WHERE share_id IN (SELECT id FROM share WHERE account_id = \(ownerId))
                """)
            guard try counts[0].get("recent", as: Int64.self) < Int64(limits.perHour), try counts[0].get("unanswered", as: Int64.self) < Int64(limits.pending) else { return nil }
            let account = try await db.rows("SELECT id FROM account WHERE name = \(name)").first?.get("id", as: Int64.self)
            let invited = StoredParticipant(id: id, shareId: shareId, accountId: account, name: name, role: role, state: .invited, invited: now, expires: now + limits.lifetime)
            _ = try await db.rows("""
                INSERT INTO share_participant (id, share_id, account_id, name, role, state, invited, expires, changed)
                VALUES (\(id), \(shareId), \(account), \(name), \(role.rawValue), 'invited', \(now), \(invited.expires), \(now))
                """)
            return invited
        }
    }

    func participants(shareId: String) async throws -> [StoredParticipant] {
        try await read { db in
            try await db.rows("SELECT * FROM share_participant WHERE share_id = \(shareId) ORDER BY invited, id").map { try Self.participant($0) }
        }
    }

    func participations(accountId: Int64) async throws -> [(share: StoredShare, participant: StoredParticipant)] {
        try await read { db in
            try await db.rows("""
                SELECT share.id, share.account_id, account.name AS owner, share.container, share.item, share.epoch, share.created,
                    p.id AS p_id, p.share_id AS p_share_id, p.account_id AS p_account_id, p.name AS p_name, p.role AS p_role, p.state AS p_state,
                    p.invited AS p_invited, p.expires AS p_expires
                FROM share_participant p JOIN share ON share.id = p.share_id JOIN account ON account.id = share.account_id
                WHERE p.account_id = \(accountId) ORDER BY p.invited, p.id
                """).map { (try Self.share($0), try Self.participant($0, prefix: "p_")) }
        }
    }

    func updateParticipant(_ match: ParticipantMatch, from: [ShareParticipantState], to: ShareParticipantState?, role: ShareRole?, now: Double) async throws -> Bool {
        guard !from.isEmpty else { return false }
        let states = from.map(\.rawValue)
        return try await transaction { db in
            !(try await db.rows("""
                UPDATE share_participant SET state = COALESCE(\(to?.rawValue)::TEXT, state), role = COALESCE(\(role?.rawValue)::TEXT, role), changed = \(now)
                WHERE state = ANY(\(states)::TEXT[]) AND (state <> 'invited' OR expires > \(now))
                AND (\(match.id)::TEXT IS NULL OR id = \(match.id)) AND (\(match.share)::TEXT IS NULL OR share_id = \(match.share))
                AND (\(match.participant)::BIGINT IS NULL OR account_id = \(match.participant))
                AND (\(match.owner)::BIGINT IS NULL OR share_id IN (SELECT id FROM share WHERE account_id = \(match.owner)))
                RETURNING id
                """)).isEmpty
        }
    }

    func shareExits(shareId: String, after: Int64, through: Int64) async throws -> [(item: String, sequence: Int64)] {
        try await read { db in
            try await db.rows("""
                SELECT item, sequence FROM share_exit WHERE share_id = \(shareId) AND sequence > \(after) AND sequence <= \(through) ORDER BY sequence, item
                """).map { (try $0.get("item", as: String.self), try $0.get("sequence", as: Int64.self)) }
        }
    }

    func chunksNamed(accountId: Int64, container: String, inside root: String, hashes: [String]) async throws -> Set<String> {
        guard !hashes.isEmpty else { return [] }
        return try await read { db in
            Set(try await db.rows("""
                WITH RECURSIVE place AS (SELECT id FROM container WHERE account_id = \(accountId) AND identifier = \(container)),
                inside(id) AS (
                    SELECT item.id FROM item WHERE item.container_id = (SELECT id FROM place) AND item.id = \(root)
                    UNION SELECT item.id FROM item JOIN inside ON item.parent_key = inside.id WHERE item.container_id = (SELECT id FROM place))
                SELECT DISTINCT revision_chunk.hash FROM inside JOIN revision ON revision.container_id = (SELECT id FROM place) AND revision.item_id = inside.id
                JOIN revision_chunk ON revision_chunk.revision_id = revision.id AND revision_chunk.hash = ANY(\(hashes)::TEXT[])
                """).map { try $0.get("hash", as: String.self) })
        }
    }

    func subtree(accountId: Int64, container: String, root: String, limit: Int) async throws -> Set<String>? {
        let most = limit + 1
        return try await read { db in
            let ids = try await db.rows("""
                WITH RECURSIVE inside(id) AS (
                    SELECT item.id FROM item JOIN container ON container.id = item.container_id
                    WHERE container.account_id = \(accountId) AND container.identifier = \(container) AND item.id = \(root)
                    UNION SELECT item.id FROM item JOIN inside ON item.parent_key = inside.id
                    WHERE item.container_id = (SELECT id FROM container WHERE account_id = \(accountId) AND identifier = \(container)))
                SELECT id FROM inside LIMIT \(most)
                """).map { try $0.get("id", as: String.self) }
            return ids.count > limit ? nil : Set(ids)
        }
    }
}

// What the rules read and write of shares, in the commit's transaction.
extension PostgresRuleStorage {
    func shareRoots(of container: Int64) async throws -> [(share: String, root: String)] {
        try await db.rows("""
            SELECT share.id, share.item FROM share JOIN container ON container.account_id = share.account_id AND container.identifier = share.container
            WHERE container.id = \(container)
            """).map { (try $0.get("id", as: String.self), try $0.get("item", as: String.self)) }
    }

    func folder(of item: String, in container: Int64) async throws -> String? {
        let key = try await db.rows("SELECT parent_key FROM item WHERE container_id = \(container) AND id = \(item)").first?.get("parent_key", as: String?.self)
        return key.flatMap { $0.isEmpty ? nil : $0 }
    }

    func recordShareExit(share: String, item: String, sequence: Int64) async throws {
        _ = try await db.rows("INSERT INTO share_exit (share_id, item, sequence) VALUES (\(share), \(item), \(sequence)) ON CONFLICT DO NOTHING")
    }
}
