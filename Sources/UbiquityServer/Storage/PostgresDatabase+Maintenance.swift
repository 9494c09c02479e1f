import Crypto
import Foundation
import UbiquityProtocol
import Logging
import PostgresNIO

/// Recovery, garbage collection and other instances' changes on PostgreSQL.
extension PostgresDatabase {
    // MARK: Recovery and garbage collection

    func recoverable(accountName: String, now: Date, retention: TimeInterval) async throws -> [RecoverableRevision] {
        try await read { db in
            try await db.rows("""
                SELECT revision.id, container.identifier, revision.item_id, revision.name, revision.device_name, revision.size,
                    revision.modification_date, revision.created, revision.complete, revision.record, revision.parent,
                    (SELECT current.deleted FROM revision AS current JOIN item ON item.current_revision = current.id
                     WHERE item.container_id = revision.container_id AND item.id = revision.item_id) AS item_deleted
                FROM revision JOIN container ON container.id = revision.container_id JOIN account ON account.id = container.account_id
                WHERE account.name = \(accountName) AND revision.state IN ('replaced', 'resolved', 'superseded') AND NOT revision.deleted
                    AND revision.created >= \(now.timeIntervalSince1970 - retention)
                ORDER BY revision.created DESC
                """).map {
                RecoverableRevision(
                    revision: try $0.get("id"), container: try $0.get("identifier"), item: try $0.get("item_id"), name: try $0.get("name"),
                    deviceName: try $0.get("device_name"), size: try $0.get("size"), modificationDate: try $0.get("modification_date"),
                    replacedAt: try $0.get("created"), itemDeleted: try $0.get("item_deleted", as: Bool?.self) ?? false, uploaded: try $0.get("complete"),
                    record: try PostgresDatabase.record($0), parent: try $0.get("parent"))
            }
        }
    }

    func restore(accountName: String, revision: String, now: Date) async throws -> (container: String, sequence: Int64)? {
        try await rules { storage in try await ServerRules.restore(accountName: accountName, revision: revision, now: now, in: storage) }
    }

    func collectGarbage(now: Date, retention: TimeInterval, grace: TimeInterval) async throws -> (revisions: Int, chunks: [(Int64, String)], bytes: Int64) {
        let collected = try await transaction { db in
            // No commit or upload may name a chunk while it is judged unreferenced.
            try await db.rows("SELECT id FROM account ORDER BY id FOR UPDATE")
            let freed = try await db.rows("""
                WITH gone AS (DELETE FROM revision WHERE state IN ('replaced', 'resolved', 'superseded') AND created < \(now.timeIntervalSince1970 - retention)
                              RETURNING container_id, cost)
                SELECT container.account_id, COUNT(*) AS revisions, SUM(gone.cost)::BIGINT AS cost FROM gone JOIN container ON container.id = gone.container_id
                GROUP BY container.account_id
                """)
            var revisions = 0
            for row in freed {
                revisions += Int(try row.get("revisions", as: Int64.self))
                try await db.rows("UPDATE account SET metadata_bytes = metadata_bytes - \(try row.get("cost", as: Int64.self)) WHERE id = \(try row.get("account_id", as: Int64.self))")
            }
            // Chunks no incomplete revision names any more are no longer reserved.
            let unreserved = try await db.rows("""
                WITH gone AS (DELETE FROM pending_chunk WHERE NOT EXISTS
                    (SELECT 1 FROM revision_chunk JOIN revision ON revision.id = revision_chunk.revision_id
                     WHERE revision_chunk.account_id = pending_chunk.account_id AND revision_chunk.hash = pending_chunk.hash AND NOT revision.complete)
                    RETURNING account_id, size)
                SELECT account_id, SUM(size)::BIGINT AS size FROM gone GROUP BY account_id
                """)
            for row in unreserved {
                try await db.rows("UPDATE account SET pending_bytes = pending_bytes - \(try row.get("size", as: Int64.self)) WHERE id = \(try row.get("account_id", as: Int64.self))")
            }
            // (A chunk a kept chunk's sealed patch changes is kept too, and so on down its bases.)
            let orphans = try await db.rows("""
                WITH RECURSIVE kept(account_id, hash) AS (
                    SELECT chunk.account_id, chunk.base FROM chunk
                    JOIN revision_chunk ON revision_chunk.account_id = chunk.account_id AND revision_chunk.hash = chunk.hash WHERE chunk.base IS NOT NULL
                    UNION SELECT chunk.account_id, chunk.base FROM chunk JOIN kept ON kept.account_id = chunk.account_id AND kept.hash = chunk.hash
                    WHERE chunk.base IS NOT NULL)
                DELETE FROM chunk WHERE created < \(now.timeIntervalSince1970 - grace) AND NOT EXISTS
                    (SELECT 1 FROM revision_chunk WHERE revision_chunk.account_id = chunk.account_id AND revision_chunk.hash = chunk.hash)
                    AND NOT EXISTS (SELECT 1 FROM kept WHERE kept.account_id = chunk.account_id AND kept.hash = chunk.hash)
                RETURNING account_id, hash, size
                """).map { (account: try $0.get("account_id", as: Int64.self), hash: try $0.get("hash", as: String.self), size: try $0.get("size", as: Int64.self)) }
            // Contents whose upload never got recorded (a crash between storing and recording).
            try await db.rows("""
                DELETE FROM chunk_content WHERE created < \(now.timeIntervalSince1970 - grace) AND NOT EXISTS
                    (SELECT 1 FROM chunk WHERE chunk.account_id = chunk_content.account_id AND chunk.hash = chunk_content.hash)
                """)
            return GarbageCollected(revisions: revisions, chunks: orphans.map { .init(account: $0.account, hash: $0.hash) }, bytes: orphans.reduce(0) { $0 + $1.size })
        }
        return (collected.revisions, collected.chunks.map { ($0.account, $0.hash) }, collected.bytes)
    }

    // MARK: Other instances' changes

    func relayChanges(to notifier: ChangeNotifier) async {
        var connectedBefore = false
        var failures = 0
        while !Task.isCancelled {
            var connection: PostgresConnection?
            do {
                let listener = try await PostgresConnection.connect(configuration: try location.connectionConfiguration(), id: 1, logger: logger)
                connection = listener
                try await listener.listen(on: channel) { notifications in
                    if failures > 0 { logger.notice("hearing other instances' changes again") }
                    failures = 0
                    // Changes made while this instance was not listening reach its devices as a catch-up.
                    if connectedBefore { notifier.catchUpAll() }
                    connectedBefore = true
                    notifier.isRelaying = true
                    defer { notifier.isRelaying = false }
                    for try await notification in notifications {
                        // Another version's notification: its devices catch up on their next request.
                        guard let change = try? JSONDecoder().decode(RelayedChange.self, from: Data(notification.payload.utf8)),
                              change.instance != instance else { continue }
                        if change.type == "shareChanged" || change.type == "sharesChanged" {
                            notifier.publishShare(share: change.share, sequence: change.type == "shareChanged" ? change.sequence : nil, accounts: change.accounts ?? [],
                                                  container: change.container, except: change.device)
                        } else if change.type == "keyRequest" {
                            notifier.publishKeyRequest(account: change.account, except: change.device)
                        } else if change.type == "keysChanged" {
                            notifier.publishKeysChanged(account: change.account, except: change.device)
                        } else if change.type == "incoming" {
                            notifier.publishIncoming(account: change.account, container: change.container, except: change.device)
                        } else {
                            notifier.publish(account: change.account, container: change.container, sequence: change.sequence, keyValue: change.keyValue,
                                             except: change.device)
                        }
                    }
                }
            } catch {
                failures += 1
                if !Task.isCancelled {
                    // Once per outage as a warning; the retries (1 s, 2 s, … up to 30 s apart) at debug.
                    logger.log(level: failures == 1 ? .warning : .debug, "not hearing other instances' changes; retrying",
                               metadata: ["error": "\(Self.describe(error))", "attempt": "\(failures)"])
                }
            }
            try? await connection?.close() // already failed or done: closing is tidying up
            try? await Task.sleep(for: .seconds(min(30, 1 << min(failures, 5)))) // cancelled: the loop ends
        }
    }
}

/// What garbage collection removed (the transaction's result).
fileprivate struct GarbageCollected: Sendable {
    struct Chunk: Sendable {
        var account: Int64
        var hash: String
    }

    var revisions: Int
    var chunks: [Chunk]
    var bytes: Int64
}

/// A change announced to every instance: `pg_notify`'s payload.
struct RelayedChange: Codable, Sendable {
    var instance: String
    var account: Int64
    var container: String
    var sequence: Int64
    var keyValue: Bool
    /// The device that made the change (not told of it again), if one did.
    var device: String?
    /// What else than a container's change it announces: `keyRequest` (a request to join),
    /// `keysChanged`, `shareChanged` (a share moved on to ``sequence``), `sharesChanged`,
    /// `incoming` (a container's incoming revisions changed).
    var type: String? = nil
    /// A `shareChanged`'s share.
    var share: String? = nil
    /// The accounts whose devices a share's event is for.
    var accounts: [Int64]? = nil
}

extension PostgresDatabase {
    func relayShare(share: String?, sequence: Int64?, accounts: [Int64], container: String, except origin: String?) async throws {
        guard !accounts.isEmpty else { return }
        var change = RelayedChange(instance: instance, account: 0, container: container, sequence: sequence ?? 0, keyValue: false, device: origin,
                                   type: share == nil ? "sharesChanged" : "shareChanged")
        change.share = share
        change.accounts = accounts
        let payload = String(decoding: try JSONEncoder().encode(change), as: UTF8.self)
        _ = try await read { [channel] db in try await db.rows("SELECT pg_notify(\(channel), \(payload))") }
    }
}

/// Chunk contents in PostgreSQL (`chunk_content`), so every instance serves every chunk.
struct PostgresChunkStore: ChunkStorage {
    let database: PostgresDatabase

    func store(_ chunks: [ChunkBatch.Chunk], account: Int64, checked: Bool, sealed: Bool) async throws {
        if !checked && !sealed { for chunk in chunks { try Self.verify(chunk.bytes, hash: chunk.hash) } }
        let now = Date().timeIntervalSince1970
        try await database.transaction { db in
            for chunk in chunks {
                let digest = sealed ? Data(SHA256.hash(data: chunk.bytes)) : nil
                try await db.rows("""
                    INSERT INTO chunk_content (account_id, hash, data, created, digest) VALUES (\(account), \(chunk.hash), \(Data(chunk.bytes)), \(now), \(digest))
                    ON CONFLICT DO NOTHING
                    """)
            }
        }
    }

    func sealedDigests(of hashes: [String], account: Int64) async throws -> [String: [UInt8]] {
        try await database.read { db in
            var digests: [String: [UInt8]] = [:]
            for row in try await db.rows("SELECT hash, digest FROM chunk_content WHERE account_id = \(account) AND digest IS NOT NULL AND hash = ANY(\(hashes)::TEXT[])") {
                digests[try row.get("hash")] = Array(try row.get("digest", as: ByteBuffer.self).readableBytesView)
            }
            return digests
        }
    }

    func load(_ hashes: [String], account: Int64, upTo limit: Int) async throws -> [Data] {
        // The sizes first, so no more than `limit` bytes are read; then those chunks in one query.
        let sizes = try await database.read { db in
            var sizes: [String: Int] = [:]
            for row in try await db.rows("SELECT hash, octet_length(data) AS size FROM chunk_content WHERE account_id = \(account) AND hash = ANY(\(hashes)::TEXT[])") {
                sizes[try row.get("hash")] = Int(try row.get("size", as: Int32.self))
            }
            return sizes
        }
        var chosen: [String] = [], total = 0
        for hash in hashes {
            guard let size = sizes[hash], chosen.isEmpty || total + size <= limit else { break }
            chosen.append(hash)
            total += size
        }
        guard !chosen.isEmpty else { return [] }
        let unique = Array(Set(chosen))
        let contents = try await database.read { db in
            var contents: [String: Data] = [:]
            for row in try await db.rows("SELECT hash, data FROM chunk_content WHERE account_id = \(account) AND hash = ANY(\(unique)::TEXT[])") {
                contents[try row.get("hash")] = Data(try row.get("data", as: ByteBuffer.self).readableBytesView)
            }
            return contents
        }
        var loaded: [Data] = []
        for hash in chosen {
            guard let data = contents[hash] else { break } // removed meanwhile
            loaded.append(data)
        }
        return loaded
    }

    func load(hash: String, account: Int64) async throws -> Data? {
        try await database.read { db in
            try await db.rows("SELECT data FROM chunk_content WHERE account_id = \(account) AND hash = \(hash)").first
                .map { Data(try $0.get("data", as: ByteBuffer.self).readableBytesView) }
        }
    }

    func remove(hash: String, account: Int64) async throws {
        _ = try await database.transaction { db in
            try await db.rows("DELETE FROM chunk_content WHERE account_id = \(account) AND hash = \(hash)")
        }
    }

    /// Nothing to do: the account's rows went with it.
    func removeAccount(_ account: Int64) async throws {}

    func storedChunks() async throws -> [ChunkEntry] {
        try await database.read { db in
            try await db.rows("SELECT account_id, hash, octet_length(data)::BIGINT AS size, created FROM chunk_content").map {
                ChunkEntry(account: try $0.get("account_id"), hash: try $0.get("hash"), size: try $0.get("size"),
                           created: Date(timeIntervalSince1970: try $0.get("created")))
            }
        }
    }
}
