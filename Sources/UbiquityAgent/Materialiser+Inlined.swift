import Foundation
import UbiquityProtocol
import UbiquitySync

// Small files' bytes from a page of changes: kept until the round that lists them has put them
// in place (or found them not wanted).
extension Materialiser {
    /// A small file's bytes as a page of changes brought them, until the round that lists
    /// them has put them in place (or found them not wanted).
    struct Inlined {
        /// The revision they are.
        var revision: String
        /// Their content token (what the item's state names).
        var content: ContentToken
        /// The device that saved the revision.
        var savedBy: String
        /// The bytes, as chunks.
        var chunks: [ContentChunk]
        var bytes: [UInt8]

        /// The bytes of each chunk, by hash.
        var pieces: [String: [UInt8]] {
            var pieces: [String: [UInt8]] = [:]
            for chunk in chunks { pieces[chunk.hash] = Array(bytes[chunk.offset..<chunk.offset + chunk.length]) }
            return pieces
        }
    }

    /// The most bytes of small files kept from pages of changes until they are put in place.
    static let inlineHeldBytes = 16 << 20

    /// Keeps the bytes a page of changes brought for its small files, checked against the
    /// content token the server gave (cut as this device cuts: a file cut otherwise
    /// elsewhere is downloaded the usual way), up to ``inlineHeldBytes`` in all.
    func keepInlined(_ items: [ItemState], in sync: isolated ContainerSync) {
        guard !sync.codec.sealed else { return } // (a sealed container's chunks never come inline)
        for item in items {
            guard let contents = item.contents, let digest = item.digest.map({ ContentToken($0) }), inlinedBytes + contents.count <= Self.inlineHeldBytes else { continue }
            let chunks = sync.codec.chunks(of: contents)
            guard ContentToken.of(chunks.map(\.reference)) == digest else {
                sync.logger.debug("inline contents cut otherwise here: downloaded the usual way", metadata: ["container": "\(sync.container)", "item": "\(item.id)"])
                continue
            }
            inlinedBytes += contents.count - (inlined[item.id]?.bytes.count ?? 0)
            inlined[item.id] = Inlined(revision: item.revision, content: digest, savedBy: item.deviceName, chunks: chunks, bytes: [UInt8](contents))
        }
    }

    /// The inline bytes held for `download`, if they are the contents it brings down.
    func inlined(for download: Download) -> Inlined? {
        guard download.kind == .file, let held = inlined[download.item], held.content == download.content else { return nil }
        return held
    }

    /// Forgets the inline bytes held (at the end of a round: what was not put in place was not
    /// wanted, or is downloaded the usual way).
    func forgetInlined() {
        inlined = [:]
        inlinedBytes = 0
        pushedDeltas = [:]
    }
}
