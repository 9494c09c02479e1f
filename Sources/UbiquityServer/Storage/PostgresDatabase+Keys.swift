import Foundation
import PostgresNIO
import UbiquityProtocol

// PostgreSQL's record of each account's keys (as the embedded database's).
extension PostgresDatabase {
    func accountKeys(accountId: Int64, recipients: [String]) async throws -> StoredAccountKeys {
        // One statement (one round trip, one snapshot): a plaintext commit asks twice — whether
        // the account takes plaintext, and the escrow's keys for its names' tags (issue 49).
        try await read { db in
            var stored = StoredAccountKeys(roster: [], envelopes: [])
            for row in try await db.rows(prepared: Prepared.AccountKeys(query: """
                SELECT TRUE AS roster, idx AS epoch, NULL::TEXT AS recipient, NULL::TEXT AS sender, body FROM roster_entry WHERE account_id = \(accountId)
                UNION ALL
                SELECT FALSE, epoch, recipient, sender, body FROM key_envelope WHERE account_id = \(accountId) AND recipient = ANY(\(recipients)::TEXT[])
                ORDER BY roster DESC, epoch, recipient
                """)) {
                if try row.get("roster", as: Bool.self) {
                    stored.roster.append(try row.get("body", as: Data.self))
                } else {
                    stored.envelopes.append(KeyEnvelopeRecord(epoch: try row.get("epoch"), recipient: try row.get("recipient"), sender: try row.get("sender"), body: try row.get("body")))
                }
            }
            return stored
        }
    }

    func appendKeys(accountId: Int64, after: Int, entries: [Data], envelopes: [KeyEnvelopeRecord], envelopeLimit: Int,
                    check: @escaping @Sendable ([Data]) throws -> Bool) async throws -> Bool {
        try await transaction { db in
            // One append at a time per account: the account's row is the lock.
            _ = try await db.rows("SELECT id FROM account WHERE id = \(accountId) FOR UPDATE")
            let roster = try await db.rows("SELECT body FROM roster_entry WHERE account_id = \(accountId) ORDER BY idx").map { try $0.get("body", as: Data.self) }
            guard roster.count == after else { return false }
            let dropEscrow = try check(roster + entries)
            let kept = try await db.rows("SELECT COUNT(*) AS n FROM key_envelope WHERE account_id = \(accountId)").first?.get("n", as: Int64.self) ?? 0
            guard Int(kept) + envelopes.count <= envelopeLimit else { throw KeyLimits.tooManyEnvelopes }
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
            try await self.announce(db, account: accountId, container: "", sequence: 0, device: nil, type: "keysChanged")
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

// Requests to join by a code (as the embedded database's), each change announced to the other
// instances so their devices hear of it.
extension PostgresDatabase {
    func addKeyRequest(accountId: Int64, deviceId: String, request: KeyRequestRecord, since: Double, limit: Int) async throws -> Bool {
        try await transaction { db in
            _ = try await db.rows("SELECT id FROM account WHERE id = \(accountId) FOR UPDATE")
            _ = try await db.rows("DELETE FROM key_request WHERE account_id = \(accountId) AND created <= \(since)")
            let count = try await db.rows("SELECT COUNT(*) AS n FROM key_request WHERE account_id = \(accountId)").first?.get("n", as: Int64.self) ?? 0
            guard count < Int64(limit) else { return false }
            _ = try await db.rows("""
                INSERT INTO key_request (id, account_id, device_id, signing, agreement, name, commitment, created, kind)
                VALUES (\(request.id), \(accountId), \(deviceId), \(request.signing), \(request.agreement), \(request.name), \(request.commitment), \(request.created),
                        \(request.kind))
                """)
            try await self.announce(db, account: accountId, container: "", sequence: 0, device: deviceId, type: "keyRequest")
            return true
        }
    }

    func keyRequests(accountId: Int64, since: Double) async throws -> [(deviceId: String, request: KeyRequestRecord)] {
        try await read { db in
            try await db.rows("SELECT * FROM key_request WHERE account_id = \(accountId) AND created > \(since) ORDER BY created, id").map {
                (try $0.get("device_id", as: String.self),
                 KeyRequestRecord(id: try $0.get("id"), signing: try $0.get("signing"), agreement: try $0.get("agreement"), name: try $0.get("name"),
                                  commitment: try $0.get("commitment"), created: try $0.get("created"), answerer: try $0.get("answerer"),
                                  answerNonce: try $0.get("answer_nonce"), revealNonce: try $0.get("reveal_nonce"), kind: try $0.get("kind")))
            }
        }
    }

    func answerKeyRequest(accountId: Int64, id: String, answerer: String, nonce: Data, since: Double) async throws -> Bool {
        try await transaction { db in
            let updated = try await db.rows("""
                UPDATE key_request SET answerer = \(answerer), answer_nonce = \(nonce)
                WHERE id = \(id) AND account_id = \(accountId) AND created > \(since) AND answerer IS NULL RETURNING id
                """)
            guard !updated.isEmpty else { return false }
            try await self.announce(db, account: accountId, container: "", sequence: 0, device: nil, type: "keyRequest")
            return true
        }
    }

    func revealKeyRequest(accountId: Int64, id: String, deviceId: String, nonce: Data, since: Double) async throws -> Bool {
        try await transaction { db in
            let updated = try await db.rows("""
                UPDATE key_request SET reveal_nonce = \(nonce) WHERE id = \(id) AND account_id = \(accountId) AND device_id = \(deviceId)
                AND created > \(since) AND answerer IS NOT NULL AND reveal_nonce IS NULL RETURNING id
                """)
            guard !updated.isEmpty else { return false }
            try await self.announce(db, account: accountId, container: "", sequence: 0, device: deviceId, type: "keyRequest")
            return true
        }
    }

    func removeKeyRequest(accountId: Int64, id: String) async throws {
        try await transaction { db in _ = try await db.rows("DELETE FROM key_request WHERE id = \(id) AND account_id = \(accountId)") }
    }

    func keepWebGrant(accountId: Int64, id: String, grant: WebGrantUpload, since: Double) async throws -> Bool {
        let containers = String(decoding: try JSONEncoder().encode(grant.containers), as: UTF8.self)
        let browser = KeyRequestRecord.browserKind, now = Date().timeIntervalSince1970
        return try await transaction { db in
            guard let deviceId = try await db.rows("""
                DELETE FROM key_request WHERE id = \(id) AND account_id = \(accountId) AND created > \(since) AND kind = \(browser)
                AND answerer IS NOT NULL AND reveal_nonce IS NOT NULL RETURNING device_id
                """).first?.get("device_id", as: String.self) else { return false }
            _ = try await db.rows("DELETE FROM web_grant WHERE account_id = \(accountId) AND expires <= \(now)")
            _ = try await db.rows("""
                INSERT INTO web_grant (account_id, device_id, body, signature, containers, expires)
                VALUES (\(accountId), \(deviceId), \(grant.body), \(grant.signature), \(containers), \(grant.expires))
                ON CONFLICT (account_id, device_id) DO UPDATE SET body = EXCLUDED.body, signature = EXCLUDED.signature,
                    containers = EXCLUDED.containers, expires = EXCLUDED.expires
                """)
            return true
        }
    }

    func webGrant(accountId: Int64, deviceId: String, now: Double) async throws -> WebGrantUpload? {
        try await read { db in
            guard let row = try await db.rows("SELECT * FROM web_grant WHERE account_id = \(accountId) AND device_id = \(deviceId) AND expires > \(now)").first else {
                return nil
            }
            let containers = (try? JSONDecoder().decode([String].self, from: Data(try row.get("containers", as: String.self).utf8))) ?? []
            return WebGrantUpload(body: try row.get("body"), signature: try row.get("signature"), containers: containers, expires: try row.get("expires"))
        }
    }
}
