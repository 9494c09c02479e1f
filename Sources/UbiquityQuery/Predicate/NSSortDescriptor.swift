import Foundation

/// Sorting by attribute name, as Apple's `NSSortDescriptor(key:ascending:)` does — what
/// ``NSMetadataQuery/sortDescriptors`` takes.
///
/// swift-corelibs-foundation's `NSSortDescriptor` only sorts by Swift key paths; Ubiquity adds
/// the attribute-name initializer (`NSSortDescriptor(key: NSMetadataItemFSNameKey, ascending:
/// true)`), built on a key path into ``MetadataSortKey``, so `NSSortDescriptor` stays
/// Foundation's type. Values missing come first, then numbers, dates and strings by their
/// natural order; values of different kinds are equal.
extension NSSortDescriptor {
    /// Orders by the attribute `key` (nil: the objects themselves).
    public convenience init(key: String?, ascending: Bool) {
        self.init(keyPath: \MetadataSortKey.[key ?? ""], ascending: ascending)
    }

    /// The attribute a descriptor made with ``init(key:ascending:)`` orders by (corelibs' `key`
    /// is unavailable); nil for other descriptors.
    public var attribute: String? {
        guard let path = keyPath as? KeyPath<MetadataSortKey, MetadataSortValue> else { return nil }
        return MetadataSortKey(object: nil)[keyPath: path].attribute
    }

    /// -1, 0 or 1 for two objects by this descriptor (attribute descriptors only: 0 for others).
    func order(_ a: Any, _ b: Any) -> Int {
        guard let path = keyPath as? KeyPath<MetadataSortKey, MetadataSortValue> else { return 0 }
        let left = MetadataSortKey(object: a)[keyPath: path], right = MetadataSortKey(object: b)[keyPath: path]
        let order = left < right ? -1 : (right < left ? 1 : 0)
        return ascending ? order : -order
    }
}

/// The root of attribute sort descriptors' key paths: an object whose attributes are read by
/// name (``NSMetadataItem``, `[String: Any]`, or anything ``PredicateKeyValueReading``).
public struct MetadataSortKey {
    let object: Any?

    /// The object's value for `attribute` ("": the object itself), comparable.
    public subscript(_ attribute: String) -> MetadataSortValue {
        guard let object else { return MetadataSortValue(attribute: attribute, value: .null) }
        if attribute.isEmpty { return MetadataSortValue(attribute: attribute, value: PredicateValue(object)) }
        if let direct = object as? PredicateDirectReading, let value = direct.predicateValueDirect(forKey: attribute) {
            return MetadataSortValue(attribute: attribute, value: value)
        }
        return MetadataSortValue(attribute: attribute, value: PredicateValue((object as? PredicateKeyValueReading)?.predicateValue(forKey: attribute)))
    }
}

/// An attribute's value as sort descriptors compare it.
public struct MetadataSortValue: Comparable {
    let attribute: String
    let value: PredicateValue

    /// Missing values first; numbers, dates and strings in their natural order; other pairs equal.
    public static func < (a: MetadataSortValue, b: MetadataSortValue) -> Bool {
        switch (a.value, b.value) {
        case (.null, .null): return false
        case (.null, _): return true
        case (_, .null): return false
        default: return (PredicateComparison.order(a.value, b.value, []) ?? 0) < 0
        }
    }

    /// Whether the two compare equal.
    public static func == (a: MetadataSortValue, b: MetadataSortValue) -> Bool { !(a < b) && !(b < a) }
}

extension Array where Element == NSSortDescriptor {
    /// Whether `a` comes before `b` by these descriptors, in turn (ties keep the order of `tie`).
    func orders(_ a: Any, before b: Any, tie: Bool) -> Bool {
        for descriptor in self {
            let order = descriptor.order(a, b)
            if order != 0 { return order < 0 }
        }
        return tie
    }
}
