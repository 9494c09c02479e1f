import Foundation
import Logging
import NIOCore
import PostgresNIO
import UbiquityObjectStore
import UbiquityProtocol

// The object store's housekeeping, safe with any number of instances at once: each piece of
// work is claimed in PostgreSQL (`FOR UPDATE SKIP LOCKED`, a lease in `claimed_until` or
// `packing`), and nothing is deleted from the bucket that a row still points at.
extension ObjectChunkStore {
    /// What one round of housekeeping did.
    struct Housekeeping: Sendable, Equatable {
        /// Packs written from waiting chunks.
        var packed = 0
        /// Sparse packs rewritten.
        var compacted = 0
        /// Pack objects removed (doomed past their grace, or abandoned while being written).
        var removed = 0
        /// The bytes those objects held.
        var freedBytes: Int64 = 0
    }

    /// Packs waiting chunks, collects doomed and abandoned packs, compacts sparse ones.
    func compact(orphanAge: TimeInterval) async throws -> Int64 {
        try await housekeep(now: Date()).freedBytes
    }

    /// One round of housekeeping at `now`.
    @discardableResult
    func housekeep(now: Date, packingAll: Bool = false) async throws -> Housekeeping {
        var done = Housekeeping()
        done.packed = try await packWaiting(now: now, all: packingAll).packs
        let collected = try await collect(now: now)
        done.removed = collected.removed
        done.freedBytes = collected.bytes
        done.compacted = try await compactSparse(now: now)
        return done
    }

    // MARK: Packing what waits

    /// What packing waiting chunks did.
    struct Packed: Sendable, Equatable {
        /// Packs written.
        var packs = 0
        /// Chunks and bytes packed.
        var chunks = 0, bytes: Int64 = 0
        /// Chunks whose bytes no longer match their names (or recorded digests): not packed,
        /// left where they are for `ubiquity fsck`, and not tried again for a day.
        var damaged: [(account: Int64, hash: String)] = []

        static func == (a: Packed, b: Packed) -> Bool {
            a.packs == b.packs && a.chunks == b.chunks && a.bytes == b.bytes && a.damaged.map(\.hash) == b.damaged.map(\.hash)
        }
    }

    /// Packs chunks waiting in the database: an account's when ``Settings/packTarget`` bytes
    /// wait or the oldest has waited ``Settings/packAfter`` (with `all`, every one with a chunk
    /// stored by `createdBy`, or by `now`). Each batch is
    /// claimed for a while (`packing`), so that two instances never pack the same chunks — and
    /// one that dies holding a claim lets it lapse. Each chunk is checked against its name (or
    /// its recorded digest) before it goes into a pack.
    func packWaiting(now: Date, all: Bool = false, createdBy: Date? = nil) async throws -> Packed {
        let at = now.timeIntervalSince1970, due = all ? (createdBy ?? now).timeIntervalSince1970 : at - settings.packAfter
        let accounts = try await database.read { [settings] db in
            try await db.rows("""
                SELECT account_id FROM chunk_content WHERE packing IS NULL OR packing < \(at)
                GROUP BY account_id HAVING MIN(created) <= \(due) OR SUM(octet_length(data)) >= \(Int64(settings.packTarget))
                """).map { try $0.get("account_id", as: Int64.self) }
        }
        var done = Packed()
        for account in accounts {
            while true {
                let lease = at + settings.intentTimeout
                let (claimed, damaged) = try await database.transaction { [settings] db in
                    var claimed: [(hash: String, bytes: ArraySlice<UInt8>, digest: [UInt8]?)] = [], damaged: [String] = [], total = 0
                    for row in try await db.rows("""
                        SELECT hash, data, digest FROM chunk_content WHERE account_id = \(account) AND (packing IS NULL OR packing < \(at))
                        ORDER BY created LIMIT 4096 FOR UPDATE SKIP LOCKED
                        """) {
                        let data = try row.get("data", as: ByteBuffer.self), hash = try row.get("hash", as: String.self)
                        let digest = try row.get("digest", as: ByteBuffer?.self).map { Array($0.readableBytesView) }
                        guard Self.isSound(Data(data.readableBytesView), hash: hash, digest: digest) else {
                            damaged.append(hash)
                            continue
                        }
                        if !claimed.isEmpty && total + data.readableBytes > settings.packTarget { break }
                        total += data.readableBytes
                        claimed.append((hash, ArraySlice(data.readableBytesView), digest))
                    }
                    try await db.rows("UPDATE chunk_content SET packing = \(lease) WHERE account_id = \(account) AND hash = ANY(\(claimed.map(\.hash))::TEXT[])")
                    try await db.rows("UPDATE chunk_content SET packing = \(at + 86_400) WHERE account_id = \(account) AND hash = ANY(\(damaged)::TEXT[])")
                    return (claimed, damaged)
                }
                for hash in damaged {
                    // (Not its name: a plaintext chunk's is the SHA-256 of its bytes.)
                    logger.error("a waiting chunk's bytes do not match its name: not packed (ubiquity fsck)", metadata: ["account": "\(account)"])
                    done.damaged.append((account, hash))
                }
                guard !claimed.isEmpty else {
                    if damaged.isEmpty { break } else { continue }
                }
                try await writePack(account: account, chunks: claimed, waiting: true)
                done.packs += 1
                done.chunks += claimed.count
                let bytes = claimed.reduce(0) { $0 + $1.bytes.count }
                done.bytes += Int64(bytes)
                if bytes < settings.packTarget && damaged.isEmpty { break }
            }
        }
        if done.packs > 0 { logger.info("waiting chunks packed", metadata: ["packs": "\(done.packs)", "chunks": "\(done.chunks)"]) }
        return done
    }

    /// Chunks and bytes waiting in the database to be packed.
    func waiting() async throws -> (chunks: Int64, bytes: Int64) {
        try await database.read { db in
            let row = try await db.rows("SELECT COUNT(*)::BIGINT AS n, COALESCE(SUM(octet_length(data)), 0)::BIGINT AS b FROM chunk_content").first!
            return (try row.get("n", as: Int64.self), try row.get("b", as: Int64.self))
        }
    }

    /// `ubiquity storage migrate`: packs every chunk the database holds into the object store
    /// (an installation that kept chunk contents in its rows, now started with an object store),
    /// while servers serve. Resumable and safe to stop at any point: each pack is written by the
    /// protocol above and its chunks leave the database in the transaction that points them at
    /// it; a stopped run's claims lapse. It ends once what waited when it began is packed
    /// (uploads made meanwhile are the servers' packers' to take). `progress` hears after each round.
    func migrate(progress: @Sendable (Packed, _ left: (chunks: Int64, bytes: Int64)) -> Void) async throws -> Packed {
        var total = Packed()
        let start = Date()
        while true {
            let round = try await packWaiting(now: Date(), all: true, createdBy: start)
            total.packs += round.packs
            total.chunks += round.chunks
            total.bytes += round.bytes
            total.damaged += round.damaged
            progress(total, try await waiting())
            if round.packs == 0 { return total }
        }
    }

    // MARK: Collecting

    /// Removes the objects of doomed packs past their grace and of packs abandoned while being
    /// written, then their rows (the object first: a row left behind is tried again; an object
    /// left behind is one no row names, for the sweep).
    func collect(now: Date) async throws -> (removed: Int, bytes: Int64) {
        let at = now.timeIntervalSince1970
        let packs = try await database.transaction { [settings] db in
            try await db.rows("""
                UPDATE pack SET claimed_until = \(at + 600) WHERE id IN (
                    SELECT id FROM pack WHERE ((state = 'doomed' AND changed < \(at - settings.grace)) OR (state = 'writing' AND created < \(at - settings.intentTimeout)))
                    AND (claimed_until IS NULL OR claimed_until < \(at)) ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED)
                RETURNING id, object_key, size
                """).map { (id: try $0.get("id", as: Int64.self), key: try $0.get("object_key", as: String.self), size: try $0.get("size", as: Int64.self)) }
        }
        guard !packs.isEmpty else { return (0, 0) }
        var removed = 0, bytes: Int64 = 0
        for pack in packs {
            // Safety: a pack some chunk still points at is live again, whatever its state said.
            let holds = try await database.read { db in
                try await db.rows("SELECT COALESCE(SUM(length), 0)::BIGINT AS live FROM packed_chunk WHERE pack_id = \(pack.id)").first!.get("live", as: Int64.self)
            }
            if holds > 0 {
                logger.error("a pack taken for dead still holds chunks: kept", metadata: ["pack": "\(pack.key)", "liveBytes": "\(holds)"])
                try await database.transaction { db in
                    try await db.rows("UPDATE pack SET state = 'live', live_bytes = \(holds), claimed_until = NULL WHERE id = \(pack.id)")
                }
                continue
            }
            do {
                try await objects.delete(pack.key)
            } catch {
                logger.warning("a dead pack's object could not be removed; tried again later", metadata: ["pack": "\(pack.key)", "error": "\(error)"])
                continue
            }
            try await database.transaction { db in
                try await db.rows("DELETE FROM pack WHERE id = \(pack.id) AND NOT EXISTS (SELECT 1 FROM packed_chunk WHERE pack_id = \(pack.id))")
            }
            removed += 1
            bytes += pack.size
        }
        logger.info("dead packs removed", metadata: ["packs": "\(removed)", "bytes": "\(bytes)"])
        return (removed, bytes)
    }

    // MARK: Compacting

    /// Rewrites live packs whose live bytes fell below ``Settings/compactBelow`` of their size:
    /// their live chunks (read and checked) go into a new pack, then — in one transaction —
    /// each chunk still in the old pack points at the new one and the old pack is doomed.
    /// A chunk removed meanwhile is not moved. Returns the packs rewritten.
    func compactSparse(now: Date, limit: Int = 8) async throws -> Int {
        let at = now.timeIntervalSince1970
        var rewritten = 0
        for _ in 0..<limit {
            let claimed = try await database.transaction { [settings] db in
                try await db.rows("""
                    UPDATE pack SET claimed_until = \(at + 600) WHERE id = (
                        SELECT id FROM pack WHERE state = 'live' AND live_bytes < size * \(settings.compactBelow)
                        AND (claimed_until IS NULL OR claimed_until < \(at)) ORDER BY live_bytes LIMIT 1 FOR UPDATE SKIP LOCKED)
                    RETURNING id, account_id, object_key
                    """).first.map { (id: try $0.get("id", as: Int64.self), account: try $0.get("account_id", as: Int64.self), key: try $0.get("object_key", as: String.self)) }
            }
            guard let old = claimed else { break }
            let rows = try await database.read { db in
                try await db.rows("SELECT hash, pack_offset, length, digest FROM packed_chunk WHERE pack_id = \(old.id) ORDER BY pack_offset").map {
                    (hash: try $0.get("hash", as: String.self), offset: Int(try $0.get("pack_offset", as: Int64.self)), length: Int(try $0.get("length", as: Int32.self)),
                     digest: try $0.get("digest", as: ByteBuffer?.self).map { Array($0.readableBytesView) })
                }
            }
            var chunks: [(hash: String, bytes: ArraySlice<UInt8>, digest: [UInt8]?)] = []
            if !rows.isEmpty {
                let places = Dictionary(uniqueKeysWithValues: rows.map { ($0.hash, Place.packed(key: old.key, offset: $0.offset, length: $0.length)) })
                let bytes = try await read(rows.map(\.hash), places: places, caching: false)
                for row in rows {
                    guard let data = bytes[row.hash], Self.isSound(data, hash: row.hash, digest: row.digest) else {
                        logger.error("a chunk read for compaction is damaged or missing: the pack is left as it is", metadata: ["pack": "\(old.key)"])
                        chunks = []
                        break
                    }
                    chunks.append((row.hash, ArraySlice(data), row.digest))
                }
                if chunks.isEmpty { continue } // (the claim lapses; an operator sees the error)
            }
            try await movePack(old.id, account: old.account, chunks: chunks, now: at)
            rewritten += 1
        }
        if rewritten > 0 { logger.info("sparse packs compacted", metadata: ["packs": "\(rewritten)"]) }
        return rewritten
    }

    /// Writes `chunks` (the old pack's live ones) as a new pack and points those still in the
    /// old pack at it; the old pack is doomed.
    private func movePack(_ old: Int64, account: Int64, chunks: [(hash: String, bytes: ArraySlice<UInt8>, digest: [UInt8]?)], now: TimeInterval) async throws {
        let pack = chunks.isEmpty ? nil : try ChunkPack(account: account, chunks: chunks)
        let entries = pack?.entries ?? []
        let newID: Int64? = if let pack { try await writeBarePack(account: account, pack: pack) } else { nil }
        let hashes = entries.map(\.hash), offsets = entries.map { Int64($0.offset) }
        try await database.transaction { db in
            var moved: Int64 = 0
            if let newID {
                for row in try await db.rows("""
                    UPDATE packed_chunk SET pack_id = \(newID), pack_offset = t.o FROM UNNEST(\(hashes)::TEXT[], \(offsets)::BIGINT[]) AS t(h, o)
                    WHERE packed_chunk.account_id = \(account) AND packed_chunk.hash = t.h AND packed_chunk.pack_id = \(old)
                    RETURNING packed_chunk.length
                    """) { moved += Int64(try row.get("length", as: Int32.self)) }
                try await db.rows("UPDATE pack SET state = CASE WHEN \(moved) > 0 THEN 'live' ELSE 'doomed' END, live_bytes = \(moved), changed = \(now) WHERE id = \(newID)")
            }
            let left = try await db.rows("SELECT COALESCE(SUM(length), 0)::BIGINT AS live FROM packed_chunk WHERE pack_id = \(old)").first!.get("live", as: Int64.self)
            try await db.rows("""
                UPDATE pack SET live_bytes = \(left), state = CASE WHEN \(left) > 0 THEN 'live' ELSE 'doomed' END, changed = \(now), claimed_until = NULL WHERE id = \(old)
                """)
        }
    }
}

extension ObjectChunkStore {
    /// What a sweep of the bucket found.
    struct Sweep: Sendable, Equatable {
        /// Objects no row names, older than the age given (removed, unless only looked at).
        var unnamed: [String] = []
        /// Live packs whose object is not in the bucket: an alarm (their chunks cannot be read).
        var missing: [String] = []
        /// Objects listed.
        var listed = 0
    }

    /// Lists the bucket's packs page by page: removes objects no pack row names that are older
    /// than `age` (a pack is always recorded before its object is written, so such an object
    /// is one a crash left behind or one whose row is gone), and raises an alarm for live packs
    /// whose object is not there. Correctness never depends on it: it only reclaims room and
    /// tells.
    @discardableResult
    func sweep(now: Date, olderThan age: TimeInterval = 86_400, removing: Bool = true) async throws -> Sweep {
        var sweep = Sweep(), token: String?, after: String?
        let cutoff = now.addingTimeInterval(-age), settled = now.timeIntervalSince1970 - 300
        repeat {
            let page = try await objects.list(prefix: "chunks/", continuationToken: token)
            token = page.continuationToken
            sweep.listed += page.objects.count
            let keys = page.objects.map(\.key), upTo = token == nil ? nil : keys.last, from = after
            // The rows that name this page's objects, and the live packs of its stretch of keys
            // (read after the listing: a pack is recorded before its object is written).
            let (named, live) = try await database.read { db in
                let named = Set(try await db.rows("SELECT object_key FROM pack WHERE object_key = ANY(\(keys)::TEXT[])").map { try $0.get("object_key", as: String.self) })
                let live = try await db.rows("""
                    SELECT object_key FROM pack WHERE state = 'live' AND created < \(settled) AND object_key LIKE 'chunks/%'
                    AND (\(from)::TEXT IS NULL OR object_key > \(from)) AND (\(upTo)::TEXT IS NULL OR object_key <= \(upTo))
                    """).map { try $0.get("object_key", as: String.self) }
                return (named, live)
            }
            let orphans = page.objects.filter { !named.contains($0.key) && ($0.lastModified ?? now) < cutoff }.map(\.key)
            sweep.unnamed += orphans
            if removing && !orphans.isEmpty {
                for (key, why) in try await objects.delete(orphans) {
                    logger.warning("an object no pack names could not be removed", metadata: ["object": "\(key)", "error": "\(why)"])
                }
            }
            let present = Set(keys)
            sweep.missing += live.filter { !present.contains($0) }
            after = upTo
        } while token != nil
        for key in sweep.missing {
            logger.critical("a live pack's object is missing from the object store: its chunks cannot be read", metadata: ["pack": "\(key)"])
        }
        if removing && !sweep.unnamed.isEmpty { logger.notice("objects no pack names removed", metadata: ["objects": "\(sweep.unnamed.count)"]) }
        return sweep
    }
}
