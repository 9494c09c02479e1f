import CUbiquityCut
import Crypto

/// A keyed 64-bit print of blocks of one fixed length: AES-128 CBC-MAC (a pseudorandom
/// function on messages of a fixed length), its first eight bytes. What a device keeps of a
/// chunk it sent or received, a print per 2 KiB block, to find which blocks a later edit kept
/// (sealed patches) — never sent anywhere: under a key this process drew, nobody who does not
/// hold it can make two blocks print alike. Eight blocks are printed side by side on the
/// processor's AES instructions (several GB/s a core, where SipHash managed about one).
public struct BlockMAC: Sendable {
    private let roundKeys: [UInt8]
    private let portable: Bool

    /// A print under `key` (16 bytes); `portable`: in portable C even where the processor has
    /// AES instructions (tests: both must print alike).
    public init(key: SymmetricKey, portable: Bool = false) {
        var expanded = [UInt8](repeating: 0, count: 176)
        key.withUnsafeBytes { raw in
            precondition(raw.count == 16, "an AES-128 key")
            expanded.withUnsafeMutableBufferPointer { ubq_cut_expand_key(raw.bindMemory(to: UInt8.self).baseAddress, $0.baseAddress) }
        }
        roundKeys = expanded
        self.portable = portable
    }

    /// Under a key drawn when this process first asked for it (prints live as long as it does).
    public static let process = BlockMAC(key: SymmetricKey(size: .bits128))

    /// The print of each of `blocks`, in order.
    /// - Precondition: every block has the same length, a multiple of 16 bytes.
    public func prints(of blocks: [UnsafeRawBufferPointer]) -> [UInt64] {
        guard let length = blocks.first?.count else { return [] }
        precondition(length % 16 == 0 && blocks.allSatisfy { $0.count == length }, "blocks of one length, a multiple of 16 bytes")
        var out = [UInt64](repeating: 0, count: blocks.count)
        // (A block of no bytes has no address; all of them print as the empty message does.)
        guard length > 0 else { return out }
        let pointers: [UnsafePointer<UInt8>?] = blocks.map { $0.baseAddress?.assumingMemoryBound(to: UInt8.self) }
        pointers.withUnsafeBufferPointer { list in
            roundKeys.withUnsafeBufferPointer { keys in
                out.withUnsafeMutableBufferPointer { ubq_block_macs(list.baseAddress, blocks.count, length, keys.baseAddress, $0.baseAddress, portable ? 1 : 0) }
            }
        }
        return out
    }
}
