import Foundation
import NIOCore
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

// Chunks going up in shared batches (docs/SyncProtocol.md, "Chunks in batches").
extension Uploader {
    /// What of an item's contents the server lacks, and where they are.
    struct Upload {
        var item: String
        var members: [LocalMember]
        var missing: Set<String>
        var url: URL
    }

    /// Uploads the missing chunks of several items' contents (a file, or a package's members),
    /// in shared batches of about ``uploadBatchBytes``, ``uploadConcurrency`` at a time.
    /// An item whose file changed since it was cut stops being read: its next change sends the
    /// new contents.
    /// Items in `announced` are incoming revisions (``announce(_:of:in:)``): after each batch
    /// that carried chunks of one, the server is told that more of it landed.
    /// With `patchesInline`, a small batch of patches is not sent but returned, for the commit
    /// to carry (``uploadPatches(_:inline:in:)``).
    @discardableResult
    func upload(_ uploads: [Upload], announced: Set<String> = [], patchesInline: Bool = false, in sync: isolated ContainerSync) async throws -> ChunkPatchBatch? {
        guard !uploads.isEmpty else { return nil }
        var sent = Set<String>()
        let wanted = uploads.map { upload in
            (upload, upload.members.map { member in (member, member.chunks.filter { upload.missing.contains($0.hash) && sent.insert($0.hash).inserted }) })
        }
        for (upload, members) in wanted {
            sync.transfers[upload.item] = ContainerSync.Transfer(downloading: false, done: 0, total: members.reduce(0) { $0 + $1.1.reduce(0) { $0 + Int64($1.length) } })
        }
        defer { for upload in uploads { sync.transfers[upload.item] = nil } }
        var inline: ChunkPatchBatch? = patchesInline ? ChunkPatchBatch() : nil
        let patched = try await uploadPatches(wanted, inline: &inline, in: sync)
        let client = sync.client, codec = sync.codec, prints = sync.prints
        // Each batch is written as the body it goes as (framing, then the chunk read from its
        // file straight into place: no copy of it is made here), and the few bodies in flight
        // are used again once sent (a new large buffer costs a page fault every 4 KiB).
        let buffers = TransferBuffers()
        let framed = wanted.reduce(0) { $0 + $1.1.reduce(0) { $0 + $1.1.reduce(0) { $0 + ChunkBatch.framing + $1.length } } }
        let capacity = min(framed, Self.batchBodyCapacity) // a small upload asks for no more than it sends
        try await withThrowingTaskGroup(of: [String: Int64].self) { group in
            var inFlight = 0
            var body = buffers.take(capacity: capacity), chunkCount = 0, payload = 0, carried: [String: Int64] = [:]
            func finished(_ done: [String: Int64], in sync: isolated ContainerSync) {
                for (item, bytes) in done { sync.transfers[item]?.done += bytes }
                inFlight -= 1
            }
            func dispatch(in sync: isolated ContainerSync) async throws {
                guard chunkCount > 0 else { return }
                if inFlight == ContainerSync.uploadConcurrency, let done = try await group.next() { finished(done, in: sync) }
                let items = carried, container = sync.container
                let sending = TransferBuffers.Handoff(body)
                group.addTask {
                    let sent = sending.take()
                    try await client.upload(batchBody: sent, sealed: codec.sealed)
                    buffers.give(consume sent)
                    // (Only a hint for the others: they find the chunks at their next look anyway.)
                    for item in items.keys where announced.contains(item) { try? await client.incomingLanded(container: container, item: item) }
                    return items
                }
                inFlight += 1
                body = buffers.take(capacity: capacity)
                chunkCount = 0
                payload = 0
                carried = [:]
            }
            for (upload, members) in wanted {
                // A flat file as the scan recorded it before cutting it still has the bytes it cut
                // — if the scan's record is of these contents: a change sent again after a failed
                // round carries the contents it was made with, while the file and its record may
                // have moved on (trusting the newer record sent the new bytes under the old hash,
                // and the server refused the batch again every round).
                let recorded = upload.members.count == 1 && upload.members[0].path.isEmpty
                    ? sync.files.file(of: upload.item).flatMap { file in
                        file.content == LocalContents.token(LocalContents.manifest(upload.members, kind: .file), kind: .file) ? file.fingerprint : nil
                    }
                    : nil
                reading: for (member, chunks) in members where !chunks.isEmpty {
                    let handle: FileHandle
                    do {
                        handle = try FileHandle(forReadingFrom: member.path.isEmpty ? upload.url : upload.url.appendingPathComponent(member.path))
                    } catch {
                        break reading // gone or unreadable since the scan: the next scan says what it became
                    }
                    defer { try? handle.close() } // read-only: closing cannot lose anything
                    var trusted = recorded.flatMap { Self.fingerprint(of: handle) == $0 ? $0 : nil }
                    for chunk in chunks where !patched.contains(chunk.hash) {
                        if chunkCount > 0 && (payload + chunk.length > ContainerSync.uploadBatchBytes || chunkCount == ChunkBatch.maximumCount) { try await dispatch(in: sync) }
                        // Changed since the scan: the next round sends the new contents.
                        guard try Self.read(chunk, from: handle, trusting: &trusted, into: &body, codec: codec, prints: prints) else { break reading }
                        chunkCount += 1
                        payload += chunk.length
                        carried[upload.item, default: 0] += Int64(chunk.length)
                    }
                }
            }
            try await dispatch(in: sync)
            while let done = try await group.next() { finished(done, in: sync) }
        }
        return inline.flatMap { $0.patches.isEmpty ? nil : $0 }
    }

    /// Room for a batch body of ``ContainerSync/uploadBatchBytes`` of chunks of the standard
    /// sizes, framing included (a batch of smaller chunks grows its body).
    static let batchBodyCapacity = ContainerSync.uploadBatchBytes + (ContainerSync.uploadBatchBytes / ContentChunker.standard.minimumSize + 1) * ChunkBatch.framing
}
