import Foundation
import GRDB

/// A row's change as an import applied it to the store: what the app sees change.
public struct AppliedChange: Hashable, Sendable {
    /// What happened to the row in the store.
    public enum Kind: Hashable, Sendable {
        /// The row appeared (new, or brought back).
        case inserted
        /// Columns of the row took new values: their names.
        case updated(Set<String>)
        /// The row went away.
        case deleted
    }

    /// The table.
    public var table: String
    /// The row's primary key.
    public var primaryKey: [LogValue]
    /// What happened.
    public var kind: Kind
    /// The device whose change it was.
    public var device: String
}

/// Removes one of two rows that collide on a unique index, as this device's change.
protocol DuplicateResolver {
    /// Removes `removed` (which may not be in the table: an incoming row that lost), keeping
    /// `kept`.
    func removeDuplicate(_ table: SyncedTable, kept: [LogValue], removed: [LogValue], _ db: Database) throws
}

/// Applies transactions to a store by ``MergeRules``, keeping each synced row's stamps in
/// `ubq_row` (``RowMeta``): other devices' records change the app's tables where their values
/// win; this device's own records (already in its tables) only record their stamps.
///
/// Writes nothing that the capture would take for this device's changes: the caller runs it
/// with capture off (``ChangeCapture/withoutCapture(_:_:)``) inside one write transaction, with
/// foreign keys checked only at its commit.
struct StoreMerger {
    /// The synced tables.
    let schema: SyncedSchema

    /// Creates the metadata table.
    static func createTables(_ db: Database) throws {
        try db.execute(sql: "CREATE TABLE IF NOT EXISTS ubq_row(tbl TEXT NOT NULL, pk BLOB NOT NULL, meta BLOB NOT NULL, PRIMARY KEY (tbl, pk)) WITHOUT ROWID")
    }

    /// Applies `record`.
    /// - Parameters:
    ///   - record: A transaction.
    ///   - local: Whether it is this device's own (its values are in the tables already).
    ///   - db: A connection inside a write transaction.
    /// - Returns: What changed in the app's tables (nothing for a local record).
    ///   - duplicates: Removes one of two rows that collide on a unique index (nil: a collision
    ///     is an error).
    @discardableResult
    func apply(_ record: ChangeLogRecord, local: Bool, _ db: Database, duplicates: (any DuplicateResolver)? = nil) throws -> [AppliedChange] {
        var applied: [AppliedChange] = []
        for (index, change) in record.changes.enumerated() {
            guard let table = schema.table(change.table), change.primaryKey.count == table.primaryKey.count else { continue }
            let stamp = ChangeStamp(timestamp: record.timestamp, device: record.device, index: (record.startIndex ?? 0) + index)
            let key = RowMeta.encodedKey(change.primaryKey)
            var meta = try Self.meta(table: table.name, key: key, db) ?? RowMeta()
            let existed = meta.exists
            var changed: [String: LogValue] = [:]
            switch change.kind {
            case .insert, .update:
                if change.kind == .insert, meta.inserted.map({ stamp > $0 }) ?? true { meta.inserted = stamp }
                for column in table.valueColumns {
                    guard let value = change.columns[column],
                          meta.stamps[column].map({ stamp > $0 }) ?? true,
                          meta.deleted.map({ stamp > $0 }) ?? true // at or before the delete: any revival overrides it
                    else { continue }
                    meta.stamps[column] = stamp
                    changed[column] = value
                }
            case .delete:
                if meta.deleted.map({ stamp > $0 }) ?? true { meta.deleted = stamp }
            }
            let exists = meta.exists
            if local {
                if !exists { meta.ghost = [:] } // this device deleted it last: nothing after its delete
                meta.pruneBeforeDelete()
                try Self.save(meta, table: table.name, key: key, db)
                continue
            }
            // The stamps are saved before the tables change: resolving a duplicate reads them.
            switch (existed, exists) {
            case (true, true):
                try Self.save(meta, table: table.name, key: key, db)
                guard !changed.isEmpty else { break }
                var candidate = try ChangeCapture.values(of: table.uniqueColumns, in: table, key: change.primaryKey, db) ?? [:]
                candidate.merge(changed) { $1 }
                if try writeResolvingDuplicates(table, key: change.primaryKey, candidate: candidate, duplicates, db, { try Self.update(table, key: change.primaryKey, values: changed, db) }) {
                    applied.append(AppliedChange(table: table.name, primaryKey: change.primaryKey, kind: .updated(Set(changed.keys)), device: record.device))
                } else {
                    applied.append(AppliedChange(table: table.name, primaryKey: change.primaryKey, kind: .deleted, device: record.device))
                }
            case (false, true):
                let values = meta.ghost.merging(changed) { $1 }
                meta.ghost = [:]
                try Self.save(meta, table: table.name, key: key, db)
                if try writeResolvingDuplicates(table, key: change.primaryKey, candidate: values, duplicates, db, { try Self.insert(table, key: change.primaryKey, values: values, db) }) {
                    applied.append(AppliedChange(table: table.name, primaryKey: change.primaryKey, kind: .inserted, device: record.device))
                }
            case (true, false):
                let deleted = meta.deleted
                let kept = table.valueColumns.filter { column in meta.stamps[column].map { stamp in deleted.map { stamp > $0 } ?? true } ?? false }
                meta.ghost = try ChangeCapture.values(of: kept, in: table, key: change.primaryKey, db) ?? [:]
                meta.pruneBeforeDelete()
                try Self.save(meta, table: table.name, key: key, db)
                try Self.delete(table, key: change.primaryKey, db)
                applied.append(AppliedChange(table: table.name, primaryKey: change.primaryKey, kind: .deleted, device: record.device))
            case (false, false):
                meta.ghost.merge(changed) { $1 }
                meta.pruneBeforeDelete()
                try Self.save(meta, table: table.name, key: key, db)
            }
        }
        return applied
    }

    /// Writes a row of another device's change; when it collides with another row on a unique
    /// index, keeps the row inserted first (by insert stamp: the same choice on every device)
    /// and has `duplicates` remove the other. Returns false when the incoming row was the one
    /// removed.
    func writeResolvingDuplicates(_ table: SyncedTable, key: [LogValue], candidate: [String: LogValue], _ duplicates: (any DuplicateResolver)?,
                                  _ db: Database, _ write: () throws -> Void) throws -> Bool {
        var attempts = 0
        while true {
            do {
                try write()
                return true
            } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE {
                attempts += 1
                guard let duplicates, attempts <= 16, let other = try Self.duplicate(of: key, in: table, candidate: candidate, db) else { throw error }
                let incoming = try Self.meta(table: table.name, key: RowMeta.encodedKey(key), db)?.inserted
                let existing = try Self.meta(table: table.name, key: RowMeta.encodedKey(other), db)?.inserted
                // A row never logged (no stamp) counts as the latest.
                let incomingFirst = switch (incoming, existing) {
                case let (incoming?, existing?): incoming < existing
                case (.some, nil): true
                case (nil, _): false
                }
                if incomingFirst {
                    try duplicates.removeDuplicate(table, kept: key, removed: other, db)
                } else {
                    try duplicates.removeDuplicate(table, kept: other, removed: key, db)
                    return false
                }
            }
        }
    }

    /// The key of a row other than `key` whose values on one of the table's unique indexes
    /// equal `candidate`'s (NULLs never collide).
    static func duplicate(of key: [LogValue], in table: SyncedTable, candidate: [String: LogValue], _ db: Database) throws -> [LogValue]? {
        for unique in table.uniqueKeys {
            let values = unique.map { candidate[$0] ?? .null }
            guard !values.contains(.null) else { continue }
            let sql = "SELECT \(table.primaryKey.map(\.quotedDatabaseIdentifier).joined(separator: ", ")) FROM main.\(table.name.quotedDatabaseIdentifier) WHERE \(unique.map { "\($0.quotedDatabaseIdentifier) IS ?" }.joined(separator: " AND ")) AND NOT (\(ChangeCapture.keyCondition(table))) LIMIT 1"
            if let row = try Row.fetchOne(db.cachedStatement(sql: sql), arguments: StatementArguments(values.map(\.databaseValue) + key.map(\.databaseValue))) {
                return (0..<table.primaryKey.count).map { LogValue(row[$0] as DatabaseValue) }
            }
        }
        return nil
    }

    static func meta(table: String, key: [UInt8], _ db: Database) throws -> RowMeta? {
        guard let bytes = try Data.fetchOne(db.cachedStatement(sql: "SELECT meta FROM ubq_row WHERE tbl = ? AND pk = ?"), arguments: [table, Data(key)]) else { return nil }
        do { return try RowMeta(encoded: Array(bytes)) } catch {
            throw DatabaseError(resultCode: .SQLITE_CORRUPT, message: "the sync metadata of a row of \(table) is damaged")
        }
    }

    static func save(_ meta: RowMeta, table: String, key: [UInt8], _ db: Database) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO ubq_row(tbl, pk, meta) VALUES (?, ?, ?)").execute(arguments: [table, Data(key), Data(meta.encoded())])
    }

    static func update(_ table: SyncedTable, key: [LogValue], values: [String: LogValue], _ db: Database) throws {
        let columns = table.valueColumns.filter { values[$0] != nil }
        let sql = "UPDATE main.\(table.name.quotedDatabaseIdentifier) SET \(columns.map { "\($0.quotedDatabaseIdentifier) = ?" }.joined(separator: ", ")) WHERE \(ChangeCapture.keyCondition(table))"
        try db.cachedStatement(sql: sql).execute(arguments: StatementArguments(columns.map { values[$0]!.databaseValue } + key.map(\.databaseValue)))
    }

    static func insert(_ table: SyncedTable, key: [LogValue], values: [String: LogValue], _ db: Database) throws {
        let columns = table.valueColumns.filter { values[$0] != nil }
        let names = (table.primaryKey + columns).map(\.quotedDatabaseIdentifier)
        let sql = "INSERT INTO main.\(table.name.quotedDatabaseIdentifier)(\(names.joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: names.count).joined(separator: ", ")))"
        try db.cachedStatement(sql: sql).execute(arguments: StatementArguments(key.map(\.databaseValue) + columns.map { values[$0]!.databaseValue }))
    }

    static func delete(_ table: SyncedTable, key: [LogValue], _ db: Database) throws {
        try db.cachedStatement(sql: "DELETE FROM main.\(table.name.quotedDatabaseIdentifier) WHERE \(ChangeCapture.keyCondition(table))").execute(arguments: StatementArguments(key.map(\.databaseValue)))
    }
}
