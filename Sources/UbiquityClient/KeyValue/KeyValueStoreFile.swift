import Foundation
import Logging
import UbiquityFiles
import UbiquityProtocol

#if canImport(Glibc)
import Glibc
#endif

/// A key-value store on this device, shared by the apps that use it and the agent: values
/// with their timestamps, which of them the server has not acknowledged yet, how far the agent
/// has pulled, and the agent's last change (so apps can tell what came from elsewhere).
///
/// It lives at `ACCOUNT/kv/STORE.json` (signed out: `DATA/kv-signed-out/STORE.json`), replaced
/// whole by safe save, each read-modify-write under an exclusive `flock` of `STORE.lock`.
public struct KeyValueStoreFile: Codable, Sendable, Equatable {
    /// One key.
    public struct Entry: Codable, Sendable, Equatable {
        /// Its value (nil: removed).
        public var value: PropertyListValue?
        /// When it was set (seconds since 1970): the most recent change wins.
        public var timestamp: Double
        /// Set here, not yet acknowledged by the server.
        public var pending: Bool

        /// An entry.
        public init(value: PropertyListValue?, timestamp: Double, pending: Bool) {
            self.value = value
            self.timestamp = timestamp
            self.pending = pending
        }
    }

    /// A change the agent made to the file: from the server, or refused by it.
    public struct ExternalChange: Codable, Sendable, Equatable {
        /// Counts up with each change.
        public var serial: Int
        /// An `NSUbiquitousKeyValueStore…Change` reason.
        public var reason: Int
        /// The keys it changed.
        public var keys: [String]

        /// A change.
        public init(serial: Int, reason: Int, keys: [String]) {
            self.serial = serial
            self.reason = reason
            self.keys = keys
        }
    }

    /// The keys, removed ones included until the server has the removal.
    public var entries: [String: Entry] = [:]
    /// The store sequence pulled from the server so far.
    public var cursor: Int64 = 0
    /// Whether the first pull from the server happened.
    public var synced = false
    /// The agent's last change.
    public var change: ExternalChange?

    /// An empty store.
    public init() {}

    /// The values (removed keys left out).
    public var values: [String: PropertyListValue] { entries.compactMapValues(\.value) }

    /// The file of store `identifier` in `folder`.
    public static func url(_ identifier: String, in folder: URL) -> URL { folder.appendingPathComponent(identifier + ".json") }

    /// Reads the store (an empty one if there is no file; a damaged file is kept aside as
    /// `STORE.json.damaged` — or `.damaged-2`, `-3`, … if that name is taken — and the store
    /// starts empty, so nothing is silently overwritten or deleted, even when two processes
    /// meet the damaged file at once).
    public static func read(_ identifier: String, in folder: URL) -> KeyValueStoreFile {
        let url = url(identifier, in: folder)
        guard let data = FileManager.default.contents(atPath: url.path) else { return KeyValueStoreFile() }
        if let store = try? JSONDecoder().decode(KeyValueStoreFile.self, from: data) { return store } // else: set aside below
        for attempt in 1...100 {
            let aside = url.appendingPathExtension(attempt == 1 ? "damaged" : "damaged-\(attempt)")
            // link(2) never replaces a file: the first free name wins; then the damaged name goes.
            if link(url.path, aside.path) == 0 {
                // Replaced by a good store meanwhile (the agent's safe save)? Then that stays.
                if let now = FileManager.default.contents(atPath: aside.path), (try? JSONDecoder().decode(KeyValueStoreFile.self, from: now)) != nil { // only: is it good?
                    unlink(aside.path)
                    return read(identifier, in: folder)
                }
                unlink(url.path)
                Logger(label: "ubiquity.key-value-store").error("a damaged key-value store was set aside; it starts empty, and what the server has comes back through the agent",
                                                               metadata: ["store": "\(identifier)", "kept": "\(aside.path)"])
                break
            }
            if errno != EEXIST { break } // gone meanwhile (another reader set it aside) or cannot: leave it
        }
        return KeyValueStoreFile()
    }

    /// Creates the store's file if there is none: the agent syncs the stores that have one.
    public static func create(_ identifier: String, in folder: URL) throws {
        guard !FileManager.default.fileExists(atPath: url(identifier, in: folder).path) else { return }
        try update(identifier, in: folder, force: true) { _ in }
    }

    /// Reads, changes and writes the store under its lock; returns what `body` returns.
    @discardableResult
    public static func update<T>(_ identifier: String, in folder: URL, force: Bool = false, _ body: (inout KeyValueStoreFile) throws -> T) throws -> T {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let lock = open(folder.appendingPathComponent(identifier + ".lock").path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lock >= 0 else { throw FileAccessError(operation: "open the lock of", path: folder.path, errno: errno) }
        defer { close(lock) }
        guard SystemCall.lock(lock, LOCK_EX) == 0 else { throw FileAccessError(operation: "lock", path: folder.path, errno: errno) }
        var store = read(identifier, in: folder)
        let before = store
        let result = try body(&store)
        if store != before || force && !FileManager.default.fileExists(atPath: url(identifier, in: folder).path) {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            try SafeSave.write(try encoder.encode(store), to: url(identifier, in: folder))
        }
        return result
    }
}

extension PropertyListValue {
    /// A property-list value of a Swift or Foundation value (String, numbers, Bool, Date, Data,
    /// arrays and string-keyed dictionaries of these); nil for anything else.
    public init?(propertyList value: Any) {
        let type = Swift.type(of: value)
        if type is NSNumber.Type, let number = value as? NSNumber {
            // A Foundation number (what Apple's APIs hand back): a Boolean, a real or an integer
            // as it was made.
            switch String(cString: number.objCType) {
            case "c", "B": self = .bool(number.boolValue)
            case "f", "d": self = .real(number.doubleValue)
            default: self = .integer(number.int64Value)
            }
        }
        else if let value = value as? String { self = .string(value) }
        else if type == Bool.self { self = .bool(value as! Bool) }
        else if let value = value as? Int { self = .integer(Int64(value)) }
        else if let value = value as? Int64 { self = .integer(value) }
        else if let value = value as? Double { self = .real(value) }
        else if let value = value as? Date { self = .date(value.timeIntervalSince1970) }
        else if let value = value as? Data { self = .data(value) }
        else if let value = value as? any BinaryInteger { self = .integer(Int64(clamping: value)) }
        else if let value = value as? any BinaryFloatingPoint { self = .real(Double(value)) }
        else if let value = value as? NSNumber { self = .real(value.doubleValue) }
        else if let value = value as? [Any] {
            var items: [PropertyListValue] = []
            for item in value {
                guard let converted = PropertyListValue(propertyList: item) else { return nil }
                items.append(converted)
            }
            self = .array(items)
        } else if let value = value as? [String: Any] {
            var items: [String: PropertyListValue] = [:]
            for (key, item) in value {
                guard let converted = PropertyListValue(propertyList: item) else { return nil }
                items[key] = converted
            }
            self = .dictionary(items)
        } else {
            return nil
        }
    }

    /// The value as Foundation hands property lists back on Apple's platforms: String,
    /// NSNumber (integers, reals and Booleans — `as? Int`, `as? Double`, `as? Bool` and
    /// `as? NSNumber` all work, as when bridged there), Date, Data, [Any], [String: Any].
    public var foundationObject: Any {
        switch self {
        case .integer(let value): return NSNumber(value: value)
        case .real(let value): return NSNumber(value: value)
        case .bool(let value): return NSNumber(value: value)
        case .array(let values): return values.map(\.foundationObject)
        case .dictionary(let values): return values.mapValues(\.foundationObject)
        default: return propertyList
        }
    }

    /// The value as Swift values: String, Int64, Double, Bool, Date, Data, [Any], [String: Any].
    public var propertyList: Any {
        switch self {
        case .string(let value): return value
        case .integer(let value): return value
        case .real(let value): return value
        case .bool(let value): return value
        case .date(let value): return Date(timeIntervalSince1970: value)
        case .data(let value): return value
        case .array(let values): return values.map(\.propertyList)
        case .dictionary(let values): return values.mapValues(\.propertyList)
        }
    }
}
