import Crypto
import Foundation
import Logging
import GRDB
import Hummingbird
import NIOPosix
import UbiquityFiles
import UbiquityProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Where chunk contents live: files in the data directory (``FileChunkStore``) or rows in
/// PostgreSQL (``PostgresChunkStore``), so instances on several machines share them.
protocol ChunkStorage: Sendable {
    /// Stores chunks of `account` (nothing for one that is there already), each checked
    /// against its hash first — unless `checked`: the caller hashed these very bytes itself
    /// (chunks it cut, or checked against their names a moment ago) — so that one that does not
    /// match stores none of them.
    ///
    /// `sealed` chunks (an encrypted account's: named by a keyed MAC of a plaintext the server
    /// never sees) cannot be checked against their names: the SHA-256 of their bytes is recorded
    /// instead (``sealedDigests(of:account:)``), and every later read is checked against it.
    /// - Throws: ``SyncError`` (`hashMismatch`) if some bytes do not hash to their hash; storage errors.
    func store(_ chunks: [ChunkBatch.Chunk], account: Int64, checked: Bool, sealed: Bool) async throws
    /// The SHA-256 recorded for each of `hashes` that is a sealed chunk of `account` (a chunk
    /// whose name is the hash of its bytes is left out).
    func sealedDigests(of hashes: [String], account: Int64) async throws -> [String: [UInt8]]
    /// The contents of chunk `hash` of `account`; nil if it is not stored.
    func load(hash: String, account: Int64) async throws -> Data?
    /// The contents of chunks of `account`, in the order of `hashes`: as many as fit in `limit`
    /// bytes (at least one), stopping before the first that is not stored.
    func load(_ hashes: [String], account: Int64, upTo limit: Int) async throws -> [Data]
    /// Writes chunks of `account` at the end of `batch` as a ``ChunkBatch`` frames them, in the
    /// order of `hashes`: as many as fit in `limit` bytes of chunks (at least one), stopping
    /// before the first that is not stored. Returns where each one's bytes are in `batch`.
    /// (A fetch's answer, read straight into the body that is sent.)
    func loadBatch(_ hashes: [String], account: Int64, upTo limit: Int, into batch: inout ByteBuffer) async throws -> [Range<Int>]
    /// As ``loadBatch(_:account:upTo:into:)``, and for each chunk loaded whether the storage
    /// vouches for its bytes: read from where it wrote them itself, after checking them against
    /// their hash, and not written since (see ``FreshPacks``). ``VerifiedChunks`` hashes the others.
    func loadVouchedBatch(_ hashes: [String], account: Int64, upTo limit: Int, into batch: inout ByteBuffer) async throws -> (places: [Range<Int>], vouched: [Bool])
    /// Removes one chunk (nothing if it is not stored).
    /// - Throws: Storage errors: the chunk may still be there.
    func remove(hash: String, account: Int64) async throws
    /// Removes every chunk of an account.
    /// - Throws: Storage errors: some chunks may still be there.
    func removeAccount(_ account: Int64) async throws
    /// Frees the room removed chunks left (after garbage collection); returns the bytes freed.
    @discardableResult
    func compact(orphanAge: TimeInterval) async throws -> Int64
    /// Puts a damaged chunk aside: it is no longer stored (a new upload stores it afresh); its
    /// damaged bytes are kept where the operator can look at them, if the storage can; returns
    /// where (nil: not kept).
    func quarantine(hash: String, account: Int64, damaged: Data) async throws -> String?
    /// Every chunk stored, whether the database lists it or not (`ubiquity fsck`).
    func storedChunks() async throws -> [ChunkEntry]
    /// The folder chunks are kept in, when they are files (the operator's page shows its file
    /// system's free space); nil when they are not.
    var folder: String? { get }
}

extension ChunkStorage {
    var folder: String? { nil }

    /// Stores chunks of `account`, each checked against its hash first.
    func store(_ chunks: [ChunkBatch.Chunk], account: Int64) async throws {
        try await store(chunks, account: account, checked: false, sealed: false)
    }

    /// Stores chunks of `account` named by the hash of their bytes (checked first unless `checked`).
    func store(_ chunks: [ChunkBatch.Chunk], account: Int64, checked: Bool) async throws {
        try await store(chunks, account: account, checked: checked, sealed: false)
    }

    /// Whether `data`, stored as chunk `hash` of `account`, is what was stored: its SHA-256 is
    /// the recorded one (a sealed chunk) or its name.
    func isSound(_ data: Data, hash: String, account: Int64) async throws -> Bool {
        let digest = SHA256.hash(data: data)
        if let recorded = try await sealedDigests(of: [hash], account: account)[hash] { return Array(digest) == recorded }
        return digest.matches(lowercaseHex: hash)
    }

    func load(_ hashes: [String], account: Int64, upTo limit: Int) async throws -> [Data] {
        var loaded: [Data] = [], total = 0
        for hash in hashes {
            guard let data = try await load(hash: hash, account: account), loaded.isEmpty || total + data.count <= limit else { break }
            loaded.append(data)
            total += data.count
        }
        return loaded
    }

    func loadBatch(_ hashes: [String], account: Int64, upTo limit: Int, into batch: inout ByteBuffer) async throws -> [Range<Int>] {
        let loaded = try await load(hashes, account: account, upTo: limit)
        batch.reserveCapacity(minimumWritableBytes: loaded.reduce(0) { $0 + ChunkBatch.framing + $1.count })
        return zip(hashes, loaded).map { hash, bytes in batch.writeFramedChunk(hash: hash, bytes) }
    }

    /// Vouches for none by default: every chunk is hashed when read.
    func loadVouchedBatch(_ hashes: [String], account: Int64, upTo limit: Int, into batch: inout ByteBuffer) async throws -> (places: [Range<Int>], vouched: [Bool]) {
        let places = try await loadBatch(hashes, account: account, upTo: limit, into: &batch)
        return (places, Array(repeating: false, count: places.count))
    }

    /// Nothing to free by default (PostgreSQL reclaims rows itself).
    func compact(orphanAge: TimeInterval) async throws -> Int64 { 0 }

    /// By default the damaged bytes are simply removed.
    func quarantine(hash: String, account: Int64, damaged: Data) async throws -> String? {
        try await remove(hash: hash, account: account)
        return nil
    }

    /// Throws `hashMismatch` unless `bytes` hash (SHA-256) to `hash`.
    static func verify(_ bytes: ArraySlice<UInt8>, hash: String) throws {
        let digest = bytes.withUnsafeBytes { SHA256.hash(data: $0) }
        guard digest.matches(lowercaseHex: hash) else {
            throw SyncError.badRequest("hashMismatch", "the chunk's bytes hash to \(digest.lowercaseHex), not \(hash)")
        }
    }
}

extension ByteBuffer {
    /// Writes chunk `hash`'s `bytes` as a ``ChunkBatch`` frames it; where its bytes are.
    mutating func writeFramedChunk(hash: String, _ bytes: some Collection<UInt8>) -> Range<Int> {
        writeBytes(ChunkBatch.frame(hash: hash, length: bytes.count))
        let start = writerIndex
        writeBytes(bytes)
        return start..<writerIndex
    }
}

/// Chunk contents on disk, per account, in pack files: each stored batch is one file
/// (`DIR/ACCOUNT/packs/ID.pack`, the chunks one after the other), written, `fsync`ed with its
/// folder, and only then entered in the index (`DIR/index.sqlite`: which pack holds each chunk,
/// where), so an indexed chunk is always whole and correct. One file per batch instead of one
/// per chunk: creating thousands of small files is what made a large upload slow.
///
/// Removing chunks leaves dead bytes in their packs; ``compact()`` rewrites packs that are
/// mostly dead and deletes packs left unindexed by a crash. Chunks stored one file each by
/// earlier versions (`DIR/ACCOUNT/ab/abcdef…`) are still read and removed.
struct FileChunkStore: ChunkStorage {
    let directory: String
    var folder: String? { directory }
    let index: DatabasePool
    /// The packs this store wrote lately, whose chunks it vouches for while nothing writes them.
    let freshPacks: FreshPacks

    /// The store in `directory` (made if missing), remembering the packs it writes in `freshPacks`.
    init(directory: String, freshPacks: FreshPacks = FreshPacks(), logger: Logger = Logger(label: "ubiquity.server")) throws {
        self.directory = directory
        self.freshPacks = freshPacks
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        ServerStorage.keepPrivate(directory, logger: logger)
        ServerStorage.prepareDatabaseFile(directory + "/index.sqlite", logger: logger)
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        // What is deleted is overwritten (the names of plaintext chunks sealed in place go).
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA secure_delete = ON") }
        index = try DatabasePool(path: directory + "/index.sqlite", configuration: configuration)
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1-packs") { db in
            try db.execute(sql: """
                CREATE TABLE pack (id TEXT PRIMARY KEY, account INTEGER NOT NULL, size INTEGER NOT NULL, live INTEGER NOT NULL, created REAL NOT NULL);
                CREATE TABLE chunk (account INTEGER NOT NULL, hash TEXT NOT NULL, pack TEXT NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,
                    PRIMARY KEY (account, hash));
                CREATE INDEX chunk_pack ON chunk(pack);
                """)
        }
        migrator.registerMigration("v2-sealed-digests") { db in
            // A sealed chunk's SHA-256 (its name is a keyed MAC the server cannot check).
            try db.execute(sql: "ALTER TABLE chunk ADD COLUMN digest BLOB")
        }
        try migrator.migrate(index)
    }

    func packPath(account: Int64, pack: String) -> String { "\(directory)/\(account)/packs/\(pack).pack" }

    /// Where earlier versions kept a chunk, one file each.
    func loosePath(account: Int64, hash: String) -> String { "\(directory)/\(account)/\(hash.prefix(2))/\(hash)" }

    func store(_ chunks: [ChunkBatch.Chunk], account: Int64, checked: Bool, sealed: Bool) async throws {
        if !checked && !sealed { for chunk in chunks { try Self.verify(chunk.bytes, hash: chunk.hash) } }
        // The caller stores what its database lacks; one the index has already (a crash between
        // indexing and recording it) is dead bytes in the new pack, not a second entry (below).
        let loose = hasLooseChunks(account: account)
        var fresh: [ChunkBatch.Chunk] = [], seen = Set<String>()
        for chunk in chunks where seen.insert(chunk.hash).inserted
            && !(loose && FileManager.default.fileExists(atPath: loosePath(account: account, hash: chunk.hash))) {
            fresh.append(chunk)
        }
        guard !fresh.isEmpty else { return }
        let pack = UUID().uuidString.lowercased()
        let path = packPath(account: account, pack: pack)
        // Written and synced on a thread of the I/O pool: an `fsync` waits milliseconds for the
        // disk, and a few uploads at once waiting on the cooperative threads would stall every
        // request on a small machine.
        let pieces = fresh.map(\.bytes)
        let written = try await NIOThreadPool.singleton.runIfActive { try Self.writeDurably(pieces, to: path) }
        let unused: Bool
        // Names and lengths only: the write's closure may outlive the call a moment on the
        // database's queue, and must not hold the request's body (kept for the next request).
        let entries = fresh.map { (hash: $0.hash, length: $0.bytes.count, digest: sealed ? Data(SHA256.hash(data: $0.bytes)) : nil) }
        do {
            unused = try await index.write { db in
                let size = entries.reduce(0) { $0 + $1.length }
                try db.cachedStatement(sql: "INSERT INTO pack (id, account, size, live, created) VALUES (?, ?, ?, 0, ?)")
                               .execute(arguments: [pack, account, size, Date().timeIntervalSince1970])
                var offset = 0, live = 0
                let insert = try db.cachedStatement(sql: "INSERT OR IGNORE INTO chunk (account, hash, pack, offset, length, digest) VALUES (?, ?, ?, ?, ?, ?)")
                for chunk in entries {
                    // Stored meanwhile by another upload: that copy stays, this one is dead bytes.
                    try insert.execute(arguments: [account, chunk.hash, pack, offset, chunk.length, chunk.digest])
                    if db.changesCount > 0 { live += chunk.length }
                    offset += chunk.length
                }
                if live == 0 && size > 0 {
                    try db.cachedStatement(sql: "DELETE FROM chunk WHERE pack = ?").execute(arguments: [pack])
                    try db.cachedStatement(sql: "DELETE FROM pack WHERE id = ?").execute(arguments: [pack])
                    return true
                }
                try db.cachedStatement(sql: "UPDATE pack SET live = ? WHERE id = ?").execute(arguments: [live, pack])
                return false
            }
        } catch {
            unlink(path)
            throw error
        }
        if unused { unlink(path) } else { freshPacks.wrote(pack, status: written) }
    }

    func load(_ hashes: [String], account: Int64, upTo limit: Int) async throws -> [Data] {
        var batch = ByteBuffer()
        let places = try await loadBatch(hashes, account: account, upTo: limit, into: &batch)
        return places.map { Data(batch.readableBytesView[$0]) }
    }

    func loadBatch(_ hashes: [String], account: Int64, upTo limit: Int, into batch: inout ByteBuffer) async throws -> [Range<Int>] {
        try await loadVouchedBatch(hashes, account: account, upTo: limit, into: &batch).places
    }

    func loadVouchedBatch(_ hashes: [String], account: Int64, upTo limit: Int, into batch: inout ByteBuffer) async throws -> (places: [Range<Int>], vouched: [Bool]) {
        // Where each is, from one look at the index; then each pack opened once, and each chunk
        // read from it straight into the batch.
        let places = try await self.places(of: hashes, account: account)
        var loaded: [Range<Int>] = [], vouched: [Bool] = [], total = 0
        var open: (pack: String, fd: Int32, vouched: Bool)?
        defer { if let open { close(open.fd) } }
        batch.reserveCapacity(minimumWritableBytes: min(limit, places.values.reduce(0) { $0 + $1.length }) + hashes.count * ChunkBatch.framing)
        for hash in hashes {
            if let place = places[hash] {
                if !loaded.isEmpty && total + place.length > limit { break }
                if open?.pack != place.pack {
                    if let open { close(open.fd) }
                    let fd = Glibc.open(packPath(account: account, pack: place.pack), O_RDONLY | O_CLOEXEC)
                    open = (place.pack, fd, fd >= 0 && freshPacks.vouches(for: place.pack, fd: fd))
                }
                let frameStart = batch.writerIndex
                batch.writeBytes(ChunkBatch.frame(hash: hash, length: place.length))
                let start = batch.writerIndex
                if let open, open.fd >= 0, Self.read(open.fd, offset: place.offset, length: place.length, into: &batch) {
                    loaded.append(start..<batch.writerIndex)
                    vouched.append(open.vouched)
                    total += place.length
                    continue
                }
                batch.moveWriterIndex(to: frameStart) // compacted meanwhile: looked for again below
            }
            // Not packed (a chunk of an earlier version), or its pack compacted meanwhile.
            guard let data = try await load(hash: hash, account: account) else { break }
            if !loaded.isEmpty && total + data.count > limit { break }
            loaded.append(batch.writeFramedChunk(hash: hash, data))
            vouched.append(false)
            total += data.count
        }
        return (loaded, vouched)
    }

    func sealedDigests(of hashes: [String], account: Int64) async throws -> [String: [UInt8]] {
        try await index.read { db in
            var digests: [String: [UInt8]] = [:]
            for start in stride(from: 0, to: hashes.count, by: 500) {
                let batch = Array(hashes[start..<min(start + 500, hashes.count)])
                let marks = Array(repeating: "?", count: batch.count).joined(separator: ",")
                for row in try Row.fetchAll(db, sql: "SELECT hash, digest FROM chunk WHERE account = ? AND digest IS NOT NULL AND hash IN (\(marks))",
                                            arguments: StatementArguments([account] + batch)) {
                    digests[row["hash"]] = Array(row["digest"] as Data)
                }
            }
            return digests
        }
    }

    /// Where the index says each of `hashes` is (those it does not name are not packed).
    func places(of hashes: [String], account: Int64) async throws -> [String: (pack: String, offset: Int64, length: Int)] {
        try await index.read { db in
            var places: [String: (pack: String, offset: Int64, length: Int)] = [:]
            for start in stride(from: 0, to: hashes.count, by: 500) {
                let batch = Array(hashes[start..<min(start + 500, hashes.count)])
                let marks = Array(repeating: "?", count: batch.count).joined(separator: ",")
                for row in try Row.fetchAll(db, sql: "SELECT hash, pack, offset, length FROM chunk WHERE account = ? AND hash IN (\(marks))",
                                            arguments: StatementArguments([account] + batch)) {
                    places[row["hash"]] = (row["pack"], row["offset"], row["length"])
                }
            }
            return places
        }
    }

    func load(hash: String, account: Int64) async throws -> Data? {
        // Twice: a pack being compacted may go between reading the index and opening it.
        for _ in 0..<2 {
            let place = try await index.read { db in
                try Row.fetchOne(db.cachedStatement(sql: "SELECT pack, offset, length FROM chunk WHERE account = ? AND hash = ?"), arguments: [account, hash])
                    .map { (pack: $0["pack"] as String, offset: $0["offset"] as Int64, length: $0["length"] as Int) }
            }
            guard let place else { return FileManager.default.contents(atPath: loosePath(account: account, hash: hash)) }
            if let data = Self.read(packPath(account: account, pack: place.pack), offset: place.offset, length: place.length) { return data }
        }
        throw SyncError(.internalServerError, "storageFailure", "chunk \(hash) is indexed but its pack cannot be read")
    }

    func remove(hash: String, account: Int64) async throws {
        let loose = loosePath(account: account, hash: hash)
        if unlink(loose) != 0 && errno != ENOENT {
            throw SyncError(.internalServerError, "storageFailure", "cannot remove chunk \(hash): \(String(cString: strerror(errno)))")
        }
        let emptied = try await index.write { db -> String? in
            guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT pack, length FROM chunk WHERE account = ? AND hash = ?"), arguments: [account, hash]) else { return nil }
            let pack: String = row["pack"]
            try db.cachedStatement(sql: "DELETE FROM chunk WHERE account = ? AND hash = ?").execute(arguments: [account, hash])
            try db.cachedStatement(sql: "UPDATE pack SET live = live - ? WHERE id = ?").execute(arguments: [row["length"] as Int64, pack])
            guard try Int64.fetchOne(db.cachedStatement(sql: "SELECT COUNT(*) FROM chunk WHERE pack = ?"), arguments: [pack]) == 0 else { return nil }
            try db.cachedStatement(sql: "DELETE FROM pack WHERE id = ?").execute(arguments: [pack])
            return pack
        }
        // A pack the index no longer names is swept by compaction if this unlink fails.
        if let pack = emptied { unlink(packPath(account: account, pack: pack)) }
    }

    func storedChunks() async throws -> [ChunkEntry] {
        var entries = try await index.read { db in
            try Row.fetchAll(db, sql: "SELECT chunk.account, chunk.hash, chunk.length, pack.created FROM chunk JOIN pack ON pack.id = chunk.pack").map {
                ChunkEntry(account: $0["account"], hash: $0["hash"], size: $0["length"], created: Date(timeIntervalSince1970: $0["created"]))
            }
        }
        // Chunks stored one file each by earlier versions: DIR/ACCOUNT/ab/abcdef….
        // A folder or file that cannot be read fails the check (it says what and why) rather
        // than leaving its chunks out of it.
        let files = FileManager.default
        for account in try files.contentsOfDirectory(atPath: directory) {
            guard let id = Int64(account) else { continue }
            for folder in try files.contentsOfDirectory(atPath: "\(directory)/\(account)") where folder.count == 2 {
                for hash in try files.contentsOfDirectory(atPath: "\(directory)/\(account)/\(folder)") where hash.hasPrefix(folder) {
                    let attributes = try files.attributesOfItem(atPath: loosePath(account: id, hash: hash))
                    entries.append(ChunkEntry(account: id, hash: hash, size: (attributes[.size] as? Int64) ?? Int64((attributes[.size] as? Int) ?? 0),
                                              created: (attributes[.modificationDate] as? Date) ?? .distantPast))
                }
            }
        }
        return entries
    }

    /// Keeps the damaged bytes in `DIR/quarantine/ACCOUNT-HASH-TIME`, then removes the chunk.
    func quarantine(hash: String, account: Int64, damaged: Data) async throws -> String? {
        let kept = "\(directory)/quarantine/\(account)-\(hash)-\(Int(Date().timeIntervalSince1970))"
        let saved = (try? Self.writeDurably([[UInt8](damaged)], to: kept)) != nil
        try await remove(hash: hash, account: account)
        return saved ? kept : nil
    }

    func removeAccount(_ account: Int64) async throws {
        try await index.write { db in
            try db.cachedStatement(sql: "DELETE FROM chunk WHERE account = ?").execute(arguments: [account])
            try db.cachedStatement(sql: "DELETE FROM pack WHERE account = ?").execute(arguments: [account])
        }
        let folder = "\(directory)/\(account)"
        guard FileManager.default.fileExists(atPath: folder) else { return }
        do { try FileManager.default.removeItem(atPath: folder) } catch {
            throw SyncError(.internalServerError, "storageFailure", "cannot remove the chunks of account \(account) in \(folder): \(error.localizedDescription)")
        }
    }

    /// Rewrites packs that are more than half dead bytes (their live chunks into a new pack),
    /// and deletes pack files the index does not name that are older than `orphanAge` (left by
    /// a crash between writing a pack and indexing it). Returns the bytes freed.
    @discardableResult
    func compact(orphanAge: TimeInterval = 3_600) async throws -> Int64 {
        var freed: Int64 = 0
        let sparse = try await index.read { db in
            try Row.fetchAll(db.cachedStatement(sql: "SELECT id, account, size FROM pack WHERE live * 2 < size")).map { (id: $0["id"] as String, account: $0["account"] as Int64, size: $0["size"] as Int64) }
        }
        for old in sparse {
            let live = try await index.read { db in
                try Row.fetchAll(db.cachedStatement(sql: "SELECT hash, offset, length FROM chunk WHERE pack = ? ORDER BY offset"), arguments: [old.id])
                    .map { (hash: $0["hash"] as String, offset: $0["offset"] as Int64, length: $0["length"] as Int) }
            }
            var chunks: [(hash: String, bytes: [UInt8])] = []
            for chunk in live {
                guard let data = Self.read(packPath(account: old.account, pack: old.id), offset: chunk.offset, length: chunk.length) else { continue }
                chunks.append((chunk.hash, [UInt8](data)))
            }
            let pack = UUID().uuidString.lowercased()
            if !chunks.isEmpty { try Self.writeDurably(chunks.map(\.bytes), to: packPath(account: old.account, pack: pack)) }
            let moved = chunks
            try await index.write { db in
                if !moved.isEmpty {
                    let size = moved.reduce(0) { $0 + $1.bytes.count }
                    try db.cachedStatement(sql: "INSERT INTO pack (id, account, size, live, created) VALUES (?, ?, ?, ?, ?)")
                                   .execute(arguments: [pack, old.account, size, size, Date().timeIntervalSince1970])
                    var offset = 0
                    for chunk in moved {
                        try db.cachedStatement(sql: "UPDATE chunk SET pack = ?, offset = ? WHERE account = ? AND hash = ? AND pack = ?")
                                       .execute(arguments: [pack, offset, old.account, chunk.hash, old.id])
                        offset += chunk.bytes.count
                    }
                }
                // Chunks removed meanwhile were not moved: the new pack's count says what is live.
                try db.cachedStatement(sql: "UPDATE pack SET live = COALESCE((SELECT SUM(length) FROM chunk WHERE pack = ?), 0) WHERE id = ?").execute(arguments: [pack, pack])
                try db.cachedStatement(sql: "DELETE FROM chunk WHERE pack = ?").execute(arguments: [old.id])
                try db.cachedStatement(sql: "DELETE FROM pack WHERE id = ?").execute(arguments: [old.id])
            }
            unlink(packPath(account: old.account, pack: old.id))
            freed += old.size - Int64(chunks.reduce(0) { $0 + $1.bytes.count })
        }
        // Packs no index entry names, old enough not to be an upload in progress.
        let indexed = Set(try await index.read { db in try String.fetchAll(db.cachedStatement(sql: "SELECT id FROM pack")) })
        // Sweeping orphans is best effort: what cannot be listed now is swept by a later collection.
        let accounts = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for account in accounts where Int64(account) != nil {
            let folder = "\(directory)/\(account)/packs"
            for file in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] where file.hasSuffix(".pack") {
                let path = folder + "/" + file
                guard !indexed.contains(String(file.dropLast(5))),
                      let attributes = try? FileManager.default.attributesOfItem(atPath: path),
                      let modified = attributes[.modificationDate] as? Date, Date().timeIntervalSince(modified) > orphanAge else { continue }
                freed += (attributes[.size] as? Int64) ?? Int64((attributes[.size] as? Int) ?? 0)
                unlink(path)
            }
        }
        // The index's log holds earlier pages (the names of chunks removed): emptied.
        try await index.writeWithoutTransaction { db in _ = try db.checkpoint(.truncate) }
        return freed
    }

    /// Whether `account` has chunks stored one file each by earlier versions (`DIR/ACCOUNT/ab/…`):
    /// one look at its folder, instead of one per chunk stored.
    func hasLooseChunks(account: Int64) -> Bool {
        // A folder that cannot be listed holds no loose chunks this store could find either.
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "\(directory)/\(account)")) ?? []
        return entries.contains { $0.count == 2 }
    }

    /// Writes `pieces` one after the other as a new file at `path`, then `fsync`s it and its
    /// folder: once this returns, the file and its name survive a crash. Returns the file's
    /// status as written (its status-change time changes with any later write).
    @discardableResult
    static func writeDurably<Piece: ContiguousBytes>(_ pieces: [Piece], to path: String) throws -> stat {
        let folder = (path as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ioError("create", path) }
        var ok = false, status = stat()
        defer { if !ok { unlink(path) } }
        do {
            defer { close(fd) }
            for bytes in pieces {
                guard bytes.withUnsafeBytes({ SystemCall.writeAll(fd, $0) }) >= 0 else { throw ioError("write", path) }
            }
            guard fsync(fd) == 0 else { throw ioError("fsync", path) }
            guard fstat(fd, &status) == 0 else { throw ioError("stat", path) }
        }
        let directory = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { throw ioError("open", folder) }
        defer { close(directory) }
        guard fsync(directory) == 0 else { throw ioError("fsync", folder) }
        ok = true
        return status
    }

    /// `length` bytes at `offset` of the file at `path`; nil if it is not there or shorter.
    static func read(_ path: String, offset: Int64, length: Int) -> Data? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return read(fd, offset: offset, length: length)
    }

    /// `length` bytes at `offset` of the open file `fd`; nil if it is shorter.
    static func read(_ fd: Int32, offset: Int64, length: Int) -> Data? {
        var data = Data(count: length)
        let got = data.withUnsafeMutableBytes { SystemCall.readFully(fd, into: $0, at: offset) }
        return got == length ? data : nil
    }

    /// Reads `length` bytes at `offset` of the open file `fd` onto the end of `buffer`; false
    /// (and `buffer` as it was) if the file is shorter or cannot be read.
    static func read(_ fd: Int32, offset: Int64, length: Int, into buffer: inout ByteBuffer) -> Bool {
        var complete = false
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { room in
            let got = SystemCall.readFully(fd, into: UnsafeMutableRawBufferPointer(rebasing: room[..<length]), at: offset)
            complete = got == length
            return complete ? length : 0
        }
        return complete
    }

    static func ioError(_ operation: String, _ path: String) -> SyncError {
        let reason = String(cString: strerror(errno))
        if errno == ENOSPC || errno == EDQUOT { return SyncError.noSpace }
        return SyncError(.internalServerError, "storageFailure", "\(operation) failed: \(reason)")
    }
}
