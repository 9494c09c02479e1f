import Foundation

/// Reads a predicate format string (Apple's "Predicate Format String Syntax") into a tree.
struct PredicateParser {
    enum Token: Equatable {
        case word(String)           // a keyword or an identifier
        case escapedWord(String)    // #word: an identifier even if it is a keyword
        case string(String)
        case number(Double)
        case symbol(String)         // operators and punctuation
        case variable(String)       // $NAME
        case substitution(Character) // %@, %K, %d, …
        case end
    }

    /// Keywords that are not key names (unless written `#NAME`).
    static let reserved: Set<String> = [
        "AND", "OR", "NOT", "ANY", "ALL", "NONE", "SOME", "IN", "LIKE", "MATCHES", "BEGINSWITH", "ENDSWITH", "CONTAINS",
        "BETWEEN", "TRUE", "FALSE", "YES", "NO", "NULL", "NIL", "SELF", "TRUEPREDICATE", "FALSEPREDICATE", "FIRST", "LAST",
        "SIZE", "ANYKEY", "SUBQUERY", "FUNCTION", "CAST", "UTI-CONFORMS-TO", "UTI-EQUALS",
    ]

    let format: String
    var arguments: [Any]
    var argumentIndex = 0
    var tokens: [(token: Token, offset: Int)] = []
    var position = 0

    init(format: String, arguments: [Any]) {
        self.format = format
        self.arguments = arguments
    }

    mutating func parse() throws -> PredicateNode {
        tokens = try Self.tokenize(format)
        let node = try parseOr()
        guard case .end = current else { throw error("expected the end of the predicate, found \(describe(current))") }
        if argumentIndex < arguments.count {
            throw PredicateFormatError(format: format, offset: format.count, reason: "more arguments given (\(arguments.count)) than the format uses (\(argumentIndex))")
        }
        return node
    }

    // MARK: Grammar

    var current: Token { tokens[position].token }

    mutating func advance() { if position < tokens.count - 1 { position += 1 } }

    func error(_ reason: String) -> PredicateFormatError {
        PredicateFormatError(format: format, offset: tokens[position].offset, reason: reason)
    }

    /// A construct Apple's predicates have and these do not: not a mistake in the format.
    func unsupported(_ reason: String) -> PredicateFormatError {
        var error = error(reason)
        error.isUnsupported = true
        return error
    }

    func describe(_ token: Token) -> String {
        switch token {
        case .word(let word): return "'\(word)'"
        case .escapedWord(let word): return "'#\(word)'"
        case .string(let text): return "the string \(PredicateValue.quoted(text))"
        case .number(let value): return "the number \(PredicateValue.number(value))"
        case .symbol(let symbol): return "'\(symbol)'"
        case .variable(let name): return "'$\(name)'"
        case .substitution(let letter): return "'%\(letter)'"
        case .end: return "the end"
        }
    }

    func isKeyword(_ token: Token, _ keywords: String...) -> Bool {
        if case .word(let word) = token { return keywords.contains(word.uppercased()) }
        return false
    }

    mutating func parseOr() throws -> PredicateNode {
        var items = [try parseAnd()]
        while isKeyword(current, "OR") || current == .symbol("||") {
            advance()
            items.append(try parseAnd())
        }
        return items.count == 1 ? items[0] : .or(items)
    }

    mutating func parseAnd() throws -> PredicateNode {
        var items = [try parseNot()]
        while isKeyword(current, "AND") || current == .symbol("&&") {
            advance()
            items.append(try parseNot())
        }
        return items.count == 1 ? items[0] : .and(items)
    }

    mutating func parseNot() throws -> PredicateNode {
        if isKeyword(current, "NOT") || current == .symbol("!") {
            advance()
            return .not(try parseNot())
        }
        return try parsePrimary()
    }

    mutating func parsePrimary() throws -> PredicateNode {
        if current == .symbol("(") {
            advance()
            let inner = try parseOr()
            guard current == .symbol(")") else { throw error("expected ')' to close the '(' , found \(describe(current))") }
            advance()
            return inner
        }
        if isKeyword(current, "TRUEPREDICATE") { advance(); return .constant(true) }
        if isKeyword(current, "FALSEPREDICATE") { advance(); return .constant(false) }
        return .comparison(try parseComparison())
    }

    mutating func parseComparison() throws -> PredicateComparison {
        var modifier = PredicateModifier.direct
        if isKeyword(current, "ANY", "SOME") { modifier = .any; advance() }
        else if isKeyword(current, "ALL") { modifier = .all; advance() }
        else if isKeyword(current, "NONE") { modifier = .none; advance() }
        let left = try parseExpression()
        let start = position
        let op = try parseOperator()
        var options: PredicateOptions = []
        if current == .symbol("[") {
            advance()
            guard case .word(let letters) = current else { throw error("expected comparison options such as [c], [d] or [cd]") }
            for letter in letters.lowercased() {
                switch letter {
                case "c": options.insert(.caseInsensitive)
                case "d": options.insert(.diacriticInsensitive)
                case "n", "l": break // normalized, locale-sensitive: the same here
                default: throw error("unknown comparison option '\(letter)' (c, d, n and l are the options)")
                }
            }
            advance()
            guard current == .symbol("]") else { throw error("expected ']' after the comparison options") }
            advance()
        }
        let right = try parseExpression()
        var comparison = PredicateComparison(left: left, operator: op, right: right, options: options, modifier: modifier)
        if op == .matches, case .constant(.string(let pattern)) = right {
            guard let compiled = PredicateComparison.regex(pattern, options) else {
                position = start
                throw error("\(PredicateValue.quoted(pattern)) is not a regular expression")
            }
            comparison.regex = PredicateRegex(expression: compiled)
        }
        if op == .between, case .aggregate(let bounds) = right, bounds.count != 2 {
            throw error("BETWEEN needs two bounds, {low, high}")
        }
        return comparison
    }

    mutating func parseOperator() throws -> PredicateOperator {
        let token = current
        advance()
        switch token {
        case .symbol("=="), .symbol("="): return .equal
        case .symbol("!="), .symbol("<>"): return .notEqual
        case .symbol("<"): return .less
        case .symbol("<="), .symbol("=<"): return .lessOrEqual
        case .symbol(">"): return .greater
        case .symbol(">="), .symbol("=>"): return .greaterOrEqual
        case .word(let word):
            switch word.uppercased() {
            case "BEGINSWITH": return .beginsWith
            case "ENDSWITH": return .endsWith
            case "CONTAINS": return .contains
            case "LIKE": return .like
            case "MATCHES": return .matches
            case "IN": return .in
            case "BETWEEN": return .between
            case "UTI-CONFORMS-TO": return .utiConformsTo
            case "UTI-EQUALS": return .utiEquals
            default: break
            }
        default: break
        }
        position -= 1
        throw error("expected a comparison operator (==, !=, <, <=, >, >=, BEGINSWITH, ENDSWITH, CONTAINS, LIKE, MATCHES, IN, BETWEEN, UTI-CONFORMS-TO, UTI-EQUALS), found \(describe(token))")
    }

    mutating func parseExpression() throws -> PredicateExpression {
        let expression = try parseTerm()
        if case .symbol(let symbol) = current, ["+", "-", "*", "/", "**"].contains(symbol) {
            throw unsupported("arithmetic ('\(symbol)') is not supported")
        }
        return expression
    }

    mutating func parseTerm() throws -> PredicateExpression {
        let token = current
        switch token {
        case .string(let text):
            advance()
            return .constant(.string(text))
        case .number(let value):
            advance()
            return .constant(.number(value))
        case .variable(let name):
            advance()
            return .variable(name)
        case .symbol("-"):
            advance()
            guard case .number(let value) = current else { throw error("expected a number after '-'") }
            advance()
            return .constant(.number(-value))
        case .symbol("{"):
            advance()
            var items: [PredicateExpression] = []
            if current != .symbol("}") {
                items.append(try parseExpression())
                while current == .symbol(",") {
                    advance()
                    items.append(try parseExpression())
                }
            }
            guard current == .symbol("}") else { throw error("expected ',' or '}' in a collection, found \(describe(current))") }
            advance()
            return .aggregate(items)
        case .symbol("@"):
            throw error("collection operators such as @count are not supported")
        case .substitution(let letter):
            advance()
            let value = try substitute(letter)
            if case .keyPath(let first) = value, current == .symbol(".") {
                return .keyPath(try keyPath(continuing: first))
            }
            return value
        case .escapedWord(let name):
            advance()
            return .keyPath(try keyPath(startingWith: name))
        case .word(let word):
            switch word.uppercased() {
            case "TRUE", "YES": advance(); return .constant(.bool(true))
            case "FALSE", "NO": advance(); return .constant(.bool(false))
            case "NULL", "NIL": advance(); return .constant(.null)
            case "SELF": advance(); return .evaluatedObject
            case "CAST": return try parseCast()
            case "SUBQUERY", "FUNCTION", "ANYKEY", "FIRST", "LAST", "SIZE":
                throw unsupported("\(word.uppercased()) is not supported")
            default:
                guard !Self.reserved.contains(word.uppercased()) else { throw error("expected a value or a key, found the keyword \(word.uppercased())") }
                advance()
                return .keyPath(try keyPath(startingWith: word))
            }
        default:
            throw error("expected a value or a key, found \(describe(token))")
        }
    }

    /// `CAST(seconds since 2001, "NSDate")`: how dates are written (Apple's own output).
    mutating func parseCast() throws -> PredicateExpression {
        advance()
        guard current == .symbol("(") else { throw error("expected '(' after CAST") }
        advance()
        let value = try parseTerm()
        guard current == .symbol(",") else { throw error("expected ',' in CAST") }
        advance()
        guard case .string(let type) = current else { throw error("expected a type name in CAST") }
        advance()
        guard current == .symbol(")") else { throw error("expected ')' to close CAST") }
        advance()
        guard type == "NSDate", case .constant(.number(let seconds)) = value else {
            throw error("only CAST(number, \"NSDate\") is supported")
        }
        return .constant(.date(Date(timeIntervalSinceReferenceDate: seconds)))
    }

    /// `name(.name)*`.
    mutating func keyPath(startingWith first: String) throws -> [String] {
        try keyPath(continuing: [first])
    }

    /// More components after `.`: names or `%K` substitutions.
    mutating func keyPath(continuing first: [String]) throws -> [String] {
        var components = first
        while current == .symbol(".") {
            advance()
            switch current {
            case .word(let name), .escapedWord(let name):
                if name.hasPrefix("@") {
                    // A collection operator ends the key path: `tags.@count`.
                    guard PredicateExpression.collectionOperators.contains(name.lowercased()) else {
                        throw unsupported("\(name) is not a supported collection operator (@count, @sum, @avg, @min, @max are)")
                    }
                    components.append(name.lowercased())
                    advance()
                    guard current != .symbol(".") else { throw error("\(name) must end its key path") }
                    return components
                }
                components.append(name)
                advance()
            case .substitution("K"):
                advance()
                guard case .keyPath(let more) = try substitute("K") else { throw error("%K needs a key") }
                components += more
            case .symbol("@"):
                throw error("collection operators such as @count are not supported")
            default:
                throw error("expected a key after '.', found \(describe(current))")
            }
        }
        return components
    }

    /// The next argument for `%letter`.
    mutating func substitute(_ letter: Character) throws -> PredicateExpression {
        position -= 1
        guard argumentIndex < arguments.count else { throw error("%\(letter) has no argument (\(arguments.count) given)") }
        let argument = arguments[argumentIndex]
        argumentIndex += 1
        defer { advance() }
        switch letter {
        case "K":
            guard let key = argument as? String, !key.isEmpty else { throw error("%K needs a key (a string), got \(Swift.type(of: argument))") }
            return .keyPath(key.split(separator: ".", omittingEmptySubsequences: false).map(String.init))
        case "@":
            return .constant(PredicateValue(argument))
        case "d", "i", "u":
            let value = PredicateValue(argument)
            guard case .number(let number) = value, number.rounded() == number else { throw error("%\(letter) needs a whole number, got \(Swift.type(of: argument))") }
            return .constant(value)
        case "f", "g", "e":
            guard case .number = PredicateValue(argument) else { throw error("%\(letter) needs a number, got \(Swift.type(of: argument))") }
            return .constant(PredicateValue(argument))
        case "s":
            guard let text = argument as? String else { throw error("%s needs a string") }
            return .constant(.string(text))
        default:
            throw error("%\(letter) is not a supported substitution (%@, %K, %d, %i, %u, %f, %g, %e, %s are)")
        }
    }

    // MARK: Tokens

    static func tokenize(_ format: String) throws -> [(token: Token, offset: Int)] {
        let characters = Array(format)
        var tokens: [(token: Token, offset: Int)] = []
        var index = 0
        func fail(_ reason: String, at offset: Int) -> PredicateFormatError { PredicateFormatError(format: format, offset: offset, reason: reason) }
        while index < characters.count {
            let character = characters[index]
            let start = index
            if character.isWhitespace { index += 1; continue }
            if character == "\"" || character == "'" {
                // A quoted string, with backslash escapes.
                var text = ""
                index += 1
                var closed = false
                while index < characters.count {
                    let next = characters[index]
                    if next == character { closed = true; index += 1; break }
                    if next == "\\" {
                        index += 1
                        guard index < characters.count else { break }
                        switch characters[index] {
                        case "n": text.append("\n")
                        case "t": text.append("\t")
                        case "r": text.append("\r")
                        case "0": text.append("\0")
                        case "u":
                            let hex = String(characters[min(index + 1, characters.count)..<min(index + 5, characters.count)])
                            guard hex.count == 4, let scalar = UInt32(hex, radix: 16).flatMap(Unicode.Scalar.init) else {
                                throw fail("\\u needs four hexadecimal digits", at: index - 1)
                            }
                            text.unicodeScalars.append(scalar)
                            index += 4
                        default: text.append(characters[index])
                        }
                        index += 1
                        continue
                    }
                    text.append(next)
                    index += 1
                }
                guard closed else { throw fail("the string starting here is not closed", at: start) }
                tokens.append((.string(text), start))
                continue
            }
            if character.isNumber || (character == "." && index + 1 < characters.count && characters[index + 1].isNumber) {
                var end = index
                if character == "0", index + 1 < characters.count, "xXbBoO".contains(characters[index + 1]) {
                    end += 2
                    while end < characters.count, characters[end].isHexDigit { end += 1 }
                    let digits = String(characters[(index + 2)..<end])
                    let radix = "xX".contains(characters[index + 1]) ? 16 : ("bB".contains(characters[index + 1]) ? 2 : 8)
                    guard let value = Int64(digits, radix: radix) else { throw fail("\(String(characters[index..<end])) is not a number", at: start) }
                    tokens.append((.number(Double(value)), start))
                    index = end
                    continue
                }
                while end < characters.count, characters[end].isNumber || characters[end] == "." { end += 1 }
                if end < characters.count, "eE".contains(characters[end]) {
                    end += 1
                    if end < characters.count, "+-".contains(characters[end]) { end += 1 }
                    while end < characters.count, characters[end].isNumber { end += 1 }
                }
                let text = String(characters[index..<end])
                guard let value = Double(text) else { throw fail("\(text) is not a number", at: start) }
                tokens.append((.number(value), start))
                index = end
                continue
            }
            if character.isLetter || character == "_" || character == "#" || character == "@" {
                var end = index + 1
                while end < characters.count, characters[end].isLetter || characters[end].isNumber || characters[end] == "_" { end += 1 }
                // Spotlight's UTI-CONFORMS-TO and UTI-EQUALS are one word each.
                if String(characters[index..<end]).uppercased() == "UTI" {
                    for suffix in ["-CONFORMS-TO", "-EQUALS"] where String(characters[end..<min(characters.count, end + suffix.count)]).uppercased() == suffix {
                        end += suffix.count
                        break
                    }
                }
                let word = String(characters[index..<end])
                if word.hasPrefix("#") {
                    guard word.count > 1 else { throw fail("'#' must be followed by a key name", at: start) }
                    tokens.append((.escapedWord(String(word.dropFirst())), start))
                } else if word == "@" {
                    tokens.append((.symbol("@"), start))
                } else {
                    tokens.append((.word(word), start))
                }
                index = end
                continue
            }
            if character == "$" {
                var end = index + 1
                while end < characters.count, characters[end].isLetter || characters[end].isNumber || characters[end] == "_" { end += 1 }
                guard end > index + 1 else { throw fail("'$' must be followed by a variable name", at: start) }
                tokens.append((.variable(String(characters[(index + 1)..<end])), start))
                index = end
                continue
            }
            if character == "%" {
                // %@, %K, %d, %ld, %lld, %lu, %f, %lf, …; %% is a literal percent sign (not valid here).
                var end = index + 1
                while end < characters.count, characters[end] == "l" || characters[end] == "q" || characters[end] == "h" { end += 1 }
                guard end < characters.count else { throw fail("'%' must be followed by a substitution such as %@ or %K", at: start) }
                let letter = characters[end]
                if letter == "%" { throw fail("'%%' (a percent sign) is not valid outside a string", at: start) }
                tokens.append((.substitution(letter), start))
                index = end + 1
                continue
            }
            // Operators and punctuation, longest first.
            let two = index + 1 < characters.count ? String(characters[index...(index + 1)]) : ""
            if ["==", "!=", "<>", "<=", "=<", ">=", "=>", "&&", "||", "**"].contains(two) {
                tokens.append((.symbol(two), start))
                index += 2
                continue
            }
            if "=<>!(){}[],.+-*/".contains(character) {
                tokens.append((.symbol(String(character)), start))
                index += 1
                continue
            }
            if character == "?" { throw fail("'?' is not valid in a predicate (use a $VARIABLE or a %@ substitution)", at: start) }
            throw fail("unexpected '\(character)'", at: start)
        }
        tokens.append((.end, characters.count))
        return tokens
    }
}
