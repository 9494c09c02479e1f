import Foundation
import UbiquityProtocol
import UbiquitySync
import Logging
import PostgresNIO

// Sign-in attempts and blocks: the storage primitives under SignInGuard.
extension PostgresDatabase {
    func countSignInAttempt(keys: [String], now: Date, windowStart: Date) async throws -> [String: SignInAttempts] {
        let (at, start) = (now.timeIntervalSince1970, windowStart.timeIntervalSince1970)
        return try await transaction { db in
            var found: [String: SignInAttempts] = [:]
            for key in keys {
                let rows = try await db.rows("""
                    INSERT INTO sign_in_attempt (key, attempts, last_attempt) VALUES (\(key), 1, \(at))
                    ON CONFLICT (key) DO UPDATE SET
                        attempts = CASE WHEN sign_in_attempt.last_attempt < \(start) THEN 1 ELSE sign_in_attempt.attempts + 1 END,
                        last_attempt = EXCLUDED.last_attempt
                    RETURNING attempts, blocked_until
                    """)
                if let row = rows.first { found[key] = SignInAttempts(attempts: Int(try row.get("attempts", as: Int32.self)), blockedUntil: try row.get("blocked_until")) }
            }
            return found
        }
    }

    func signInAttempts(keys: [String]) async throws -> [String: SignInAttempts] {
        try await read { db in
            var found: [String: SignInAttempts] = [:]
            for row in try await db.rows("SELECT key, attempts, blocked_until FROM sign_in_attempt WHERE key = ANY(\(keys))") {
                found[try row.get("key")] = SignInAttempts(attempts: Int(try row.get("attempts", as: Int32.self)), blockedUntil: try row.get("blocked_until"))
            }
            return found
        }
    }

    func blockSignIn(key: String, until: Date) async throws {
        let at = until.timeIntervalSince1970
        _ = try await transaction { db in
            try await db.rows("UPDATE sign_in_attempt SET blocked_until = GREATEST(blocked_until, \(at)) WHERE key = \(key)")
        }
    }

    func signInSucceeded(clearing: [String], forgiving: [String]) async throws {
        _ = try await transaction { db in
            for key in clearing { _ = try await db.rows("DELETE FROM sign_in_attempt WHERE key = \(key)") }
            for key in forgiving { _ = try await db.rows("UPDATE sign_in_attempt SET attempts = GREATEST(attempts - 1, 0) WHERE key = \(key)") }
            return 0
        }
    }

    func clearSignInAttempts(keys: [String]) async throws -> Int {
        try await transaction { db in
            var cleared = 0
            for key in keys { cleared += try await db.rows("DELETE FROM sign_in_attempt WHERE key = \(key) RETURNING key").count }
            return cleared
        }
    }

    func blockedSignIns(now: Date) async throws -> [(key: String, until: Date)] {
        let at = now.timeIntervalSince1970
        return try await read { db in
            try await db.rows("SELECT key, blocked_until FROM sign_in_attempt WHERE blocked_until > \(at) ORDER BY key").map {
                (key: try $0.get("key"), until: Date(timeIntervalSince1970: try $0.get("blocked_until")))
            }
        }
    }

    func pruneSignInAttempts(before: Date) async throws -> Int {
        let at = before.timeIntervalSince1970
        return try await transaction { db in
            try await db.rows("DELETE FROM sign_in_attempt WHERE last_attempt < \(at) AND blocked_until < \(at) RETURNING key").count
        }
    }

    func setPasswordHash(accountId: Int64, hash: String) async throws {
        _ = try await transaction { db in
            try await db.rows("UPDATE account SET password_hash = \(hash) WHERE id = \(accountId)")
        }
    }
}
