import Foundation
import GRDB
import PostgresNIO
import UbiquityProtocol

/// An announced revision as the database keeps it (``IncomingRevision``, its update as sent).
struct StoredIncoming: Sendable {
    var item: String
    var deviceName: String
    /// The update, JSON as the route validated and encoded it.
    var update: Data
    var touched: Double
    var expires: Double
}

/// Revisions devices are uploading now (docs/SyncProtocol.md, "Incoming revisions"): a row per
/// container, item and device, gone when withdrawn or expired. Nothing else reads them: they
/// are no item's revision and count against no quota (each device keeps at most
/// ``IncomingRevision/maximumPerDevice``, each as large as a commit may be).
protocol IncomingStorage: Sendable {
    /// Announces `update` (JSON) as the device's incoming revision of the item, replacing one it
    /// announced before (and dropping its oldest beyond ``IncomingRevision/maximumPerDevice``),
    /// or with `update` nil keeps its announcement for another ``IncomingRevision/lifetime``.
    /// Returns when it expires; nil when there was none to keep.
    func announceIncoming(accountId: Int64, container: String, item: String, device: DeviceAuth, update: Data?, now: Date) async throws -> Double?
    /// Withdraws the device's announcement of the item; whether there was one.
    func withdrawIncoming(accountId: Int64, container: String, item: String, device: String) async throws -> Bool
    /// The container's live announcements but those of `device`, oldest first.
    func incoming(accountId: Int64, container: String, except device: String, now: Date) async throws -> [StoredIncoming]
}

extension SQLiteDatabase: IncomingStorage {
    func announceIncoming(accountId: Int64, container: String, item: String, device: DeviceAuth, update: Data?, now: Date) async throws -> Double? {
        let at = now.timeIntervalSince1970, expires = at + IncomingRevision.lifetime
        return try await pool.write { db in
            try db.execute(sql: "DELETE FROM incoming WHERE expires < ?", arguments: [at])
            guard let update else {
                try db.execute(sql: "UPDATE incoming SET touched = ?, expires = ? WHERE accountId = ? AND container = ? AND item = ? AND deviceId = ?",
                               arguments: [at, expires, accountId, container, item, device.deviceId])
                return db.changesCount > 0 ? expires : nil
            }
            try db.execute(sql: """
                INSERT INTO incoming (accountId, container, item, deviceId, deviceName, body, touched, expires) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (accountId, container, item, deviceId) DO UPDATE SET deviceName = excluded.deviceName, body = excluded.body,
                    touched = excluded.touched, expires = excluded.expires
                """, arguments: [accountId, container, item, device.deviceId, device.deviceName, update, at, expires])
            try db.execute(sql: """
                DELETE FROM incoming WHERE accountId = ? AND deviceId = ? AND rowid NOT IN
                    (SELECT rowid FROM incoming WHERE accountId = ? AND deviceId = ? ORDER BY touched DESC LIMIT ?)
                """, arguments: [accountId, device.deviceId, accountId, device.deviceId, IncomingRevision.maximumPerDevice])
            return expires
        }
    }

    func withdrawIncoming(accountId: Int64, container: String, item: String, device: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM incoming WHERE accountId = ? AND container = ? AND item = ? AND deviceId = ?",
                           arguments: [accountId, container, item, device])
            return db.changesCount > 0
        }
    }

    func incoming(accountId: Int64, container: String, except device: String, now: Date) async throws -> [StoredIncoming] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT item, deviceName, body, touched, expires FROM incoming
                WHERE accountId = ? AND container = ? AND deviceId <> ? AND expires >= ? ORDER BY touched
                """, arguments: [accountId, container, device, now.timeIntervalSince1970]).map {
                StoredIncoming(item: $0["item"], deviceName: $0["deviceName"], update: $0["body"], touched: $0["touched"], expires: $0["expires"])
            }
        }
    }
}

extension PostgresDatabase: IncomingStorage {
    func announceIncoming(accountId: Int64, container: String, item: String, device: DeviceAuth, update: Data?, now: Date) async throws -> Double? {
        let at = now.timeIntervalSince1970, expires = at + IncomingRevision.lifetime
        return try await transaction { [self] db in
            try await db.rows("DELETE FROM incoming WHERE expires < \(at)")
            if let update {
                try await db.rows("""
                    INSERT INTO incoming (account_id, container, item, device_id, device_name, body, touched, expires)
                    VALUES (\(accountId), \(container), \(item), \(device.deviceId), \(device.deviceName), \(update), \(at), \(expires))
                    ON CONFLICT (account_id, container, item, device_id) DO UPDATE SET device_name = EXCLUDED.device_name, body = EXCLUDED.body,
                        touched = EXCLUDED.touched, expires = EXCLUDED.expires
                    """)
                try await db.rows("""
                    DELETE FROM incoming WHERE account_id = \(accountId) AND device_id = \(device.deviceId) AND (container, item) NOT IN
                        (SELECT container, item FROM incoming WHERE account_id = \(accountId) AND device_id = \(device.deviceId)
                         ORDER BY touched DESC LIMIT \(IncomingRevision.maximumPerDevice))
                    """)
            } else if try await db.rows("""
                UPDATE incoming SET touched = \(at), expires = \(expires)
                WHERE account_id = \(accountId) AND container = \(container) AND item = \(item) AND device_id = \(device.deviceId) RETURNING item
                """).isEmpty {
                return nil
            }
            // Every instance's devices hear of it.
            try await announce(db, account: accountId, container: container, sequence: 0, device: device.deviceId, type: "incoming")
            return expires
        }
    }

    func withdrawIncoming(accountId: Int64, container: String, item: String, device: String) async throws -> Bool {
        try await transaction { [self] db in
            let removed = try await !db.rows("""
                DELETE FROM incoming WHERE account_id = \(accountId) AND container = \(container) AND item = \(item) AND device_id = \(device) RETURNING item
                """).isEmpty
            if removed { try await announce(db, account: accountId, container: container, sequence: 0, device: device, type: "incoming") }
            return removed
        }
    }

    func incoming(accountId: Int64, container: String, except device: String, now: Date) async throws -> [StoredIncoming] {
        try await read { db in
            try await db.rows("""
                SELECT item, device_name, body, touched, expires FROM incoming
                WHERE account_id = \(accountId) AND container = \(container) AND device_id <> \(device) AND expires >= \(now.timeIntervalSince1970)
                ORDER BY touched
                """).map {
                StoredIncoming(item: try $0.get("item"), deviceName: try $0.get("device_name"),
                               update: Data(try $0.get("body", as: ByteBuffer.self).readableBytesView),
                               touched: try $0.get("touched"), expires: try $0.get("expires"))
            }
        }
    }
}
