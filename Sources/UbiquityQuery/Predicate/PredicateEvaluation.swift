import Foundation

extension PredicateComparison {
    /// Whether the comparison holds for the context's object.
    func evaluate(_ context: PredicateContext) -> Bool {
        let left = left.value(context), right = right.value(context)
        switch modifier {
        case .direct:
            return compare(left, right)
        case .any, .all, .none:
            guard case .collection(let elements) = left else { return modifier == .none ? !compare(left, right) : compare(left, right) }
            switch modifier {
            case .any: return elements.contains { compare($0, right) }
            case .all: return elements.allSatisfy { compare($0, right) }
            default: return !elements.contains { compare($0, right) }
            }
        }
    }

    func compare(_ left: PredicateValue, _ right: PredicateValue) -> Bool {
        switch self.operator {
        case .equal: return Self.equal(left, right, options)
        case .notEqual: return !Self.equal(left, right, options)
        case .less: return Self.order(left, right, options).map { $0 < 0 } ?? false
        case .lessOrEqual: return Self.order(left, right, options).map { $0 <= 0 } ?? false
        case .greater: return Self.order(left, right, options).map { $0 > 0 } ?? false
        case .greaterOrEqual: return Self.order(left, right, options).map { $0 >= 0 } ?? false
        case .between:
            guard case .collection(let bounds) = right, bounds.count == 2,
                  let low = Self.order(left, bounds[0], options), let high = Self.order(left, bounds[1], options) else { return false }
            return low >= 0 && high <= 0
        case .in:
            switch right {
            case .collection(let elements): return elements.contains { Self.equal(left, $0, options) }
            case .string(let text):
                guard case .string(let part) = left else { return false }
                return options.fold(text).contains(options.fold(part))
            default: return false
            }
        case .contains:
            if case .collection(let elements) = left { return elements.contains { Self.equal($0, right, options) } }
            guard case .string(let text) = left, case .string(let part) = right else { return false }
            return part.isEmpty || options.fold(text).contains(options.fold(part))
        case .utiConformsTo, .utiEquals:
            guard case .string(let wanted) = right else { return false }
            let types: [String]
            switch left {
            case .string(let type): types = self.operator == .utiEquals ? [type] : MetadataRecord.typeTree(type)
            case .collection(let tree): types = tree.compactMap { if case .string(let type) = $0 { return type } else { return nil } }
            default: return false
            }
            return types.contains { $0.caseInsensitiveCompare(wanted) == .orderedSame }
        case .beginsWith:
            guard case .string(let text) = left, case .string(let part) = right else { return false }
            return options.fold(text).hasPrefix(options.fold(part))
        case .endsWith:
            guard case .string(let text) = left, case .string(let part) = right else { return false }
            return options.fold(text).hasSuffix(options.fold(part))
        case .like:
            guard case .string(let text) = left, case .string(let pattern) = right else { return false }
            return Self.like(options.fold(text).unicodeScalars, options.fold(pattern).unicodeScalars)
        case .matches:
            guard case .string(let text) = left else { return false }
            let expression: NSRegularExpression
            if let regex { expression = regex.expression } else {
                guard case .string(let pattern) = right, let compiled = Self.regex(pattern, options) else { return false }
                expression = compiled
            }
            let folded = options.contains(.diacriticInsensitive) ? options.subtracting(.caseInsensitive).fold(text) : text
            let whole = NSRange(folded.startIndex..., in: folded)
            return expression.firstMatch(in: folded, options: [.anchored], range: whole).map { $0.range == whole } ?? false
        }
    }

    /// A regular expression for `MATCHES` (case-insensitive with `[c]`); nil if it is not one.
    static func regex(_ pattern: String, _ options: PredicateOptions) -> NSRegularExpression? {
        // An invalid pattern (checked when the predicate is parsed) matches nothing.
        try? NSRegularExpression(pattern: pattern, options: options.contains(.caseInsensitive) ? [.caseInsensitive] : [])
    }

    static func equal(_ left: PredicateValue, _ right: PredicateValue, _ options: PredicateOptions) -> Bool {
        switch (left, right) {
        case (.string(let a), .string(let b)): return options.fold(a) == options.fold(b)
        case (.number(let a), .number(let b)): return a == b
        case (.bool(let a), .number(let b)), (.number(let b), .bool(let a)): return (a ? 1 : 0) == b
        case (.collection(let a), .collection(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { equal($0, $1, options) }
        default: return left == right
        }
    }

    /// -1, 0 or 1; nil when the two cannot be ordered (different kinds, NULL).
    static func order(_ left: PredicateValue, _ right: PredicateValue, _ options: PredicateOptions) -> Int? {
        func sign<T: Comparable>(_ a: T, _ b: T) -> Int { a < b ? -1 : (a > b ? 1 : 0) }
        switch (left, right) {
        case (.number(let a), .number(let b)): return sign(a, b)
        case (.date(let a), .date(let b)): return sign(a, b)
        case (.date(let a), .number(let b)): return sign(a.timeIntervalSinceReferenceDate, b)
        case (.number(let a), .date(let b)): return sign(a, b.timeIntervalSinceReferenceDate)
        case (.string(let a), .string(let b)): return sign(options.fold(a), options.fold(b))
        case (.bool(let a), .bool(let b)): return sign(a ? 1 : 0, b ? 1 : 0)
        default: return nil
        }
    }

    /// `LIKE`: `*` is any run of characters, `?` any one, a backslash takes the next literally.
    /// Walks both strings in place (no copies: a query evaluates it once per item).
    static func like(_ text: String.UnicodeScalarView, _ pattern: String.UnicodeScalarView) -> Bool {
        // The common shape, `*.txt`: the text ends with the rest (the same scalars are the same bytes).
        let patternBytes = String(pattern).utf8
        if patternBytes.first == UInt8(ascii: "*") {
            let literal = patternBytes.dropFirst()
            if !literal.contains(where: { $0 == UInt8(ascii: "*") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "\\") }) {
                let textBytes = String(text).utf8
                return textBytes.count >= literal.count && textBytes.reversed().starts(with: literal.reversed())
            }
        }
        var t = text.startIndex, p = pattern.startIndex
        var star: (pattern: String.UnicodeScalarView.Index, text: String.UnicodeScalarView.Index)?
        while t < text.endIndex {
            if p < pattern.endIndex {
                let symbol = pattern[p]
                if symbol == "*" {
                    star = (p, t)
                    p = pattern.index(after: p)
                    continue
                }
                if symbol == "?" {
                    t = text.index(after: t)
                    p = pattern.index(after: p)
                    continue
                }
                var literal = symbol, next = pattern.index(after: p)
                if symbol == "\\", next < pattern.endIndex {
                    literal = pattern[next]
                    next = pattern.index(after: next)
                }
                if literal == text[t] {
                    t = text.index(after: t)
                    p = next
                    continue
                }
            }
            // Mismatch: let the last star take one more character, or fail.
            guard let last = star else { return false }
            let taken = text.index(after: last.text)
            star = (last.pattern, taken)
            p = pattern.index(after: last.pattern)
            t = taken
        }
        while p < pattern.endIndex && pattern[p] == "*" { p = pattern.index(after: p) }
        return p == pattern.endIndex
    }
}
