import Foundation
import Logging
import Testing
import UbiquityObjectStore
import UbiquityProtocol
import UbiquityTestSupport
@testable import UbiquityServer

/// `ubiquity storage migrate --from-data`: an embedded installation (SQLite and its chunk
/// folder) moved into PostgreSQL and a real object store (SeaweedFS) — a pass while its server
/// serves, then the final pass with it stopped, killed midway and run again. Devices go on with
/// the tokens they had; every item, chunk and value is there.
@Suite(.enabled(if: TestPostgres.configured && TestObjectStore.configured, "needs PostgreSQL and SeaweedFS"))
struct InstallationMoveTests {
    let kv = "ABCDE12345.com.example.notes"

    @Test func anEmbeddedInstallationMovesWhileItServesAndFinishesAfterAKill() async throws {
        let old = try await TestServer(.sqlite)
        defer { old.remove() }
        _ = try await old.admin.createAccount(name: "ann", password: "correct horse")
        _ = try await old.admin.createAccount(name: "bob", password: "correct horse")
        let contents = (0..<6).map { [UInt8](randomBytes(40_000 + $0 * 1_000)) }
        let large = (0..<3).map { _ in [UInt8](randomBytes(300_000)) }
        let laptop = try await old.run { client in
            let laptop = try await client.signIn("ann")
            for (index, bytes) in contents.prefix(4).enumerated() {
                #expect(try await client.commit(notes, "item\(index)", fileUpdate("Note \(index).txt", [bytes]), token: laptop.token).item.uploaded)
            }
            #expect(try await client.commit(notes, "large", fileUpdate("Large.bin", large), token: laptop.token).item.uploaded)
            let set = try await client.send(.post, "/v1/kv/\(kv)", token: laptop.token,
                                            json: KeyValueUpdate(changes: [KeyValueChange(key: "theme", value: .string("dark"), timestamp: 100)]))
            #expect(set.status == .ok)
            _ = try await client.signIn("bob", device: "bob's phone")
            return laptop
        }

        let target = try Backend.postgresURL(), bucket = try TestObjectStore.fresh()
        let objectStore = try ObjectStoreSettings(url: bucket.url, credentialsFile: bucket.credentialsFile)
        let admin = try await ServerAdministration(dataDirectory: NSTemporaryDirectory() + "unused-\(UUID().uuidString.prefix(8))",
                                                   database: target, objectStore: objectStore, bcryptCost: 4)
        defer { Task { await admin.close() } }

        // A pass while the old server serves: the chunks so far move; the new storage refuses to serve.
        let first = try await InstallationMove.run(from: old.directory, into: admin, final: false) { _ in }
        #expect(first.chunks == 7 && !first.finished && first.missing.isEmpty)
        var configuration = SyncServer.Configuration(dataDirectory: NSTemporaryDirectory() + "unused-\(UUID().uuidString.prefix(8))", port: 0, bcryptCost: 4)
        configuration.database = target
        configuration.objectStore = objectStore
        configuration.escrowKeyFile = old.directory + "/escrow.key" // (the accounts' envelopes are sealed to it)
        await #expect(throws: SyncError.self) { await (try await SyncServer(configuration: configuration)).close() }

        // The old server goes on: an edit, a new item, and a chunk removed (as its collection would).
        try await old.run { client in
            #expect(try await client.commit(notes, "item4", fileUpdate("Note 4.txt", [contents[4]]), token: laptop.token).item.uploaded)
            let set = try await client.send(.post, "/v1/kv/\(kv)", token: laptop.token,
                                            json: KeyValueUpdate(changes: [KeyValueChange(key: "font", value: .integer(12), timestamp: 101)]))
            #expect(set.status == .ok)
        }
        let sourceDatabase = try #require(old.admin.storage.database as? SQLiteDatabase)
        let removed = sha256(contents[3])
        try await sourceDatabase.pool.write { db in
            try db.execute(sql: "DELETE FROM revision WHERE itemId = 'item3'")
            try db.execute(sql: "DELETE FROM item WHERE id = 'item3'")
            try db.execute(sql: "DELETE FROM chunk WHERE hash = ?", arguments: [removed])
        }

        // The final pass is refused while anything has the directory open.
        await #expect(throws: SyncError.self) { _ = try await InstallationMove.run(from: old.directory, into: admin, final: true) { _ in } }
        await old.server.close()
        await old.admin.close()

        // Killed after its tables committed and one pack was written: still refused to serve.
        struct Killed: Error {}
        let store = try #require(admin.storage.chunks as? ObjectChunkStore)
        var settings = store.settings
        settings.packTarget = 1 // a pack per chunk
        let written = Counter()
        let stopping = ObjectChunkStore(database: store.database, objects: store.objects, settings: settings, logger: Logger(label: "test"),
                                        afterStep: { step in if step == .objectWritten, written.next() == 1 { throw Killed() } })
        let lock = try DataDirectoryLock(directory: old.directory, exclusive: true)
        let killed = InstallationMove(directory: old.directory, source: try SQLiteDatabase(path: old.directory + "/ubiquity.sqlite"),
                                      sourceChunks: try FileChunkStore(directory: old.directory + "/chunks"), target: store.database,
                                      store: stopping, logger: Logger(label: "test"))
        await #expect(throws: Killed.self) { _ = try await killed.run(final: true) { _ in } }
        await killed.source.close()
        lock.release()
        await #expect(throws: SyncError.self) { await (try await SyncServer(configuration: configuration)).close() }

        let last = try await InstallationMove.run(from: old.directory, into: admin, final: true) { _ in }
        #expect(last.finished && last.damaged.isEmpty && last.missing.isEmpty)
        #expect(last.movedBefore == 6 && last.chunks == 1, "only the new chunk moves; the one removed was not sought")
        #expect(last.rows["account"] == 2 && last.rows["item"] == 5 && last.rows["kv"] == 2 && last.rows["device"] == 2)
        let again = try await InstallationMove.run(from: old.directory, into: admin, final: true) { _ in }
        #expect(again.finished && again.rows.isEmpty, "a finished move does nothing")

        // The new storage serves: the laptop's token still works, and everything is there.
        let server = try await SyncServer(configuration: configuration)
        defer { Task { await server.close() } }
        try await server.makeApplication().test(.router) { test in
            let client = Client(client: test)
            let items = try await client.changes(notes, token: laptop.token).items
            #expect(Set(items.filter { !$0.deleted }.map(\.name)) == ["Note 0.txt", "Note 1.txt", "Note 2.txt", "Note 4.txt", "Large.bin"])
            #expect(items.allSatisfy { $0.uploaded })
            let wanted = [contents[0], contents[1], contents[2], contents[4]] + large
            let fetched = try await client.send(.post, "/v1/chunks/fetch", token: laptop.token, json: ChunkFetchRequest(hashes: wanted.map(sha256)))
            let chunks = try ChunkBatch(decoding: Array(buffer: fetched.body), maximumChunkSize: 1 << 22).chunks
            #expect(chunks.map { Array($0.bytes) } == wanted, "every chunk reads back whole from the object store")
            let values = try await client.send(.get, "/v1/kv/\(kv)", token: laptop.token).decode(KeyValueResponse.self)
            #expect(Set(values.entries.map(\.key)) == ["theme", "font"])
            let bob = try await client.signIn("bob", device: "bob's laptop")
            #expect(try await client.changes(notes, token: bob.token).items.isEmpty)
            let usage = try await client.usage(token: laptop.token)
            #expect(usage.parts.chunkBytes == Int64(wanted.reduce(0) { $0 + $1.count }), "the quota counts what the account stores")
        }
        let check = try await admin.checkStore(repair: false, now: Date())
        #expect(check.isClean, "\(check)")
    }

    /// An installation's move into a database that already holds accounts of its own is refused.
    @Test func aDatabaseWithAccountsOfItsOwnIsNotFilled() async throws {
        let old = try await TestServer.withAccount("ann")
        defer { old.remove() }
        let bucket = try TestObjectStore.fresh()
        let admin = try await ServerAdministration(dataDirectory: NSTemporaryDirectory() + "unused-\(UUID().uuidString.prefix(8))", database: try Backend.postgresURL(),
                                                   objectStore: try ObjectStoreSettings(url: bucket.url, credentialsFile: bucket.credentialsFile), bcryptCost: 4)
        defer { Task { await admin.close() } }
        _ = try await admin.createAccount(name: "zed", password: "correct horse")
        do {
            _ = try await InstallationMove.run(from: old.directory, into: admin, final: false) { _ in }
            Issue.record("filled a database with accounts of its own")
        } catch let error as SyncError {
            #expect(error.code == "databaseNotEmpty")
        }
    }
}
