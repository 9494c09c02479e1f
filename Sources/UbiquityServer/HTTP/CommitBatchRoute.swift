import Foundation
import Hummingbird
import NIOCore
import UbiquityProtocol

extension SyncServices {
    /// `PUT …/chunks/HASH`: the one chunk in the body, stored (at most
    /// `Validate.maximumChunkSize` bytes; `sealed`: an encrypted account's, kept unread).
    func receiveChunk(_ request: Request, context: SyncContext, device: DeviceAuth, sealed: Bool) async throws {
        let hash = try context.parameters.require("hash")
        try Validate.hash(hash)
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: Int(Validate.maximumChunkSize))
        } catch {
            throw SyncError(.contentTooLarge, "chunkTooLarge", "chunks are at most \(Validate.maximumChunkSize) bytes")
        }
        try await receive([ChunkBatch.Chunk(hash: hash, bytes: Array(buffer: body))], from: device, logger: context.logger, sealed: sealed)
    }

    /// `POST …/commits`: many items' updates in one transaction and one push
    /// (docs/SyncProtocol.md, "Commits in batches"), for a device or for a page a device let in
    /// under Advanced Data Protection (its records sealed in the browser).
    /// `sealedOnly`: every update but a deletion must carry a sealed record, and none its bytes
    /// inline (a page's, whose records and chunks are sealed in the browser).
    func commitBatch(_ request: Request, context: SyncContext, container: String, device: DeviceAuth, sealedOnly: Bool = false,
                     check: (@Sendable (ItemCommit) async throws -> ItemCommit)? = nil) async throws -> CommitBatchResponse {
        let batch = try await request.decode(as: CommitBatchRequest.self, context: context)
        guard (1...CommitBatchRequest.maximumCount).contains(batch.commits.count) else {
            throw SyncError.badRequest("tooMany", "a batch carries 1 to \(CommitBatchRequest.maximumCount) commits")
        }
        if sealedOnly, batch.commits.contains(where: { ($0.update.record == nil && $0.update.deleted != true) || $0.update.contents != nil }) {
            throw SyncError.badRequest("notSealed", "every change from this page carries its record sealed, and no bytes inline")
        }
        try await refusePlaintext(batch.commits.map(\.update), of: device)
        if let patches = batch.patches {
            // Chunks as patches, made and stored before the commits that name them.
            guard !sealedOnly, patches.count <= CommitBatchRequest.maximumPatchBytes else {
                throw SyncError.badRequest("badPatch", "a batch carries at most \(CommitBatchRequest.maximumPatchBytes) bytes of plaintext patches")
            }
            let decoded: ChunkPatchBatch
            do {
                decoded = try ChunkPatchBatch(decoding: [UInt8](patches), maximumChunkSize: Int(Validate.maximumChunkSize), maximumTotal: ChunkBatch.maximumBytes)
            } catch let error as ChunkPatchBatch.FormatError {
                throw SyncError.badRequest("badPatch", error.description)
            }
            if !decoded.patches.isEmpty { try await receivePatches(decoded, from: device, logger: context.logger) }
        }
        // Each update checked on its own: one refused is answered with its error, the others go on.
        var results = [CommitResult?](repeating: nil, count: batch.commits.count)
        var accepted: [(index: Int, commit: ItemCommit)] = [], items = Set<String>(), inline: [ChunkBatch.Chunk] = []
        var inlineBytes: [String: Data] = [:], deltas: [String: (base: String, delta: ChunkListDelta)] = [:]
        for (index, asked) in batch.commits.enumerated() {
            do {
                try Validate.identifier(asked.item, field: "item id")
                guard items.insert(asked.item).inserted else { throw SyncError.badRequest("duplicateItem", "item \(asked.item) appears twice in the batch") }
                // (Through a share: only what is inside it, its root's place the owner's.)
                let commit = try await check?(asked) ?? asked
                if let delta = commit.update.manifestDelta, let base = commit.update.baseRevision, commit.update.record == nil,
                   delta.operations.count <= Self.pushedDeltaOperations {
                    deltas[commit.item] = (base, delta) // (pushed along if it makes the item current: below)
                }
                var update = try await prepared(commit.update, of: commit.item, in: container, for: device)
                let bytes = update.contents
                inline += try Self.inlineChunks(of: &update)
                if let bytes { inlineBytes[commit.item] = bytes }
                accepted.append((index, ItemCommit(item: commit.item, update: update)))
            } catch let error as SyncError {
                results[index] = CommitResult(item: asked.item, error: error.body)
            }
        }
        // Small files' bytes (each checked as it was taken out) stored before their commits
        // (one quota check, one write): complete when committed.
        if !inline.isEmpty { try await receive(inline, from: device, logger: context.logger, checked: true) }
        let brief = Self.brief(request), terse = request.uri.queryParameters["terse"] == "true"
        let tags = await nameTags(of: accepted.map { ($0.commit.item, $0.commit.update) }, device: device, container: container)
        let verdicts = accepted.isEmpty ? [] : try await database.commit(accountId: device.accountId, container: container, commits: accepted.map(\.commit),
                                                                          device: device, now: Date(), brief: brief, limits: accountLimits, nameTags: tags)
        var fresh: [CommitOutcome] = []
        for (entry, verdict) in zip(accepted, verdicts) {
            switch verdict {
            case .success(let outcome):
                if terse, let committed = Self.committed(outcome, as: entry.commit.update, by: device) {
                    results[entry.index] = CommitResult(item: entry.commit.item, committed: committed)
                } else {
                    results[entry.index] = CommitResult(item: entry.commit.item, commit: Self.answer(outcome, brief: brief))
                }
                if !outcome.repeated { fresh.append(outcome) }
            case .failure(let error):
                results[entry.index] = CommitResult(item: entry.commit.item, error: error.body)
            }
        }
        if let sequence = fresh.map(\.item.sequence).max() {
            metrics.count(.commits, by: fresh.count)
            var page = Self.pushedPage(fresh, inlineBytes: inlineBytes, deltas: deltas)
            // (Devices that read the signed commits up to there take the page without asking: unknown, they ask.)
            page?.signedCommits = try? await database.lastCommitPosition(accountId: device.accountId, container: container)
            notifier.publish(account: device.accountId, container: container, sequence: sequence, except: device.deviceId, page: page)
            await publishToParticipants(of: device.accountId, container: container, changed: fresh.map(\.item), except: device.deviceId, acting: device, logger: context.logger)
        }
        return CommitBatchResponse(results: results.map { $0! })
    }

    /// The most steps of a file's chunk-list difference pushed along with its change.
    static let pushedDeltaOperations = 32

    /// The changes of a commit batch as a page to push along with its event, when they are
    /// small and are all the container's changes from before the batch to after it (their
    /// sequences follow each other); nil otherwise (devices then fetch them). A file committed
    /// as a small difference from its base revision's chunk list (`deltas`, by item) that made
    /// that revision current carries the difference: a device whose copy is the base rebuilds
    /// the list without asking for it (docs/SyncProtocol.md, "Pushed pages").
    static func pushedPage(_ outcomes: [CommitOutcome], inlineBytes: [String: Data], deltas: [String: (base: String, delta: ChunkListDelta)] = [:]) -> ChangeNotifier.PushedPage? {
        guard !outcomes.isEmpty, outcomes.count <= PushEvent.maximumPageItems else { return nil }
        let states = outcomes.map(\.item).sorted { $0.sequence < $1.sequence }
        let since = states[0].sequence - 1
        guard states.enumerated().allSatisfy({ $0.element.sequence == since + 1 + Int64($0.offset) }) else { return nil }
        var contents: [String: Data] = [:], total = 0
        for outcome in outcomes where outcome.isCurrent && outcome.item.revision == outcome.revision && outcome.item.uploaded && !outcome.item.deleted {
            guard let bytes = inlineBytes[outcome.item.id], Int64(bytes.count) == outcome.item.size, total + bytes.count <= PushEvent.maximumPageContentBytes else { continue }
            contents[outcome.item.id] = bytes
            total += bytes.count
        }
        var items = states.map(Self.brief)
        for (index, item) in items.enumerated() {
            guard let (base, delta) = deltas[item.id], item.kind == .file, !item.deleted, item.record == nil,
                  let outcome = outcomes.first(where: { $0.item.id == item.id }), outcome.isCurrent, outcome.item.revision == outcome.revision else { continue }
            items[index].manifestDelta = delta
            items[index].deltaBase = base
        }
        return ChangeNotifier.PushedPage(since: since, items: items, contents: contents)
    }
}
