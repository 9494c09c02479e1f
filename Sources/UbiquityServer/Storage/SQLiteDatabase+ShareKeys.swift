import Foundation
import GRDB

// The keys of sharing (issue 46, docs/Sharing.md "Keys"): each account's sealed sharing
// identity, and each share's key envelopes.
extension SQLiteDatabase {
    func sharingIdentity(accountId: Int64) async throws -> StoredSharingIdentity? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT signing, agreement, sealed FROM sharingIdentity WHERE accountId = ?", arguments: [accountId]).map {
                StoredSharingIdentity(signing: $0["signing"], agreement: $0["agreement"], sealed: $0["sealed"])
            }
        }
    }

    func publishSharingIdentity(accountId: Int64, _ identity: StoredSharingIdentity, replacing: Data?, now: Double) async throws -> StoredSharingIdentity {
        try await pool.write { db in
            let current = try Data.fetchOne(db, sql: "SELECT signing FROM sharingIdentity WHERE accountId = ?", arguments: [accountId])
            if current == replacing {
                try db.execute(sql: """
                    INSERT INTO sharingIdentity (accountId, signing, agreement, sealed, updated) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT (accountId) DO UPDATE SET signing = excluded.signing, agreement = excluded.agreement, sealed = excluded.sealed, updated = excluded.updated
                    """, arguments: [accountId, identity.signing, identity.agreement, identity.sealed, now])
            }
            let row = try Row.fetchOne(db, sql: "SELECT signing, agreement, sealed FROM sharingIdentity WHERE accountId = ?", arguments: [accountId])!
            return StoredSharingIdentity(signing: row["signing"], agreement: row["agreement"], sealed: row["sealed"])
        }
    }

    func shareKeyEnvelopes(shareId: String, accountId: Int64) async throws -> [(epoch: Int64, envelope: Data)] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT epoch, envelope FROM shareKey WHERE shareId = ? AND accountId = ? ORDER BY epoch",
                             arguments: [shareId, accountId]).map { ($0["epoch"], $0["envelope"]) }
        }
    }

    func shareKeyHolders(shareId: String, epoch: Int64) async throws -> Set<Int64> {
        try await pool.read { db in
            Set(try Int64.fetchAll(db, sql: "SELECT accountId FROM shareKey WHERE shareId = ? AND epoch = ?", arguments: [shareId, epoch]))
        }
    }

    func keepShareKeyEnvelopes(shareId: String, ownerId: Int64, epoch: Int64, envelopes: [(accountId: Int64, epoch: Int64, envelope: Data)]) async throws -> ShareKeyKeeping {
        try await pool.write { db in
            let current = try Int64.fetchOne(db, sql: "SELECT epoch FROM share WHERE id = ? AND accountId = ?", arguments: [shareId, ownerId])
            guard current == epoch else { return .staleEpoch(current: current) }
            let standing = try Data.fetchOne(db, sql: "SELECT envelope FROM shareKey WHERE shareId = ? AND epoch = ? AND accountId = ?",
                                             arguments: [shareId, epoch, ownerId])
            let owners = envelopes.first { $0.accountId == ownerId && $0.epoch == epoch }?.envelope
            if let standing, let owners, owners != standing { return .ownerKeyDiffers(standing: standing) }
            guard standing != nil || owners != nil else { return .ownerKeyMissing }
            for (account, sealedIn, envelope) in envelopes where account != ownerId || (sealedIn == epoch && standing == nil) {
                try db.execute(sql: """
                    INSERT INTO shareKey (shareId, epoch, accountId, envelope) VALUES (?, ?, ?, ?)
                    ON CONFLICT (shareId, epoch, accountId) DO UPDATE SET envelope = excluded.envelope
                    """, arguments: [shareId, sealedIn, account, envelope])
            }
            return .kept
        }
    }

    func advanceShareEpoch(shareId: String, removed: Int64?) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE share SET epoch = epoch + 1 WHERE id = ?", arguments: [shareId])
            if let removed { try db.execute(sql: "DELETE FROM shareKey WHERE shareId = ? AND accountId = ?", arguments: [shareId, removed]) }
        }
    }
}
