import Foundation
import UbiquityProtocol
import UbiquitySync

/// A revision written before its container's records were sealed, as the server reads it to
/// seal it in place (``SealInPlace``).
struct UnsealedRevision: Sendable, Equatable {
    var id: String
    var created: Double
    var item: String
    var name: String
    var parent: String?
    var kind: ItemKind
    var modificationDate: Double
    var type: String?
    var deleted: Bool
    /// Its manifest as stored (plaintext sizes, chunks named by SHA-256).
    var manifest: Manifest
}

/// Where a look for unsealed revisions goes on from: those created before `created`, or then
/// with an id after `id` (newest first, ties by id).
struct UnsealedCursor: Sendable, Equatable {
    var created: Double
    var id: String
}

/// What an unsealed revision becomes (``RuleStorage/rewrite(_:container:)``): the same
/// revision, item, folder, kind and contents, with what a sealing device would have sent —
/// its name's tag, no type or date, its chunks sealed (renamed by the container's keyed MAC, at
/// their sealed sizes) and its record.
struct RevisionRewrite: Sendable {
    var id: String
    var item: String
    var account: Int64
    /// The sealed update, prepared: manifest, chunk references, size, content token, record.
    var commit: PreparedCommit
    /// What it counts against the quota now.
    var cost: Int64
    /// Its folder and name keys, for the item's row when it is the current revision.
    var keys: (parent: String, name: String)
}

/// What ``ServerRules/sealInPlace(account:container:rewrites:chunks:now:in:)`` did.
struct SealedInPlace: Sendable, Equatable {
    /// Revisions rewritten (one sealed meanwhile is left as it is).
    var revisions = 0
    /// Plaintext chunks no revision names any more, unlisted: the chunk store removes them.
    var removed: [String] = []
}

extension ServerRules {
    /// Rewrites revisions of a container in place with their sealed forms (issue 45's upgrade,
    /// under Standard Data Protection with the escrow's keys), in one transaction: the sealed
    /// chunks (stored already) are listed, each revision that still has no record is rewritten,
    /// and the plaintext chunks nothing names any more are unlisted (returned, for the chunk
    /// store). The quota is not checked: what is stored grows by the padding only, and shrinks
    /// back as the plaintext goes. Nothing is announced: the revisions keep their ids and
    /// contents, and devices that hold them need nothing new.
    static func sealInPlace(account: Int64, container identifier: String, rewrites: [RevisionRewrite], chunks: [String: Int64], now: Date,
                            in storage: some RuleStorage) async throws -> SealedInPlace {
        guard try await storage.account(account) != nil,
              let container = try await storage.container(account: account, identifier: identifier, create: false) else { return SealedInPlace() }
        let stored = try await storage.storedSizes(account: account, hashes: chunks.keys.sorted())
        try await storage.addChunks(account: account, chunks: chunks.filter { stored[$0.key] == nil }, bases: [:], now: now)
        var done = SealedInPlace(), costs: Int64 = 0, replaced = Set<String>()
        for rewrite in rewrites {
            guard let before = try await storage.rewrite(rewrite, container: container) else { continue }
            done.revisions += 1
            costs += rewrite.cost - before.cost
            replaced.formUnion(Set(before.hashes).subtracting(rewrite.commit.hashes))
        }
        if costs != 0 { try await storage.adjust(account, by: AccountChange(metadataBytes: costs)) }
        for hash in replaced.sorted() where try await !storage.isNamed(account: account, hash: hash) {
            _ = try await storage.removeChunk(account: account, hash: hash)
            done.removed.append(hash)
        }
        try await storage.forgetContainerChunks(container: container, hashes: replaced.sorted())
        return done
    }
}
