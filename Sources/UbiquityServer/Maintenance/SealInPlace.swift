import Foundation
import Logging
import ServiceLifecycle
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync

/// Seals in place what accounts stored before their containers sealed (issue 45's upgrade),
/// under Standard Data Protection, with the escrow's keys: each revision without a sealed record
/// — current, conflict version, earlier revision or deletion — gets the record its device would
/// have sent (name, type, date, sizes, content token; its name becomes its tag), and the
/// plaintext chunks it names are sealed under the container's keyed MAC (cut where they were:
/// the same bytes, renamed) and the plaintext ones removed once nothing names them. Nothing is
/// sent again by a device: a revision keeps its id and its contents, so devices that hold it need
/// nothing new; one that fetches it later opens the record and the sealed chunks as it opens any.
///
/// Resumable by construction: a revision is rewritten in one transaction, once (it has a record
/// after); sealed chunks stored before a crash and not yet listed are stored again or collected.
/// Accounts under Advanced (no key here) are skipped: their devices hold the only keys.
struct SealInPlace: Sendable {
    let database: any SyncDatabase
    let chunks: any ChunkStorage
    let escrow: ServerEscrow
    let logger: Logger
    /// Revisions younger than this are left for a later round: a device of an older build may
    /// still be editing from them (its manifest deltas need the plaintext list as it was).
    var settle: TimeInterval = 600
    /// Revisions sealed in one transaction.
    var batch = 32
    /// Sealed bytes held before they are stored.
    static let storeBytes = 16 << 20

    /// Indexes `account`'s plaintext names by their tags (the first step of ``run(account:now:progress:)``).
    /// - Returns: How many were indexed anew.
    func reindex(account: Int64) async throws -> Int {
        guard let rootKeys = try await escrow.rootKeys(ofAccount: account, database: database), !rootKeys.isEmpty else { return 0 }
        var report = SealInPlaceReport()
        for container in try await database.containers(ofAccount: account) {
            try await reindex(container: container.identifier, account: account, rootKeys: rootKeys, report: &report)
        }
        return report.reindexed
    }

    /// Seals every account's old revisions (or only `account`'s). `progress` hears after each batch.
    /// - Throws: What the database or the chunk store threw; what was done before stays done.
    func run(account only: Int64? = nil, now: Date = Date(), progress: (@Sendable (SealInPlaceReport) -> Void)? = nil) async throws -> SealInPlaceReport {
        var report = SealInPlaceReport()
        // Only accounts with something to seal (found by the index of unsealed revisions: a
        // round over a million sealed accounts reads none of them). A plaintext name is an
        // unsealed revision's, so the names to index by their tags are theirs too.
        for account in try await database.accountsWithUnsealedRevisions() where only == nil || account == only {
            try Task.checkCancellation()
            let rootKeys: [AccountRootKey]?
            do { rootKeys = try await escrow.rootKeys(ofAccount: account, database: database) } catch {
                report.problems.append("account \(account): its keys do not open with this escrow key (\(error)): left as it is")
                continue
            }
            guard let rootKeys, !rootKeys.isEmpty else {
                report.skipped += 1 // Advanced: the server holds no key
                continue
            }
            report.accounts += 1
            for container in try await database.containers(ofAccount: account) {
                try await reindex(container: container.identifier, account: account, rootKeys: rootKeys, report: &report)
            }
            for container in try await database.containers(ofAccount: account) {
                try await seal(container: container.identifier, account: account, rootKeys: rootKeys, now: now, report: &report, progress: progress)
            }
        }
        if report.revisions > 0 {
            // What was replaced leaves no copy behind: packs of removed chunks rewritten, logs emptied.
            try await chunks.compact(orphanAge: 3_600)
            try await database.scrubLog()
        }
        return report
    }

    /// Indexes the container's plaintext names by their tags at once, however young (those
    /// from before the account had keys were indexed by their own keys): a sealed name meets
    /// them from then on (``ServerRules/settle(name:item:tags:among:)``), before they are sealed.
    private func reindex(container: String, account: Int64, rootKeys: [AccountRootKey], report: inout SealInPlaceReport) async throws {
        guard let records = ItemRecords.keyed(container: container, rootKeys: rootKeys, sealing: false) else { return }
        let stale = try await database.plaintextNamedItems(accountId: account, container: container).compactMap { item -> (id: String, name: String, key: String)? in
            let tag = records.tag(item.name, parent: item.parent)
            return item.key == tag ? nil : (item.id, item.name, tag)
        }
        guard !stale.isEmpty else { return }
        try await database.reindex(accountId: account, container: container, keys: stale)
        report.reindexed += stale.count
    }

    /// Seals one container's old revisions, a batch at a time, newest first.
    private func seal(container: String, account: Int64, rootKeys: [AccountRootKey], now: Date, report: inout SealInPlaceReport,
                      progress: (@Sendable (SealInPlaceReport) -> Void)?) async throws {
        guard let newest = rootKeys.max(by: { $0.epoch < $1.epoch }),
              let records = ItemRecords.keyed(container: container, rootKeys: rootKeys, sealing: true) else { return }
        let keys = newest.chunkKeys(container: container)
        // Newest first, each batch below the last one (a revision left — a chunk missing or
        // damaged — is not met again this round).
        var cursor = UnsealedCursor(created: now.timeIntervalSince1970 - settle, id: "")
        while true {
            try Task.checkCancellation()
            let todo = try await database.unsealedRevisions(accountId: account, container: container, below: cursor, limit: batch)
            guard let last = todo.last else { return }
            cursor = UnsealedCursor(created: last.created, id: last.id)
            // The plaintext chunks the batch names, sealed and stored (not yet listed).
            let named = Set(todo.flatMap { $0.manifest.allChunks.map(\.hash) }).sorted()
            let sealedBefore = try await chunks.sealedDigests(of: named, account: account)
            // (Stored as they go, at most ``storeBytes`` held at once: a batch of large files is
            // gigabytes.)
            var renamed: [String: String] = [:], pending: [ChunkBatch.Chunk] = [], held = 0, unusable = Set<String>()
            var fresh: [String: Int64] = [:]
            func store() async throws {
                let absent = Set(try await database.missingChunks(accountId: account, hashes: pending.map(\.hash)))
                let new = pending.filter { absent.contains($0.hash) && fresh[$0.hash] == nil }
                try await chunks.store(new, account: account, checked: true, sealed: true)
                for chunk in new { fresh[chunk.hash] = Int64(chunk.bytes.count) }
                (pending, held) = ([], 0)
            }
            for hash in named where sealedBefore[hash] == nil {
                guard let bytes = try await chunks.load(hash: hash, account: account), bytes.withUnsafeBytes({ ContentChunker.hash($0) }) == hash else {
                    unusable.insert(hash)
                    continue
                }
                let (id, body) = try keys.seal(bytes)
                renamed[hash] = id.description
                pending.append(ChunkBatch.Chunk(hash: id.description, bytes: ArraySlice(body)))
                (held, report.bytes) = (held + body.count, report.bytes + Int64(bytes.count))
                if held >= Self.storeBytes { try await store() }
            }
            try await store()
            // Each revision as its device would have sent it sealed.
            var rewrites: [RevisionRewrite] = []
            for revision in todo {
                let chunksNamed = revision.manifest.allChunks.map(\.hash)
                if chunksNamed.contains(where: { unusable.contains($0) }) {
                    // (Not the chunk's name: a plaintext chunk's SHA-256 is no more to be logged than its bytes.)
                    if report.problems.count < 100 { report.problems.append("account \(account): revision \(revision.id) names a chunk missing or damaged: left until it is whole (`ubiquity fsck --repair`)") }
                    report.left += 1
                    continue
                }
                rewrites.append(try rewrite(revision, account: account, renamed: renamed, records: records))
            }
            let done = try await database.sealInPlace(accountId: account, container: container, rewrites: rewrites, chunks: fresh, now: Date())
            let left = await ChunkRemoval.remove(done.removed.map { (account, $0) }, database: database, chunks: chunks, logger: logger)
            for (_, _, error) in left {
                // Unlisted bytes count against nothing; a collection removes them later.
                logger.warning("cannot remove a plaintext chunk sealed in place; a garbage collection will", metadata: ["account": "\(account)", "error": "\(error)"])
            }
            report.revisions += done.revisions
            report.chunks += fresh.count
            report.removed += done.removed.count
            progress?(report)
        }
    }

    /// What `revision` becomes: its chunks renamed, its record sealed, its update prepared.
    private func rewrite(_ revision: UnsealedRevision, account: Int64, renamed: [String: String], records: ItemRecords) throws -> RevisionRewrite {
        func rename(_ chunks: [ChunkReference]) -> [ChunkReference] { chunks.map { ChunkReference(hash: renamed[$0.hash] ?? $0.hash, size: $0.size) } }
        var manifest = revision.manifest
        manifest.chunks = manifest.chunks.map(rename)
        manifest.members = manifest.members?.map { ManifestMember(path: $0.path, chunks: rename($0.chunks)) }
        let update = ItemUpdate(baseRevision: nil, name: revision.name, parent: revision.parent, kind: revision.kind,
                                modificationDate: revision.modificationDate, type: revision.type, manifest: manifest, deleted: revision.deleted)
        let commit = try PreparedCommit(ItemCommit(item: revision.item, update: try records.sealed(update, item: revision.item, manifest: manifest)))
        return RevisionRewrite(id: revision.id, item: revision.item, account: account, commit: commit, cost: RevisionCost.of(commit),
                               keys: NameCollision.indexKeys(name: commit.update.name, parent: revision.parent, deleted: revision.deleted))
    }
}

/// What ``SealInPlace`` did (`ubiquity seal-in-place` prints it; the server logs it).
package struct SealInPlaceReport: Sendable, Equatable {
    /// Accounts under Standard whose revisions were looked at.
    package var accounts = 0
    /// Accounts with keys the server does not hold (Advanced): their devices seal.
    package var skipped = 0
    /// Revisions sealed in place.
    package var revisions = 0
    /// Plaintext names indexed by their tags (from before the account had keys).
    package var reindexed = 0
    /// Chunks sealed, and plaintext ones removed.
    package var chunks = 0, removed = 0
    /// Plaintext bytes sealed.
    package var bytes: Int64 = 0
    /// Revisions left unsealed (a chunk they name is missing or damaged).
    package var left = 0
    /// What was left, and why (no name or key in it; the first 100).
    package var problems: [String] = []

    package init() {}
}

/// Seals old revisions in place (``SealInPlace``) when the server starts and every
/// ``interval`` after, until it shuts down gracefully.
struct SealInPlaceService: Service {
    let sealing: SealInPlace
    var interval: Duration = .seconds(600)

    func run() async {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let report = try await sealing.run()
                    if report.revisions > 0 || report.reindexed > 0 || !report.problems.isEmpty {
                        sealing.logger.notice("sealed revisions from before in place", metadata: [
                            "revisions": "\(report.revisions)", "names": "\(report.reindexed)", "chunks": "\(report.chunks)", "removed": "\(report.removed)",
                            "bytes": "\(report.bytes)", "left": "\(report.left)"])
                        for problem in report.problems.prefix(5) { sealing.logger.warning("left unsealed", metadata: ["why": "\(problem)"]) }
                    }
                } catch is CancellationError {
                    return
                } catch {
                    sealing.logger.error("sealing in place failed; tried again later", metadata: ["error": "\(error)"])
                }
                do { try await Task.sleep(for: interval) } catch { return }
            }
        }
    }
}
