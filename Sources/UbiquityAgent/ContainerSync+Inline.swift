import Foundation
import UbiquityProtocol
import UbiquitySync

// Small files travel inside the JSON both ways (docs/SyncProtocol.md, "Small files inline"):
// up in their commit, down in the page of changes that lists them. A new small document takes
// one request each way, with no chunk framing and no separate chunk request.
extension ContainerSync {
    /// A small file's bytes as a page of changes brought them, until the round that lists
    /// them has put them in place (or found them not wanted).
    struct Inlined {
        /// The revision they are.
        var revision: String
        /// Their content token (what the item's state names).
        var content: String
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

    /// The most bytes of small files one commit request carries inline.
    static let commitInlineBytes = 2 << 20

    /// How large a file a page of changes should bring inline: on a greedy device (which
    /// downloads everything anyway) as large as the protocol allows; elsewhere none, since
    /// items are listed first and downloaded when asked (metadata first).
    var inlineLimit: Int { greedy ? ItemUpdate.maximumInlineBytes : 0 }

    /// Keeps the bytes a page of changes brought for its small files, checked against the
    /// content token the server gave (cut as this device cuts: a file cut otherwise
    /// elsewhere is downloaded the usual way), up to ``inlineHeldBytes`` in all.
    func keepInlined(_ items: [ItemState]) {
        for item in items {
            guard let contents = item.contents, let digest = item.digest, inlinedBytes + contents.count <= Self.inlineHeldBytes else { continue }
            let chunks = ContentChunker.standard.chunks(of: contents)
            guard ContentToken.of(chunks.map(\.reference)) == digest else {
                logger.debug("inline contents cut otherwise here: downloaded the usual way", metadata: ["container": "\(container)", "item": "\(item.id)"])
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
    }

    /// The bytes of a change's file to send inline with its commit: a flat file of at most
    /// ``ItemUpdate/maximumInlineBytes`` whose bytes on disk are still the chunks cut at the
    /// scan. Nil otherwise — then its chunks go the usual way, whose reading notices a file
    /// changed or gone since the scan (and the next scan sends what it became).
    func inlineContents(of change: LocalChange, members: [LocalMember]) -> Data? {
        guard change.kind ?? .file == .file, !change.deleted, members.count == 1, let path = files.path(of: change.item) else { return nil }
        let chunks = members[0].chunks
        let size = chunks.reduce(0) { $0 + $1.length }
        guard size <= ItemUpdate.maximumInlineBytes else { return nil }
        let data: Data
        do {
            data = try Data(contentsOf: root.appendingPathComponent(path))
        } catch {
            return nil // gone or unreadable since the scan: see above
        }
        guard data.count == size else { return nil }
        let intact = data.withUnsafeBytes { bytes in
            chunks.allSatisfy { ContentChunker.hash(UnsafeRawBufferPointer(rebasing: bytes[$0.offset..<$0.offset + $0.length])) == $0.hash }
        }
        return intact ? data : nil
    }
}
