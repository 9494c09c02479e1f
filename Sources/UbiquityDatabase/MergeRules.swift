import Foundation

/// When a change was made, in the order every device merges by: its transaction's timestamp,
/// then its device id (together unique per transaction), then its place in the transaction.
public struct ChangeStamp: Comparable, Hashable, Sendable, Codable {
    /// The transaction's hybrid-logical-clock timestamp.
    public var timestamp: HLCTimestamp
    /// The device that made it.
    public var device: String
    /// The change's place among its transaction's changes.
    public var index: Int

    /// A stamp.
    public init(timestamp: HLCTimestamp, device: String, index: Int = 0) {
        self.timestamp = timestamp
        self.device = device
        self.index = index
    }

    public static func < (lhs: ChangeStamp, rhs: ChangeStamp) -> Bool {
        (lhs.timestamp, lhs.device, lhs.index) < (rhs.timestamp, rhs.device, rhs.index)
    }
}

/// A row, by table and primary key.
public struct RowKey: Hashable, Sendable, Codable {
    /// The table.
    public var table: String
    /// The primary key's values.
    public var primaryKey: [LogValue]

    /// A key.
    public init(table: String, primaryKey: [LogValue]) {
        self.table = table
        self.primaryKey = primaryKey
    }
}

/// What the merge knows of one row: each column's value with the stamp that set it, and the
/// stamps of the row's latest insert and latest delete.
public struct MergedRow: Equatable, Sendable, Codable {
    /// Each column's value and the stamp of the change that set it.
    public var columns: [String: Stamped] = [:]
    /// The latest insert of the row.
    public var inserted: ChangeStamp?
    /// The latest delete of the row.
    public var deleted: ChangeStamp?

    /// A value and the stamp that set it.
    public struct Stamped: Equatable, Sendable, Codable {
        /// The value.
        public var value: LogValue
        /// Who set it, when.
        public var stamp: ChangeStamp
    }

    /// Whether the row exists: inserted, and not deleted since (a delete beats updates made
    /// concurrently or later; only a later insert brings the row back).
    public var exists: Bool {
        guard let inserted else { return false }
        return deleted.map { inserted > $0 } ?? true
    }

    /// The row's values, if it exists.
    public var values: [String: LogValue]? {
        exists ? columns.mapValues(\.value) : nil
    }
}

/// The merge rules of databases in iCloud, as a state every device reaches from the same set of
/// transactions whatever order (and however many times) they arrive in:
///
/// - each column takes the value of the latest change that set it (by ``ChangeStamp``: the
///   transaction's hybrid-logical-clock timestamp, then the device id) — concurrent edits of
///   different columns of one row both stand; of one column, the later wins, on every device;
/// - a delete beats every update not followed by a re-insert: the row exists if its latest
///   insert is later than its latest delete;
/// - a transaction's changes share its timestamp, so they win or lose together against other
///   transactions; within it, later changes follow earlier ones.
///
/// Every rule takes a maximum, so applying records commutes, associates and repeats harmlessly.
/// This is the reference the store's import is checked against.
public struct MergeRules: Equatable, Sendable {
    /// Every row the records touched, by key.
    public private(set) var rows: [RowKey: MergedRow] = [:]

    /// An empty state.
    public init() {}

    /// Applies one transaction.
    /// - Parameter record: The transaction.
    public mutating func apply(_ record: ChangeLogRecord) {
        for (index, change) in record.changes.enumerated() {
            let stamp = ChangeStamp(timestamp: record.timestamp, device: record.device, index: (record.startIndex ?? 0) + index)
            let key = RowKey(table: change.table, primaryKey: change.primaryKey)
            var row = rows[key] ?? MergedRow()
            switch change.kind {
            case .insert, .update:
                if change.kind == .insert, row.inserted.map({ stamp > $0 }) ?? true { row.inserted = stamp }
                for (name, value) in change.columns where row.columns[name].map({ stamp > $0.stamp }) ?? true {
                    row.columns[name] = MergedRow.Stamped(value: value, stamp: stamp)
                }
            case .delete:
                if row.deleted.map({ stamp > $0 }) ?? true { row.deleted = stamp }
            }
            rows[key] = row
        }
    }

    /// The rows of `table` that exist, with their values, by primary key.
    public func table(_ table: String) -> [[LogValue]: [String: LogValue]] {
        var result: [[LogValue]: [String: LogValue]] = [:]
        for (key, row) in rows where key.table == table {
            if let values = row.values { result[key.primaryKey] = values }
        }
        return result
    }
}
