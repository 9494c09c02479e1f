import Foundation
import PostgresNIO
import UbiquityProtocol

// PostgreSQL's record of each account's keys (as the embedded database's).
extension PostgresDatabase {
    func accountKeys(accountId: Int64, recipients: [String]) async throws -> StoredAccountKeys {
        try await read { db in
            let roster = try await db.rows("SELECT body FROM roster_entry WHERE account_id = \(accountId) ORDER BY idx").map { try $0.get("body", as: Data.self) }
            let envelopes = try await db.rows("""
                SELECT * FROM key_envelope WHERE account_id = \(accountId) AND recipient = ANY(\(recipients)::TEXT[]) ORDER BY epoch, recipient
                """).map {
                KeyEnvelopeRecord(epoch: try $0.get("epoch"), recipient: try $0.get("recipient"), sender: try $0.get("sender"), body: try $0.get("body"))
            }
            return StoredAccountKeys(roster: roster, envelopes: envelopes)
        }
    }

    func appendKeys(accountId: Int64, after: Int, entries: [Data], envelopes: [KeyEnvelopeRecord],
                    check: @escaping @Sendable ([Data]) throws -> Bool) async throws -> Bool {
        try await transaction { db in
            // One append at a time per account: the account's row is the lock.
            _ = try await db.rows("SELECT id FROM account WHERE id = \(accountId) FOR UPDATE")
            let roster = try await db.rows("SELECT body FROM roster_entry WHERE account_id = \(accountId) ORDER BY idx").map { try $0.get("body", as: Data.self) }
            guard roster.count == after else { return false }
            let dropEscrow = try check(roster + entries)
            for (offset, entry) in entries.enumerated() {
                _ = try await db.rows("INSERT INTO roster_entry (account_id, idx, body) VALUES (\(accountId), \(Int64(after + offset)), \(entry))")
            }
            for envelope in envelopes {
                _ = try await db.rows("""
                    INSERT INTO key_envelope (account_id, epoch, recipient, sender, body)
                    VALUES (\(accountId), \(envelope.epoch), \(envelope.recipient), \(envelope.sender), \(envelope.body))
                    ON CONFLICT (account_id, epoch, recipient) DO UPDATE SET sender = EXCLUDED.sender, body = EXCLUDED.body
                    """)
            }
            if dropEscrow {
                _ = try await db.rows("DELETE FROM key_envelope WHERE account_id = \(accountId) AND recipient = \(KeyEnvelopeRecord.escrowRecipient)")
            }
            return true
        }
    }

    func claimSetting(_ name: String, value: String) async throws -> String {
        try await transaction { db in
            _ = try await db.rows("INSERT INTO server_setting (name, value) VALUES (\(name), \(value)) ON CONFLICT (name) DO NOTHING")
            return try await db.rows("SELECT value FROM server_setting WHERE name = \(name)").first?.get("value", as: String.self) ?? value
        }
    }
}
