import CUbiquitySystem
import Foundation
import UbiquityClient
import Synchronization
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// A file, folder or package a metadata query found, with its attributes: name, URL, size,
/// dates, type, and — for an item in a ubiquity container — its sync status, even when only
/// its metadata is on this device.
///
/// A query keeps each result's item object for as long as the item is a result and updates its
/// attributes in place, so an item seen in one update is the same object in the next (as on
/// Apple platforms). Reading attributes is thread-safe.
public final class NSMetadataItem: NSObject, PredicateKeyValueReading, @unchecked Sendable { // unchecked: its record is behind a Mutex
    let record: Mutex<MetadataRecord>

    init(_ record: MetadataRecord) {
        self.record = Mutex(record)
        super.init()
    }

    /// The item at `url`, read from disk now (its sync status too, if it is in a ubiquity
    /// container); nil if there is nothing there. A placeholder's item (not downloaded) is
    /// found at the item's own URL.
    public convenience init?(url: URL) {
        let path = url.standardizedFileURL.path
        let containers = UbiquityContainers.shared
        if let location = containers.location(of: url) {
            let source = ContainerSource(identifier: location.container, root: location.root, part: .everything)
            guard let record = source.record(at: path) else { return nil }
            self.init(record)
        } else {
            guard let record = MetadataRecord.read(path) else { return nil }
            self.init(record)
        }
    }

    /// The value of one attribute (an `NSMetadataItem…Key`), or nil if the item has none.
    /// Numbers and Booleans come back as `NSNumber`, as on Apple's platforms: `as? Int`,
    /// `as? Double`, `as? Bool` and `as? NSNumber` all work.
    public func value(forAttribute key: String) -> Any? {
        record.withLock { $0.value(forAttribute: key) }.map(Self.bridged)
    }

    /// The values of several attributes, by name (those the item has), bridged as
    /// ``value(forAttribute:)``'s.
    public func values(forAttributes keys: [String]) -> [String: Any]? {
        record.withLock { record in
            var values: [String: Any] = [:]
            for key in keys { if let value = record.value(forAttribute: key) { values[key] = Self.bridged(value) } }
            return values
        }
    }

    /// A value as Foundation hands it back on Apple's platforms: numbers and Booleans as
    /// `NSNumber` (in arrays too), anything else as it is.
    static func bridged(_ value: Any) -> Any {
        switch value {
        case let flag as Bool where type(of: value) == Bool.self: return NSNumber(value: flag)
        case let number as Int64 where type(of: value) == Int64.self: return NSNumber(value: number)
        case let number as Int where type(of: value) == Int.self: return NSNumber(value: number)
        case let number as Double where type(of: value) == Double.self: return NSNumber(value: number)
        case let values as [Any]: return values.map(bridged)
        default: return value
        }
    }

    /// The names of the attributes the item has.
    public var attributes: [String] {
        record.withLock { record in MetadataRecord.allAttributes.filter { record.value(forAttribute: $0) != nil } }
    }

    /// The value of an attribute, for predicates (as Swift values).
    public func predicateValue(forKey key: String) -> Any? {
        record.withLock { $0.value(forAttribute: key) }
    }

    /// The item's path.
    override public var description: String { "<NSMetadataItem \(record.withLock { $0.path })>" }

    var path: String { record.withLock { $0.path } }
}
