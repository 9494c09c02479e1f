import Crypto
import Foundation
import GRDB

/// Why a store's schema cannot be synced as it is.
public struct SyncedSchemaError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The table.
    public var table: String
    /// What is wrong with it, and what to do.
    public var message: String

    /// An error.
    public init(table: String, message: String) {
        self.table = table
        self.message = message
    }

    /// `table: message`.
    public var description: String { "\(table): \(message)" }
}

/// A table whose rows sync: its columns and its primary key.
public struct SyncedTable: Hashable, Sendable {
    /// The table's name.
    public let name: String
    /// Every column, in the table's order.
    public let columns: [String]
    /// The primary key's columns, in key order (one to ``SyncedTable/maximumKeyColumns``).
    public let primaryKey: [String]
    /// The columns outside the primary key, in the table's order.
    public let valueColumns: [String]
    /// The columns of each unique index other than the primary key: two devices' rows that
    /// collide on one are duplicates (one is kept, on every device the same).
    public let uniqueKeys: [[String]]

    /// The most columns a synced table's primary key may have.
    public static let maximumKeyColumns = 4

    /// A table's shape.
    public init(name: String, columns: [String], primaryKey: [String], uniqueKeys: [[String]] = []) {
        self.name = name
        self.columns = columns
        self.primaryKey = primaryKey
        self.uniqueKeys = uniqueKeys
        let key = Set(primaryKey)
        self.valueColumns = columns.filter { !key.contains($0) }
    }

    /// The columns of the unique indexes, each once.
    var uniqueColumns: [String] {
        var seen = Set<String>()
        return uniqueKeys.joined().filter { seen.insert($0).inserted }
    }

    /// The bit that marks a change of value column `index` in a captured update (columns past
    /// the 62nd share the last bit).
    static func bit(ofValueColumn index: Int) -> Int64 { 1 << Int64(min(index, 62)) }

    /// The value columns marked in `mask`.
    func valueColumns(in mask: Int64) -> [String] {
        valueColumns.enumerated().filter { mask & Self.bit(ofValueColumn: $0.offset) != 0 }.map(\.element)
    }
}

/// The tables of a store that sync, read from its schema, and the schema's hash (which every
/// log record carries, so that a device applies a record only with a schema that has its
/// columns).
///
/// Every ordinary table syncs except SQLite's and GRDB's own (`sqlite_…`, `grdb_…`), the
/// engine's (`ubq_…`) and those the app keeps local. A synced table needs a primary key that
/// means the same row on every device: an explicit `PRIMARY KEY` of one to four columns — text
/// (a UUID) or any value the app assigns —, not the hidden rowid nor an `INTEGER PRIMARY KEY`
/// (SQLite picks those numbers per device, so two devices' new rows would collide).
public struct SyncedSchema: Sendable, Equatable {
    /// The synced tables, sorted by name.
    public let tables: [SyncedTable]
    /// SHA-256 (hex) of the synced tables' shapes: names, columns, types, constraints on
    /// columns, keys.
    public let hash: String

    /// The tables by name.
    public func table(_ name: String) -> SyncedTable? { tables.first { $0.name == name } }

    /// Reads the schema of the store `db` is connected to.
    /// - Parameters:
    ///   - db: A connection.
    ///   - localTables: Tables that stay on this device.
    /// - Throws: ``SyncedSchemaError`` for a table without a usable primary key.
    public static func read(_ db: Database, localTables: Set<String> = []) throws -> SyncedSchema {
        let names = try String.fetchAll(db, sql: """
            SELECT name FROM sqlite_master
            WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'
              AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE 'grdb\\_%' ESCAPE '\\' AND name NOT LIKE 'ubq\\_%' ESCAPE '\\'
            ORDER BY name
            """)
        var tables: [SyncedTable] = []
        var shape = ""
        for name in names where !localTables.contains(name) {
            let columns = try db.columns(in: name)
            let key = try db.primaryKey(name)
            if key.isRowID {
                let message = key.rowIDColumn.map { "its key \"\($0)\" is an INTEGER PRIMARY KEY, numbered by each device on its own (two devices' new rows would collide): use a text key such as a UUID" }
                    ?? "it has no PRIMARY KEY; a synced table needs one that names the same row on every device (a UUID)"
                throw SyncedSchemaError(table: name, message: message)
            }
            guard key.columns.count <= SyncedTable.maximumKeyColumns else {
                throw SyncedSchemaError(table: name, message: "its primary key has \(key.columns.count) columns; at most \(SyncedTable.maximumKeyColumns)")
            }
            let uniqueKeys = try db.indexes(on: name).filter { $0.isUnique && $0.origin != .primaryKeyConstraint && $0.columns != key.columns }.map(\.columns).sorted { $0.lexicographicallyPrecedes($1) }
            tables.append(SyncedTable(name: name, columns: columns.map(\.name), primaryKey: key.columns, uniqueKeys: uniqueKeys))
            shape += "table \(name)\n"
            for column in columns {
                shape += "  \(column.name) \(column.type) notnull=\(column.isNotNull) default=\(column.defaultValueSQL ?? "") pk=\(column.primaryKeyIndex)\n"
            }
            for unique in uniqueKeys { shape += "  unique \(unique.joined(separator: ","))\n" }
        }
        let hash = LogSegment.hex(SHA256.hash(data: Data(shape.utf8)))
        return SyncedSchema(tables: tables, hash: hash)
    }
}
