import Foundation

/// A column's value as a log carries it: SQLite's storage classes.
public enum LogValue: Hashable, Sendable, Codable {
    /// NULL.
    case null
    /// An INTEGER.
    case integer(Int64)
    /// A REAL.
    case real(Double)
    /// TEXT.
    case text(String)
    /// A BLOB.
    case blob(Data)

    private enum CodingKeys: String, CodingKey { case i, r, t, b }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if let value = try container.decodeIfPresent(Int64.self, forKey: .i) {
            self = .integer(value)
        } else if let value = try container.decodeIfPresent(Double.self, forKey: .r) {
            self = .real(value)
        } else if let value = try container.decodeIfPresent(String.self, forKey: .t) {
            self = .text(value)
        } else if let value = try container.decodeIfPresent(Data.self, forKey: .b) {
            self = .blob(value)
        } else {
            self = .null
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .null: break
        case .integer(let value): try container.encode(value, forKey: .i)
        case .real(let value): try container.encode(value, forKey: .r)
        case .text(let value): try container.encode(value, forKey: .t)
        case .blob(let value): try container.encode(value, forKey: .b)
        }
    }
}

/// One row's change within a transaction.
public struct RowChange: Hashable, Sendable, Codable {
    /// What happened to the row.
    public enum Kind: String, Sendable, Codable {
        /// The row was inserted: ``RowChange/columns`` holds every column.
        case insert
        /// Columns of the row changed: ``RowChange/columns`` holds those, with their new values.
        case update
        /// The row was deleted.
        case delete
    }

    /// The table.
    public var table: String
    /// The row's primary key, column by column (in the table's key order).
    public var primaryKey: [LogValue]
    /// What happened.
    public var kind: Kind
    /// New values by column name (empty for a delete).
    public var columns: [String: LogValue]

    /// A row's change.
    public init(table: String, primaryKey: [LogValue], kind: Kind, columns: [String: LogValue] = [:]) {
        self.table = table
        self.primaryKey = primaryKey
        self.kind = kind
        self.columns = columns
    }
}

/// One committed transaction of one device: every row it changed, under one timestamp so that
/// its values win or lose together.
public struct ChangeLogRecord: Hashable, Sendable, Codable {
    /// When, by the device's hybrid logical clock.
    public var timestamp: HLCTimestamp
    /// The device that made it.
    public var device: String
    /// The hash of the schema it was made with (a device with another schema applies it only
    /// once its own migrator has reached that schema).
    public var schema: String
    /// The rows it changed, in the order it changed them.
    public var changes: [RowChange]
    /// The place of its first change in its transaction, when a transaction too large for one
    /// record was split into several (nil: the record is the whole transaction, from 0).
    public var startIndex: Int?

    /// A transaction's record (or, with `startIndex`, a part of one).
    public init(timestamp: HLCTimestamp, device: String, schema: String, changes: [RowChange], startIndex: Int? = nil) {
        self.timestamp = timestamp
        self.device = device
        self.schema = schema
        self.changes = changes
        self.startIndex = startIndex
    }

    /// Whether this record comes before `other` in the one order every device merges by:
    /// timestamp, then device id.
    public func orderedBefore(_ other: ChangeLogRecord) -> Bool {
        (timestamp, device) < (other.timestamp, other.device)
    }
}
