import Foundation

extension CommitLedger {
    /// The format of ``encoded(rememberingAtMost:)``.
    public static let checkpointFormat: UInt8 = 2

    /// The most devices a stored ledger may name (far more than any roster holds).
    static let maximumStoredDevices = 65_535

    /// The ledger as a device keeps it between runs (format 2): `format ‖ container ‖ count of
    /// devices (16-bit) ‖ each, by device: device ‖ head sequence ‖ head hash (32) ‖ count of
    /// recent hashes (16-bit) ‖ each, oldest first: sequence ‖ hash (32)`; then `count of escrow
    /// chains (16-bit) ‖ each, by key: key ‖ roster entry last named ‖ count of terms (16-bit) ‖
    /// each, by first entry: the term's first entry ‖ its first sequence`; then `count of
    /// closings (16-bit) ‖ each, by signer and entry: signer ‖ the entry that ended its term ‖
    /// the last sequence allowed in it`; numbers big-endian (64-bit unless said), texts after
    /// a 16-bit length. So that a restarted device goes on from where it read instead of
    /// reading and checking every commit of the container again. (Format 1 had no escrow
    /// chains nor closings: it is not read, and the commits are read again from the start.)
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
        let escrows = escrowChains.keys.sorted().prefix(Self.maximumStoredDevices)
        writer.append(number: UInt16(escrows.count))
        for key in escrows {
            let chain = escrowChains[key]!
            writer.append(string: key)
            writer.append(number: chain.rosterIndex)
            let starts = chain.termStarts.sorted { $0.key < $1.key }.prefix(Self.maximumStoredDevices)
            writer.append(number: UInt16(starts.count))
            for (from, sequence) in starts {
                writer.append(number: from)
                writer.append(number: sequence)
            }
        }
        let closed = closings.sorted { ($0.key.signer, $0.key.until) < ($1.key.signer, $1.key.until) }.prefix(Self.maximumStoredDevices)
        writer.append(number: UInt16(closed.count))
        for (ended, allowed) in closed {
            writer.append(string: ended.signer)
            writer.append(number: ended.until)
            writer.append(number: allowed)
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
        var escrows: [String: EscrowChain] = [:]
        last = nil
        for _ in 0..<Int(try reader.number(UInt16.self)) {
            let key = try reader.string()
            guard last.map({ $0 < key }) ?? true else { throw EncryptionError(.malformed, "a stored ledger names an escrow chain twice or out of order") }
            last = key
            var chain = EscrowChain(rosterIndex: try reader.number(UInt64.self), termStarts: [:])
            var previous: UInt64?
            for _ in 0..<Int(try reader.number(UInt16.self)) {
                let from = try reader.number(UInt64.self), sequence = try reader.number(UInt64.self)
                guard previous.map({ $0 < from }) ?? true, from <= chain.rosterIndex, sequence > 0, sequence <= heads[key]?.sequence ?? 0 else {
                    throw EncryptionError(.malformed, "a stored ledger's escrow chain \(key) has terms out of order or past its head")
                }
                previous = from
                chain.termStarts[from] = sequence
            }
            escrows[key] = chain
        }
        var closings: [Roster.EndedTerm: UInt64] = [:]
        for _ in 0..<Int(try reader.number(UInt16.self)) {
            let ended = Roster.EndedTerm(signer: try reader.string(), until: try reader.number(UInt64.self))
            guard closings.updateValue(try reader.number(UInt64.self), forKey: ended) == nil else {
                throw EncryptionError(.malformed, "a stored ledger closes a term twice")
            }
        }
        restore(escrow: escrows, closings: closings)
        try reader.finish()
    }
}
