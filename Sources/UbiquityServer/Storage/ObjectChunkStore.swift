import Crypto
import Foundation
import Logging
import NIOCore
import NIOFoundationCompat
import PostgresNIO
import UbiquityObjectStore
import UbiquityProtocol

/// Chunk contents in an S3-compatible object store, indexed in PostgreSQL (issue 47; the design
/// in docs/Scaling.md): packs of chunks as immutable objects, written intent first; small
/// uploads wait in the database (`chunk_content`) until a packer seals them into a pack.
///
/// The write protocol, each step durable before the next:
/// 1. the pack is recorded `writing` (its key names no object yet);
/// 2. its object is written once (`If-None-Match: *`);
/// 3. in one transaction the pack turns `live` and its chunks point at it (a chunk some other
///    pack holds already keeps that one: this copy is dead weight, counted out of `live_bytes`).
/// Only then is the upload acknowledged. A crash between steps leaves a `writing` row (collected
/// with its object after ``Settings/intentTimeout``) or an object no row names (removed by the
/// sweep after a day): never a chunk pointing at nothing, never a live object without a row.
///
/// Death is decided in SQL: removing a chunk lowers its pack's `live_bytes` in the same
/// transaction; a pack with none left is `doomed`, and its object goes after
/// ``Settings/grace`` — longer than any fetch that found the chunk there before.
final class ObjectChunkStore: ChunkStorage {
    /// Sizes and times of the protocol.
    struct Settings: Sendable {
        /// A batch at least this large is a pack of its own at once; smaller ones wait in the database.
        var directPackMinimum = 1 << 20
        /// The most bytes the packer puts in one pack.
        var packTarget = 16 << 20
        /// How long a waiting chunk waits before the packer takes it, however few wait.
        var packAfter: TimeInterval = 30
        /// How long a doomed pack's object stays (longer than any fetch).
        var grace: TimeInterval = 900
        /// How long a pack may stay `writing` before it is taken for abandoned.
        var intentTimeout: TimeInterval = 3_600
        /// Ranges of one pack at most this far apart are read with one GET.
        var mergeGap = 256 << 10
        /// The most bytes one GET reads (a whole pack of one 16 MiB upload, its trailer too).
        var largestRead = 20 << 20
        /// GETs in flight for one load.
        var readsInFlight = 4
        /// A read of at least this many bytes of a pack reads the whole pack (or, from a pack
        /// larger than ``largestRead``, that much from the read on), kept in the read cache
        /// for the next fetches.
        var readAheadMinimum = 1 << 20
        /// The most bytes of packs kept for the next fetches (``PackReadCache``): a pack of a
        /// 16 MiB upload, and a part of the next.
        var readCacheBytes = 24 << 20
        /// A pack whose live bytes fell below this share of its size is compacted.
        var compactBelow = 0.5
    }

    /// The steps of the write protocol, for tests that stop there as a crash would.
    enum Step: Sendable { case intentRecorded, objectWritten }

    let database: PostgresDatabase
    let objects: S3Client
    let settings: Settings
    let logger: Logger
    /// Called after each step of writing a pack; a test throws there to stop as a crash would.
    let afterStep: (@Sendable (Step) async throws -> Void)?
    /// Ranges of packs lately read, for the next fetches.
    let cache: PackReadCache

    init(database: PostgresDatabase, objects: S3Client, settings: Settings = Settings(), logger: Logger,
         afterStep: (@Sendable (Step) async throws -> Void)? = nil) {
        self.database = database
        self.objects = objects
        self.settings = settings
        self.logger = logger
        self.afterStep = afterStep
        cache = PackReadCache(capacity: settings.readCacheBytes)
    }

    // MARK: Storing

    func store(_ chunks: [ChunkBatch.Chunk], account: Int64, checked: Bool, sealed: Bool) async throws {
        if !checked && !sealed { for chunk in chunks { try Self.verify(chunk.bytes, hash: chunk.hash) } }
        var seen = Set<String>()
        let fresh = chunks.filter { seen.insert($0.hash).inserted }
        guard !fresh.isEmpty else { return }
        let entries = fresh.map { (hash: $0.hash, bytes: $0.bytes, digest: sealed ? Array(SHA256.hash(data: $0.bytes)) : nil) }
        if fresh.reduce(0, { $0 + $1.bytes.count }) >= settings.directPackMinimum {
            try await writePack(account: account, chunks: entries)
            return
        }
        // Small: waits in the database (durable there) until the packer takes it.
        let now = Date().timeIntervalSince1970
        try await database.transaction { db in
            for chunk in entries {
                try await db.rows("""
                    INSERT INTO chunk_content (account_id, hash, data, created, digest)
                    SELECT \(account), \(chunk.hash), \(Data(chunk.bytes)), \(now), \(chunk.digest.map { Data($0) })
                    WHERE NOT EXISTS (SELECT 1 FROM packed_chunk WHERE account_id = \(account) AND hash = \(chunk.hash))
                    ON CONFLICT DO NOTHING
                    """)
            }
        }
    }

    /// Writes `chunks` of `account` as one pack by the protocol above; returns the hashes the
    /// pack holds live (those no other pack held already). `waiting`: the chunks are ones
    /// waiting in the database, and only those still waiting when the pack is recorded are
    /// pointed at it — one removed meanwhile stays removed (found by
    /// `twoInstancesHousekeepingAtOnceLoseNothing`: a chunk removed while it was being packed
    /// came back).
    @discardableResult
    func writePack(account: Int64, chunks: [(hash: String, bytes: ArraySlice<UInt8>, digest: [UInt8]?)], waiting: Bool = false) async throws -> [String] {
        let pack = try ChunkPack(account: account, chunks: chunks)
        let id = try await writeBarePack(account: account, pack: pack), now = Date().timeIntervalSince1970
        let hashes = pack.entries.map(\.hash), offsets = pack.entries.map { Int64($0.offset) }, lengths = pack.entries.map { Int32($0.length) }
        let digests = chunks.map { ByteBuffer(bytes: $0.digest ?? []) }
        return try await database.transaction { db in
            guard try await !db.rows("UPDATE pack SET state = 'live', changed = \(now) WHERE id = \(id) AND state = 'writing' RETURNING id").isEmpty else {
                // Taken for abandoned meanwhile (an upload that took longer than the intent's timeout).
                throw SyncError(.serviceUnavailable, "objectStoreUnavailable", "storing chunks took too long; try again")
            }
            // Waiting copies of these chunks are packed now (here or in the pack that had them);
            // the rows taken lock them against a removal until this commits.
            let taken = Set(try await db.rows("DELETE FROM chunk_content WHERE account_id = \(account) AND hash = ANY(\(hashes)::TEXT[]) RETURNING hash")
                .map { try $0.get("hash", as: String.self) })
            let pointed = waiting ? hashes.map { taken.contains($0) } : hashes.map { _ in true }
            let inserted = try await db.rows("""
                INSERT INTO packed_chunk (account_id, hash, pack_id, pack_offset, length, digest, created)
                SELECT \(account), h, \(id), o, l, NULLIF(d, ''::BYTEA), \(now)
                FROM UNNEST(\(hashes)::TEXT[], \(offsets)::BIGINT[], \(lengths)::INTEGER[], \(digests)::BYTEA[], \(pointed)::BOOLEAN[]) AS t(h, o, l, d, p)
                WHERE p ON CONFLICT DO NOTHING RETURNING hash, length
                """)
            let live = try inserted.reduce(Int64(0)) { $0 + Int64(try $1.get("length", as: Int32.self)) }
            try await db.rows("UPDATE pack SET live_bytes = \(live), state = CASE WHEN \(live) > 0 THEN 'live' ELSE 'doomed' END WHERE id = \(id)")
            return try inserted.map { try $0.get("hash", as: String.self) }
        }
    }

    /// Steps 1 and 2 of the protocol: the pack recorded `writing` (no live bytes yet), then its
    /// object written. Returns its id; the caller points chunks at it (step 3).
    func writeBarePack(account: Int64, pack: ChunkPack) async throws -> Int64 {
        let key = Self.newKey(account: account), now = Date().timeIntervalSince1970
        let id = try await database.transaction { db in
            try await db.rows("""
                INSERT INTO pack (account_id, object_key, state, size, live_bytes, created, changed)
                VALUES (\(account), \(key), 'writing', \(Int64(pack.body.readableBytes)), 0, \(now), \(now)) RETURNING id
                """).first!.get("id", as: Int64.self)
        }
        try await afterStep?(.intentRecorded)
        do {
            try await objects.put(key, body: pack.body, ifAbsent: true)
        } catch let error as ObjectStoreError {
            throw SyncError(.serviceUnavailable, "objectStoreUnavailable", "chunks could not be stored: \(error)")
        }
        try await afterStep?(.objectWritten)
        return id
    }

    /// A new pack's key: `chunks/ACCOUNT/` and 128 random bits (never reused: packs are never
    /// written twice).
    static func newKey(account: Int64) -> String {
        var generator = SystemRandomNumberGenerator()
        return "chunks/\(account)/" + (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    /// Whether `data` is chunk `hash`: its SHA-256 is the recorded `digest` (a sealed chunk) or its name.
    static func isSound(_ data: Data, hash: String, digest: [UInt8]?) -> Bool {
        let actual = SHA256.hash(data: data)
        if let digest { return Array(actual) == digest }
        return actual.matches(lowercaseHex: hash)
    }

    // MARK: Reading

    /// Where a chunk is: in a pack, or waiting in the database with its bytes.
    enum Place: Sendable {
        /// In the pack `key` (of `packSize` bytes; nil: not known).
        case packed(key: String, offset: Int, length: Int, packSize: Int? = nil)
        case waiting(Data)

        var length: Int {
            switch self {
            case .packed(_, _, let length, _): length
            case .waiting(let data): data.count
            }
        }
    }

    /// Where each of `hashes` of `account` is (those stored). One statement, so one snapshot:
    /// a chunk being packed meanwhile is seen on one side or the other, never on neither (found
    /// by `twoInstancesHousekeepingAtOnceLoseNothing`: two queries missed a chunk packed between them).
    func places(of hashes: [String], account: Int64) async throws -> [String: Place] {
        guard !hashes.isEmpty else { return [:] }
        let unique = Array(Set(hashes))
        return try await database.read { db in
            var places: [String: Place] = [:]
            for row in try await db.rows("""
                SELECT packed_chunk.hash, pack_offset, length, object_key, pack.size, NULL::BYTEA AS data FROM packed_chunk JOIN pack ON pack.id = packed_chunk.pack_id
                WHERE packed_chunk.account_id = \(account) AND packed_chunk.hash = ANY(\(unique)::TEXT[])
                UNION ALL SELECT hash, NULL, NULL, NULL, NULL, data FROM chunk_content WHERE account_id = \(account) AND hash = ANY(\(unique)::TEXT[])
                """) {
                let hash = try row.get("hash", as: String.self)
                if let key = try row.get("object_key", as: String?.self) {
                    places[hash] = .packed(key: key, offset: Int(try row.get("pack_offset", as: Int64.self)), length: Int(try row.get("length", as: Int32.self)),
                                           packSize: Int(try row.get("size", as: Int64.self)))
                } else if places[hash] == nil, let data = try row.get("data", as: ByteBuffer?.self) {
                    places[hash] = .waiting(Data(data.readableBytesView))
                }
            }
            return places
        }
    }

    func load(hash: String, account: Int64) async throws -> Data? {
        try await load([hash], account: account, upTo: .max).first
    }

    /// Reads chunks as ranged GETs: the ranges of one pack at most ``Settings/mergeGap`` apart
    /// as one, several in flight. A pack gone meanwhile (compacted) has its chunks looked up
    /// again, once. The bytes are checked against their names by ``VerifiedChunks`` before
    /// they are served.
    func load(_ hashes: [String], account: Int64, upTo limit: Int) async throws -> [Data] {
        var places = try await places(of: hashes, account: account)
        var chosen: [String] = [], total = 0
        for hash in hashes {
            guard let place = places[hash], chosen.isEmpty || total + place.length <= limit else { break }
            chosen.append(hash)
            total += place.length
        }
        var bytes = try await read(chosen, places: places)
        let lost = chosen.filter { bytes[$0] == nil }
        if !lost.isEmpty {
            // Compacted meanwhile: where are they now?
            let again = try await self.places(of: lost, account: account)
            for (hash, place) in again { places[hash] = place }
            for (hash, data) in try await read(lost.filter { again[$0] != nil }, places: again) { bytes[hash] = data }
            // (The pack named, not the chunk: a plaintext chunk's name is the SHA-256 of its bytes.)
            for hash in lost where bytes[hash] == nil {
                guard case .packed(let key, _, _, _)? = again[hash] else { continue }
                logger.error("a chunk's pack is missing from the object store", metadata: ["account": "\(account)", "pack": "\(key)"])
            }
        }
        var loaded: [Data] = []
        for hash in chosen {
            guard let data = bytes[hash] else { break }
            loaded.append(data)
        }
        return loaded
    }

    /// The bytes of `hashes` at `places` (a pack that is gone leaves its chunks out). A large
    /// read goes through the read cache, reading ahead to its pack's end, unless not `caching`
    /// (compaction's reads, which no fetch will ask for again).
    func read(_ hashes: [String], places: [String: Place], caching: Bool = true) async throws -> [String: Data] {
        var bytes: [String: Data] = [:]
        var wanted: [String: [(hash: String, offset: Int, length: Int)]] = [:]
        var packSizes: [String: Int] = [:]
        for hash in Set(hashes) {
            switch places[hash] {
            case .waiting(let data)?: bytes[hash] = data
            case .packed(let key, let offset, let length, let packSize)?:
                wanted[key, default: []].append((hash, offset, length))
                packSizes[key] = packSize
            case nil: break
            }
        }
        // Neighbouring ranges as one read.
        var reads: [(key: String, range: Range<Int>, parts: [(hash: String, offset: Int, length: Int)])] = []
        for (key, parts) in wanted {
            for part in parts.sorted(by: { $0.offset < $1.offset }) {
                if let last = reads.last, last.key == key, part.offset - last.range.upperBound <= settings.mergeGap,
                   part.offset + part.length - last.range.lowerBound <= settings.largestRead {
                    reads[reads.count - 1].range = last.range.lowerBound..<max(last.range.upperBound, part.offset + part.length)
                    reads[reads.count - 1].parts.append(part)
                } else {
                    reads.append((key, part.offset..<(part.offset + part.length), [part]))
                }
            }
        }
        try await withThrowingTaskGroup(of: [String: Data].self) { group in
            var next = reads.startIndex
            func start() {
                guard next < reads.endIndex else { return }
                let read = reads[next]
                next += 1
                // A large read reads its whole pack, through the cache (fetches of a large file
                // come in any order, several at once: each finds the pack read or being read);
                // from a pack larger than `largestRead`, that much from the read on.
                let packSize = packSizes[read.key] ?? 0
                let ahead = packSize == 0 ? read.range : packSize <= settings.largestRead
                    ? 0..<max(read.range.upperBound, packSize)
                    : read.range.lowerBound..<max(read.range.upperBound, min(packSize, read.range.lowerBound + settings.largestRead))
                let cached = caching && read.range.count >= settings.readAheadMinimum
                group.addTask { [objects, cache] in
                    let body: ByteBuffer
                    do {
                        if cached {
                            body = try await cache.bytes(of: read.key, read.range, readingAhead: ahead) { try await objects.get(read.key, range: $0) }
                        } else if caching, let kept = try await cache.lookUp(read.key, read.range) {
                            body = kept // (a small read of a pack read lately: what is left of a fetch)
                        } else {
                            body = try await objects.get(read.key, range: read.range)
                        }
                    } catch ObjectStoreError.notFound {
                        return [:] // compacted meanwhile: looked up again
                    } catch let error as ObjectStoreError {
                        throw SyncError(.serviceUnavailable, "objectStoreUnavailable", "chunks could not be read: \(error)")
                    }
                    var found: [String: Data] = [:]
                    for part in read.parts {
                        found[part.hash] = body.getData(at: body.readerIndex + part.offset - read.range.lowerBound, length: part.length)
                    }
                    return found
                }
            }
            for _ in 0..<settings.readsInFlight { start() }
            while let found = try await group.next() {
                bytes.merge(found) { first, _ in first }
                start()
            }
        }
        return bytes
    }

    func sealedDigests(of hashes: [String], account: Int64) async throws -> [String: [UInt8]] {
        guard !hashes.isEmpty else { return [:] }
        return try await database.read { db in
            var digests: [String: [UInt8]] = [:]
            for row in try await db.rows("""
                SELECT hash, digest FROM packed_chunk WHERE account_id = \(account) AND digest IS NOT NULL AND hash = ANY(\(hashes)::TEXT[])
                UNION ALL SELECT hash, digest FROM chunk_content WHERE account_id = \(account) AND digest IS NOT NULL AND hash = ANY(\(hashes)::TEXT[])
                """) {
                digests[try row.get("hash")] = Array(try row.get("digest", as: ByteBuffer.self).readableBytesView)
            }
            return digests
        }
    }

    // MARK: Removing

    func remove(hash: String, account: Int64) async throws {
        let now = Date().timeIntervalSince1970
        try await database.transaction { db in
            // The waiting copy first: a packer taking it holds its row until its pack is
            // recorded, so this waits for that and then finds the chunk in its pack (the other
            // order let a chunk packed in between come back — found by
            // `twoInstancesHousekeepingAtOnceLoseNothing` under CI's load).
            try await db.rows("DELETE FROM chunk_content WHERE account_id = \(account) AND hash = \(hash)")
            for row in try await db.rows("DELETE FROM packed_chunk WHERE account_id = \(account) AND hash = \(hash) RETURNING pack_id, length") {
                let pack = try row.get("pack_id", as: Int64.self), length = Int64(try row.get("length", as: Int32.self))
                try await db.rows("""
                    UPDATE pack SET live_bytes = live_bytes - \(length), changed = \(now),
                        state = CASE WHEN live_bytes - \(length) <= 0 THEN 'doomed' ELSE state END
                    WHERE id = \(pack)
                    """)
            }
        }
    }

    /// The account's packs are doomed (its rows went with it).
    func removeAccount(_ account: Int64) async throws {
        let now = Date().timeIntervalSince1970
        try await database.transaction { db in
            try await db.rows("DELETE FROM packed_chunk WHERE account_id = \(account)")
            try await db.rows("UPDATE pack SET state = 'doomed', live_bytes = 0, changed = \(now) WHERE account_id = \(account) AND state = 'live'")
        }
    }

    func storedChunks() async throws -> [ChunkEntry] {
        try await database.read { db in
            try await db.rows("""
                SELECT account_id, hash, length::BIGINT AS size, created FROM packed_chunk
                UNION ALL SELECT account_id, hash, octet_length(data)::BIGINT AS size, created FROM chunk_content
                """).map {
                ChunkEntry(account: try $0.get("account_id"), hash: try $0.get("hash"), size: try $0.get("size"),
                           created: Date(timeIntervalSince1970: try $0.get("created")))
            }
        }
    }
}
