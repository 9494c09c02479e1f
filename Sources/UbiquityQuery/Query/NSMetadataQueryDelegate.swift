import Foundation

/// Apple's `NSMetadataQueryDelegate`: what a query's delegate may substitute — another object
/// for a result (a model object of the app's own), another value for an attribute.
///
/// On Apple's platforms both methods are optional Objective-C requirements; Swift on Linux has
/// none, so each has a default here that substitutes nothing. A delegate written for Apple's SDK
/// (`class Library: NSObject, NSMetadataQueryDelegate { func metadataQuery(_:replacementObjectForResultObject:) … }`)
/// compiles and is called as there.
public protocol NSMetadataQueryDelegate: NSObjectProtocol {
    /// The object the query gives instead of `result` (``NSMetadataQuery/results``,
    /// ``NSMetadataQuery/result(at:)``, ``NSMetadataQuery/enumerateResults(_:)``); asked once
    /// per result for as long as it is one.
    func metadataQuery(_ query: NSMetadataQuery, replacementObjectForResultObject result: NSMetadataItem) -> Any
    /// The value the query gives instead of `attrValue` for `attrName`
    /// (``NSMetadataQuery/value(ofAttribute:forResultAt:)``, ``NSMetadataQuery/valueLists``).
    func metadataQuery(_ query: NSMetadataQuery, replacementValueForAttribute attrName: String, value attrValue: Any) -> Any
}

extension NSMetadataQueryDelegate {
    /// By default, the result itself.
    public func metadataQuery(_ query: NSMetadataQuery, replacementObjectForResultObject result: NSMetadataItem) -> Any { result }
    /// By default, the value itself.
    public func metadataQuery(_ query: NSMetadataQuery, replacementValueForAttribute attrName: String, value attrValue: Any) -> Any { attrValue }
}

/// What the delegate gave for a result, and its identity when it is an object.
struct QueryReplacement: @unchecked Sendable {
    var value: Any
    var object: ObjectIdentifier?
}

/// The query's delegate, not retained (as Apple's `weak var delegate`).
struct WeakQueryDelegate: @unchecked Sendable {
    weak var value: (any NSMetadataQueryDelegate)?
}

extension NSMetadataQuery {
    /// The query's delegate (not retained): it may give other objects for results and other
    /// values for attributes.
    public var delegate: (any NSMetadataQueryDelegate)? {
        get { state.withLock { $0.delegate.value } }
        set {
            let delegate = WeakQueryDelegate(value: newValue)
            state.withLock { state in
                state.delegate = delegate
                state.replacements = [:]
                state.replaced = [:]
            }
        }
    }

    /// What the query gives for `item`: the delegate's replacement (asked once, then kept while
    /// `item` is a result), or the item.
    func replacement(for item: NSMetadataItem) -> Any {
        let id = ObjectIdentifier(item)
        let (delegate, cached) = state.withLock { ($0.delegate.value, $0.replacements[id]) }
        guard let delegate else { return item }
        if let cached { return cached.value }
        // (Outside the lock: the delegate may ask the query about its results.)
        let replacement = delegate.metadataQuery(self, replacementObjectForResultObject: item)
        let object = type(of: replacement) is AnyClass && !(replacement is NSMetadataItem) ? ObjectIdentifier(replacement as AnyObject) : nil
        state.withLock { state in
            state.replacements[id] = QueryReplacement(value: replacement, object: object)
            if let object { state.replaced[object] = id }
        }
        return replacement
    }

    /// What the query gives for `value` of `attribute`: the delegate's replacement, or the value.
    func replacement(for value: Any?, of attribute: String) -> Any? {
        guard let value, let delegate = state.withLock({ $0.delegate.value }) else { return value }
        return delegate.metadataQuery(self, replacementValueForAttribute: attribute, value: value)
    }
}
