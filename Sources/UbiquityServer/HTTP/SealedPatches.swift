import Foundation
import Hummingbird
import Logging
import UbiquityProtocol

// Sealed patches (issue 45; docs/SyncProtocol.md, "Sealed patches"): a device's sealed patch of
// a chunk, kept in place of the chunk it makes.
extension SyncServices {
    /// How many sealed patches deep a chunk may be stored: a chunk made from a patch of a chunk
    /// made from a patch, and so on, down to one stored whole. A reader without any of them
    /// reads every one; a device sends the chunk whole when its base is this deep already.
    static let maximumPatchDepth = 8

    /// Stores a batch of sealed patches (`POST /v1/chunks/patches?sealed=1`): each framed as a
    /// ``ChunkPatch`` that keeps nothing of its base (prefix and suffix 0) whose middle is the
    /// sealed patch, kept as it comes in place of the chunk it makes (the server cannot make
    /// that chunk: the device made the patch, a reader applies it and checks the result).
    /// - Throws: ``SyncError`` 400 `badBatch`/`badPatch`, 404 for a base the account lacks,
    ///   409 `patchTooDeep` for a base that is ``maximumPatchDepth`` patches deep already.
    func receiveSealedPatches(_ request: Request, from device: DeviceAuth, logger: Logger) async throws {
        let batch = try await Self.patchBatch(of: request)
        for patch in batch.patches {
            guard patch.prefix == 0, patch.suffix == 0, !patch.middle.isEmpty else {
                throw SyncError.badRequest("badPatch", "a sealed patch of chunk \(patch.hash) keeps nothing of its base: its middle is the sealed patch")
            }
            guard patch.hash != patch.base else { throw SyncError.badRequest("badPatch", "chunk \(patch.hash) is named as its own base") }
        }
        try await requireChunks(batch.patches.map(\.base), of: device)
        // How deep each base is already (its own base, and so on).
        var depth: [String: Int] = [:], frontier = Set(batch.patches.map(\.base))
        for base in frontier { depth[base] = 0 }
        var origin = Dictionary(uniqueKeysWithValues: frontier.map { ($0, $0) })
        for level in 1...Self.maximumPatchDepth where !frontier.isEmpty {
            let below = try await database.chunkBases(accountId: device.accountId, hashes: Array(frontier))
            frontier = []
            for (made, base) in below {
                guard let start = origin[made] else { continue }
                depth[start] = level
                origin[base] = start
                frontier.insert(base)
            }
        }
        let batchBases = Set(batch.patches.map(\.hash))
        if let deep = batch.patches.first(where: { (depth[$0.base] ?? 0) >= Self.maximumPatchDepth || batchBases.contains($0.base) }) {
            throw SyncError(.conflict, "patchTooDeep", "the base of chunk \(deep.hash) is \(Self.maximumPatchDepth) sealed patches deep already (or in this batch): send the chunk whole")
        }
        try await receive(batch.patches.map { ChunkBatch.Chunk(hash: $0.hash, bytes: $0.middle) }, from: device, logger: logger, sealed: true,
                          bases: Dictionary(batch.patches.map { ($0.hash, $0.base) }) { first, _ in first })
    }

    /// The batch of patches a request's body holds (`POST /v1/chunks/patches`, sealed or not).
    /// - Throws: ``SyncError`` 400 `badBatch` for a body that is not one, or holds none.
    static func patchBatch(of request: Request) async throws -> ChunkPatchBatch {
        var body: [UInt8] = [] // (patches are small: a new array is fine)
        try await batchBody(of: request, framing: ChunkPatchBatch.framing, into: &body)
        let batch: ChunkPatchBatch
        do {
            batch = try ChunkPatchBatch(decoding: body, maximumChunkSize: Int(Validate.maximumChunkSize), maximumTotal: ChunkBatch.maximumBytes)
        } catch let error as ChunkPatchBatch.FormatError {
            throw SyncError.badRequest("badBatch", error.description)
        }
        guard !batch.patches.isEmpty else { throw SyncError.badRequest("badBatch", "the batch holds no patches") }
        return batch
    }
}

extension SyncServices {
    /// `POST /v1/chunks/bases`: which of the chunks asked for the server keeps as sealed
    /// patches, of which chunks, down to chunks kept whole (at most ``maximumPatchDepth``
    /// deep) — what a device publishing a link under Advanced names keys for.
    func addChunkBasesRoute(to chunks: RouterGroup<SyncContext>) {
        chunks.post("bases") { request, context in try await chunkBases(request, context: context, device: try context.requireDevice()) }
    }

    /// The answer to a ``ChunkBasesRequest`` of `device`'s (a device's, or a granted web page's).
    /// - Throws: ``SyncError`` 400 for more than 100,000 hashes or a malformed one, 404 for a
    ///   chunk the device may not read.
    func chunkBases(_ request: Request, context: SyncContext, device: DeviceAuth) async throws -> ChunkBasesResponse {
        let asked = try await request.decode(as: ChunkBasesRequest.self, context: context)
        guard asked.hashes.count <= 100_000 else { throw SyncError.badRequest("tooMany", "at most 100,000 hashes per request") }
        try await requireChunks(asked.hashes, of: device)
        return ChunkBasesResponse(bases: try await patchBases(of: asked.hashes, account: device.accountId))
    }

    /// Each of `hashes` the account keeps as a sealed patch, and each base found, mapped to its
    /// base — down to chunks kept whole (at most ``maximumPatchDepth`` deep).
    func patchBases(of hashes: [String], account: Int64) async throws -> [String: String] {
        var bases: [String: String] = [:], asking = Set(hashes), looked = Set<String>()
        for _ in 0...Self.maximumPatchDepth where !asking.isEmpty {
            let below = try await database.chunkBases(accountId: account, hashes: Array(asking))
            looked.formUnion(asking)
            bases.merge(below) { first, _ in first }
            asking = Set(below.values).subtracting(looked)
        }
        return bases
    }
}

extension ChunkBasesResponse: ResponseEncodable {}
