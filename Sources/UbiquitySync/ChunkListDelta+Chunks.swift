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

/// What names an item's contents in the sync decisions, the same on every device and on the
/// server: SHA-256 of the chunk list (for a package, of each member's path and chunk list, in
/// path order); a folder's contents are always `folder`. The server sends it as
/// ``ItemState/digest`` when it leaves the manifest out.
package enum ContentToken {
    /// What names a folder's contents (a folder has none: its items are items of their own).
    package static let folder = "folder"

    /// The token of `manifest`, for an item of `kind`.
    package static func of(_ manifest: Manifest, kind: ItemKind) -> String {
        switch kind {
        case .directory:
            return folder
        case .file:
            return of(manifest.chunks ?? [])
        case .package:
            let text = "package\n" + (manifest.members ?? []).sorted { $0.path < $1.path }
                .map { $0.path + "\u{0}" + $0.chunks.map { "\($0.hash):\($0.size)" }.joined(separator: ",") }.joined(separator: "\n")
            return Data(text.utf8).withUnsafeBytes { ContentChunker.hash($0) }
        }
    }

    /// The token of a flat file's chunk list.
    package static func of(_ chunks: [ChunkReference]) -> String {
        let text = chunks.map { "\($0.hash):\($0.size)" }.joined(separator: ",")
        return Data(text.utf8).withUnsafeBytes { ContentChunker.hash($0) }
    }
}
