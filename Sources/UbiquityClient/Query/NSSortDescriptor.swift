import Foundation

/// How to order objects by one attribute: what ``NSMetadataQuery/sortDescriptors`` takes.
///
/// swift-corelibs-foundation's `NSSortDescriptor` only sorts by Swift key paths; this one sorts
/// by attribute name, as Apple's does (`NSSortDescriptor(key: NSMetadataItemFSNameKey,
/// ascending: true)`), and shadows it in files that import Ubiquity.
public final class NSSortDescriptor: CustomStringConvertible, Sendable {
    /// The attribute compared (nil: the objects themselves).
    public let key: String?
    /// Whether smaller values come first.
    public let ascending: Bool

    /// Orders by `key`.
    public init(key: String?, ascending: Bool) {
        self.key = key
        self.ascending = ascending
    }

    /// The same attribute, the other way round.
    public var reversedSortDescriptor: NSSortDescriptor { NSSortDescriptor(key: key, ascending: !ascending) }

    /// How `object1` and `object2` are ordered: values missing first, then numbers, dates and
    /// strings by their natural order; values of different kinds are equal.
    public func compare(_ object1: Any, to object2: Any) -> ComparisonResult {
        let order = Self.order(value(of: object1), value(of: object2))
        let result = ascending ? order : -order
        return result < 0 ? .orderedAscending : (result > 0 ? .orderedDescending : .orderedSame)
    }

    func value(of object: Any) -> PredicateValue {
        guard let key else { return PredicateValue(object) }
        return PredicateValue((object as? PredicateKeyValueReading)?.predicateValue(forKey: key))
    }

    static func order(_ a: PredicateValue, _ b: PredicateValue) -> Int {
        switch (a, b) {
        case (.null, .null): return 0
        case (.null, _): return -1
        case (_, .null): return 1
        default: return PredicateComparison.order(a, b, []) ?? 0
        }
    }

    /// `key` and the direction.
    public var description: String { "(\(key ?? "self"), \(ascending ? "ascending" : "descending"))" }
}

extension Array where Element == NSSortDescriptor {
    /// Whether `a` comes before `b` by these descriptors, in turn (ties keep the order of `tie`).
    func orders(_ a: Any, before b: Any, tie: Bool) -> Bool {
        for descriptor in self {
            switch descriptor.compare(a, to: b) {
            case .orderedAscending: return true
            case .orderedDescending: return false
            case .orderedSame: continue
            }
        }
        return tie
    }
}
