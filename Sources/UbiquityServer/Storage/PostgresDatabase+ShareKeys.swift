import Foundation
import PostgresNIO

// The keys of sharing (issue 46, docs/Sharing.md "Keys"), as the embedded database's.
extension PostgresDatabase {
    private static func identity(_ row: PostgresRandomAccessRow) throws -> StoredSharingIdentity {
        StoredSharingIdentity(signing: try row.get("signing"), agreement: try row.get("agreement"), sealed: try row.get("sealed"))
    }

    func sharingIdentity(accountId: Int64) async throws -> StoredSharingIdentity? {
        try await read { db in
            try await db.rows("SELECT signing, agreement, sealed FROM sharing_identity WHERE account_id = \(accountId)").first.map(Self.identity)
        }
    }

    func publishSharingIdentity(accountId: Int64, _ identity: StoredSharingIdentity, replacing: Data?, now: Double) async throws -> StoredSharingIdentity {
        try await transaction { db in
            // One publication at a time per account: the account's row is the lock.
            _ = try await db.rows("SELECT id FROM account WHERE id = \(accountId) FOR UPDATE")
            let current = try await db.rows("SELECT signing FROM sharing_identity WHERE account_id = \(accountId)").first?.get("signing", as: Data.self)
            if current == replacing {
                _ = try await db.rows("""
                    INSERT INTO sharing_identity (account_id, signing, agreement, sealed, updated)
                    VALUES (\(accountId), \(identity.signing), \(identity.agreement), \(identity.sealed), \(now))
                    ON CONFLICT (account_id) DO UPDATE SET signing = EXCLUDED.signing, agreement = EXCLUDED.agreement, sealed = EXCLUDED.sealed, updated = EXCLUDED.updated
                    """)
            }
            return try Self.identity(try await db.rows("SELECT signing, agreement, sealed FROM sharing_identity WHERE account_id = \(accountId)")[0])
        }
    }

    func shareKeyEnvelopes(shareId: String, accountId: Int64) async throws -> [(epoch: Int64, envelope: Data)] {
        try await read { db in
            try await db.rows("SELECT epoch, envelope FROM share_key WHERE share_id = \(shareId) AND account_id = \(accountId) ORDER BY epoch").map {
                (try $0.get("epoch", as: Int64.self), try $0.get("envelope", as: Data.self))
            }
        }
    }

    func shareKeyHolders(shareId: String, epoch: Int64) async throws -> Set<Int64> {
        try await read { db in
            Set(try await db.rows("SELECT account_id FROM share_key WHERE share_id = \(shareId) AND epoch = \(epoch)").map { try $0.get("account_id", as: Int64.self) })
        }
    }

    func keepShareKeyEnvelopes(shareId: String, ownerId: Int64, epoch: Int64, envelopes: [(accountId: Int64, epoch: Int64, envelope: Data)]) async throws -> ShareKeyKeeping {
        try await transaction { db in
            // The share's row is the lock: its epoch does not move meanwhile, and two devices of
            // the owner never both keep the epoch's key.
            let current = try await db.rows("SELECT epoch FROM share WHERE id = \(shareId) AND account_id = \(ownerId) FOR UPDATE").first?.get("epoch", as: Int64.self)
            guard current == epoch else { return .staleEpoch(current: current) }
            let standing = try await db.rows("""
                SELECT envelope FROM share_key WHERE share_id = \(shareId) AND epoch = \(epoch) AND account_id = \(ownerId)
                """).first?.get("envelope", as: Data.self)
            let owners = envelopes.first { $0.accountId == ownerId && $0.epoch == epoch }?.envelope
            if let standing, let owners, owners != standing { return .ownerKeyDiffers(standing: standing) }
            guard standing != nil || owners != nil else { return .ownerKeyMissing }
            for (account, sealedIn, envelope) in envelopes where account != ownerId || (sealedIn == epoch && standing == nil) {
                _ = try await db.rows("""
                    INSERT INTO share_key (share_id, epoch, account_id, envelope) VALUES (\(shareId), \(sealedIn), \(account), \(envelope))
                    ON CONFLICT (share_id, epoch, account_id) DO UPDATE SET envelope = EXCLUDED.envelope
                    """)
            }
            return .kept
        }
    }

    func advanceShareEpoch(shareId: String, removed: Int64?) async throws {
        try await transaction { db in
            _ = try await db.rows("UPDATE share SET epoch = epoch + 1 WHERE id = \(shareId)")
            if let removed { _ = try await db.rows("DELETE FROM share_key WHERE share_id = \(shareId) AND account_id = \(removed)") }
        }
    }
}
