import Foundation
import Synchronization
import UbiquityKeys

// Sealed patches (issue 45): the server cannot read a sealed chunk, so it can neither give a
// block signature of one nor make a chunk from a patch. A device that changes a sealed chunk
// makes the patch itself, against fingerprints of the old chunk's blocks it kept when it last
// held that chunk's plaintext (never sent anywhere), seals it, and the server keeps the sealed
// patch in place of the new chunk; a reader applies it to the old chunk (its own copy, or one
// fetched) and checks that the result is the chunk named.

/// Fingerprints of a chunk's blocks, from its start and from its end, kept on this device only:
/// what a later edit of the chunk is compared with to find the bytes it kept.
package struct BlockPrints: Sendable, Equatable {
    /// The bytes per block.
    package static let blockSize = 2048
    /// The chunk's length.
    package let length: Int
    /// Each whole block's print, from the start: a 64-bit keyed MAC (``BlockMAC/process``:
    /// prints never leave the process, and nobody who does not hold its key can make two
    /// blocks print alike).
    package let front: [UInt64]
    /// The same from the end, the last block first.
    package let back: [UInt64]

    /// The prints of a chunk whose plaintext is `bytes`.
    package init(of bytes: UnsafeRawBufferPointer) {
        let size = Self.blockSize, blocks = bytes.count / size
        length = bytes.count
        let front = BlockMAC.process.prints(of: (0..<blocks).map { UnsafeRawBufferPointer(rebasing: bytes[($0 * size)..<(($0 + 1) * size)]) })
        self.front = front
        // (A chunk of whole blocks has the same blocks counted from either end.)
        back = bytes.count % size == 0 ? front.reversed()
            : BlockMAC.process.prints(of: (0..<blocks).map { UnsafeRawBufferPointer(rebasing: bytes[(bytes.count - ($0 + 1) * size)..<(bytes.count - $0 * size)]) })
    }

    /// Roughly what the prints take in memory.
    package var memory: Int { 64 + (front.count + back.count) * 8 }
}

/// A patch's bytes, as sealed (``ChunkCodec/sealPatch(_:making:from:)``): the number of bytes
/// at the start and at the end of the chunk it changes that the new chunk keeps (4 bytes
/// big-endian each), then the new bytes between.
package struct PatchBody: Sendable, Equatable {
    /// Bytes kept from the base's start.
    package var prefix: Int
    /// Bytes kept from the base's end.
    package var suffix: Int
    /// The bytes between.
    package var middle: [UInt8]

    /// A patch of these parts.
    package init(prefix: Int, suffix: Int, middle: [UInt8]) {
        self.prefix = prefix
        self.suffix = suffix
        self.middle = middle
    }

    /// The patch making `target` from the chunk `prints` describe: the whole blocks at either
    /// end whose prints agree are kept (neither end overlapping the other, in either chunk).
    package init(making target: UnsafeRawBufferPointer, against prints: BlockPrints) {
        let size = BlockPrints.blockSize
        let limit = min(prints.front.count, target.count / size)
        // (Every block is printed at once, eight side by side: an edit's chunk differs from its
        // base in a few blocks, so nearly all of them are compared anyway.)
        let front = BlockMAC.process.prints(of: (0..<limit).map { UnsafeRawBufferPointer(rebasing: target[($0 * size)..<(($0 + 1) * size)]) })
        let back = BlockMAC.process.prints(of: (0..<limit).map { UnsafeRawBufferPointer(rebasing: target[(target.count - ($0 + 1) * size)..<(target.count - $0 * size)]) })
        let leading = (0..<limit).first { front[$0] != prints.front[$0] } ?? limit
        let trailing = (0..<limit).first { back[$0] != prints.back[$0] } ?? limit
        let prefix = leading * size
        let suffix = min(trailing * size, min(target.count, prints.length) - prefix)
        self.init(prefix: prefix, suffix: suffix, middle: Array(target[prefix..<(target.count - suffix)]))
    }

    /// The bytes that are sealed.
    package var encoded: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(8 + middle.count)
        for value in [UInt32(truncatingIfNeeded: prefix), UInt32(truncatingIfNeeded: suffix)] {
            withUnsafeBytes(of: value.bigEndian) { out.append(contentsOf: $0) }
        }
        out += middle
        return out
    }

    /// A patch from its bytes; nil if they are too short.
    package init?(decoding bytes: some Collection<UInt8>) {
        let array = Array(bytes)
        guard array.count >= 8 else { return nil }
        prefix = Int(array[0..<4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        suffix = Int(array[4..<8].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        middle = Array(array[8...])
    }

    /// The chunk made from `base`; nil when the patch keeps more of the base than it has.
    package func applied(to base: UnsafeRawBufferPointer) -> [UInt8]? {
        guard prefix >= 0, suffix >= 0, prefix <= base.count - suffix else { return nil }
        var made: [UInt8] = []
        made.reserveCapacity(prefix + middle.count + suffix)
        made += base[0..<prefix]
        made += middle
        made += base[(base.count - suffix)...]
        return made
    }
}

/// The block prints of chunks this device held in plaintext lately (sent or received), by name,
/// bounded in memory (the oldest go first). Only chunks of at least ``smallestChunk`` bytes are
/// kept: a smaller one travels whole at little cost.
package final class BlockPrintCache: Sendable {
    /// The smallest chunk whose prints are kept.
    package static let smallestChunk = 32 << 10

    private struct State {
        var prints: [String: BlockPrints] = [:]
        var order: [String] = []
        var start = 0
        var memory = 0
    }
    private let state = Mutex(State())
    /// The most memory the prints take.
    package let capacity: Int

    /// A cache of at most `capacity` bytes of prints.
    package init(capacity: Int = 16 << 20) {
        self.capacity = capacity
    }

    /// Keeps the prints of chunk `name`, whose plaintext is `bytes` (if it is large enough and
    /// not kept already).
    package func note(_ bytes: UnsafeRawBufferPointer, as name: String) {
        guard bytes.count >= Self.smallestChunk, state.withLock({ $0.prints[name] == nil }) else { return }
        let prints = BlockPrints(of: bytes)
        state.withLock { state in
            guard state.prints.updateValue(prints, forKey: name) == nil else { return }
            state.order.append(name)
            state.memory += prints.memory
            while state.memory > capacity, state.start < state.order.count {
                let oldest = state.order[state.start]
                state.start += 1
                if let gone = state.prints.removeValue(forKey: oldest) { state.memory -= gone.memory }
            }
            if state.start > 4096 && state.start * 2 > state.order.count {
                state.order.removeFirst(state.start)
                state.start = 0
            }
        }
    }

    /// The prints of chunk `name`, if kept.
    package func prints(of name: String) -> BlockPrints? {
        state.withLock { $0.prints[name] }
    }

    /// How many chunks' prints are kept.
    package var count: Int { state.withLock { $0.prints.count } }
}
