import Foundation

extension ItemRecord {
    /// What a listing reads of a record — its format, name, size and date — straight from the
    /// record's JSON as this build writes it (compact, one-letter keys, a name that escapes at
    /// most slashes), without decoding the rest: a folder of ten thousand sealed names is
    /// listed in a fraction of the time the full decoder takes. Nil for anything else (a name
    /// with another escape, spaces, an unknown shape, bytes that are not UTF-8): the full
    /// decoder then reads it, and refuses what is not a record.
    package static func listing(_ bytes: Data) -> (format: Int, name: String, size: Int64, date: Double)? {
        bytes.withUnsafeBytes { raw -> (format: Int, name: String, size: Int64, date: Double)? in
            var scanner = RecordScanner(bytes: raw.bindMemory(to: UInt8.self))
            return scanner.listing()
        }
    }
}

/// Reads the top level of a compact record (``ItemRecord/listing(_:)``).
private struct RecordScanner {
    let bytes: UnsafeBufferPointer<UInt8>
    var position = 0

    static let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")

    mutating func take(_ byte: UInt8) -> Bool {
        guard position < bytes.count, bytes[position] == byte else { return false }
        position += 1
        return true
    }

    /// A string's contents, the opening quote taken; nil if it holds a control character, bytes
    /// that are not UTF-8, or an escape other than `\/` (what the encoder writes for a slash).
    mutating func string() -> String? {
        let start = position
        var slashes = false
        while position < bytes.count, bytes[position] != Self.quote {
            guard bytes[position] >= 0x20 else { return nil }
            if bytes[position] == Self.backslash {
                guard position + 1 < bytes.count, bytes[position + 1] == UInt8(ascii: "/") else { return nil }
                slashes = true
                position += 1
            }
            position += 1
        }
        guard position < bytes.count else { return nil }
        defer { position += 1 }
        let text = UnsafeBufferPointer(rebasing: bytes[start..<position])
        return slashes ? String(validating: Self.unescapingSlashes(text), as: UTF8.self) : String(validating: text, as: UTF8.self)
    }

    /// Past a string, the opening quote taken, whatever it escapes; false if it does not end.
    mutating func skipString() -> Bool {
        while position < bytes.count, bytes[position] != Self.quote {
            position += bytes[position] == Self.backslash ? 2 : 1
        }
        guard position < bytes.count else { return false }
        position += 1
        return true
    }

    static func unescapingSlashes(_ text: UnsafeBufferPointer<UInt8>) -> [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(text.count)
        var index = 0
        while index < text.count {
            if text[index] == backslash { index += 1 }
            result.append(text[index])
            index += 1
        }
        return result
    }

    /// Past an array (of members: objects of strings and numbers), the opening bracket taken.
    mutating func skipArray() -> Bool {
        var depth = 1
        while position < bytes.count, depth > 0 {
            switch bytes[position] {
            case Self.quote:
                position += 1
                guard skipString() else { return false }
                continue
            case UInt8(ascii: "["), UInt8(ascii: "{"): depth += 1
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
            default: break
            }
            position += 1
        }
        return depth == 0
    }

    /// A number's text (digits, sign, point, exponent).
    mutating func number() -> Substring? {
        let start = position
        while position < bytes.count, bytes[position] != UInt8(ascii: ","), bytes[position] != UInt8(ascii: "}") {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) || "-+.eE".utf8.contains(bytes[position]) else { return nil }
            position += 1
        }
        guard position > start else { return nil }
        return Substring(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
    }

    mutating func listing() -> (format: Int, name: String, size: Int64, date: Double)? {
        var format: Int?, name: String?, size: Int64?, date: Double?
        guard take(UInt8(ascii: "{")) else { return nil }
        repeat {
            // A one-letter key.
            guard take(Self.quote), position + 1 < bytes.count, bytes[position + 1] == Self.quote else { return nil }
            let key = bytes[position]
            position += 2
            guard take(UInt8(ascii: ":")), position < bytes.count else { return nil }
            if take(Self.quote) {
                if key == UInt8(ascii: "n") {
                    guard let value = string() else { return nil }
                    name = value
                } else {
                    guard skipString() else { return nil }
                }
            } else if take(UInt8(ascii: "[")) {
                guard skipArray() else { return nil }
            } else if take(UInt8(ascii: "n")) {
                guard take(UInt8(ascii: "u")), take(UInt8(ascii: "l")), take(UInt8(ascii: "l")) else { return nil }
            } else {
                guard let text = number() else { return nil }
                switch key {
                case UInt8(ascii: "v"): guard let value = Int(text) else { return nil }; format = value
                case UInt8(ascii: "s"): guard let value = Int64(text) else { return nil }; size = value
                case UInt8(ascii: "d"): guard let value = Double(text) else { return nil }; date = value
                default: return nil
                }
            }
        } while take(UInt8(ascii: ","))
        guard take(UInt8(ascii: "}")), position == bytes.count, let format, let name, let size, let date else { return nil }
        return (format, name, size, date)
    }
}
