import Foundation

/// Associated data for the AEADs: a label, the format and the epoch, then each field
/// length-prefixed, so that no two bindings can be written alike.
struct Binding {
    private(set) var bytes: [UInt8]

    init(_ label: String, format: UInt8, epoch: UInt32) {
        bytes = Array("ubiquity \(label)".utf8)
        bytes.append(0)
        bytes.append(format)
        withUnsafeBytes(of: epoch.bigEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func append(_ field: some Collection<UInt8>) {
        withUnsafeBytes(of: UInt32(field.count).bigEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: field)
    }

    mutating func append(_ field: String) { append(Array(field.utf8)) }

    mutating func append(_ number: UInt64) {
        withUnsafeBytes(of: number.bigEndian) { append(Array($0)) }
    }
}

/// The header every sealed object starts with: its format byte and its key's epoch.
struct SealedHeader {
    static let size = 5
    var format: UInt8
    var epoch: UInt32

    init(format: UInt8, epoch: UInt32) {
        self.format = format
        self.epoch = epoch
    }

    init(_ bytes: some Collection<UInt8>) throws {
        guard bytes.count >= Self.size else { throw EncryptionError(.malformed, "a sealed object is shorter than its header") }
        let array = Array(bytes.prefix(Self.size))
        format = array[0]
        epoch = array[1...4].reduce(0) { $0 << 8 | UInt32($1) }
    }

    var bytes: [UInt8] {
        var bytes = [format]
        withUnsafeBytes(of: epoch.bigEndian) { bytes.append(contentsOf: $0) }
        return bytes
    }
}
