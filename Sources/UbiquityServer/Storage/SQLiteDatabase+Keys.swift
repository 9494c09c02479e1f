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

    func appendKeys(accountId: Int64, after: Int, entries: [Data], envelopes: [KeyEnvelopeRecord], envelopeLimit: Int,
                    check: @escaping @Sendable ([Data]) throws -> Bool) async throws -> Bool {
        try await pool.write { db in
            let roster = try Data.fetchAll(db.cachedStatement(sql: "SELECT body FROM rosterEntry WHERE accountId = ? ORDER BY idx"), arguments: [accountId])
            guard roster.count == after else { return false }
            let dropEscrow = try check(roster + entries)
            let kept = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM keyEnvelope WHERE accountId = ?", arguments: [accountId]) ?? 0
            guard kept + envelopes.count <= envelopeLimit else { throw KeyLimits.tooManyEnvelopes }
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

// Requests to join by a code.
extension SQLiteDatabase {
    func addKeyRequest(accountId: Int64, deviceId: String, request: KeyRequestRecord, since: Double, limit: Int) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM keyRequest WHERE accountId = ? AND created <= ?", arguments: [accountId, since])
            guard try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM keyRequest WHERE accountId = ?", arguments: [accountId]) ?? 0 < limit else { return false }
            try db.execute(sql: """
                INSERT INTO keyRequest (id, accountId, deviceId, signing, agreement, name, commitment, created, kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [request.id, accountId, deviceId, request.signing, request.agreement, request.name, request.commitment, request.created, request.kind])
            return true
        }
    }

    func keyRequests(accountId: Int64, since: Double) async throws -> [(deviceId: String, request: KeyRequestRecord)] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM keyRequest WHERE accountId = ? AND created > ? ORDER BY created, id", arguments: [accountId, since]).map {
                ($0["deviceId"], KeyRequestRecord(id: $0["id"], signing: $0["signing"], agreement: $0["agreement"], name: $0["name"], commitment: $0["commitment"],
                                                  created: $0["created"], answerer: $0["answerer"], answerNonce: $0["answerNonce"], revealNonce: $0["revealNonce"],
                                                  kind: $0["kind"]))
            }
        }
    }

    func answerKeyRequest(accountId: Int64, id: String, answerer: String, nonce: Data, since: Double) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: """
                UPDATE keyRequest SET answerer = ?, answerNonce = ? WHERE id = ? AND accountId = ? AND created > ? AND answerer IS NULL
                """, arguments: [answerer, nonce, id, accountId, since])
            return db.changesCount > 0
        }
    }

    func revealKeyRequest(accountId: Int64, id: String, deviceId: String, nonce: Data, since: Double) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: """
                UPDATE keyRequest SET revealNonce = ? WHERE id = ? AND accountId = ? AND deviceId = ? AND created > ? AND answerer IS NOT NULL AND revealNonce IS NULL
                """, arguments: [nonce, id, accountId, deviceId, since])
            return db.changesCount > 0
        }
    }

    func removeKeyRequest(accountId: Int64, id: String) async throws {
        try await pool.write { db in try db.execute(sql: "DELETE FROM keyRequest WHERE id = ? AND accountId = ?", arguments: [id, accountId]) }
    }

    func keepWebGrant(accountId: Int64, id: String, grant: WebGrantUpload, since: Double) async throws -> Bool {
        let containers = String(decoding: try JSONEncoder().encode(grant.containers), as: UTF8.self)
        return try await pool.write { db in
            guard let deviceId = try String.fetchOne(db, sql: """
                SELECT deviceId FROM keyRequest WHERE id = ? AND accountId = ? AND created > ? AND kind = ? AND answerer IS NOT NULL AND revealNonce IS NOT NULL
                """, arguments: [id, accountId, since, KeyRequestRecord.browserKind]) else { return false }
            try db.execute(sql: "DELETE FROM webGrant WHERE accountId = ? AND expires <= ?", arguments: [accountId, Date().timeIntervalSince1970])
            try db.execute(sql: """
                INSERT OR REPLACE INTO webGrant (accountId, deviceId, body, signature, containers, expires) VALUES (?, ?, ?, ?, ?, ?)
                """, arguments: [accountId, deviceId, grant.body, grant.signature, containers, grant.expires])
            try db.execute(sql: "DELETE FROM keyRequest WHERE id = ? AND accountId = ?", arguments: [id, accountId])
            return true
        }
    }

    func webGrant(accountId: Int64, deviceId: String, now: Double) async throws -> WebGrantUpload? {
        try await pool.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM webGrant WHERE accountId = ? AND deviceId = ? AND expires > ?", arguments: [accountId, deviceId, now]) else { return nil }
            let containers = (try? JSONDecoder().decode([String].self, from: Data((row["containers"] as String).utf8))) ?? []
            return WebGrantUpload(body: row["body"], signature: row["signature"], containers: containers, expires: row["expires"])
        }
    }
}
