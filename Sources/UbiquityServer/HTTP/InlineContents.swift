import Foundation
import UbiquityProtocol

// Small files' bytes travel inside the JSON of commits and of pages of changes
// (docs/SyncProtocol.md, "Small files inline"): no chunk framing, no separate chunk request,
// one round trip each way for a new small document.
extension SyncServices {
    /// The most bytes of contents one page of changes carries inline, all items together.
    static let pageInlineBytes = 2 << 20

    /// The chunks an update's inline ``ItemUpdate/contents`` are, checked against its chunk
    /// list (a delta already applied); the update is left without them. Each chunk is checked
    /// here, so that a wrong one refuses only its own update in a batch.
    /// - Throws: ``SyncError`` `invalidContents` (400) unless the contents are exactly the chunks
    ///   the chunk list names, of a flat file of at most ``ItemUpdate/maximumInlineBytes``.
    static func inlineChunks(of update: inout ItemUpdate) throws -> [ChunkBatch.Chunk] {
        guard let contents = update.contents else { return [] }
        update.contents = nil
        guard update.kind == .file, update.deleted != true, contents.count <= ItemUpdate.maximumInlineBytes else {
            throw SyncError.badRequest("invalidContents", "inline contents are for a flat file of at most \(ItemUpdate.maximumInlineBytes) bytes")
        }
        let listed = update.manifest.chunks ?? []
        guard listed.reduce(Int64(0), { $0 + $1.size }) == Int64(contents.count) else {
            throw SyncError.badRequest("invalidContents", "the contents are \(contents.count) bytes, not as many as the chunk list says")
        }
        let bytes = [UInt8](contents)
        var chunks: [ChunkBatch.Chunk] = [], offset = 0
        for reference in listed {
            let piece = bytes[offset..<offset + Int(reference.size)]
            offset += piece.count
            do {
                try FileChunkStore.verify(piece, hash: reference.hash)
            } catch let error as SyncError {
                throw SyncError.badRequest("invalidContents", "the contents are not the chunks listed: \(error.message)")
            }
            chunks.append(ChunkBatch.Chunk(hash: reference.hash, bytes: piece))
        }
        return chunks
    }

    /// Puts the bytes of the page's small flat files — uploaded, at most `limit` bytes each,
    /// ``pageInlineBytes`` in all, in page order — into their states, except revisions the
    /// asking device made (it has their bytes). A file whose chunks cannot all be loaded is
    /// left as it was: the device downloads it the usual way.
    func inline(_ page: inout ChangesResponse, upTo limit: Int, container: String, for device: DeviceAuth) async throws {
        var budget = Int64(Self.pageInlineBytes), wanted: [Int] = []
        for (index, item) in page.items.enumerated() where item.kind == .file && !item.deleted && item.uploaded && item.size <= limit {
            guard item.size <= budget else { break }
            budget -= item.size
            wanted.append(index)
        }
        guard !wanted.isEmpty else { return }
        let lists = try await database.chunkLists(accountId: device.accountId, container: container, revisions: wanted.map { page.items[$0].revision },
                                                  notMadeBy: device.deviceId)
        var hashes: [String] = [], listed = Set<String>()
        for index in wanted {
            for reference in lists[page.items[index].revision] ?? [] where listed.insert(reference.hash).inserted { hashes.append(reference.hash) }
        }
        let loaded = hashes.isEmpty ? [] : try await chunks.load(hashes, account: device.accountId, upTo: Self.pageInlineBytes)
        let bytes = Dictionary(zip(hashes, loaded), uniquingKeysWith: { first, _ in first })
        for index in wanted {
            guard let list = lists[page.items[index].revision] else { continue }
            var contents = Data()
            for reference in list {
                guard let piece = bytes[reference.hash], piece.count == reference.size else { break }
                contents.append(piece)
            }
            if contents.count == page.items[index].size { page.items[index].contents = contents }
        }
    }
}
