import AsyncHTTPClient
import CompressNIO
import Foundation
import UbiquityFiles
import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import UbiquityProtocol
import UbiquitySync
import UbiquityClient

/// A client of the sync server's protocol (docs/SyncProtocol.md), over AsyncHTTPClient: what
/// `ubiquity login` and the agent use. Every failure is a ``SyncClientError`` naming the server's
/// error code, or `unreachable` when there was no answer.
package struct SyncClient: Sendable {
    /// The server's base URL.
    package let server: URL
    /// The device token, once signed in.
    package let token: String?
    let http: HTTPClient
    /// How long a request may take (chunk transfers get four times as long).
    package var timeout: TimeAmount = .seconds(30)
    /// What this client (and its copies) sent and received.
    package let traffic = SyncTraffic()
    /// Whether the server said it takes gzip-compressed bodies (its answers' `Accept-Encoding`,
    /// RFC 7694): until it does, bodies go as they are.
    private let serverTakesGzip = Flag()
    /// JSON bodies smaller than this go as they are.
    static let compressionThreshold = 256
    /// Where each request is said at trace level (method, path, status, milliseconds, bytes).
    package var logger: Logger?

    /// The share this client reaches the server's items through (nil: the containers its
    /// requests name): see ``through(_:)``.
    package private(set) var share: ShareScope?

    /// A client of `server`, signed in with `token` if given.
    package init(server: URL, token: String? = nil, http: HTTPClient = SyncClient.defaultHTTPClient) {
        self.server = server
        self.token = token
        self.http = http
    }

    /// Registers this device with the account: the answer carries the device token.
    package func signIn(account: String, password: String, deviceName: String, containers: [String]? = nil) async throws -> SignInResponse {
        try await json(.POST, "v1/sign-in", body: SignInRequest(account: account, password: password, deviceName: deviceName, containers: containers))
    }

    /// Revokes this device's token.
    package func signOut() async throws {
        _ = try await send(.POST, "v1/sign-out", body: nil, expecting: [.noContent])
    }

    /// The account and device the token belongs to.
    package func account() async throws -> AccountResponse { try await json(.GET, "v1/account") }

    /// The items of `container` changed after `since`; `brief`: without their manifests (their
    /// tokens instead, ``ItemState/digest``); `inline`: with the bytes of flat files of at most
    /// that many bytes made by other devices (``ItemState/contents``).
    package func changes(container: String, since: Int64, brief: Bool = false, inline: Int = 0) async throws -> ChangesResponse {
        var page: ChangesResponse = try await json(.GET, itemsPath(container) + "/changes?since=\(since)" + (brief ? "&brief=true" : "") + (inline > 0 ? "&inline=\(inline)" : ""))
        if let share { page.items = page.items.map(share.seen) }
        return page
    }

    /// An item's present state with its manifest — or, given a revision the device has
    /// (`since`), for a file, its chunk list as a difference from that revision's
    /// (``ItemState/manifestDelta``) when the server can make one.
    package func item(container: String, id: String, since: String? = nil) async throws -> ItemState {
        let state: ItemState = try await json(.GET, itemsPath(container) + "/items/\(id)" + (since.map { "?since=\($0)" } ?? ""))
        return share?.seen(state) ?? state
    }

    /// Commits a change of an item, whose chunks were uploaded first (the server refuses, 409
    /// `missingChunks`, one naming chunks the account does not hold); `brief`: the answer's
    /// item without its manifest.
    package func commit(container: String, item: String, update: ItemUpdate, brief: Bool = false) async throws -> CommitResponse {
        try await json(.PUT, "v1/containers/\(container)/items/\(item)" + (brief ? "?brief=true" : ""), body: update)
    }

    /// Commits changes of many items in one request and one transaction (at most
    /// ``CommitBatchRequest/maximumCount``): one result per change, in order, each its
    /// commit's answer or the reason it was refused; `brief`: answers without manifests.
    /// `terse`: a commit that made its item exactly what its update said is answered by its
    /// revision and sequence alone (``CommitResult/committed``; a server that does not know
    /// the word answers in full). `patches`: chunks as patches, made by the server before the
    /// commits (``CommitBatchRequest/patches``).
    package func commit(container: String, batch: [ItemCommit], brief: Bool = false, terse: Bool = false, patches: ChunkPatchBatch? = nil) async throws -> [CommitResult] {
        let query = [brief ? "brief=true" : nil, terse ? "terse=true" : nil].compactMap { $0 }.joined(separator: "&")
        var answer: CommitBatchResponse = try await json(.POST, itemsPath(container) + "/commits" + (query.isEmpty ? "" : "?" + query),
                                                         body: CommitBatchRequest(commits: batch, patches: patches.map { Data($0.encoded()) }))
        if let share {
            for index in answer.results.indices {
                if let item = answer.results[index].commit?.item { answer.results[index].commit?.item = share.seen(item) }
            }
        }
        guard answer.results.count == batch.count else {
            throw SyncClientError(status: 200, code: "badAnswer", message: "the server answered \(answer.results.count) results for \(batch.count) commits")
        }
        return answer.results
    }

    /// Several items' present states with their manifests (at most
    /// ``ItemsFetchRequest/maximumCount``); unknown ids are left out.
    package func items(container: String, ids: [String]) async throws -> [ItemState] {
        let answer: ItemsResponse = try await json(.POST, itemsPath(container) + "/fetch", body: ItemsFetchRequest(ids: ids))
        return share.map { answer.items.map($0.seen) } ?? answer.items
    }

    /// An item's earlier revisions the server keeps, newest first.
    package func revisions(container: String, item: String) async throws -> [ItemRevision] {
        let answer: ItemRevisionsResponse = try await json(.GET, itemsPath(container) + "/items/\(item)/revisions")
        return answer.revisions
    }

    /// One revision of an item with its manifest, to download it.
    package func revision(container: String, item: String, revision: String) async throws -> RevisionContentsResponse {
        try await json(.GET, itemsPath(container) + "/items/\(item)/revisions/\(revision)")
    }

    /// Publishes an item's current revision: a link anyone can download it from — under
    /// Advanced, with the manifest this device sealed for the link's page (`request`).
    package func publish(container: String, item: String, request: PublishRequest = PublishRequest()) async throws -> PublishedLink {
        try refusedThroughShare("publishing a link")
        return try await json(.POST, "v1/containers/\(container)/items/\(item)/links", body: request)
    }

    /// Which of `hashes` the server keeps as sealed patches, of which chunks (down to chunks
    /// kept whole).
    package func chunkBases(_ hashes: [String]) async throws -> [String: String] {
        var bases: [String: String] = [:]
        if share != nil { return bases } // (sealed patches are not kept through a share)
        for start in stride(from: 0, to: hashes.count, by: 50_000) {
            let answer: ChunkBasesResponse = try await json(.POST, "v1/chunks/bases", body: ChunkBasesRequest(hashes: Array(hashes[start..<min(start + 50_000, hashes.count)])))
            bases.merge(answer.bases) { first, _ in first }
        }
        return bases
    }

    /// Keeps one revision of an item and removes conflict versions.
    package func resolve(container: String, item: String, keep: String, remove: [String]) async throws -> ItemState {
        let state: ItemState = try await json(.POST, itemsPath(container) + "/items/\(item)/resolve", body: ResolveRequest(keep: keep, remove: remove))
        return share?.seen(state) ?? state
    }

    /// Key-value store `store`'s keys changed after sequence `since` (0: all of them).
    package func keyValues(store: String, since: Int64) async throws -> KeyValueResponse {
        try await json(.GET, "v1/kv/\(store)?since=\(since)")
    }

    /// Applies key-value changes (all or none; the most recent timestamp wins per key); the
    /// answer has the named keys as they are now.
    package func applyKeyValues(store: String, changes: [KeyValueChange]) async throws -> KeyValueResponse {
        try await json(.POST, "v1/kv/\(store)", body: KeyValueUpdate(changes: changes))
    }

    /// Which of `hashes` the server lacks.
    package func missingChunks(_ hashes: [String]) async throws -> [String] {
        let answer: MissingChunksResponse = try await json(.POST, chunksPath + "/missing", body: MissingChunksRequest(hashes: hashes))
        return answer.missing
    }

    /// Uploads one chunk (the server checks it against its hash).
    package func upload(_ bytes: [UInt8], hash: String) async throws {
        try refusedThroughShare("sending one chunk alone")
        _ = try await send(.PUT, "v1/chunks/\(hash)", raw: bytes, expecting: [.created], timeout: timeout * 4)
    }

    /// Uploads several chunks in one request (``ChunkBatch``; at most
    /// ``ChunkBatch/maximumBytes`` of chunks, or one larger chunk); the server checks each
    /// against its hash and keeps all or none.
    package func upload(_ batch: ChunkBatch) async throws {
        _ = try await send(.POST, chunksPath, raw: batch.encoded(), expecting: [.created], timeout: timeout * 4)
    }

    /// Uploads a ``ChunkBatch`` already written as a body (framing and bytes, as
    /// ``ChunkBatch/encoded()`` writes them): large uploads read their chunks straight into it.
    /// `sealed`: the chunks are sealed (an account whose devices hold its keys; the server
    /// keeps them as they come, with a SHA-256 of each to find damage by).
    package func upload(batchBody: ByteBuffer, sealed: Bool = false) async throws {
        _ = try await send(.POST, sealed ? chunksPath + "?sealed=1" : chunksPath, payload: batchBody, expecting: [.created], timeout: timeout * 4)
    }

    /// Downloads chunks, in the order asked, each checked against its hash: the server answers
    /// with as many as fit in one batch, and this asks again for the rest.
    /// `codec`: how the chunks are checked (and opened, when sealed).
    package func download(_ hashes: [String], codec: ChunkCodec = .plain) async throws -> [ChunkBatch.Chunk] {
        var chunks: [String: [UInt8]] = [:]
        _ = try await download(hashes, codec: codec) { hash, bytes in chunks[hash] = Array(bytes) }
        // (In the order asked: a chunk made from a sealed patch is handed on after its batch.)
        return hashes.compactMap { hash in chunks[hash].map { ChunkBatch.Chunk(hash: hash, bytes: $0) } }
    }

    /// Downloads chunks, in the order asked, handing each to `each` once checked against its
    /// hash, as its batch arrives (the bytes are valid only during the call: nothing is copied
    /// out of the answer). The answers are gathered in `accumulation` (cleared first), which
    /// comes back to be used again. Sealed chunks (`codec`) are opened and checked against
    /// their names first; `each` gets their plaintext.
    /// - Throws: ``SyncClientError`` (`hashMismatch` for a damaged chunk — or, sealed, one that
    ///   does not open as the chunk asked for — `badAnswer` for a body that is not a batch of
    ///   what was asked), or what `each` throws.
    ///
    /// A chunk the server keeps as a sealed patch of another (a device that holds the keys asks
    /// for them as stored) is made from the chunk the patch changes — this device's own copy
    /// when `localBase` gives it, else fetched the same way, at most
    /// ``maximumPatchDepth`` patches down — and checked against its name like any other.
    package func download(_ hashes: [String], codec: ChunkCodec = .plain, accumulation: consuming ByteBuffer = ByteBuffer(),
                          localBase: (String) -> [UInt8]? = { _ in nil }, depth: Int = 0,
                          each: (String, UnsafeRawBufferPointer) throws -> Void) async throws -> ByteBuffer {
        // Handed on, never copied, so that clearing it reuses its memory.
        var spare: ByteBuffer? = consume accumulation, received = 0
        while received < hashes.count {
            let asked = Array(hashes[received..<min(hashes.count, received + ChunkBatch.maximumCount)])
            var basesHeader: String?
            let answer = try await send(.POST, chunksPath + "/fetch",
                                        payload: ByteBuffer(bytes: try JSONEncoder().encode(ChunkFetchRequest(hashes: asked, patches: codec.opensSealed ? true : nil))),
                                        expecting: [.ok], timeout: timeout * 4, json: true, accumulation: spare.take(),
                                        headers: { basesHeader = $0.first(name: ChunkFetchRequest.basesHeader) })
            var bases: [String: String] = [:]
            if let basesHeader {
                guard codec.opensSealed, let named = ChunkFetchRequest.bases(inHeader: basesHeader), named.count <= ChunkFetchRequest.maximumPatchesPerAnswer else {
                    throw SyncClientError(status: 200, code: "badAnswer", message: "the server named the bases of sealed patches in a way the protocol does not say")
                }
                bases = named
            }
            var patches: [(hash: String, base: String, body: Data)] = []
            let count = try answer.withUnsafeReadableBytes { body in
                let frames: [ChunkBatch.Frame]
                do {
                    frames = try ChunkBatch.frames(in: body, maximumChunkSize: Self.maximumAnswerBytes)
                } catch {
                    throw SyncClientError(status: 200, code: "badAnswer", message: "the server's chunk batch is not what the protocol says: \(error)")
                }
                guard !frames.isEmpty, frames.count <= asked.count else {
                    throw SyncClientError(status: 200, code: "badAnswer", message: "the server answered \(frames.count) chunks for \(asked.count) asked")
                }
                for (frame, hash) in zip(frames, asked) {
                    let bytes = UnsafeRawBufferPointer(rebasing: body[frame.bytes])
                    guard frame.hash == hash else {
                        throw SyncClientError(status: 200, code: "hashMismatch", message: "the server answered chunk \(frame.hash) for \(hash)")
                    }
                    if let base = bases[hash] {
                        patches.append((hash, base, Data(bytes))) // made once the batch is read (its base may have to be fetched)
                        continue
                    }
                    // A sealing device opens first; a plaintext one checks the hash first (no copy)
                    // and opens only what does not hash to its name, if it holds the keys.
                    if !codec.sealed, ContentChunker.hash(bytes) == hash {
                        try each(hash, bytes)
                    } else if codec.opensSealed {
                        let plaintext: Data
                        do {
                            plaintext = try codec.open(bytes, as: hash)
                        } catch {
                            throw SyncClientError(status: 200, code: "hashMismatch", message: "chunk \(hash) arrived damaged or is not the chunk asked for: \((error as? ChunkCodecError)?.reason ?? "\(error)")")
                        }
                        try plaintext.withUnsafeBytes { try each(hash, $0) }
                    } else {
                        throw SyncClientError(status: 200, code: "hashMismatch", message: "chunk \(hash) arrived damaged")
                    }
                }
                return frames.count
            }
            for patch in patches { try await made(patch.hash, from: patch.body, base: patch.base, codec: codec, localBase: localBase, depth: depth, each: each) }
            received += count
            spare = answer
        }
        return spare ?? ByteBuffer()
    }

    /// How many sealed patches down a chunk is made (its base made from a patch, and so on).
    static let maximumPatchDepth = 8

    /// Makes chunk `hash` from its sealed patch `body` and the chunk `base` (this device's copy,
    /// else fetched), checks it against its name and hands it to `each`.
    /// - Throws: ``SyncClientError`` `hashMismatch` when the patch does not open or does not make
    ///   the chunk named; what fetching the base throws.
    private func made(_ hash: String, from body: Data, base: String, codec: ChunkCodec, localBase: (String) -> [UInt8]?, depth: Int,
                      each: (String, UnsafeRawBufferPointer) throws -> Void) async throws {
        guard depth < Self.maximumPatchDepth else {
            throw SyncClientError(status: 200, code: "hashMismatch", message: "chunk \(hash) is more than \(Self.maximumPatchDepth) sealed patches deep")
        }
        let patch: PatchBody
        do {
            let opened = try body.withUnsafeBytes { try codec.openPatch($0, making: hash, from: base) }
            guard let decoded = PatchBody(decoding: opened) else { throw ChunkCodecError(name: hash, reason: "its patch is too short") }
            patch = decoded
        } catch {
            throw SyncClientError(status: 200, code: "hashMismatch", message: "the sealed patch of chunk \(hash) arrived damaged or is not the one asked for: \((error as? ChunkCodecError)?.reason ?? "\(error)")")
        }
        var baseBytes = localBase(base)
        if baseBytes == nil {
            _ = try await download([base], codec: codec, localBase: localBase, depth: depth + 1) { _, bytes in baseBytes = Array(bytes) }
        }
        guard let baseBytes, let made = baseBytes.withUnsafeBytes({ patch.applied(to: $0) }), made.withUnsafeBytes({ codec.recognises($0, as: hash) }) else {
            throw SyncClientError(status: 200, code: "hashMismatch", message: "the sealed patch of chunk \(hash) does not make that chunk from chunk \(base)")
        }
        try made.withUnsafeBytes { try each(hash, $0) }
    }

    /// Uploads sealed patches: each chunk as its device sealed a patch of the chunk named as its
    /// base (``ChunkCodec/sealPatch(_:making:from:)``), which the server keeps in its place.
    /// - Throws: ``SyncClientError``: 404 for a base the server lacks, 409 `patchTooDeep`.
    package func upload(sealedPatches: [(hash: String, base: String, body: Data)]) async throws {
        try refusedThroughShare("sending sealed patches")
        let batch = ChunkPatchBatch(sealedPatches.map { ChunkPatch(hash: $0.hash, base: $0.base, prefix: 0, suffix: 0, middle: [UInt8]($0.body)) })
        _ = try await send(.POST, "v1/chunks/patches?sealed=1", raw: batch.encoded(), expecting: [.created], timeout: timeout * 4)
    }

    /// The block signatures of chunks the server has, in the order asked (asking again while
    /// the server answers fewer than asked).
    package func signatures(of hashes: [String]) async throws -> [ChunkSignature] {
        try refusedThroughShare("asking for chunks' signatures")
        var signatures: [ChunkSignature] = []
        while signatures.count < hashes.count {
            let asked = Array(hashes[signatures.count..<min(hashes.count, signatures.count + ChunkSignaturesRequest.maximumCount)])
            let answer: ChunkSignaturesResponse = try await json(.POST, "v1/chunks/signatures", body: ChunkSignaturesRequest(hashes: asked))
            guard !answer.signatures.isEmpty, answer.signatures.count <= asked.count, zip(answer.signatures, asked).allSatisfy({ $0.hash == $1 }) else {
                throw SyncClientError(status: 200, code: "badAnswer", message: "the server answered \(answer.signatures.count) signatures for \(asked.count) asked, not in order")
            }
            signatures += answer.signatures
        }
        return signatures
    }

    /// Uploads chunks as patches of chunks the server has (``ChunkPatchBatch``); the server
    /// makes each, checks it against its hash, and keeps all or none.
    package func upload(_ patches: ChunkPatchBatch) async throws {
        try refusedThroughShare("sending patches")
        _ = try await send(.POST, "v1/chunks/patches", raw: patches.encoded(), expecting: [.created], timeout: timeout * 4)
    }

    /// Downloads chunks as patches of chunks this side has, in the order asked (asking again for
    /// the rest). Unchecked: apply each with ``ChunkPatch/made(from:)``, which checks the result.
    package func downloadPatches(_ wanted: [ChunkPatchRequest.Wanted]) async throws -> [ChunkPatch] {
        try refusedThroughShare("asking for patches")
        var patches: [ChunkPatch] = []
        while patches.count < wanted.count {
            let asked = Array(wanted[patches.count..<min(wanted.count, patches.count + ChunkBatch.maximumCount)])
            let body = try await send(.POST, "v1/chunks/patches/fetch", raw: try JSONEncoder().encode(ChunkPatchRequest(patches: asked)).map { $0 },
                                      expecting: [.ok], timeout: timeout * 4, json: true)
            let batch: ChunkPatchBatch
            do {
                batch = try ChunkPatchBatch(decoding: Array(buffer: body), maximumChunkSize: 64 << 20, maximumTotal: 64 << 20)
            } catch {
                throw SyncClientError(status: 200, code: "badAnswer", message: "the server's patches are not what the protocol says: \(error)")
            }
            guard !batch.patches.isEmpty, batch.patches.count <= asked.count,
                  zip(batch.patches, asked).allSatisfy({ $0.hash == $1.hash && $0.base == $1.base }) else {
                throw SyncClientError(status: 200, code: "badAnswer", message: "the server answered \(batch.patches.count) patches for \(asked.count) asked, not in order")
            }
            patches += batch.patches
        }
        return patches
    }

    /// Downloads one chunk.
    package func download(_ hash: String) async throws -> [UInt8] {
        try refusedThroughShare("fetching one chunk alone")
        let body = try await send(.GET, "v1/chunks/\(hash)", raw: nil, expecting: [.ok], timeout: timeout * 4)
        return Array(buffer: body)
    }

    /// This client reaching the server's items of one share, `scope`, instead of its containers'
    /// (`/v1/shares/ID/…`, docs/Sharing.md): the same requests, answered for what is inside the
    /// share; the share's top item shown under the name ``ShareScope/name`` this device gives it.
    /// What a share does not carry (links, patches, signed commits) is refused here, unsent.
    package func through(_ scope: ShareScope) -> SyncClient {
        var client = self
        client.share = scope
        return client
    }

    /// Where a container's items are reached: through the share, if this client is for one.
    private func itemsPath(_ container: String) -> String {
        share.map { "v1/shares/\($0.id)" } ?? "v1/containers/\(container)"
    }

    /// Where chunks are sent and fetched: through the share, if this client is for one.
    private var chunksPath: String {
        share.map { "v1/shares/\($0.id)/chunks" } ?? "v1/chunks"
    }

    /// Refuses, unsent, what a share does not carry (the callers fall back: whole chunks).
    func refusedThroughShare(_ what: String) throws {
        if share != nil { throw SyncClientError(status: 400, code: "notThroughShare", message: "\(what) is not done through a share") }
    }

    /// The process's HTTP client: a server that refuses connections is reported after 5 s of
    /// retrying (AsyncHTTPClient's default would retry until the request's whole deadline).
    package static let defaultHTTPClient: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.timeout = .init(connect: .seconds(5), read: .seconds(120))
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    // MARK: Requests

    func json<Answer: Decodable>(_ method: HTTPMethod, _ path: String) async throws -> Answer {
        try await json(method, path, body: Optional<SignInRequest>.none)
    }

    func json<Answer: Decodable, Body: Encodable>(_ method: HTTPMethod, _ path: String, body: Body?) async throws -> Answer {
        let bytes = try await send(method, path, body: body.map { try JSONEncoder().encode($0) }, expecting: [.ok])
        do {
            return try JSONDecoder().decode(Answer.self, from: Data(bytes.readableBytesView))
        } catch {
            throw SyncClientError(status: 200, code: "badAnswer", message: "the server's answer to \(method) /\(path) is not what the protocol says: \(error)")
        }
    }

    func send(_ method: HTTPMethod, _ path: String, body: Data?, expecting: Set<HTTPResponseStatus>) async throws -> ByteBuffer {
        try await send(method, path, raw: body.map { [UInt8]($0) }, expecting: expecting, timeout: timeout, json: body != nil)
    }

    /// The longest answer body taken (a chunk batch is at most 16 MiB of chunks).
    static let maximumAnswerBytes = 64 << 20

    /// How JSON bodies are compressed: zlib's fastest level — chunk lists and hashes are most
    /// of a large body, and the higher levels shrink them by 2% more for three times the CPU.
    static let gzip = CompressionAlgorithm.gzip(configuration: .init(compressionLevel: .fastestCompression))

    func send(_ method: HTTPMethod, _ path: String, raw: [UInt8]?, expecting: Set<HTTPResponseStatus>, timeout: TimeAmount, json: Bool = false) async throws -> ByteBuffer {
        try await send(method, path, payload: raw.map { ByteBuffer(bytes: $0) }, expecting: expecting, timeout: timeout, json: json)
    }

    /// Sends a request and answers its body (at most 64 MiB). `accumulation`, when given, is
    /// where the body is gathered (cleared first; a buffer of an earlier answer, so a large
    /// transfer does not ask for new memory for every answer).
    func send(_ method: HTTPMethod, _ path: String, payload body: ByteBuffer?, expecting: Set<HTTPResponseStatus>, timeout: TimeAmount, json: Bool = false,
              accumulation: consuming ByteBuffer? = nil, headers: (HTTPHeaders) -> Void = { _ in }) async throws -> ByteBuffer {
        var request = HTTPClientRequest(url: server.absoluteString.trimmingCharacters(in: CharacterSet(charactersIn: "/")) + "/" + path)
        request.method = method
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        request.headers.add(name: "Accept-Encoding", value: "gzip")
        var payload = body
        if let body {
            request.headers.add(name: "Content-Type", value: json ? "application/json" : "application/octet-stream")
            if json, body.readableBytes >= Self.compressionThreshold, serverTakesGzip.isSet, let compressed = try? payload?.compress(with: Self.gzip) { // not compressed: sent as it is
                // (Compressing memory cannot fail but for lack of memory: then it goes as it is.)
                payload = compressed
                request.headers.add(name: "Content-Encoding", value: "gzip")
            }
            request.body = .bytes(payload ?? ByteBuffer())
        }
        let response: HTTPClientResponse
        var body: ByteBuffer
        let started = ContinuousClock.now
        defer {
            if let logger, logger.logLevel <= .trace {
                logger.trace("request", metadata: ["method": "\(method)", "path": "\(path.prefix(80))", "ms": "\((ContinuousClock.now - started).inMilliseconds)",
                                                   "sent": "\(payload?.readableBytes ?? 0)"])
            }
        }
        do {
            response = try await http.execute(request, timeout: timeout)
            if var gathered = accumulation.take() { // its only reference: cleared in place
                gathered.clear()
                try await response.body.collect(upTo: Self.maximumAnswerBytes, into: &gathered)
                body = gathered
            } else {
                body = try await response.body.collect(upTo: Self.maximumAnswerBytes)
            }
            let wireBody = body.readableBytes
            // HTTP/1.1 as on the wire: request line, headers (ours and the client's Host,
            // Content-Length), body; status line, headers, body.
            let host = (server.host ?? "").utf8.count + 12
            let sent = method.rawValue.utf8.count + path.utf8.count + 13 + host + (payload.map { "\($0.readableBytes)".utf8.count + 18 + $0.readableBytes } ?? 0)
                + request.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 4 } + 2
            let received = 17 + response.status.reasonPhrase.utf8.count + response.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 4 } + 2
                + wireBody
            traffic.count(sent: sent, received: received)
        } catch {
            throw SyncClientError(status: 0, code: "unreachable", message: "no answer from \(server.absoluteString): \(error)")
        }
        if response.headers["Accept-Encoding"].contains(where: { $0.lowercased().contains("gzip") }) { serverTakesGzip.set() }
        if response.headers["Content-Encoding"].contains(where: { $0.lowercased() == "gzip" }) {
            do {
                body = try body.decompress(with: .gzip(), maxSize: Self.maximumAnswerBytes)
            } catch {
                throw SyncClientError(status: Int(response.status.code), code: "badAnswer", message: "the server's answer to \(method) /\(path) is not valid gzip: \(error)")
            }
        }
        guard expecting.contains(response.status) else {
            let shaped = try? JSONDecoder().decode(ErrorResponse.self, from: Data(body.readableBytesView)) // not the server's shape: the status and body are reported
            throw SyncClientError(status: Int(response.status.code), code: shaped?.error.code ?? "http\(response.status.code)",
                                  message: shaped?.error.message ?? "\(method) /\(path): \(response.status)")
        }
        headers(response.headers)
        return body
    }
}

/// A fact learnt once, shared between copies and threads (a client's copies, a server's event
/// loops): false until set, then true for good.
final class Flag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .acquiring) }
    func set() { value.store(true, ordering: .releasing) }
}

/// Bytes a ``SyncClient`` exchanged with the server: HTTP/1.1 requests and answers as they go
/// over the connection (headers included), for `ubiquity status` and the benchmark.
package final class SyncTraffic: Sendable {
    /// The totals so far.
    package struct Totals: Sendable, Equatable {
        /// Requests made.
        package var requests = 0
        /// Bytes sent.
        package var sent = 0
        /// Bytes received.
        package var received = 0
        /// Both ways.
        package var total: Int { sent + received }
    }

    private let totals = Mutex(Totals())

    /// Nothing counted yet.
    package init() {}

    /// The totals so far.
    package var snapshot: Totals { totals.withLock { $0 } }

    func count(sent: Int, received: Int) {
        totals.withLock {
            $0.requests += 1
            $0.sent += sent
            $0.received += received
        }
    }
}

/// A request the server refused or did not answer.
package struct SyncClientError: Error, CustomStringConvertible, Equatable {
    /// The HTTP status (0: no answer).
    package var status: Int
    /// The server's error code (`signInFailed`, `quotaExceeded`, …) or `unreachable`.
    package var code: String
    /// What the server said.
    package var message: String

    /// The message, with its code.
    package var description: String { "\(message) (\(code))" }
}

extension SyncClient {
    /// Registers this device with the account and saves its credentials (token 0600) under
    /// `paths`: what `ubiquity login` does.
    @discardableResult
    package func signIn(account: String, password: String, deviceName: String, savingTo paths: UbiquityPaths) async throws -> UbiquityCredentials {
        let answer = try await signIn(account: account, password: password, deviceName: deviceName)
        let credentials = UbiquityCredentials(server: server, account: account, deviceId: answer.deviceId, deviceName: deviceName,
                                              token: answer.token, identityToken: answer.identityToken)
        try credentials.save(to: paths)
        return credentials
    }
}

// Signed commits (issue 45, docs/Encryption.md "Signed commits").
extension SyncClient {
    /// Sends this device's signed commits of `container` (oldest first, at most
    /// ``SignedCommitsRequest/maximumCount``): where the server keeps each.
    package func sendSignedCommits(container: String, _ commits: [SignedCommitUpload]) async throws -> [Int64] {
        try refusedThroughShare("sending signed commits")
        let answer: SignedCommitsResponse = try await json(.POST, "v1/containers/\(container)/signed-commits", body: SignedCommitsRequest(commits: commits))
        guard answer.positions.count == commits.count else {
            throw SyncClientError(status: 200, code: "badAnswer", message: "the server answered \(answer.positions.count) places for \(commits.count) commits")
        }
        return answer.positions
    }

    /// The container's signed commits after place `position`, in the order they came.
    package func signedCommits(container: String, after position: Int64) async throws -> SignedCommitsPage {
        try refusedThroughShare("reading signed commits")
        return try await json(.GET, "v1/containers/\(container)/signed-commits?after=\(position)")
    }
}
