import Foundation

/// A property-list value in JSON with a type tag, so nothing is lost on the way:
/// `{"string":"…"}`, `{"integer":1}`, `{"real":1.5}`, `{"bool":true}`, `{"date":SECONDS}`,
/// `{"data":"BASE64"}`, `{"array":[…]}`, `{"dictionary":{"key":…}}`.
public indirect enum PropertyListValue: Codable, Sendable, Equatable {
    case string(String)
    case integer(Int64)
    case real(Double)
    case bool(Bool)
    case date(Double)
    case data(Data)
    case array([PropertyListValue])
    case dictionary([String: PropertyListValue])

    private enum Key: String, CodingKey { case string, integer, real, bool, date, data, array, dictionary }

    /// Decodes a tagged value (exactly one tag).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        guard container.allKeys.count == 1, let key = container.allKeys.first else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "a property-list value has exactly one type tag"))
        }
        switch key {
        case .string: self = .string(try container.decode(String.self, forKey: key))
        case .integer: self = .integer(try container.decode(Int64.self, forKey: key))
        case .real: self = .real(try container.decode(Double.self, forKey: key))
        case .bool: self = .bool(try container.decode(Bool.self, forKey: key))
        case .date: self = .date(try container.decode(Double.self, forKey: key))
        case .data: self = .data(try container.decode(Data.self, forKey: key))
        case .array: self = .array(try container.decode([PropertyListValue].self, forKey: key))
        case .dictionary: self = .dictionary(try container.decode([String: PropertyListValue].self, forKey: key))
        }
    }

    /// Encodes with its type tag.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        switch self {
        case .string(let value): try container.encode(value, forKey: .string)
        case .integer(let value): try container.encode(value, forKey: .integer)
        case .real(let value): try container.encode(value, forKey: .real)
        case .bool(let value): try container.encode(value, forKey: .bool)
        case .date(let value): try container.encode(value, forKey: .date)
        case .data(let value): try container.encode(value, forKey: .data)
        case .array(let value): try container.encode(value, forKey: .array)
        case .dictionary(let value): try container.encode(value, forKey: .dictionary)
        }
    }
}

/// One key's change: a new value, or nil to remove it, stamped by the device.
///
/// An account whose devices hold its keys sends sealed changes instead: `key` is the key's
/// keyed tag, `value` is nil, `sealed` holds the value or the removal sealed on the device, and
/// `removed` says which, so that the server counts keys without reading them.
public struct KeyValueChange: Codable, Sendable, Equatable {
    /// The key (at most 64 bytes of UTF-8), or its tag for a sealed change.
    public var key: String
    /// The new value, or nil to remove the key (always nil for a sealed change).
    public var value: PropertyListValue?
    /// When the device made the change (seconds since 1970); the most recent change wins.
    public var timestamp: Double
    /// The change sealed on the device (an encrypted account), or nil.
    public var sealed: Data?
    /// For a sealed change: whether it removes the key.
    public var removed: Bool?

    /// Creates a change.
    public init(key: String, value: PropertyListValue?, timestamp: Double) {
        self.key = key
        self.value = value
        self.timestamp = timestamp
    }

    /// Creates a sealed change.
    public init(key: String, sealed: Data, removed: Bool, timestamp: Double) {
        self.key = key
        self.timestamp = timestamp
        self.sealed = sealed
        self.removed = removed
    }
}

/// `POST /v1/kv/{store}`: changes to apply, all or none.
public struct KeyValueUpdate: Codable, Sendable {
    /// The changes.
    public var changes: [KeyValueChange]

    /// Creates an update.
    public init(changes: [KeyValueChange]) { self.changes = changes }
}

/// A key as the server has it (value nil and nothing sealed: removed).
public struct KeyValueEntry: Codable, Sendable, Equatable {
    /// The key (its tag, for a sealed entry).
    public var key: String
    /// Its value, or nil if it was removed or is sealed.
    public var value: PropertyListValue?
    /// The winning change as its device sealed it (an encrypted account), or nil.
    public var sealed: Data?
    /// For a sealed entry: whether it is a removal.
    public var removed: Bool?
    /// The winning change's timestamp.
    public var timestamp: Double
    /// The device that made it.
    public var deviceName: String
    /// The store sequence at which it changed.
    public var sequence: Int64

    /// Creates a value.
    public init(key: String, value: PropertyListValue? = nil, timestamp: Double, deviceName: String, sequence: Int64) {
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.deviceName = deviceName
        self.sequence = sequence
    }
}

/// The store's state after an update, or the changes since a cursor.
public struct KeyValueResponse: Codable, Sendable {
    /// The store's sequence now.
    public var sequence: Int64
    /// Entries changed since the cursor (for an update: every key it named, as they are now —
    /// a change older than the server's is not applied, and the newer value comes back).
    public var entries: [KeyValueEntry]

    /// Creates a value.
    public init(sequence: Int64, entries: [KeyValueEntry]) {
        self.sequence = sequence
        self.entries = entries
    }
}

/// Apple's limits for a key-value store, enforced exactly.
public enum KeyValueLimits {
    /// At most this many keys.
    public static let maximumKeys = 1_024
    /// At most this many bytes in all (keys and values).
    public static let maximumTotalBytes = 1_048_576
    /// At most this many bytes for one value.
    public static let maximumValueBytes = 1_048_576
    /// At most this many bytes of UTF-8 per key.
    public static let maximumKeyBytes = 64

    /// The most bytes a sealed value may take: what sealing adds (padding, at most an eighth, the
    /// key inside, the seal) to the largest value. Devices check Apple's limits on the values
    /// themselves; the server, which cannot read them, allows this much.
    public static let maximumSealedValueBytes = maximumValueBytes + maximumValueBytes / 8 + 256
    /// The most bytes a store of sealed values may take, by the same reckoning.
    public static let maximumSealedTotalBytes = maximumTotalBytes + maximumTotalBytes / 8 + maximumKeys * 256

    /// The bytes a key and value count for: the key's UTF-8 plus the value's JSON.
    public static func size(key: String, value: PropertyListValue) throws -> Int {
        key.utf8.count + (try JSONEncoder().encode(value)).count
    }
}
