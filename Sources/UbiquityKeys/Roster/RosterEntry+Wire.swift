import Foundation

/// Reads the fields of a wire encoding, refusing anything short or left over.
struct WireReader {
    private let bytes: [UInt8]
    private var offset = 0
    private let what: String

    init(_ bytes: some DataProtocol, what: String) {
        self.bytes = Array(bytes)
        self.what = what
    }

    var isAtEnd: Bool { offset == bytes.count }

    mutating func take(_ count: Int) throws -> [UInt8] {
        guard count >= 0, bytes.count - offset >= count else { throw EncryptionError(.malformed, "\(what) is truncated") }
        defer { offset += count }
        return Array(bytes[offset..<(offset + count)])
    }

    mutating func byte() throws -> UInt8 { try take(1)[0] }

    mutating func number<T: FixedWidthInteger>(_: T.Type) throws -> T {
        try take(MemoryLayout<T>.size).reduce(0) { $0 << 8 | T($1) }
    }

    /// A string of at most `limit` UTF-8 bytes after a 16-bit length.
    mutating func string(limit: Int = 256) throws -> String {
        let count = Int(try number(UInt16.self))
        guard count <= limit, let text = String(bytes: try take(count), encoding: .utf8) else {
            throw EncryptionError(.malformed, "\(what) has a text field that is too long or not UTF-8")
        }
        return text
    }

    func finish() throws {
        guard isAtEnd else { throw EncryptionError(.malformed, "\(what) has \(bytes.count - offset) bytes left over") }
    }
}

/// Writes the fields of a wire encoding.
struct WireWriter {
    private(set) var bytes: [UInt8] = []

    mutating func append(_ field: some Collection<UInt8>) { bytes.append(contentsOf: field) }

    mutating func append<T: FixedWidthInteger>(number: T) {
        withUnsafeBytes(of: number.bigEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func append(string: String) {
        let utf8 = Array(string.utf8.prefix(Int(UInt16.max)))
        append(number: UInt16(utf8.count))
        bytes.append(contentsOf: utf8)
    }
}

extension RosterEntry {
    /// The entry as stored and sent (format 1): `format ‖ index ‖ previous (32) ‖ change ‖
    /// signer ‖ signature (64)`, numbers big-endian, texts after a 16-bit length.
    public var encoded: Data {
        var writer = WireWriter()
        writer.append([Self.format])
        writer.append(number: index)
        writer.append(previous)
        func keys(_ keys: DevicePublicKeys) { writer.append(keys.signing); writer.append(keys.agreement) }
        switch change {
        case .genesis(let device, let name): writer.append([0]); keys(device); writer.append(string: name)
        case .addDevice(let device, let name): writer.append([1]); keys(device); writer.append(string: name)
        case .removeDevice(let identifier): writer.append([2]); writer.append(string: identifier)
        case .newEpoch(let epoch): writer.append([3]); writer.append(number: epoch)
        case .custody(let custody): writer.append([4, custody.rawValue])
        case .minimumFormat(let format): writer.append([5, format])
        case .escrow(let escrow):
            writer.append([6, escrow == nil ? 0 : 1])
            if let escrow { keys(escrow) }
        case .recovery(let recovery):
            writer.append([7, recovery == nil ? 0 : 1])
            if let recovery { keys(recovery) }
        case .addWebSession(let browser, let expires): writer.append([8]); keys(browser); writer.append(number: expires)
        case .endWebSession(let identifier): writer.append([9]); writer.append(string: identifier)
        }
        writer.append(string: signer)
        writer.append(signature)
        return Data(writer.bytes)
    }

    /// An entry from its wire encoding (its signature and place are checked by
    /// ``Roster/verify(_:pinned:)``).
    /// - Throws: ``EncryptionError`` `.unsupportedFormat` for another format, `.malformed` for
    ///   bytes that are not an entry.
    public init(encoded: some DataProtocol) throws {
        var reader = WireReader(encoded, what: "a roster entry")
        let format = try reader.byte()
        guard format == Self.format else { throw EncryptionError(.unsupportedFormat, "a roster entry of format \(format); this device reads format \(Self.format)") }
        let index = try reader.number(UInt64.self)
        let previous = try reader.take(32)
        func keys() throws -> DevicePublicKeys { try DevicePublicKeys(signing: reader.take(32), agreement: reader.take(32)) }
        let change: RosterChange
        switch try reader.byte() {
        case 0: change = .genesis(keys: try keys(), name: try reader.string())
        case 1: change = .addDevice(keys: try keys(), name: try reader.string())
        case 2: change = .removeDevice(identifier: try reader.string())
        case 3: change = .newEpoch(try reader.number(UInt32.self))
        case 4:
            guard let custody = Custody(rawValue: try reader.byte()) else { throw EncryptionError(.malformed, "a roster entry names an unknown custody") }
            change = .custody(custody)
        case 5: change = .minimumFormat(try reader.byte())
        case 6: change = .escrow(try reader.byte() == 0 ? nil : try keys())
        case 7: change = .recovery(try reader.byte() == 0 ? nil : try keys())
        case 8: change = .addWebSession(keys: try keys(), expires: try reader.number(UInt64.self))
        case 9: change = .endWebSession(identifier: try reader.string())
        case let kind: throw EncryptionError(.malformed, "a roster entry of unknown kind \(kind)")
        }
        let signer = try reader.string()
        let signature = try reader.take(64)
        try reader.finish()
        self.init(index: index, previous: previous, change: change, signer: signer, signature: signature)
    }
}
