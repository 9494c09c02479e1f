import Foundation
import UbiquityProtocol

extension ChunkListDelta {
    /// The delta that turns the chunks `old` into `new` (of a file cut by ``ContentChunker``).
    package init(from old: [ContentChunk], to new: [ContentChunk]) {
        self.init(from: old.map(\.reference), to: new.map(\.reference))
    }

    /// The new chunks, rebuilt from `old`, with their offsets.
    /// - Throws: ``DeltaError`` when the delta copies chunks `old` does not have.
    package func apply(to old: [ContentChunk]) throws -> [ContentChunk] {
        var offset = 0
        return try apply(to: old.map(\.reference)).map { reference in
            defer { offset += Int(reference.size) }
            return ContentChunk(offset: offset, length: Int(reference.size), hash: reference.hash)
        }
    }
}

extension ContentChunk {
    /// The chunk as a manifest names it (hash and size).
    package var reference: ChunkReference { ChunkReference(hash: hash, size: Int64(length)) }
}
