/// A dictionary from strings to values kept out of line: each entry holds a key and one
/// pointer, each value lives in its own immutable box. A Swift dictionary keeps its load factor
/// between 3/8 and 3/4, so with large values inline most of its memory is empty buckets the
/// size of a value (at 100,010 items, 262,144 buckets of 160 bytes: 42 MB for 16 MB of
/// snapshots); out of line, in a ``CompactDictionary``, an entry costs 24 bytes and there are
/// no empty buckets. Value semantics are kept: a value is never changed in place, a new box
/// replaces it.
package struct OutOfLineDictionary<Value: Sendable>: Sendable {
    private final class Box: Sendable {
        let value: Value
        init(_ value: Value) { self.value = value }
    }

    private var storage: CompactDictionary<String, Box>

    /// An empty dictionary.
    package init() {
        storage = [:]
    }

    /// An empty dictionary with room for `capacity` values.
    package init(minimumCapacity capacity: Int) {
        storage = CompactDictionary(minimumCapacity: capacity)
    }

    /// The value for `key`, if any; setting nil removes it.
    package subscript(key: String) -> Value? {
        get { storage[key]?.value }
        set { storage[key] = newValue.map(Box.init) }
    }

    /// Removes the value for `key` and returns it.
    @discardableResult
    package mutating func removeValue(forKey key: String) -> Value? {
        storage.removeValue(forKey: key)?.value
    }

    /// The keys.
    package var keys: some Collection<String> { storage.keys }

    /// The values (in the order of ``keys``).
    package var values: some Collection<Value> { storage.values.lazy.map(\.value) }

    /// A plain dictionary of the values transformed.
    package func mapValues<T>(_ transform: (Value) throws -> T) rethrows -> [String: T] {
        try storage.mapValues { try transform($0.value) }
    }

    /// How many values there are.
    package var count: Int { storage.count }

    /// Whether there are none.
    package var isEmpty: Bool { storage.isEmpty }
}

extension OutOfLineDictionary: Equatable where Value: Equatable {
    package static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.count == rhs.count && lhs.storage.allSatisfy { key, box in rhs.storage[key].map { $0 === box || $0.value == box.value } ?? false }
    }
}

extension OutOfLineDictionary: Codable where Value: Codable {
    /// Decodes it as a dictionary (its encoded form is a plain JSON object).
    package init(from decoder: any Decoder) throws {
        let plain = try [String: Value](from: decoder)
        storage = CompactDictionary(minimumCapacity: plain.count)
        for (key, value) in plain { storage[key] = Box(value) }
    }

    /// Encodes it as a dictionary.
    package func encode(to encoder: any Encoder) throws {
        try storage.mapValues(\.value).encode(to: encoder)
    }
}

extension OutOfLineDictionary: ExpressibleByDictionaryLiteral {
    /// A dictionary of the pairs given (the last of equal keys wins).
    package init(dictionaryLiteral elements: (String, Value)...) {
        storage = CompactDictionary(minimumCapacity: elements.count)
        for (key, value) in elements { storage[key] = Box(value) }
    }
}

extension OutOfLineDictionary {
    /// The instance of `key` the dictionary holds, if it holds it: what a string equal to a
    /// key (a parent folder's id in each of its children) can share instead of its own copy.
    package func storedKey(_ key: String) -> String? {
        storage.storedKey(key)
    }
}

/// Makes equal strings share one storage: what a table read from disk or the network (where
/// every field of every row is a string of its own) goes through, so that an item's id, its
/// revision and its path are held once however many tables name them. Strings of up to 15 bytes
/// are stored inline by Swift and pass through.
package struct StringInterner {
    private var seen = Set<String>()

    /// An interner that has seen nothing.
    package init() {}

    /// `string`, or the equal string seen before.
    package mutating func callAsFunction(_ string: String) -> String {
        string.utf8.count <= 15 ? string : seen.insert(string).memberAfterInsert
    }

    /// `string` (if any), or the equal string seen before.
    package mutating func callAsFunction(_ string: String?) -> String? {
        string.map { self($0) }
    }
}
