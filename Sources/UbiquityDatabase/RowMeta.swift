import Foundation

/// What a store keeps beside each synced row so that it merges as ``MergeRules`` says: the
/// stamps of its latest insert and delete, the stamp of each column's value, and — while the
/// row does not exist — the values that would come back with it.
///
/// Kept small: once a delete wins, stamps at or before it are dropped (any insert that brings
/// the row back is later and carries every column), so a deleted row is a tombstone of one
/// stamp (plus, rarely, values stamped after the delete).
struct RowMeta: Equatable, Sendable {
    /// The latest insert.
    var inserted: ChangeStamp?
    /// The latest delete.
    var deleted: ChangeStamp?
    /// The stamp of each value column's value.
    var stamps: [String: ChangeStamp] = [:]
    /// Values of a row that does not exist (empty while it does: its values are in its table).
    var ghost: [String: LogValue] = [:]

    /// Whether the row exists: inserted after its latest delete.
    var exists: Bool {
        guard let inserted else { return false }
        return deleted.map { inserted > $0 } ?? true
    }

    /// Drops what a deleted row no longer needs: stamps (and held values) at or before its
    /// delete.
    mutating func pruneBeforeDelete() {
        guard !exists, let deleted else { return }
        for (column, stamp) in stamps where stamp <= deleted {
            stamps[column] = nil
            ghost[column] = nil
        }
        if let inserted, inserted <= deleted { self.inserted = nil }
    }
}

// MARK: - Encoding

/// Appends the engine's compact binary encodings (row metadata, keys) to a byte buffer.
struct ByteWriter {
    var bytes: [UInt8] = []

    mutating func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    mutating func int64(_ value: Int64) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func string(_ value: String) {
        varint(UInt64(value.utf8.count))
        bytes.append(contentsOf: value.utf8)
    }

    mutating func value(_ value: LogValue) {
        switch value {
        case .null: bytes.append(0)
        case .integer(let value): bytes.append(1); int64(value)
        case .real(let value): bytes.append(2); int64(Int64(bitPattern: value.bitPattern))
        case .text(let value): bytes.append(3); string(value)
        case .blob(let value): bytes.append(4); varint(UInt64(value.count)); bytes.append(contentsOf: value)
        }
    }
}

/// Reads what ``ByteWriter`` wrote; a short or malformed buffer is an error, never a crash.
struct ByteReader {
    struct Malformed: Error {}
    let bytes: [UInt8]
    var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var isAtEnd: Bool { offset == bytes.count }

    mutating func byte() throws -> UInt8 {
        guard offset < bytes.count else { throw Malformed() }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func varint() throws -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try byte()
            guard shift < 64 else { throw Malformed() }
            result |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return result }
            shift += 7
        }
    }

    mutating func count() throws -> Int {
        let value = try varint()
        guard value <= UInt64(bytes.count - offset) else { throw Malformed() }
        return Int(value)
    }

    mutating func int64() throws -> Int64 {
        guard bytes.count - offset >= 8 else { throw Malformed() }
        var value: UInt64 = 0
        for index in 0..<8 { value |= UInt64(bytes[offset + index]) << (8 * UInt64(index)) }
        offset += 8
        return Int64(bitPattern: value)
    }

    mutating func string() throws -> String {
        let count = try count()
        defer { offset += count }
        return String(decoding: bytes[offset..<offset + count], as: UTF8.self)
    }

    mutating func value() throws -> LogValue {
        switch try byte() {
        case 0: return .null
        case 1: return .integer(try int64())
        case 2: return .real(Double(bitPattern: UInt64(bitPattern: try int64())))
        case 3: return .text(try string())
        case 4:
            let count = try count()
            defer { offset += count }
            return .blob(Data(bytes[offset..<offset + count]))
        default: throw Malformed()
        }
    }
}

extension RowMeta {
    /// The metadata as stored (format 1): devices named once, then the stamps and held values.
    func encoded() -> [UInt8] {
        var devices: [String] = []
        var deviceIndex: [String: Int] = [:]
        func index(of device: String) -> Int {
            if let index = deviceIndex[device] { return index }
            devices.append(device)
            deviceIndex[device] = devices.count - 1
            return devices.count - 1
        }
        var body = ByteWriter()
        func stamp(_ stamp: ChangeStamp) {
            body.int64(stamp.timestamp.packed)
            body.varint(UInt64(index(of: stamp.device)))
            body.varint(UInt64(stamp.index))
        }
        body.bytes.append((inserted == nil ? 0 : 1) | (deleted == nil ? 0 : 2))
        if let inserted { stamp(inserted) }
        if let deleted { stamp(deleted) }
        body.varint(UInt64(stamps.count))
        for (column, value) in stamps.sorted(by: { $0.key < $1.key }) {
            body.string(column)
            stamp(value)
        }
        body.varint(UInt64(ghost.count))
        for (column, value) in ghost.sorted(by: { $0.key < $1.key }) {
            body.string(column)
            body.value(value)
        }
        var writer = ByteWriter()
        writer.bytes.append(1)
        writer.varint(UInt64(devices.count))
        for device in devices { writer.string(device) }
        writer.bytes.append(contentsOf: body.bytes)
        return writer.bytes
    }

    /// Reads ``encoded()``.
    init(encoded bytes: [UInt8]) throws {
        var reader = ByteReader(bytes)
        guard try reader.byte() == 1 else { throw ByteReader.Malformed() }
        var devices: [String] = []
        for _ in 0..<(try reader.count()) { devices.append(try reader.string()) }
        func stamp() throws -> ChangeStamp {
            let timestamp = HLCTimestamp(packed: try reader.int64())
            let device = Int(try reader.varint())
            guard device < devices.count else { throw ByteReader.Malformed() }
            return ChangeStamp(timestamp: timestamp, device: devices[device], index: Int(try reader.varint()))
        }
        let flags = try reader.byte()
        self.init()
        if flags & 1 != 0 { inserted = try stamp() }
        if flags & 2 != 0 { deleted = try stamp() }
        for _ in 0..<(try reader.count()) {
            let column = try reader.string()
            stamps[column] = try stamp()
        }
        for _ in 0..<(try reader.count()) {
            let column = try reader.string()
            ghost[column] = try reader.value()
        }
        guard reader.isAtEnd else { throw ByteReader.Malformed() }
    }

    /// A primary key as the metadata table keys it (the same key, the same bytes).
    static func encodedKey(_ key: [LogValue]) -> [UInt8] {
        var writer = ByteWriter()
        for value in key { writer.value(value) }
        return writer.bytes
    }
}
