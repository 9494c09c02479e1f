import Foundation
import GRDB
import Testing
import UbiquityProtocol
@testable import UbiquityServer

/// The embedded database's migrations keep what older servers stored.
@Suite struct SQLiteMigrationTests {
    @Test func manifestsMoveOutAndChunkReferencesStayWithWhatIsAwaited() async throws {
        let path = NSTemporaryDirectory() + "ubiquity-migration-\(UUID().uuidString.prefix(8)).sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let manifest = Manifest(chunks: (0..<300).map { ChunkReference(hash: String(repeating: String($0 % 10), count: 64), size: 16_384) })
        // A database as the server before manifests lived apart left it: one file, one revision.
        do {
            let queue = try DatabaseQueue(path: path)
            try SQLiteDatabase.migrator.migrate(queue, upTo: "v6-revision-parent")
            try await queue.write { db in
                try db.execute(sql: """
                    INSERT INTO account (id, name, passwordHash, identityToken, quotaBytes, created) VALUES (1, 'ada', 'x', 'identity', 1000000000, 0);
                    INSERT INTO container (id, accountId, identifier, sequence) VALUES (1, 1, 'iCloud.notes', 1);
                    INSERT INTO item (containerId, id, currentRevision, sequence) VALUES (1, 'film', 'rev1', 1);
                    """)
                try db.execute(sql: """
                    INSERT INTO revision (id, containerId, itemId, deviceId, deviceName, name, kind, size, modificationDate, manifest, deleted, complete, state, created)
                    VALUES ('rev1', 1, 'film', 'device', 'laptop', 'Film.raw', 'file', 4915200, 0, ?, 0, 1, 'current', 0)
                    """, arguments: [try JSONEncoder().encode(manifest)])
                for hash in Set(manifest.chunks!.map(\.hash)) {
                    try db.execute(sql: "INSERT INTO revisionChunk (revisionId, accountId, hash) VALUES ('rev1', 1, ?)", arguments: [hash])
                }
                // A second file still waiting for one of its two chunks.
                try db.execute(sql: """
                    INSERT INTO item (containerId, id, currentRevision, sequence) VALUES (1, 'draft', 'rev2', 1);
                    INSERT INTO revision (id, containerId, itemId, deviceId, deviceName, name, kind, size, modificationDate, manifest, deleted, complete, state, created)
                        VALUES ('rev2', 1, 'draft', 'device', 'laptop', 'Draft.txt', 'file', 2, 0, X'7B7D', 0, 0, 'current', 0);
                    INSERT INTO chunk (accountId, hash, size, created) VALUES (1, 'here', 1, 0);
                    INSERT INTO revisionChunk (revisionId, accountId, hash) VALUES ('rev2', 1, 'here'), ('rev2', 1, 'awaited');
                    """)
            }
            try queue.close()
        }
        let database = try SQLiteDatabase(path: path)
        let state = try #require(try await database.items(accountId: 1, container: "iCloud.notes", ids: ["film"]).first)
        #expect(state.manifest == manifest && state.name == "Film.raw")
        let columns = try await database.pool.read { db in try db.columns(in: "revision").map(\.name) }
        #expect(!columns.contains("manifest"), "the manifest is no longer in the revision's row")
        let stored = try await database.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM revisionManifest") }
        #expect(stored == 2)
        let references = try await database.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM revisionChunk WHERE accountId = 1 AND revisionId = 'rev1'") }
        #expect(references == 10, "the chunk references kept through the table's rebuild")
        let waiting = try await database.pool.read { db in try Row.fetchAll(db, sql: "SELECT revisionId, hash FROM revisionWaiting").map { "\($0["revisionId"] as String) \($0["hash"] as String)" } }
        #expect(waiting == ["rev2 awaited"], "only the chunk an incomplete revision still lacks is waited for")
        let containerChunks = try await database.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM containerChunk WHERE containerId = 1") }
        #expect(containerChunks == 12, "each chunk the container's revisions name, once")
        // Items got their folder and name keys, and a clash with an older item is found by them.
        let keys = try await database.pool.read { db in try Row.fetchAll(db, sql: "SELECT id, parentKey, nameKey FROM item ORDER BY id").map { "\($0["id"] as String):\($0["parentKey"] as String):\($0["nameKey"] as String)" } }
        #expect(keys == ["draft::draft.txt", "film::film.raw"])
        // The quota's counters were filled in: items, what revisions cost, what is waited for.
        let figures = try await database.usage(ofAccount: 1)
        let manifestBytes = try JSONEncoder().encode(manifest).count
        #expect(figures.items == 2 && figures.chunkBytes == 1 && figures.pendingBytes == 0)
        #expect(figures.metadataBytes == 2 * RevisionCost.record + Int64("Film.raw".utf8.count + "Draft.txt".utf8.count + manifestBytes + 2))
        let pending = try await database.pool.read { db in try String.fetchAll(db, sql: "SELECT hash FROM pendingChunk") }
        #expect(pending == ["awaited"], "a chunk an incomplete revision waits for is reserved (at the size its manifest declares: none here)")
        let clash = try await database.commit(accountId: 1, container: "iCloud.notes", commits: [ItemCommit(item: "z-film", update: fileUpdate("FILM.raw", []))],
                                              device: DeviceAuth(deviceId: "d", deviceName: "phone", accountId: 1, containers: nil), now: Date(), brief: false,
                                              limits: AccountLimits(), nameTags: [:])
        #expect(try clash.first?.get().item.name == "FILM 2.raw")
        await database.close()
    }
}
