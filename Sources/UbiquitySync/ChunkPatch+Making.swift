import Crypto
import Foundation
import UbiquityProtocol

// Making and checking chunk patches (the wire forms are in UbiquityProtocol/ChunkPatch.swift):
// which old chunk a changed one most likely came from, a chunk's block signature, a patch from
// a signature, and a patch applied and checked.

extension ChunkSignature {
    /// The signature of chunk `hash`, whose bytes are `bytes`.
    package init(of bytes: [UInt8], hash: String, blockSize: Int = ChunkSignature.standardBlockSize) {
        let blocks = bytes.count / blockSize
        var front = Data(capacity: blocks * 4), back = Data(capacity: blocks * 4)
        for index in 0..<blocks {
            front += Self.blockHash(bytes[(index * blockSize)..<((index + 1) * blockSize)])
            back += Self.blockHash(bytes[(bytes.count - (index + 1) * blockSize)..<(bytes.count - index * blockSize)])
        }
        self.init(hash: hash, length: bytes.count, blockSize: blockSize, front: front, back: back)
    }

    /// A block's short hash: the first 4 bytes of its SHA-256.
    static func blockHash(_ block: ArraySlice<UInt8>) -> Data {
        Data(SHA256.hash(data: block).prefix(4))
    }

    /// Whether the signature is one this side can use: a block size of at least 64 bytes and
    /// 4 bytes per whole block of the chunk, both ways.
    var isWellFormed: Bool {
        guard blockSize >= 64, length >= 0 else { return false }
        let blocks = length / blockSize
        return front.count == blocks * 4 && back.count == blocks * 4
    }
}

extension ChunkPatch {
    /// The patch that makes `target` (chunk `hash`) from the chunk `signature` describes,
    /// which this side does not have: the whole blocks at either end whose short hashes agree
    /// are kept, the rest travels. Nil when the signature is not well formed.
    package init?(making target: [UInt8], hash: String, against signature: ChunkSignature) {
        guard signature.isWellFormed else { return nil }
        let size = signature.blockSize, blocks = signature.length / size
        let front = [UInt8](signature.front), back = [UInt8](signature.back)
        func agrees(_ block: ArraySlice<UInt8>, _ hashes: [UInt8], at index: Int) -> Bool {
            ChunkSignature.blockHash(block).elementsEqual(hashes[(index * 4)..<(index * 4 + 4)])
        }
        let limit = min(blocks, target.count / size)
        var leading = 0
        while leading < limit && agrees(target[(leading * size)..<((leading + 1) * size)], front, at: leading) { leading += 1 }
        var trailing = 0
        while trailing < limit && agrees(target[(target.count - (trailing + 1) * size)..<(target.count - trailing * size)], back, at: trailing) { trailing += 1 }
        // Neither end may overlap the other, in the target or in the base.
        let prefix = leading * size
        let suffix = min(trailing * size, min(target.count, signature.length) - prefix)
        self.init(hash: hash, base: signature.hash, prefix: prefix, suffix: suffix, middle: Array(target[prefix..<(target.count - suffix)]))
    }

    /// The chunk made from `base` (chunk ``base``'s bytes), if it fits and hashes to ``hash``.
    package func made(from base: [UInt8]) -> [UInt8]? {
        guard let made = try? applied(to: base), // a patch that takes more than the base has makes nothing
              made.withUnsafeBytes({ ContentChunker.hash($0) }) == hash else { return nil }
        return made
    }
}

/// Which chunk of a file's old contents each new chunk most likely changes: the pairs that make
/// good ``ChunkPatch``es. The chunks added between two runs the lists share are paired, in
/// order, with the old chunks those runs leave out (the last of them standing in for any more);
/// added chunks that the old list has nothing for in their place (an insertion) get no partner.
package enum ChunkPartners {
    /// New chunk hash → the old chunk hash to patch it from.
    package static func of(old: [ChunkReference], new: [ChunkReference]) -> [String: String] {
        guard !old.isEmpty else { return [:] }
        var partners: [String: String] = [:]
        var cursor = 0, added: [String] = []
        func pair(upTo end: Int) {
            let gap = cursor < end ? Array(old[cursor..<end]) : []
            if !gap.isEmpty {
                for (index, hash) in added.enumerated() where partners[hash] == nil { partners[hash] = gap[min(index, gap.count - 1)].hash }
            }
            added = []
        }
        for operation in ChunkListDelta(from: old, to: new).operations {
            switch operation {
            case .add(let hash, _):
                added.append(hash)
            case .copy(let from, let count):
                pair(upTo: from)
                cursor = max(cursor, from + count)
            }
        }
        pair(upTo: old.count)
        return partners
    }
}
