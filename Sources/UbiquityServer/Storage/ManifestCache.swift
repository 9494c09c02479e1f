import Foundation
import Synchronization
import UbiquityProtocol

/// The decoded manifests of large files' recent revisions. A revision's manifest never
/// changes (but once, when the server seals an old revision in place: ``forget(_:)``), and a large file's is long (a 64 MiB file lists about 4,000 chunks, some 300 KB of
/// JSON): without this, every small edit of it decoded its base revision's list to apply the
/// edit's difference, and every device fetching it decoded both lists again to send the
/// difference on. Small manifests are decoded each time (cheap, and they would crowd out the
/// large ones). Keyed by revision id (unique across accounts, and only ever looked up for a row
/// already read within the requester's account); bounded by the chunk references held, the
/// least recently used going first.
final class ManifestCache: Sendable {
    /// The process's cache (both database backends use it).
    static let shared = ManifestCache(limit: 200_000)

    /// Manifests with fewer chunks than this are not kept.
    static let smallest = 256

    private struct Entry {
        var manifest: Manifest
        /// The revision's content token when it was kept.
        var digest: String?
        var references: Int
        var used: UInt64
    }

    private let limit: Int
    private let state = Mutex<(entries: [String: Entry], references: Int, clock: UInt64)>(([:], 0, 0))

    /// A cache that holds at most `limit` chunk references.
    init(limit: Int) {
        self.limit = limit
    }

    /// The manifest of `revision` if it is kept and is still the one whose content token is
    /// `digest` (the revision's row's): a revision sealed in place since — by another instance,
    /// or by `ubiquity seal-in-place` beside a running server — has another one.
    func cached(_ revision: String, digest: String?) -> Manifest? {
        state.withLock { state -> Manifest? in
            guard let entry = state.entries[revision] else { return nil }
            guard entry.digest == digest else {
                state.entries[revision] = nil
                state.references -= entry.references
                return nil
            }
            state.clock &+= 1
            state.entries[revision]!.used = state.clock
            return state.entries[revision]!.manifest
        }
    }

    /// The manifest of `revision`, whose stored JSON is `stored` and content token `digest`:
    /// from the cache, or read and decoded (and kept if large).
    func manifest(of revision: String, digest: String?, stored: @autoclosure () throws -> Data) throws -> Manifest {
        if let known = cached(revision, digest: digest) { return known }
        let manifest = try JSONDecoder().decode(Manifest.self, from: try stored())
        remember(manifest, of: revision, digest: digest)
        return manifest
    }

    /// Keeps `manifest` as `revision`'s (its content token `digest`), if it is large.
    func remember(_ manifest: Manifest, of revision: String, digest: String?) {
        let references = (manifest.chunks?.count ?? 0) + (manifest.members ?? []).reduce(0) { $0 + $1.chunks.count }
        guard references >= Self.smallest, references <= limit else { return }
        state.withLock { state in
            guard state.entries[revision] == nil else { return }
            state.clock &+= 1
            state.entries[revision] = Entry(manifest: manifest, digest: digest, references: references, used: state.clock)
            state.references += references
            // At most limit / smallest entries: finding the oldest by a walk is cheap.
            while state.references > limit, let oldest = state.entries.min(by: { $0.value.used < $1.value.used }) {
                state.entries[oldest.key] = nil
                state.references -= oldest.value.references
            }
        }
    }

    /// The chunks of `base`, an edit's base revision, and their sizes, if its list is kept here and the
    /// edit lists `count` chunks (a large file). A chunk goes from storage only when nothing
    /// refers to it, so if the base revision is complete these are all still stored, and the
    /// edit's commit need look up only its other chunks (a 1-byte edit of a 64 MiB file: a few,
    /// not 4,000). Whether the base is complete — and not sealed in place since — is the caller's
    /// to ask.
    func chunkSizes(ofBase base: String?, forEditOf count: Int) -> [String: Int64]? {
        guard let base, count >= Self.smallest, let known = state.withLock({ $0.entries[base]?.manifest }) else { return nil }
        return Dictionary(known.allChunks.map { ($0.hash, $0.size) }) { first, _ in first }
    }

    /// Forgets the manifest of `revision`: it was rewritten in place (sealed by the server,
    /// ``SealInPlace``) — the one change a stored manifest ever sees.
    func forget(_ revision: String) {
        state.withLock { state in
            guard let entry = state.entries.removeValue(forKey: revision) else { return }
            state.references -= entry.references
        }
    }

    /// How many manifests are kept (for tests).
    var count: Int { state.withLock { $0.entries.count } }
}
