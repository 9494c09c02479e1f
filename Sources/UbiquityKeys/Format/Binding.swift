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

import Crypto

/// The AES-256-GCM box every sealed object carries after its header (and any clear fields):
/// `nonce (12) ‖ ciphertext ‖ tag (16)`.
enum Sealing {
    /// `header ‖ clear ‖ nonce ‖ AES-256-GCM(key, plaintext, binding) ‖ tag`, with a random
    /// nonce, or `nonce` (only for a key that seals one plaintext and no other).
    static func seal(_ plaintext: [UInt8], key: SecretKey, binding: [UInt8], header: SealedHeader, clear: [UInt8] = [], nonce: [UInt8]? = nil) throws -> Data {
        let box = try AES.GCM.seal(plaintext, using: key.symmetric, nonce: try nonce.map { try AES.GCM.Nonce(data: $0) } ?? AES.GCM.Nonce(), authenticating: binding)
        var sealed = Data(capacity: SealedHeader.size + clear.count + 12 + plaintext.count + 16) // (one buffer: no regrowing)
        sealed.append(contentsOf: header.bytes)
        sealed.append(contentsOf: clear)
        sealed.append(contentsOf: box.nonce)
        sealed.append(box.ciphertext)
        sealed.append(box.tag)
        return sealed
    }

    /// The plaintext of the box that starts at `offset`; nil if it is too short or does not open
    /// (changed bytes, another key, another binding).
    static func open(_ bytes: [UInt8], at offset: Int, key: SecretKey, binding: [UInt8]) -> [UInt8]? {
        guard bytes.count >= offset + 12 + 16 else { return nil }
        guard let nonce = try? AES.GCM.Nonce(data: bytes[offset..<(offset + 12)]),
              let box = try? AES.GCM.SealedBox(nonce: nonce, ciphertext: bytes[(offset + 12)..<(bytes.count - 16)], tag: bytes[(bytes.count - 16)...]),
              let plaintext = try? AES.GCM.open(box, using: key.symmetric, authenticating: binding) else { return nil }
        return Array(plaintext)
    }
}
