import OrderedCollections

/// A hash map kept dense, for tables with an entry per item: keys and values in two arrays,
/// found through a hash table of array offsets (swift-collections' `OrderedDictionary`),
/// with removal by moving the last entry into the removed one's place — O(1), where
/// `OrderedDictionary`'s own removal keeps the order by shifting every later entry. The order
/// of iteration is not kept across removals (as with `Dictionary`, it means nothing).
///
/// A Swift `Dictionary` keeps its load factor between 3/8 and 3/4 with whole entries in its
/// buckets: at 100,002 entries it has 262,144 buckets, 2.6 times the entries. Here the hash
/// table's buckets hold offsets of 18 bits, and only the arrays hold entries (with at most
/// their growth's slack): an agent's item-keyed tables at 100,000 items took about half.
package struct CompactDictionary<Key: Hashable, Value> {
    private var storage: OrderedDictionary<Key, Value>

    /// An empty dictionary.
    package init() {
        storage = [:]
    }

    /// An empty dictionary with room for `capacity` entries.
    package init(minimumCapacity capacity: Int) {
        storage = OrderedDictionary(minimumCapacity: capacity)
    }

    /// The value for `key`, if any; setting nil removes it.
    package subscript(key: Key) -> Value? {
        get { storage[key] }
        set {
            if let newValue {
                storage[key] = newValue
            } else {
                removeValue(forKey: key)
            }
        }
    }

    /// Removes the value for `key` and returns it (the last entry takes its place).
    @discardableResult
    package mutating func removeValue(forKey key: Key) -> Value? {
        guard let index = storage.index(forKey: key) else { return nil }
        let last = storage.count - 1
        if index != last { storage.swapAt(index, last) }
        return storage.removeLast().value
    }

    /// The instance of `key` the dictionary holds, if it holds it (one equal to `key`).
    package func storedKey(_ key: Key) -> Key? {
        storage.index(forKey: key).map { storage.keys[$0] }
    }

    /// How many entries there are.
    package var count: Int { storage.count }

    /// Whether there are none.
    package var isEmpty: Bool { storage.isEmpty }

    /// The keys.
    package var keys: some RandomAccessCollection<Key> { storage.keys }

    /// The values (in the order of ``keys``).
    package var values: some RandomAccessCollection<Value> { storage.values }

    /// A plain dictionary of the values transformed.
    package func mapValues<T>(_ transform: (Value) throws -> T) rethrows -> [Key: T] {
        var mapped: [Key: T] = Dictionary(minimumCapacity: storage.count)
        for (key, value) in storage { mapped[key] = try transform(value) }
        return mapped
    }
}

extension CompactDictionary: Sequence {
    /// The entries, as a dictionary's.
    package func makeIterator() -> some IteratorProtocol<(key: Key, value: Value)> {
        storage.makeIterator()
    }

    /// How many entries there are.
    package var underestimatedCount: Int { storage.count }
}

extension CompactDictionary: Sendable where Key: Sendable, Value: Sendable {}

extension CompactDictionary: Equatable where Value: Equatable {
    /// Whether both have the same entries, in whatever order.
    package static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.count == rhs.count && lhs.storage.allSatisfy { rhs.storage[$0.key] == $0.value }
    }
}

extension CompactDictionary: ExpressibleByDictionaryLiteral {
    /// A dictionary of the pairs given (the last of equal keys wins).
    package init(dictionaryLiteral elements: (Key, Value)...) {
        self.init(minimumCapacity: elements.count)
        for (key, value) in elements { self[key] = value }
    }
}
