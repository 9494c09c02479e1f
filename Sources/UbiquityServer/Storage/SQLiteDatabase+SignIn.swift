import Foundation
import UbiquityProtocol
import UbiquitySync
import GRDB

// Sign-in attempts and blocks: the storage primitives under SignInGuard.
extension SQLiteDatabase {
    func countSignInAttempt(keys: [String], now: Date, windowStart: Date) async throws -> [String: SignInAttempts] {
        try await pool.write { db in
            var found: [String: SignInAttempts] = [:]
            let statement = try db.cachedStatement(sql: """
                INSERT INTO signInAttempt (key, attempts, lastAttempt) VALUES (?, 1, ?)
                ON CONFLICT(key) DO UPDATE SET attempts = CASE WHEN lastAttempt < ? THEN 1 ELSE attempts + 1 END, lastAttempt = excluded.lastAttempt
                RETURNING attempts, blockedUntil
                """)
            for key in keys {
                if let row = try Row.fetchOne(statement, arguments: [key, now.timeIntervalSince1970, windowStart.timeIntervalSince1970]) {
                    found[key] = SignInAttempts(attempts: row["attempts"], blockedUntil: row["blockedUntil"])
                }
            }
            return found
        }
    }

    func signInAttempts(keys: [String]) async throws -> [String: SignInAttempts] {
        try await pool.read { db in
            var found: [String: SignInAttempts] = [:]
            for key in keys {
                if let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT attempts, blockedUntil FROM signInAttempt WHERE key = ?"), arguments: [key]) {
                    found[key] = SignInAttempts(attempts: row["attempts"], blockedUntil: row["blockedUntil"])
                }
            }
            return found
        }
    }

    func blockSignIn(key: String, until: Date) async throws {
        try await pool.write { db in
            try db.cachedStatement(sql: "UPDATE signInAttempt SET blockedUntil = max(blockedUntil, ?) WHERE key = ?")
                .execute(arguments: [until.timeIntervalSince1970, key])
        }
    }

    func signInSucceeded(clearing: [String], forgiving: [String]) async throws {
        try await pool.write { db in
            for key in clearing { try db.cachedStatement(sql: "DELETE FROM signInAttempt WHERE key = ?").execute(arguments: [key]) }
            for key in forgiving {
                try db.cachedStatement(sql: "UPDATE signInAttempt SET attempts = max(attempts - 1, 0) WHERE key = ?").execute(arguments: [key])
            }
        }
    }

    func clearSignInAttempts(keys: [String]) async throws -> Int {
        try await pool.write { db in
            var cleared = 0
            for key in keys {
                try db.cachedStatement(sql: "DELETE FROM signInAttempt WHERE key = ?").execute(arguments: [key])
                cleared += db.changesCount
            }
            return cleared
        }
    }

    func blockedSignIns(now: Date) async throws -> [(key: String, until: Date)] {
        try await pool.read { db in
            try Row.fetchAll(db.cachedStatement(sql: "SELECT key, blockedUntil FROM signInAttempt WHERE blockedUntil > ? ORDER BY key"),
                             arguments: [now.timeIntervalSince1970])
                .map { (key: $0["key"], until: Date(timeIntervalSince1970: $0["blockedUntil"])) }
        }
    }

    func pruneSignInAttempts(before: Date) async throws -> Int {
        try await pool.write { db in
            try db.cachedStatement(sql: "DELETE FROM signInAttempt WHERE lastAttempt < ? AND blockedUntil < ?")
                .execute(arguments: [before.timeIntervalSince1970, before.timeIntervalSince1970])
            return db.changesCount
        }
    }

    func setPasswordHash(accountId: Int64, hash: String) async throws {
        try await pool.write { db in
            try db.cachedStatement(sql: "UPDATE account SET passwordHash = ? WHERE id = ?").execute(arguments: [hash, accountId])
        }
    }
}
