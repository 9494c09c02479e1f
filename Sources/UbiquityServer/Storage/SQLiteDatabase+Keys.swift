import Foundation
import GRDB
import UbiquityProtocol

// The embedded database's record of each account's keys: its roster and the sealed copies of
// its root key. Nothing here opens anything: the server stores what devices wrote.
extension SQLiteDatabase {
    func accountKeys(accountId: Int64, recipients: [String]) async throws -> StoredAccountKeys {
        try await pool.read { db in
            let roster = try Data.fetchAll(db.cachedStatement(sql: "SELECT body FROM rosterEntry WHERE accountId = ? ORDER BY idx"), arguments: [accountId])
            let envelopes = try Row.fetchAll(db, sql: """
                SELECT * FROM keyEnvelope WHERE accountId = ? AND recipient IN (SELECT value FROM json_each(?)) ORDER BY epoch, recipient
                """, arguments: [accountId, String(decoding: try JSONEncoder().encode(recipients), as: UTF8.self)]).map {
                KeyEnvelopeRecord(epoch: $0["epoch"], recipient: $0["recipient"], sender: $0["sender"], body: $0["body"])
            }
            return StoredAccountKeys(roster: roster, envelopes: envelopes)
        }
    }

    func appendKeys(accountId: Int64, after: Int, entries: [Data], envelopes: [KeyEnvelopeRecord],
                    check: @escaping @Sendable ([Data]) throws -> Bool) async throws -> Bool {
        try await pool.write { db in
            let roster = try Data.fetchAll(db.cachedStatement(sql: "SELECT body FROM rosterEntry WHERE accountId = ? ORDER BY idx"), arguments: [accountId])
            guard roster.count == after else { return false }
            let dropEscrow = try check(roster + entries)
            for (offset, entry) in entries.enumerated() {
                try db.cachedStatement(sql: "INSERT INTO rosterEntry (accountId, idx, body) VALUES (?, ?, ?)").execute(arguments: [accountId, after + offset, entry])
            }
            for envelope in envelopes {
                try db.cachedStatement(sql: """
                    INSERT INTO keyEnvelope (accountId, epoch, recipient, sender, body) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT(accountId, epoch, recipient) DO UPDATE SET sender = excluded.sender, body = excluded.body
                    """).execute(arguments: [accountId, envelope.epoch, envelope.recipient, envelope.sender, envelope.body])
            }
            if dropEscrow {
                try db.execute(sql: "DELETE FROM keyEnvelope WHERE accountId = ? AND recipient = ?", arguments: [accountId, KeyEnvelopeRecord.escrowRecipient])
            }
            return true
        }
    }

    func claimSetting(_ name: String, value: String) async throws -> String {
        try await pool.write { db in
            try db.execute(sql: "INSERT INTO serverSetting (name, value) VALUES (?, ?) ON CONFLICT(name) DO NOTHING", arguments: [name, value])
            return try String.fetchOne(db, sql: "SELECT value FROM serverSetting WHERE name = ?", arguments: [name]) ?? value
        }
    }
}
