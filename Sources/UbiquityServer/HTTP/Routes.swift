import Foundation
import Logging
import UbiquityProtocol
import UbiquitySync
import HTTPTypes
import Hummingbird
import HummingbirdBcrypt
import HummingbirdWebSocket

extension SignInResponse: ResponseEncodable {}
extension ItemState: ResponseEncodable {}
extension CommitResponse: ResponseEncodable {}
extension CommitBatchResponse: ResponseEncodable {}
extension ItemsResponse: ResponseEncodable {}
extension ChangesResponse: ResponseEncodable {}
extension MissingChunksResponse: ResponseEncodable {}
extension ChunkSignaturesResponse: ResponseEncodable {}
extension KeyValueResponse: ResponseEncodable {}
extension AccountResponse: ResponseEncodable {}
extension ItemRevisionsResponse: ResponseEncodable {}
extension RevisionContentsResponse: ResponseEncodable {}

/// What every route needs.
struct SyncServices: Sendable {
    let database: any SyncDatabase
    var chunks: any ChunkStorage
    let metrics: ServerMetrics
    let notifier: ChangeNotifier
    let signIns: SignInGuard
    /// What an account may hold besides its quota.
    var accountLimits = AccountLimits()
    /// How long revisions no longer current are kept (and listed as versions).
    var retention: TimeInterval = SyncServer.defaultRetention
    /// Each account's share of the requests handled at once.
    var share = AccountShare()
    /// The limits on the invitations to shares one account makes (docs/Sharing.md).
    var invitationLimits = InvitationLimits()
    /// Whether items sealed with their account's keys may be shared (sealed with the share's
    /// keys by the owner's devices: docs/Sharing.md, "Keys"); off only by `--no-sealed-shares`.
    var sealedShares = true
    /// When devices were last heard from.
    var sightings = DeviceSightings()
    /// How often an address may open published links.
    var links = LinkThrottle()
    /// How often an address may fetch the chunks of links' pages (one request per chunk).
    var linkChunks = LinkThrottle(limit: LinkThrottle.chunksPerMinute)
    /// The arrays chunk batches are gathered into.
    var bodies = BatchBodies()
    /// Fetches of the same chunks at once, sharing one read.
    var fetches = SharedFetches()
    /// Chunks of uploads in progress as they land, for devices fetching ahead (issue 48).
    var landing = LandingChunks()
    /// How long a fetch of what is there waits for the next chunk to land.
    var landingWait: Duration = .seconds(2)
    /// The server's escrow key (nil: none; devices then let new devices in themselves).
    var escrow: ServerEscrow?
    /// What the web pages read from sealed records before (Standard only; in memory).
    var openedRecords = OpenedRecordCache()
    /// What every commit reads of its account and seldom changes, per generation (in memory).
    var accountFacts = AccountFacts()
}

/// `GET /health`.
struct HealthResponse: Codable, ResponseEncodable {
    var status: String
}

extension SyncServices {
    func addRoutes(to router: Router<SyncContext>) {
        router.get("health") { _, _ in
            try await database.ping() // 503 databaseUnavailable when it does not answer
            return HealthResponse(status: "ok")
        }
        // What load balancers and uptime checks often ask.
        router.head("health") { _, _ -> HTTPResponse.Status in
            try await database.ping()
            return .ok
        }
        router.get("metrics") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(string: metrics.exposition())))
        }

        let v1 = router.group("v1")
        addKeyRoutes(to: v1)
        v1.post("sign-in") { request, context in try await signIn(request, context) }
        v1.get("account") { _, context in
            let device = try context.requireDevice()
            guard let identity = try await database.identityToken(ofAccount: device.accountId) else { throw SyncError.unauthorized }
            let usage = try await database.usage(ofAccount: device.accountId)
            return AccountResponse(identityToken: identity, deviceId: device.deviceId, deviceName: device.deviceName, usedBytes: usage.used, quotaBytes: usage.quota,
                                   usage: AccountUsage(chunkBytes: usage.chunkBytes, keyValueBytes: usage.keyValueBytes, metadataBytes: usage.metadataBytes,
                                                       pendingBytes: usage.pendingBytes, items: usage.items))
        }
        addContainerListRoute(to: v1)
        // Signing out: the calling device's token stops working (`ubiquity logout`).
        v1.post("sign-out") { _, context -> HTTPResponse.Status in
            let device = try context.requireDevice()
            _ = try await database.revokeDevice(id: device.deviceId)
            notifier.disconnect([device.deviceId])
            return .noContent
        }

        // Push: "container C is now at sequence N", as JSON text messages, for as long as the
        // device stays connected.
        v1.ws("push", shouldUpgrade: { _, context in
            _ = try context.requireDevice()
            return .upgrade([:])
        }, onUpgrade: { inbound, outbound, context in
            guard let device = context.requestContext.device else { return }
            // `pages=gzip`: small commits' changes come along, as gzip-compressed binary
            // messages; `inline=N`: with small files' bytes of at most N bytes.
            let query = context.request.uri.queryParameters
            let inline = query["inline"].flatMap { Int($0) }.map { min(max($0, 0), ItemUpdate.maximumInlineBytes) } ?? 0
            let (id, events) = notifier.subscribe(device, pages: query["pages"] == "gzip", inline: inline)
            defer { notifier.unsubscribe(id) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for try await _ in inbound {} // until the device closes
                }
                group.addTask {
                    try await outbound.write(.text(PushMailbox.message(.connected)))
                    var pacer = PushPacer()
                    while let waiting = await events.next(pacedBy: &pacer, pace: notifier.pace(forAccount: device.accountId)) {
                        for delivery in waiting {
                            if let page = delivery.page {
                                try await outbound.write(.binary(ByteBuffer(bytes: page)))
                            } else {
                                try await outbound.write(.text(delivery.text))
                            }
                        }
                    }
                    // The stream ended: the device was revoked or signed out.
                    try await outbound.close(.policyViolation, reason: "signed out")
                }
                try await group.next()
                group.cancelAll()
            }
        })

        let containers = v1.group("containers/:container")
        addSignedCommitRoutes(to: containers)
        addIncomingRoutes(to: containers)
        containers.get("changes") { request, context in
            let container = try context.parameters.require("container")
            let device = try context.requireDevice(for: container)
            let since = try Self.integer(request.uri.queryParameters["since"], name: "since", default: 0)
            let limit = try Self.integer(request.uri.queryParameters["limit"], name: "limit", default: 500)
            guard since >= 0, (1...5_000).contains(limit) else { throw SyncError.badRequest("invalidCursor", "since must be ≥ 0 and limit 1 to 5000") }
            // `inline=N`: small files' bytes come with the page.
            let inline = try Self.integer(request.uri.queryParameters["inline"], name: "inline", default: 0)
            guard (0...Int64(ItemUpdate.maximumInlineBytes)).contains(inline) else {
                throw SyncError.badRequest("invalidInline", "inline must be 0 to \(ItemUpdate.maximumInlineBytes) bytes")
            }
            var page = try await database.changes(accountId: device.accountId, container: container, since: since, limit: Int(limit), brief: Self.brief(request))
            if inline > 0 { try await self.inline(&page, upTo: Int(inline), container: container, for: device) }
            return page
        }
        containers.get("items/:item") { request, context in
            let (device, container, item) = try Self.itemAddress(context)
            let since = request.uri.queryParameters["since"].map(String.init)
            // With `since` the manifest is needed (for the difference).
            guard var state = try await database.item(accountId: device.accountId, container: container, id: item, brief: since == nil && Self.brief(request)) else {
                throw SyncError.notFound
            }
            // A device that has an earlier revision gets the chunk list as a difference from it.
            if let since, state.kind == .file, !state.deleted {
                try Validate.identifier(since, field: "since")
                if let base = try await database.revisionManifest(accountId: device.accountId, container: container, item: item, revision: since),
                   base.kind == .file {
                    let delta = ChunkListDelta(from: base.manifest.chunks ?? [], to: state.manifest.chunks ?? [])
                    state = Self.brief(state)
                    state.manifestDelta = delta
                    state.deltaBase = since
                }
            }
            return Self.brief(request) ? Self.brief(state) : state
        }
        // An item's earlier revisions the server keeps: the versions of it that are not on the
        // device (NSFileVersion's nonlocal versions), newest first.
        containers.get("items/:item/revisions") { _, context in
            let (device, container, item) = try Self.itemAddress(context)
            guard let revisions = try await database.itemRevisions(accountId: device.accountId, container: container, item: item,
                                                                   since: Date().timeIntervalSince1970 - retention,
                                                                   limit: ItemRevisionsResponse.maximumCount) else {
                throw SyncError.notFound
            }
            return ItemRevisionsResponse(revisions: revisions)
        }
        // One revision's manifest, to download that version (its chunks come as any others).
        containers.get("items/:item/revisions/:revision") { _, context in
            let (device, container, item) = try Self.itemAddress(context)
            let revision = try context.parameters.require("revision")
            try Validate.identifier(revision, field: "revision")
            guard let contents = try await database.revisionContents(accountId: device.accountId, container: container, item: item, revision: revision) else {
                throw SyncError.notFound
            }
            return contents
        }
        containers.put("items/:item") { request, context in
            let (device, container, item) = try Self.itemAddress(context)
            let asked = try await request.decode(as: ItemUpdate.self, context: context)
            try await refusePlaintext([asked], of: device)
            var update = try await prepared(asked, of: item, in: container, for: device)
            let inline = try Self.inlineChunks(of: &update)
            if !inline.isEmpty { try await receive(inline, from: device, logger: context.logger, checked: true) } // checked as they were taken out; stored before the commit: complete when committed
            let tags = await nameTags(of: [(item, update)], device: device, container: container)
            let outcome = try await database.commit(accountId: device.accountId, container: container, itemId: item, update: update, device: device, now: Date(),
                                                    brief: Self.brief(request), limits: accountLimits, nameTags: tags[item])
            if !outcome.repeated { // a change sent again changed nothing: nothing to count or push
                metrics.count(.commits)
                notifier.publish(account: device.accountId, container: container, sequence: outcome.item.sequence, except: device.deviceId)
                await publishToParticipants(of: device.accountId, container: container, changed: [outcome.item], except: device.deviceId, acting: device, logger: context.logger)
            }
            return Self.answer(outcome, brief: Self.brief(request))
        }
        // Many items' present states (with their manifests) in one answer.
        containers.post("fetch") { request, context in
            let container = try context.parameters.require("container")
            let device = try context.requireDevice(for: container)
            let asked = try await request.decode(as: ItemsFetchRequest.self, context: context)
            guard (1...ItemsFetchRequest.maximumCount).contains(asked.ids.count) else {
                throw SyncError.badRequest("tooMany", "ask for 1 to \(ItemsFetchRequest.maximumCount) items at a time")
            }
            for id in asked.ids { try Validate.identifier(id, field: "item id") }
            return ItemsResponse(items: try await database.items(accountId: device.accountId, container: container, ids: asked.ids))
        }
        // Many items' updates in one transaction and one push (docs/SyncProtocol.md, "Commits in batches").
        containers.post("commits") { request, context in
            let container = try context.parameters.require("container")
            let device = try context.requireDevice(for: container)
            return try await commitBatch(request, context: context, container: container, device: device)
        }
        containers.post("items/:item/resolve") { request, context in
            let (device, container, item) = try Self.itemAddress(context)
            let resolution = try await request.decode(as: ResolveRequest.self, context: context)
            try Validate.identifier(resolution.keep, field: "keep")
            for removed in resolution.remove { try Validate.identifier(removed, field: "remove") }
            let state = try await database.resolve(accountId: device.accountId, container: container, itemId: item, request: resolution)
            notifier.publish(account: device.accountId, container: container, sequence: state.sequence)
            await publishToParticipants(of: device.accountId, container: container, changed: [state], except: nil, logger: context.logger)
            return state
        }

        addKeyValueRoutes(to: v1)
        addShareRoutes(to: v1)

        let chunks = v1.group("chunks")
        addChunkBasesRoute(to: chunks)
        chunks.post("missing") { request, context in
            let device = try context.requireDevice()
            let asked = try await request.decode(as: MissingChunksRequest.self, context: context)
            guard asked.hashes.count <= 100_000 else { throw SyncError.badRequest("tooMany", "at most 100,000 hashes per request") }
            for hash in asked.hashes { try Validate.hash(hash) }
            return MissingChunksResponse(missing: try await missingChunks(asked.hashes, of: device))
        }
        chunks.put(":hash") { request, context -> Response in
            let device = try context.requireDevice()
            try await receiveChunk(request, context: context, device: device, sealed: try await sealedUpload(request, device: device))
            return Response(status: .created)
        }
        // Many chunks in one body (docs/SyncProtocol.md, "Chunks in batches").
        chunks.post { request, context -> Response in try await receiveChunkBatch(request, context: context, device: try context.requireDevice()) }
        chunks.post("fetch") { request, context -> Response in try await fetchChunkBatch(request, context: context, device: try context.requireDevice()) }
        // Chunks as changes of chunks the account has (docs/SyncProtocol.md, "Chunk patches").
        chunks.post("signatures") { request, context in
            let device = try context.requireDevice()
            let asked = try await request.decode(as: ChunkSignaturesRequest.self, context: context)
            guard !asked.hashes.isEmpty, asked.hashes.count <= ChunkSignaturesRequest.maximumCount else {
                throw SyncError.badRequest("tooMany", "ask for 1 to \(ChunkSignaturesRequest.maximumCount) signatures at a time")
            }
            try await requireChunks(asked.hashes, of: device)
            // As many as 16 MiB of chunks make, in the order asked; the client asks again for the rest.
            var signatures: [ChunkSignature] = [], read = 0
            for hash in asked.hashes where signatures.isEmpty || read < ChunkBatch.maximumBytes {
                let bytes = try await loadChunk(hash, of: device)
                read += bytes.count
                signatures.append(ChunkSignature(of: bytes, hash: hash))
            }
            return ChunkSignaturesResponse(signatures: signatures)
        }
        chunks.post("patches") { request, context -> Response in
            let device = try context.requireDevice()
            if try await sealedUpload(request, device: device) {
                try await receiveSealedPatches(request, from: device, logger: context.logger)
                return Response(status: .created)
            }
            try await receivePatches(try await Self.patchBatch(of: request), from: device, logger: context.logger)
            return Response(status: .created)
        }
        chunks.post("patches/fetch") { request, context -> Response in
            let device = try context.requireDevice()
            let asked = try await request.decode(as: ChunkPatchRequest.self, context: context)
            guard !asked.patches.isEmpty, asked.patches.count <= ChunkBatch.maximumCount else {
                throw SyncError.badRequest("tooMany", "ask for 1 to \(ChunkBatch.maximumCount) patches at a time")
            }
            try await requireChunks(asked.patches.flatMap { [$0.hash, $0.base] }, of: device)
            // As many as 16 MiB of chunks and bases make, in the order asked; the client asks again for the rest.
            var batch = ChunkPatchBatch(), read = 0
            for wanted in asked.patches where batch.patches.isEmpty || read < ChunkBatch.maximumBytes {
                let target = try await loadChunk(wanted.hash, of: device), base = try await loadChunk(wanted.base, of: device)
                read += target.count + base.count
                batch.patches.append(ChunkPatch(making: target, hash: wanted.hash, from: base, baseHash: wanted.base))
            }
            return Response(status: .ok, headers: [.contentType: "application/octet-stream"], body: .init(byteBuffer: ByteBuffer(bytes: batch.encoded())))
        }
        chunks.get(":hash") { _, context -> Response in
            let device = try context.requireDevice()
            let hash = try context.parameters.require("hash")
            try await requireChunks([hash], of: device)
            if try await !database.chunkBases(accountId: device.accountId, hashes: [hash]).isEmpty {
                throw SyncError(.conflict, "storedAsPatch", "chunk \(hash) is stored as a sealed patch: fetch it with POST /v1/chunks/fetch and patches=true")
            }
            guard let data = try await self.chunks.load(hash: hash, account: device.accountId) else { throw SyncError.chunkNotFound }
            return Response(status: .ok, headers: [.contentType: "application/octet-stream"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
        }
    }

    /// An update as it will be committed: a chunk-list difference applied to its base
    /// revision's list, then every field checked.
    /// - Throws: ``SyncError`` `deltaBaseUnknown` (409) when the difference does not fit, or
    ///   the validation's errors.
    func prepared(_ update: ItemUpdate, of item: String, in container: String, for device: DeviceAuth) async throws -> ItemUpdate {
        var update = update
        if let delta = update.manifestDelta {
            // A file's chunk list as a difference from its base revision's.
            guard update.kind == .file, let base = update.baseRevision else {
                throw SyncError.badRequest("invalidManifest", "a manifest delta is for a file with a base revision")
            }
            try Validate.identifier(base, field: "baseRevision")
            guard let known = try await database.revisionManifest(accountId: device.accountId, container: container, item: item, revision: base),
                  known.kind == .file, let chunks = try? delta.apply(to: known.manifest.chunks ?? []) else { // a delta that does not fit: the whole list is sent
                throw SyncError(.conflict, "deltaBaseUnknown", "the delta does not fit revision \(base): send the whole manifest")
            }
            update.manifest = Manifest(chunks: chunks)
            update.manifestDelta = nil
        }
        try Validate.update(update)
        return update
    }

    /// Makes the chunks of plaintext `batch` from their bases (which the device must be able
    /// to read) and stores them, each checked against its hash.
    /// - Throws: 404 for a base the device cannot read, 400 `badPatch` for a patch that does not
    ///   apply, 413 when the bases read are more than four batches; the storing's errors.
    func receivePatches(_ batch: ChunkPatchBatch, from device: DeviceAuth, logger: Logger) async throws {
        try await requireChunks(batch.patches.map(\.base), of: device)
        // One base at a time; what is read for them is bounded too (a base may be large and named often).
        var made: [ChunkBatch.Chunk] = [], read = 0
        for patch in batch.patches {
            let base = try await loadChunk(patch.base, of: device)
            read += base.count
            guard read <= 4 * ChunkBatch.maximumBytes || made.isEmpty else {
                throw SyncError(.contentTooLarge, "batchTooLarge", "the patches' bases are more than \(4 * ChunkBatch.maximumBytes) bytes: send fewer at a time")
            }
            do {
                made.append(ChunkBatch.Chunk(hash: patch.hash, bytes: try patch.applied(to: base)))
            } catch let error as ChunkPatchBatch.FormatError {
                throw SyncError.badRequest("badPatch", error.description)
            }
        }
        try await receive(made, from: device, logger: logger) // each checked against its hash
    }

    /// The terse answer to a commit that made its item exactly what `update` said (`terse=true`):
    /// nil when anything differs, and the whole answer goes.
    static func committed(_ outcome: CommitOutcome, as update: ItemUpdate, by device: DeviceAuth) -> CommittedRevision? {
        let item = outcome.item
        guard outcome.isCurrent, item.revision == outcome.revision, outcome.missingChunks.isEmpty, item.uploaded, item.conflicts.isEmpty,
              !item.deleted, update.deleted != true, item.name == update.name, item.parent == update.parent, item.kind == update.kind,
              item.type == update.type, item.modificationDate == update.modificationDate || update.record != nil, item.record == update.record,
              item.deviceName == device.deviceName else { return nil }
        return CommittedRevision(revision: outcome.revision, sequence: item.sequence)
    }

    /// A commit's answer (brief: manifests left out).
    static func answer(_ outcome: CommitOutcome, brief: Bool) -> CommitResponse {
        CommitResponse(revision: outcome.revision, outcome: outcome.isCurrent ? "current" : "conflict",
                       item: brief ? Self.brief(outcome.item) : outcome.item, missingChunks: outcome.missingChunks)
    }

    /// Stores uploaded chunks: the quota checked once for those the account lacks (before any
    /// byte is written), the contents stored, then recorded in one transaction, which checks the
    /// quota again (another upload may have used the room meanwhile: then nothing is kept).
    /// Each chunk is checked against its hash, unless `checked`: the caller made the hashes
    /// from these bytes itself, or checked them against the names a moment ago.
    /// Stores chunks a device sent (`sealed`: an encrypted account's, not checked against their
    /// names — the server keeps the SHA-256 of their bytes instead).
    /// `bases`: chunks stored as sealed patches, with the chunk each changes.
    func receive(_ received: [ChunkBatch.Chunk], from device: DeviceAuth, logger: Logger, checked: Bool = false, sealed: Bool = false,
                 bases: [String: String] = [:]) async throws {
        for chunk in received { try Validate.hash(chunk.hash) }
        // Under Advanced Data Protection the server takes no plaintext: a device of an older
        // build, the web page, a patch or inline bytes the server would keep as they are.
        if !sealed, try await custody(ofAccount: device.accountId) == .advanced {
            throw SyncError(.conflict, "sealedOnly", "the account uses Advanced Data Protection: its devices seal every chunk (update this device's ubiquity)")
        }
        let lacking = Set(try await database.missingChunks(accountId: device.accountId, hashes: received.map(\.hash)))
        // Each chunk is checked against its hash once: those to store by the storage, the others
        // (ones the account has, repeats) here; one wrong chunk refuses the whole batch.
        var fresh: [ChunkBatch.Chunk] = [], seen = Set<String>()
        for chunk in received {
            if lacking.contains(chunk.hash) && seen.insert(chunk.hash).inserted {
                fresh.append(chunk)
            } else if !checked && !sealed {
                try FileChunkStore.verify(chunk.bytes, hash: chunk.hash)
            }
        }
        let adding = fresh.reduce(Int64(0)) { $0 + Int64($1.bytes.count) }
        if adding > 0 {
            // Before writing anything (chunks reserved by a commit are counted already: the
            // database's check, after writing, is the exact one).
            let usage = try await database.usage(ofAccount: device.accountId)
            guard usage.used - usage.pendingBytes + adding <= usage.quota else { throw SyncError.quotaExceeded(used: usage.used, quota: usage.quota, adding: adding) }
        }
        try await chunks.store(fresh, account: device.accountId, checked: checked, sealed: sealed)
        let recorded: ChunksRecorded
        do {
            recorded = try await database.chunksStored(accountId: device.accountId, chunks: received.map { StoredChunk(hash: $0.hash, size: Int64($0.bytes.count), base: bases[$0.hash]) }, now: Date())
        } catch let error as SyncError where error.code == "quotaExceeded" {
            // Another upload used the room meanwhile: the bytes are not kept.
            let recorded = Set(received.map(\.hash)).subtracting(try await database.missingChunks(accountId: device.accountId, hashes: fresh.map(\.hash)))
            for chunk in fresh where !recorded.contains(chunk.hash) {
                do { try await chunks.remove(hash: chunk.hash, account: device.accountId) } catch {
                    // Unrecorded bytes count against nothing; `ubiquity gc` removes them later.
                    // (Not its name: a plaintext chunk's is the SHA-256 of its bytes.)
                    logger.error("cannot remove a chunk refused for quota", metadata: ["account": "\(device.accountId)", "error": "\(error)"])
                }
            }
            throw error
        }
        // Chunks the account had when this upload looked, that garbage collection forgot before
        // they were recorded here (it removes their bytes, or already did): stored again. One
        // whose bytes it removes after this is caught by its check once it removed them
        // (``ChunkRemoval``: listed again, bytes gone — asked of the devices once more).
        let relisted = recorded.listed.subtracting(fresh.map(\.hash))
        if !relisted.isEmpty {
            var again: [ChunkBatch.Chunk] = [], storing = Set<String>()
            for chunk in received where relisted.contains(chunk.hash) && storing.insert(chunk.hash).inserted { again.append(chunk) }
            // (Each was checked against its hash above, or by the caller.)
            try await chunks.store(again, account: device.accountId, checked: true, sealed: sealed)
            logger.notice("chunks collected while a device sent them were stored again", metadata: ["account": "\(device.accountId)", "chunks": "\(again.count)"])
        }
        for (container, sequence) in recorded.sequences { notifier.publish(account: device.accountId, container: container, sequence: sequence, except: device.deviceId) }
        metrics.count(.chunkBytesReceived, by: received.reduce(0) { $0 + $1.bytes.count })
    }

    func signIn(_ request: Request, _ context: SyncContext) async throws -> SignInResponse {
        // Read with a small limit: nobody signed in yet, nothing large to send.
        let body = try await request.body.collect(upTo: SignInGuard.bodyLimit)
        let asked: SignInRequest
        do {
            asked = try JSONDecoder().decode(SignInRequest.self, from: body)
        } catch {
            throw SyncError.badRequest("badRequest", "not a sign-in request: \(error)")
        }
        guard asked.account.utf8.count <= 255, asked.password.utf8.count <= SignInGuard.longestPassword else { throw SyncError.signInFailed }
        try Validate.name(asked.deviceName, field: "deviceName")
        for container in asked.containers ?? [] { try Validate.container(container) }
        let account = try await signIns.check(account: asked.account, password: asked.password, address: context.clientAddress)
        let token = SQLiteDatabase.randomToken()
        let id = try await database.addDevice(accountId: account.id, name: asked.deviceName, tokenHash: DeviceAuthMiddleware.hash(token), containers: asked.containers)
        return SignInResponse(deviceId: id, token: token, identityToken: account.identityToken)
    }

    /// Whether the request asks for brief answers (`brief=true`): manifests left out, their
    /// tokens (``ItemState/digest``) given instead.
    static func brief(_ request: Request) -> Bool { request.uri.queryParameters["brief"].map { $0 == "true" || $0 == "1" } ?? false }

    /// The item with its manifests left out and their tokens given instead.
    static func brief(_ item: ItemState) -> ItemState {
        var brief = item
        if brief.digest == nil { brief.digest = ContentToken.of(item.manifest, kind: item.kind).description }
        brief.manifest = Manifest()
        brief.conflicts = item.conflicts.map { conflict in
            var version = conflict
            if version.digest == nil { version.digest = ContentToken.of(conflict.manifest, kind: item.kind).description }
            version.manifest = Manifest()
            return version
        }
        return brief
    }

    static func itemAddress(_ context: SyncContext) throws -> (DeviceAuth, String, String) {
        let container = try context.parameters.require("container")
        let device = try context.requireDevice(for: container)
        let item = try context.parameters.require("item")
        try Validate.identifier(item, field: "item id")
        return (device, container, item)
    }

    static func integer(_ text: Substring?, name: String, default value: Int64) throws -> Int64 {
        guard let text else { return value }
        guard let number = Int64(text) else { throw SyncError.badRequest("invalidCursor", "\(name) must be an integer") }
        return number
    }
}

// A batch of chunks sent, and one fetched (docs/SyncProtocol.md, "Chunks in batches"): for a
// device in its own account, and for one through a share (docs/Sharing.md).
extension SyncServices {
    /// `POST …/chunks`: every chunk of the body stored in `device`'s account, or none — but for
    /// a body cut short (its connection gone; nobody hears the answer): the chunks that came
    /// whole are stored, each checked as always, so the device sends only the rest again (a
    /// 16 MiB batch cut near its end is not sent whole twice).
    func receiveChunkBatch(_ request: Request, context: SyncContext, device: DeviceAuth) async throws -> Response {
        let sealed = try await sealedUpload(request, device: device)
        let logger = context.logger
        // While an incoming revision of the account is announced, each chunk is kept as it
        // lands, for the devices fetching it ahead (LandingChunks).
        let landing = self.landing, account = device.accountId
        let landed: ((String, UnsafeRawBufferPointer) -> Void)? = landing.isWatched(account: account)
            ? { hash, bytes in landing.land(account: account, hash: hash, bytes: bytes, sealed: sealed) } : nil
        try await bodies.gather(request, framing: ChunkBatch.framing, landed: landed, cut: { body in
            let frames = (try? body.withUnsafeBytes { try ChunkBatch.frames(in: $0, maximumChunkSize: Int(Validate.maximumChunkSize), cut: true) }) ?? []
            guard !frames.isEmpty else { return }
            do {
                // (Its own task: the request's may be cancelled with its connection.)
                let chunks = frames.map { ChunkBatch.Chunk(hash: $0.hash, bytes: body[$0.bytes]) }
                try await Task { try await receive(chunks, from: device, logger: logger, sealed: sealed) }.value
                logger.info("kept the whole chunks of an upload cut short", metadata: ["chunks": "\(frames.count)", "bytes": "\(frames.reduce(0) { $0 + $1.bytes.count })"])
            } catch {
                logger.info("the whole chunks of an upload cut short were not kept", metadata: ["error": "\(error)"])
            }
        }) { body in
            let batch: ChunkBatch
            do {
                batch = try ChunkBatch(decoding: body, maximumChunkSize: Int(Validate.maximumChunkSize))
            } catch let error as ChunkBatch.FormatError {
                throw SyncError.badRequest("badBatch", error.description)
            }
            guard !batch.chunks.isEmpty else { throw SyncError.badRequest("badBatch", "the batch holds no chunks") }
            let payload = batch.chunks.reduce(0) { $0 + $1.bytes.count }
            guard payload <= ChunkBatch.maximumBytes || batch.chunks.count == 1 else {
                throw SyncError(.contentTooLarge, "batchTooLarge", "a batch carries at most \(ChunkBatch.maximumBytes) bytes of chunks (or one chunk of up to \(Validate.maximumChunkSize))")
            }
            // A body that came whole is stored even if its connection goes meanwhile (in a task of
            // its own: the request's may be cancelled with its connection), so that the device,
            // asking which chunks the server lacks, sends none of it again.
            try await Task { try await receive(batch.chunks, from: device, logger: logger, sealed: sealed) }.value
        }
        return Response(status: .created)
    }

    /// `POST …/chunks/fetch`: as many of the chunks asked for as fit, in that order, from
    /// `device`'s account — each one it may read (`named`: which the items it may read name;
    /// nil: what its token's containers name, or all).
    func fetchChunkBatch(_ request: Request, context: SyncContext, device: DeviceAuth,
                         named: (@Sendable ([String]) async throws -> Set<String>)? = nil) async throws -> Response {
        let asked = try await request.decode(as: ChunkFetchRequest.self, context: context)
        guard !asked.hashes.isEmpty, asked.hashes.count <= ChunkBatch.maximumCount else {
            throw SyncError.badRequest("tooMany", "ask for 1 to \(ChunkBatch.maximumCount) chunks at a time")
        }
        if asked.available == true { return try await availableAnswer(asked.hashes, of: device, named: named) }
        if let named { try await requireChunks(asked.hashes, of: device, named: named) } else { try await requireChunks(asked.hashes, of: device) }
        // Chunks stored as sealed patches go as they are stored, to a device that takes them
        // (it names their bases in a header: a few per answer, the answer stopping before more).
        var hashes = asked.hashes
        let bases = try await database.chunkBases(accountId: device.accountId, hashes: hashes)
        if !bases.isEmpty {
            guard asked.patches == true else {
                throw SyncError(.conflict, "storedAsPatch", "chunk \(hashes.first { bases[$0] != nil } ?? "") is stored as a sealed patch: ask with patches=true (update this device's ubiquity)")
            }
            var patches = 0, kept = 0
            for hash in hashes {
                if bases[hash] != nil { patches += 1 }
                if patches > ChunkFetchRequest.maximumPatchesPerAnswer { break }
                kept += 1
            }
            hashes.removeLast(hashes.count - kept)
        }
        // As many as fit, in the order asked; the client asks again for the rest.
        // The batch read from storage straight into the body sent — once for fetches of the
        // same chunks at once (devices bringing down the same new file).
        let (chunks, metrics, account) = (self.chunks, self.metrics, device.accountId), asking = hashes
        let answer = try await fetches.answer(hashes, account: account) {
            var body = ByteBuffer()
            let loaded = try await chunks.loadBatch(asking, account: account, upTo: ChunkBatch.maximumBytes, into: &body)
            metrics.count(.chunkBytesRead, by: loaded.reduce(0) { $0 + $1.count })
            return SharedFetches.Answer(body: body, count: loaded.count)
        }
        guard answer.count > 0 else { throw SyncError.noSuchChunk(hashes[0]) }
        metrics.count(.chunkBytesSent, by: answer.body.readableBytes)
        let body = answer.body
        var headers: HTTPFields = [.contentType: "application/octet-stream"]
        let sent = hashes.prefix(answer.count).compactMap { hash in bases[hash].map { (made: hash, base: $0) } }
        if !sent.isEmpty { headers[HTTPField.Name(ChunkFetchRequest.basesHeader)!] = ChunkFetchRequest.basesHeaderValue(sent) }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
    }
}
