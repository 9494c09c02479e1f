import Foundation

extension CommitLedger {
    /// The format of ``encoded(rememberingAtMost:)``.
    public static let checkpointFormat: UInt8 = 1

    /// The most devices a stored ledger may name (far more than any roster holds).
    static let maximumStoredDevices = 65_535

    /// The ledger as a device keeps it between runs (format 1): `format ‖ container ‖ count of
    /// devices (16-bit) ‖ each, by device: device ‖ head sequence ‖ head hash (32) ‖ count of
    /// recent hashes (16-bit) ‖ each, oldest first: sequence ‖ hash (32)`, numbers big-endian,
    /// texts after a 16-bit length. So that a restarted device goes on from where it read
    /// instead of reading and checking every commit of the container again.
    ///
    /// `remembered`: the most recent hashes kept of each device's chain (the newest; at most
    /// ``remembered``). Fewer than the ledger holds only narrows what a restarted device can
    /// compare another device's view with; every head is kept, so a chain that is forked,
    /// withheld or replayed past them is refused as before.
    public func encoded(rememberingAtMost remembered: Int = 512) -> Data {
        var writer = WireWriter()
        writer.append([Self.checkpointFormat])
        writer.append(string: container)
        let devices = heads.keys.sorted()
        writer.append(number: UInt16(devices.count))
        for device in devices {
            let head = heads[device]!
            writer.append(string: device)
            writer.append(number: head.sequence)
            writer.append(head.hash)
            let kept = (recent[device] ?? [:]).sorted { $0.key < $1.key }.suffix(max(0, min(remembered, Self.remembered, Int(UInt16.max))))
            writer.append(number: UInt16(kept.count))
            for (sequence, hash) in kept {
                writer.append(number: sequence)
                writer.append(hash)
            }
        }
        return Data(writer.bytes)
    }

    /// A ledger as ``encoded(rememberingAtMost:)`` kept it, for `container`.
    /// - Throws: ``EncryptionError`` `.unsupportedFormat` for another format, `.malformed` for
    ///   bytes that are not a ledger (short, left over, another container's, a device twice or
    ///   out of order, a remembered hash past its device's head or out of order, or a head
    ///   whose own hash is not remembered as it).
    public init(encoded: some DataProtocol, container: String) throws {
        var reader = WireReader(encoded, what: "a stored ledger of commits")
        let format = try reader.byte()
        guard format == Self.checkpointFormat else {
            throw EncryptionError(.unsupportedFormat, "a stored ledger of format \(format); this device reads format \(Self.checkpointFormat)")
        }
        guard try reader.string() == container else { throw EncryptionError(.malformed, "a stored ledger of another container") }
        self.init(container: container)
        let count = Int(try reader.number(UInt16.self))
        var last: String?
        for _ in 0..<count {
            let device = try reader.string()
            guard last.map({ $0 < device }) ?? true else { throw EncryptionError(.malformed, "a stored ledger names a device twice or out of order") }
            last = device
            let head = CommitHead(sequence: try reader.number(UInt64.self), hash: try reader.take(32))
            var hashes: [UInt64: [UInt8]] = [:]
            var previous: UInt64?
            for _ in 0..<Int(try reader.number(UInt16.self)) {
                let sequence = try reader.number(UInt64.self)
                guard previous.map({ $0 < sequence }) ?? true, sequence <= head.sequence, sequence > 0 else {
                    throw EncryptionError(.malformed, "a stored ledger remembers commits of device \(device) out of order or past its head")
                }
                previous = sequence
                hashes[sequence] = try reader.take(32)
            }
            if let known = hashes[head.sequence], known != head.hash {
                throw EncryptionError(.malformed, "a stored ledger's head of device \(device) is not the commit it remembers there")
            }
            restore(device: device, head: head, recent: hashes)
        }
        try reader.finish()
    }
}
