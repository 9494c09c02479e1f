import CUbiquitySystem
import Foundation
import UbiquityClient

#if canImport(Glibc)
import Glibc
#endif

extension UbiquityPlaceholder {
    /// Reads a placeholder, found at `relative` from the open folder `descriptor` (or an
    /// absolute path with `AT_FDCWD`), as fast as a query meeting thousands of them needs: one
    /// `read` into a buffer on the stack, and the flat JSON object the agent writes (string and
    /// number values, no escapes) taken apart in place. Anything else — escapes, other value
    /// kinds, a larger file — goes through `JSONSerialization`. Nil if there is no readable
    /// placeholder there.
    static func quickRead(descriptor: Int32, relative: String) -> UbiquityPlaceholder? {
        let small = 4096
        let quick = withUnsafeTemporaryAllocation(byteCount: small, alignment: 1) { buffer -> Result<UbiquityPlaceholder, QuickReadFailure> in
            let count = ubq_read_small_file(descriptor, relative, buffer.baseAddress, UInt(small))
            guard count >= 0 else { return .failure(.unreadable) }
            guard count < small, let placeholder = FlatPlaceholder.parse(UnsafeRawBufferPointer(rebasing: buffer[..<count])) else {
                return .failure(.notFlat)
            }
            return .success(placeholder)
        }
        switch quick {
        case .success(let placeholder):
            return placeholder
        case .failure(.unreadable):
            return nil
        case .failure(.notFlat):
            return slowRead(descriptor: descriptor, relative: relative)
        }
    }

    private enum QuickReadFailure: Error {
        case unreadable, notFlat
    }

    /// The placeholder read whole (at most 1 MiB) and decoded by `JSONSerialization`.
    private static func slowRead(descriptor: Int32, relative: String) -> UbiquityPlaceholder? {
        let limit = 1 << 20
        var bytes = [UInt8](repeating: 0, count: limit)
        let count = bytes.withUnsafeMutableBytes { ubq_read_small_file(descriptor, relative, $0.baseAddress, UInt(limit)) }
        guard count >= 0, count < limit,
              let object = try? JSONSerialization.jsonObject(with: Data(bytes[..<count])) as? [String: Any], // not JSON: not a placeholder
              let name = object["name"] as? String, let item = object["item"] as? String else { return nil }
        return UbiquityPlaceholder(name: name, item: item, size: (object["size"] as? NSNumber)?.int64Value,
                                   modificationDate: (object["modificationDate"] as? NSNumber)?.doubleValue)
    }
}

/// The flat JSON object of a placeholder, taken apart without allocating more than its strings.
enum FlatPlaceholder {
    /// The placeholder in `bytes`, or nil if they are not a flat object of strings without
    /// escapes and plain numbers that names `name` and `item` (the caller then decodes them
    /// the general way).
    static func parse(_ bytes: UnsafeRawBufferPointer) -> UbiquityPlaceholder? {
        var reader = Reader(bytes: bytes)
        var name: String?, item: String?, size: Int64?, modificationDate: Double?
        guard reader.take(UInt8(ascii: "{")) else { return nil }
        if !reader.take(UInt8(ascii: "}")) {
            repeat {
                guard let key = reader.string(), reader.take(UInt8(ascii: ":")) else { return nil }
                if reader.peek == UInt8(ascii: "\"") {
                    guard let value = reader.string() else { return nil }
                    switch key {
                    case "name": name = value
                    case "item": item = value
                    default: break
                    }
                } else {
                    guard let number = reader.number() else { return nil }
                    switch key {
                    case "size": size = Int64(number) ?? Double(number).flatMap { Int64(exactly: $0.rounded()) }
                    case "modificationDate": modificationDate = Double(number)
                    default: break
                    }
                }
            } while reader.take(UInt8(ascii: ","))
            guard reader.take(UInt8(ascii: "}")) else { return nil }
        }
        guard reader.atEnd, let name, let item else { return nil }
        return UbiquityPlaceholder(name: name, item: item, size: size, modificationDate: modificationDate)
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var index = 0

        var peek: UInt8? {
            index < bytes.count ? bytes[index] : nil
        }

        var atEnd: Bool {
            mutating get {
                skipSpace()
                return index == bytes.count
            }
        }

        mutating func skipSpace() {
            while let byte = peek, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { index += 1 }
        }

        /// Takes `byte` (after white space) if it is next.
        mutating func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard peek == byte else { return false }
            index += 1
            return true
        }

        /// A string without escapes or control characters.
        mutating func string() -> String? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = index
            while let byte = peek, byte != UInt8(ascii: "\"") {
                guard byte != UInt8(ascii: "\\"), byte >= 0x20 else { return nil }
                index += 1
            }
            guard peek != nil else { return nil }
            defer { index += 1 }
            return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        }

        /// A number's text (digits, sign, point, exponent).
        mutating func number() -> Substring? {
            skipSpace()
            let start = index
            while let byte = peek, (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-")
                || byte == UInt8(ascii: "+") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") {
                index += 1
            }
            guard index > start else { return nil }
            return Substring(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        }
    }
}
