import DequeModule
import Foundation
import Synchronization

/// The names, sizes and dates the server's pages last read from sealed item records (Standard
/// Data Protection only: without the escrow's keys nothing is opened, so nothing is kept), so
/// that a large folder's next page sorts by name without opening every record again.
///
/// In memory only, never written anywhere; bounded (``capacity`` records, the oldest dropped
/// first). An entry is found only by the whole record and everything it is bound to (account,
/// container, item, folder, the name-clash tag the server shows beside it): a record moved,
/// changed or shown beside another tag is a new key, opened and checked again.
final class OpenedRecordCache: Sendable {
    /// What a record is found by.
    struct Key: Hashable, Sendable {
        var account: Int64
        var container: String
        var item: String
        var parent: String?
        var shown: String
        var record: Data

        /// Every byte of the record hashed (`Data`'s own hash reads only some of them, and
        /// records of one length differ little there: a folder's lookups then compare most of
        /// its keys byte by byte).
        func hash(into hasher: inout Hasher) {
            hasher.combine(account)
            hasher.combine(item)
            hasher.combine(shown)
            record.withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }

    /// What a page reads from a record.
    struct Opened: Sendable, Equatable {
        var name: String
        var size: Int64
        var date: Double
    }

    /// The most records kept (a 10,000-item folder several times over; a few tens of MiB).
    let capacity: Int
    private let state = Mutex<(entries: [Key: Opened], order: Deque<Key>)>(([:], []))

    init(capacity: Int = 65_536) {
        self.capacity = capacity
    }

    /// What `key`'s record said, if it was opened before.
    func opened(_ key: Key) -> Opened? {
        state.withLock { $0.entries[key] }
    }

    /// Keeps what the records of `keys` said (`opened`, in the same order).
    func keep(_ keys: [Key], _ opened: [Opened]) {
        state.withLock { state in
            for (key, value) in zip(keys, opened) where state.entries.updateValue(value, forKey: key) == nil {
                state.order.append(key)
            }
            while state.order.count > capacity, let oldest = state.order.popFirst() {
                state.entries[oldest] = nil
            }
        }
    }

    /// How many records are kept.
    var count: Int { state.withLock { $0.entries.count } }
}
