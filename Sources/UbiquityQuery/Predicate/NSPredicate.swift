import Foundation
import Synchronization

/// Predicates written in Apple's predicate format string syntax: what an ``NSMetadataQuery``
/// filters its results with.
///
/// swift-corelibs-foundation's `NSPredicate` cannot read format strings (it only takes
/// blocks); Ubiquity adds the format-string initializers to it, so Apple's code compiles and
/// runs unchanged, and `NSPredicate` stays Foundation's type:
///
/// ```swift
/// let query = NSMetadataQuery()
/// query.predicate = NSPredicate(format: "%K LIKE '*.txt'", NSMetadataItemFSNameKey)
/// ```
///
/// Supported: comparisons (`==` `=` `!=` `<>` `<` `<=` `=<` `>` `>=` `=>`), `BEGINSWITH`,
/// `ENDSWITH`, `CONTAINS`, `LIKE` (with `*` and `?` wildcards), `MATCHES` (a regular expression
/// matching the whole string), `IN`, `BETWEEN`, the `[c]`, `[d]` and `[cd]` options (case and
/// diacritic insensitive), `ANY`/`SOME`/`ALL`/`NONE` on collections, `AND`/`&&`, `OR`/`||`,
/// `NOT`/`!`, parentheses, `TRUEPREDICATE`/`FALSEPREDICATE`, literals (quoted strings,
/// numbers, `TRUE`/`YES`, `FALSE`/`NO`, `NULL`/`NIL`, `SELF`, `{…}` collections,
/// `CAST(seconds, "NSDate")`), key paths, `$VARIABLES`, and the `%@`, `%K`, `%d`/`%i`/`%ld`/
/// `%lld`/`%u`/`%lu`, `%f`/`%lf`/`%g` and `%%` substitutions, Spotlight's `UTI-CONFORMS-TO` and
/// `UTI-EQUALS`, and the collection operators `@count`, `@sum`, `@avg`, `@min` and `@max` at the
/// end of a key path. What Apple has and this does not (arithmetic, `SUBQUERY`, `FUNCTION`) is a
/// clear error, never a wrong answer.
///
/// As on Apple platforms, ``Foundation/NSPredicate/init(format:_:)`` stops the program when
/// the format string is not a predicate (Apple raises an exception); use
/// ``Foundation/NSPredicate/init(validatingFormat:argumentArray:)`` for format strings from
/// users, which throws a ``PredicateFormatError`` instead. corelibs' `predicateFormat` is
/// deprecated and says `BLOCKPREDICATE` for these; ``Foundation/NSPredicate/formatString``
/// gives the format.
extension NSPredicate {
    /// Parses a predicate format string, `arguments` filling its `%@`, `%K` and other
    /// substitutions in order. Stops the program if it is not a valid predicate (as Apple's
    /// exception does): see ``init(validatingFormat:argumentArray:)``.
    public convenience init(format predicateFormat: String, _ arguments: Any...) {
        self.init(format: predicateFormat, argumentArray: arguments)
    }

    /// Parses a predicate format string with its substitutions' arguments in an array. Stops
    /// the program if it is not a valid predicate (as Apple's exception does). A valid format
    /// that uses what these predicates do not support (``PredicateFormatError/isUnsupported``:
    /// a `SUBQUERY`, arithmetic…) does not stop it: the predicate matches nothing, says why in
    /// ``unsupportedReason``, and an ``NSMetadataQuery`` given it does not start.
    public convenience init(format predicateFormat: String, argumentArray arguments: [Any]?) {
        do {
            try self.init(validatingFormat: predicateFormat, argumentArray: arguments)
        } catch let error as PredicateFormatError where error.isUnsupported {
            self.init(parsed: ParsedPredicate(node: .constant(false), unsupported: error))
        } catch {
            preconditionFailure("NSPredicate: \(error)")
        }
    }

    /// Why this predicate matches nothing, when its format string uses what these predicates
    /// do not support (see ``init(format:argumentArray:)``); nil otherwise.
    public var unsupportedReason: PredicateFormatError? { parsed?.unsupported }

    /// Parses a predicate format string, throwing instead of stopping when it is not a valid
    /// predicate: for format strings typed by users.
    /// - Throws: ``PredicateFormatError`` naming the place and the reason.
    public convenience init(validatingFormat predicateFormat: String, argumentArray arguments: [Any]? = nil) throws {
        var parser = PredicateParser(format: predicateFormat, arguments: arguments ?? [])
        self.init(parsed: ParsedPredicate(node: try parser.parse()))
    }

    /// A predicate evaluating `parsed` (and answering the probe that finds it again).
    convenience init(parsed: ParsedPredicate) {
        self.init(block: { object, variables in
            if let probe = object as? PredicateProbe {
                probe.found.withLock { $0 = parsed }
                return false
            }
            return parsed.evaluate(with: object, substitutionVariables: variables)
        })
    }

    /// The parsed predicate behind a format-string predicate (nil for other predicates).
    var parsed: ParsedPredicate? {
        let probe = PredicateProbe()
        _ = evaluate(with: probe)
        return probe.found.withLock { $0 }
    }

    /// The predicate as a format string, normalised (keywords in capitals, strings in double
    /// quotes, substitutions filled in) — for predicates made from a format string or a value;
    /// nil for block predicates.
    public var formatString: String? {
        if let parsed { return parsed.predicateFormat }
        // corelibs keeps `NSPredicate(value:)` as `kind: .boolean(Bool)` (its `predicateFormat`
        // is deprecated): read it without calling that.
        guard let kind = Mirror(reflecting: self).children.first(where: { $0.label == "kind" }).map({ String(describing: $0.value) }) else { return nil }
        switch kind {
        case "boolean(true)": return "TRUEPREDICATE"
        case "boolean(false)": return "FALSEPREDICATE"
        default: return nil
        }
    }

    /// A copy with `$VARIABLES` replaced by the given values (the others stay variables), as
    /// Apple's `withSubstitutionVariables(_:)` (corelibs declares it unavailable; importing
    /// Ubiquity makes an app's call find this one). A predicate not made from a format string
    /// comes back as it is.
    public func withSubstitutionVariables(_ variables: [String: Any]) -> Self {
        guard let parsed else { return self }
        let copy = NSPredicate(parsed: ParsedPredicate(node: parsed.node.substituting(variables.mapValues(PredicateValue.init))))
        return copy as? Self ?? self
    }
}

/// What a query or a predicate evaluates: a parsed predicate, or any Foundation predicate.
struct PredicateMatcher: Sendable {
    let parsed: ParsedPredicate?
    let foundation: UncheckedSendable<NSPredicate>
    /// The items (paths) a query is limited to (``NSMetadataQuery/searchItems``): those items
    /// and what is under them; nil: no limit.
    let items: Set<String>?

    init(_ predicate: NSPredicate, items: Set<String>? = nil) {
        parsed = predicate.parsed
        foundation = UncheckedSendable(predicate)
        self.items = items
    }

    func evaluate(with object: Any) -> Bool {
        if let record = object as? MetadataRecord { return evaluate(record: record) }
        if let parsed { return parsed.evaluate(with: object, substitutionVariables: nil) }
        return foundation.value.evaluate(with: object)
    }

    /// Whether a record matches: a parsed predicate reads it directly (a query asks this once
    /// per item: the record is not boxed, nor its type asked of it, unless the predicate reads
    /// what only the boxed record gives, such as `SELF`).
    func evaluate(record: MetadataRecord) -> Bool {
        if let items, !Self.within(record.path, items) { return false }
        if let parsed { return parsed.node.evaluate(PredicateContext(record: record)) }
        return foundation.value.evaluate(with: record)
    }

    /// Whether `path` is one of `items` or under one of them.
    static func within(_ path: String, _ items: Set<String>) -> Bool {
        var current = Substring(path)
        while true {
            if items.contains(String(current)) { return true }
            guard let slash = current.lastIndex(of: "/"), slash > current.startIndex else { return false }
            current = current[..<slash]
        }
    }
}

/// Passed to a predicate's block to find the parsed predicate behind it.
final class PredicateProbe: Sendable {
    let found = Mutex<ParsedPredicate?>(nil)
}

/// A parsed predicate: its tree, evaluated directly.
final class ParsedPredicate: CustomStringConvertible, Sendable {
    let node: PredicateNode
    /// Why the format string could not be read, when it uses what is not supported (the node
    /// is then `FALSEPREDICATE`).
    let unsupported: PredicateFormatError?

    init(node: PredicateNode, unsupported: PredicateFormatError? = nil) {
        self.node = node
        self.unsupported = unsupported
    }

    var predicateFormat: String { unsupported?.format ?? node.format }
    var description: String { predicateFormat }

    func evaluate(with object: Any?, substitutionVariables variables: [String: Any]?) -> Bool {
        let variables = (variables ?? [:]).mapValues(PredicateValue.init)
        return node.evaluate(PredicateContext(object: object, variables: variables))
    }
}

/// An object whose values a predicate can read by key (``NSMetadataItem`` is one).
public protocol PredicateKeyValueReading {
    /// The value for `key`, or nil.
    func predicateValue(forKey key: String) -> Any?
}

extension Dictionary: PredicateKeyValueReading where Key == String {
    /// The dictionary's value for `key`.
    public func predicateValue(forKey key: String) -> Any? {
        self[key].map { $0 as Any }
    }
}

/// Objects that give some values as predicate values directly (faster than through `Any`).
protocol PredicateDirectReading {
    func predicateValueDirect(forKey key: String) -> PredicateValue?
}

/// Why a format string is not a predicate: where, and what is wrong.
public struct PredicateFormatError: Error, Equatable, CustomStringConvertible {
    /// The format string.
    public var format: String
    /// Where the problem is (a character offset from 0).
    public var offset: Int
    /// What is wrong.
    public var reason: String
    /// Whether the format is one Apple's predicates accept and these do not (a `SUBQUERY`,
    /// arithmetic…), rather than a mistake.
    public var isUnsupported = false

    /// The reason, with the place.
    public var description: String { "\(reason) (at character \(offset + 1) of \"\(format)\")" }
}

// MARK: - The tree

/// A value as predicates compare them.
enum PredicateValue: Sendable, Equatable {
    case null
    case string(String)
    case number(Double)
    case bool(Bool)
    case date(Date)
    case data(Data)
    case collection([PredicateValue])

    /// Any Swift or Foundation value, as predicates see it (a URL as its absolute string).
    init(_ any: Any?) {
        guard let any else { self = .null; return }
        // Exact types first: on Linux a number may cast to Bool and a Bool to NSNumber.
        let type = Swift.type(of: any)
        if let value = any as? PredicateValue { self = value }
        else if let value = any as? String { self = .string(value) }
        else if type == Bool.self { self = .bool(any as! Bool) }
        else if type == Int.self { self = .number(Double(any as! Int)) }
        else if type == Int64.self { self = .number(Double(any as! Int64)) }
        else if type == Double.self { self = .number(any as! Double) }
        else if type == Int32.self { self = .number(Double(any as! Int32)) }
        else if type == UInt64.self { self = .number(Double(any as! UInt64)) }
        else if type == UInt.self { self = .number(Double(any as! UInt)) }
        else if type == Float.self { self = .number(Double(any as! Float)) }
        else if let value = any as? Date { self = .date(value) }
        else if let value = any as? URL { self = .string(value.absoluteString) }
        else if let value = any as? Substring { self = .string(String(value)) }
        else if let value = any as? Data { self = .data(value) }
        else if any is NSNull { self = .null }
        else if let value = any as? NSNumber { self = .number(value.doubleValue) }
        else if let value = any as? any BinaryInteger { self = .number(Double(value)) }
        else if let value = any as? any BinaryFloatingPoint { self = .number(Double(value)) }
        else if let value = any as? [Any] { self = .collection(value.map(PredicateValue.init)) }
        else if let value = any as? Set<String> { self = .collection(value.sorted().map(PredicateValue.string)) }
        else {
            let mirror = Mirror(reflecting: any)
            if mirror.displayStyle == .optional {
                self = mirror.children.first.map { PredicateValue($0.value) } ?? .null
            } else {
                self = .string(String(describing: any))
            }
        }
    }

    var format: String {
        switch self {
        case .null: return "nil"
        case .string(let value): return PredicateValue.quoted(value)
        case .number(let value): return PredicateValue.number(value)
        case .bool(let value): return value ? "YES" : "NO"
        case .date(let value): return "CAST(\(PredicateValue.number(value.timeIntervalSinceReferenceDate)), \"NSDate\")"
        case .data(let value): return "<\(value.map { String(format: "%02x", $0) }.joined())>"
        case .collection(let values): return "{" + values.map(\.format).joined(separator: ", ") + "}"
        }
    }

    static func number(_ value: Double) -> String {
        value.rounded() == value && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }

    static func quoted(_ value: String) -> String {
        var out = "\""
        for character in value {
            switch character {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            default: out.append(character)
            }
        }
        return out + "\""
    }
}

/// One side of a comparison.
indirect enum PredicateExpression: Sendable, Equatable {
    case constant(PredicateValue)
    case keyPath([String])
    case evaluatedObject
    case variable(String)
    case aggregate([PredicateExpression])

    var format: String {
        switch self {
        case .constant(let value): return value.format
        case .keyPath(let components): return components.map { PredicateParser.reserved.contains($0.uppercased()) ? "#" + $0 : $0 }.joined(separator: ".")
        case .evaluatedObject: return "SELF"
        case .variable(let name): return "$" + name
        case .aggregate(let items): return "{" + items.map(\.format).joined(separator: ", ") + "}"
        }
    }

    func value(_ context: PredicateContext) -> PredicateValue {
        switch self {
        case .constant(let value): return value
        case .evaluatedObject: return PredicateValue(context.object)
        case .variable(let name): return context.variables[name] ?? .null
        case .aggregate(let items): return .collection(items.map { $0.value(context) })
        case .keyPath(let components):
            // Metadata records and items give their common values without boxing them.
            if components.count == 1, let record = context.record, let value = record.predicateValueDirect(forKey: components[0]) {
                return value
            }
            if components.count == 1, let direct = context.object as? PredicateDirectReading,
               let value = direct.predicateValueDirect(forKey: components[0]) {
                return value
            }
            var current: Any? = context.object
            for component in components {
                if component.hasPrefix("@") { return Self.collect(component, PredicateValue(current)) }
                guard let reading = current as? PredicateKeyValueReading else { return .null }
                current = reading.predicateValue(forKey: component)
            }
            return PredicateValue(current)
        }
    }

    /// The collection operators a key path may end with.
    static let collectionOperators: Set<String> = ["@count", "@sum", "@avg", "@min", "@max"]

    /// A collection operator applied to `value`: `@count` of any collection (a single value
    /// counts 1, none 0), `@sum`/`@avg`/`@min`/`@max` of its numbers (null when it has none).
    static func collect(_ operation: String, _ value: PredicateValue) -> PredicateValue {
        let elements: [PredicateValue]
        switch value {
        case .collection(let items): elements = items
        case .null: elements = []
        default: elements = [value]
        }
        if operation == "@count" { return .number(Double(elements.count)) }
        let numbers = elements.compactMap { element -> Double? in if case .number(let number) = element { return number } else { return nil } }
        guard !numbers.isEmpty else { return operation == "@sum" ? .number(0) : .null }
        switch operation {
        case "@sum": return .number(numbers.reduce(0, +))
        case "@avg": return .number(numbers.reduce(0, +) / Double(numbers.count))
        case "@min": return .number(numbers.min()!)
        default: return .number(numbers.max()!)
        }
    }

    func substituting(_ variables: [String: PredicateValue]) -> PredicateExpression {
        switch self {
        case .variable(let name): return variables[name].map(PredicateExpression.constant) ?? self
        case .aggregate(let items): return .aggregate(items.map { $0.substituting(variables) })
        default: return self
        }
    }
}

/// What a comparison does.
enum PredicateOperator: String, Sendable {
    case equal = "==", notEqual = "!=", less = "<", lessOrEqual = "<=", greater = ">", greaterOrEqual = ">="
    case beginsWith = "BEGINSWITH", endsWith = "ENDSWITH", contains = "CONTAINS", like = "LIKE", matches = "MATCHES"
    case `in` = "IN", between = "BETWEEN"
    /// Spotlight's: the left side (a content type, or a type tree) conforms to the type on the right.
    case utiConformsTo = "UTI-CONFORMS-TO"
    /// Spotlight's: the left side is the type on the right.
    case utiEquals = "UTI-EQUALS"
}

/// How a comparison treats a collection on its left: as a whole, or element by element.
enum PredicateModifier: String, Sendable {
    case direct = "", any = "ANY ", all = "ALL ", none = "NONE "
}

/// `[c]`, `[d]`, `[cd]`.
struct PredicateOptions: OptionSet, Sendable, Hashable {
    let rawValue: Int
    static let caseInsensitive = PredicateOptions(rawValue: 1)
    static let diacriticInsensitive = PredicateOptions(rawValue: 2)

    var format: String {
        let letters = (contains(.caseInsensitive) ? "c" : "") + (contains(.diacriticInsensitive) ? "d" : "")
        return letters.isEmpty ? "" : "[\(letters)]"
    }

    func fold(_ text: String) -> String {
        var options: String.CompareOptions = []
        if contains(.caseInsensitive) { options.insert(.caseInsensitive) }
        if contains(.diacriticInsensitive) { options.insert(.diacriticInsensitive) }
        return options.isEmpty ? text : text.folding(options: options, locale: nil)
    }
}

struct PredicateComparison: Sendable {
    var left: PredicateExpression
    var `operator`: PredicateOperator
    var right: PredicateExpression
    var options: PredicateOptions
    var modifier: PredicateModifier
    /// For `MATCHES` against a constant: the expression, compiled once.
    var regex: PredicateRegex?
}

/// A compiled regular expression (NSRegularExpression is immutable and safe to share).
struct PredicateRegex: @unchecked Sendable {
    let expression: NSRegularExpression
}

indirect enum PredicateNode: Sendable {
    case constant(Bool)
    case not(PredicateNode)
    case and([PredicateNode])
    case or([PredicateNode])
    case comparison(PredicateComparison)

    var format: String {
        switch self {
        case .constant(let value): return value ? "TRUEPREDICATE" : "FALSEPREDICATE"
        case .not(let inner): return "NOT " + inner.nestedFormat
        case .and(let items): return items.map(\.nestedFormat).joined(separator: " AND ")
        case .or(let items): return items.map(\.nestedFormat).joined(separator: " OR ")
        case .comparison(let comparison):
            return comparison.modifier.rawValue + comparison.left.format + " " + comparison.operator.rawValue + comparison.options.format + " " + comparison.right.format
        }
    }

    private var nestedFormat: String {
        switch self {
        case .and, .or: return "(" + format + ")"
        default: return format
        }
    }

    func evaluate(_ context: PredicateContext) -> Bool {
        switch self {
        case .constant(let value): return value
        case .not(let inner): return !inner.evaluate(context)
        case .and(let items): return items.allSatisfy { $0.evaluate(context) }
        case .or(let items): return items.contains { $0.evaluate(context) }
        case .comparison(let comparison): return comparison.evaluate(context)
        }
    }

    func substituting(_ variables: [String: PredicateValue]) -> PredicateNode {
        switch self {
        case .constant: return self
        case .not(let inner): return .not(inner.substituting(variables))
        case .and(let items): return .and(items.map { $0.substituting(variables) })
        case .or(let items): return .or(items.map { $0.substituting(variables) })
        case .comparison(var comparison):
            comparison.left = comparison.left.substituting(variables)
            comparison.right = comparison.right.substituting(variables)
            return .comparison(comparison)
        }
    }
}

struct PredicateContext {
    /// The object evaluated when it is a metadata record: read directly, boxed only when
    /// ``object`` is asked for.
    var record: MetadataRecord?
    /// Any other object evaluated.
    var other: Any?
    var variables: [String: PredicateValue]

    /// A context for any object (a record is read directly all the same).
    init(object: Any?, variables: [String: PredicateValue]) {
        if let record = object as? MetadataRecord { self.record = record } else { other = object }
        self.variables = variables
    }

    /// A context for a metadata record, without variables.
    init(record: MetadataRecord) {
        self.record = record
        variables = [:]
    }

    /// The object evaluated.
    var object: Any? { record.map { $0 as Any } ?? other }
}
