import Foundation
import UbiquityFiles
import UbiquitySync
import NIOCore
import NIOHTTP1
import UbiquityProtocol

/// Expiry answer of an announcement (`{"expires": SECONDS}`).
private struct IncomingExpiry: Decodable {
    var expires: Double
}

// Incoming revisions (docs/SyncProtocol.md, "Incoming revisions"): what a device uploads is
// announced before its chunks, and the others fetch them as they land. Not through shares:
// a participant's devices get a shared item at its commit, as before.
extension SyncClient {
    /// Announces `update` as the revision of `item` this device is uploading now.
    /// - Returns: When the announcement expires unless ``incomingLanded(container:item:)`` keeps it.
    @discardableResult
    package func announceIncoming(container: String, item: String, update: ItemUpdate) async throws -> Double {
        try refusedThroughShare("announcing an upload")
        let answer: IncomingExpiry = try await json(.PUT, "v1/containers/\(container)/incoming/\(item)", body: update)
        return answer.expires
    }

    /// Says that more chunks of the announced revision of `item` are stored (the others fetch
    /// them), and keeps the announcement.
    package func incomingLanded(container: String, item: String) async throws {
        try refusedThroughShare("announcing an upload")
        _ = try await send(.POST, "v1/containers/\(container)/incoming/\(item)/landed", body: nil, expecting: [.ok])
    }

    /// Withdraws the announcement of `item` (committed, or given up).
    package func withdrawIncoming(container: String, item: String) async throws {
        try refusedThroughShare("announcing an upload")
        _ = try await send(.DELETE, "v1/containers/\(container)/incoming/\(item)", body: nil, expecting: [.noContent])
    }

    /// The revisions other devices are uploading into `container` now.
    package func incoming(container: String) async throws -> [IncomingRevision] {
        try refusedThroughShare("announcing an upload")
        let answer: IncomingResponse = try await json(.GET, "v1/containers/\(container)/incoming")
        return answer.incoming
    }

    /// Those of `hashes` the server has now — stored, or landing from an upload in progress —
    /// each checked against its name (a sealed one opened) and handed to `each` as plaintext, in
    /// the order they came (at most 16 MiB of them; none when none is there yet). Returns the
    /// hashes handed on. One request: asked again, it answers what landed since.
    /// - Throws: ``SyncClientError`` `hashMismatch` for a damaged chunk or one not asked for,
    ///   `badAnswer` for a body that is not a batch, or what `each` throws.
    package func downloadAvailable(_ hashes: [String], codec: ChunkCodec = .plain, each: (String, UnsafeRawBufferPointer) throws -> Void) async throws -> Set<String> {
        try refusedThroughShare("fetching ahead")
        let asked = Array(hashes.prefix(ChunkBatch.maximumCount)), wanted = Set(asked)
        let answer = try await send(.POST, "v1/chunks/fetch", payload: ByteBuffer(bytes: try JSONEncoder().encode(ChunkFetchRequest(hashes: asked, available: true))),
                                    expecting: [.ok], timeout: timeout * 4, json: true)
        return try answer.withUnsafeReadableBytes { body in
            let frames: [ChunkBatch.Frame]
            do {
                frames = try ChunkBatch.frames(in: body, maximumChunkSize: Self.maximumAnswerBytes)
            } catch {
                throw SyncClientError(status: 200, code: "badAnswer", message: "the server's chunk batch is not what the protocol says: \(error)")
            }
            var got = Set<String>()
            for frame in frames {
                guard wanted.contains(frame.hash), got.insert(frame.hash).inserted else {
                    throw SyncClientError(status: 200, code: "hashMismatch", message: "the server answered chunk \(frame.hash), not asked for")
                }
                let bytes = UnsafeRawBufferPointer(rebasing: body[frame.bytes])
                if !codec.sealed, ContentChunker.hash(bytes) == frame.hash {
                    try each(frame.hash, bytes)
                } else if codec.opensSealed {
                    let plaintext: Data
                    do {
                        plaintext = try codec.open(bytes, as: frame.hash)
                    } catch {
                        throw SyncClientError(status: 200, code: "hashMismatch", message: "chunk \(frame.hash) arrived damaged or is not the chunk asked for")
                    }
                    try plaintext.withUnsafeBytes { try each(frame.hash, $0) }
                } else {
                    throw SyncClientError(status: 200, code: "hashMismatch", message: "chunk \(frame.hash) arrived damaged")
                }
            }
            return got
        }
    }
}
