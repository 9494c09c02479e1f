import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
import UbiquityProtocol
@testable import UbiquityServer
import UbiquitySync

@Suite struct KeyValueTests {
    let store = "ABCDE12345.com.example.notes"

    func post(_ client: Client, _ changes: [KeyValueChange], token: String) async throws -> Client.Answer {
        try await client.send(.post, "/v1/kv/\(store)", token: token, json: KeyValueUpdate(changes: changes))
    }

    @Test(arguments: Backend.all) func valuesRoundTripAndTheMostRecentTimestampWins(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let phone = try await client.signIn("ada", device: "phone")
            let values: [String: PropertyListValue] = [
                "name": .string("Ada"), "count": .integer(42), "ratio": .real(0.5), "on": .bool(true),
                "when": .date(1_800_000_000), "blob": .data(Data([0, 1, 2])),
                "list": .array([.string("a"), .integer(1)]), "nested": .dictionary(["inner": .array([.bool(false)])]),
            ]
            let first = try await post(client, values.map { KeyValueChange(key: $0.key, value: $0.value, timestamp: 100) }, token: laptop.token)
            #expect(first.status == .ok)
            var all = try await client.send(.get, "/v1/kv/\(store)", token: phone.token).decode(KeyValueResponse.self)
            #expect(Dictionary(uniqueKeysWithValues: all.entries.map { ($0.key, $0.value!) }) == values)
            #expect(all.entries.allSatisfy { $0.deviceName == "laptop" })

            // An older change loses (and the answer carries the newer value); a newer one wins.
            let older = try await post(client, [KeyValueChange(key: "name", value: .string("old"), timestamp: 50)], token: phone.token).decode(KeyValueResponse.self)
            #expect(older.entries.map(\.value) == [.string("Ada")])
            let newer = try await post(client, [KeyValueChange(key: "name", value: .string("Countess"), timestamp: 200),
                                                KeyValueChange(key: "count", value: nil, timestamp: 200)], token: phone.token).decode(KeyValueResponse.self)
            #expect(Set(newer.entries.map(\.key)) == ["name", "count"])
            all = try await client.send(.get, "/v1/kv/\(store)?since=\(first.decode(KeyValueResponse.self).sequence)", token: laptop.token).decode(KeyValueResponse.self)
            #expect(Dictionary(uniqueKeysWithValues: all.entries.map { ($0.key, $0.value) }) == ["name": .string("Countess"), "count": nil])
        }
    }

    @Test(arguments: Backend.all) func applesLimitsAreEnforcedExactlyAndAViolationChangesNothing(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let ada = try await client.signIn("ada")
            let key64 = String(repeating: "k", count: 64)
            #expect(try await post(client, [KeyValueChange(key: key64, value: .bool(true), timestamp: 1)], token: ada.token).status == .ok)
            let key65 = try await post(client, [KeyValueChange(key: key64 + "k", value: .bool(true), timestamp: 1)], token: ada.token)
            #expect(key65.status == .contentTooLarge && key65.errorCode == "keyValueQuotaViolation")

            // 1,024 keys fit; the 1,025th does not.
            let many = (1..<1_024).map { KeyValueChange(key: "key\($0)", value: .integer(Int64($0)), timestamp: 1) }
            #expect(try await post(client, many, token: ada.token).status == .ok)
            let extra = try await post(client, [KeyValueChange(key: "one-too-many", value: .integer(0), timestamp: 1)], token: ada.token)
            #expect(extra.errorCode == "keyValueQuotaViolation")
            // Removing a key makes room.
            #expect(try await post(client, [KeyValueChange(key: "key1", value: nil, timestamp: 2), KeyValueChange(key: "fits", value: .integer(0), timestamp: 2)], token: ada.token).status == .ok)

            // 1 MB in all: a second large value that would pass on its own is refused over the total.
            let big = PropertyListValue.data(Data(repeating: 1, count: 500_000)) // 666,668 bytes as JSON
            let first = try await post(client, [KeyValueChange(key: "key2", value: nil, timestamp: 3), KeyValueChange(key: "big1", value: big, timestamp: 3)], token: ada.token)
            #expect(first.status == .ok)
            let tooMuch = try await post(client, [KeyValueChange(key: "key3", value: nil, timestamp: 3), KeyValueChange(key: "big2", value: big, timestamp: 3)], token: ada.token)
            #expect(tooMuch.status == .contentTooLarge && tooMuch.errorCode == "keyValueQuotaViolation")
            #expect(String(buffer: tooMuch.body).contains("bytes"), "the total, not the key count")
            let state = try await client.send(.get, "/v1/kv/\(store)", token: ada.token).decode(KeyValueResponse.self)
            #expect(!state.entries.contains { $0.key == "big2" }, "nothing of the refused update was kept")
            #expect(state.entries.contains { $0.key == "key3" && $0.value != nil })
            #expect(state.entries.filter { $0.value != nil }.count == 1_024)
            #expect(try await client.send(.post, "/v1/kv/\(store)", token: ada.token, raw: Array(#"{"changes":[{"key":"x","value":{"string":"a","integer":1},"timestamp":1}]}"#.utf8)).status == .badRequest, "two type tags")
        }
    }
}

@Suite struct QuotaTests {
    @Test(arguments: Backend.all) func anUploadBeyondTheQuotaGets507AndIsNotKept(backend: Backend) async throws {
        let server = try await TestServer(backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ada", password: "correct horse", quotaBytes: 100)
        try await server.run { client in
            let ada = try await client.signIn("ada")
            let sixty = [UInt8](repeating: 6, count: 60), fifty = [UInt8](repeating: 5, count: 50)
            #expect(try await client.upload(sixty, token: ada.token).status == .created)
            #expect(try await client.upload(sixty, token: ada.token).status == .created, "the same chunk again costs nothing")
            let refused = try await client.upload(fifty, token: ada.token)
            #expect(refused.status.code == 507 && refused.errorCode == "quotaExceeded")
            let account = String(buffer: try await client.send(.get, "/v1/account", token: ada.token).body)
            #expect(account.contains("\"usedBytes\":60") && account.contains("\"quotaBytes\":100"))
            #expect(try await client.send(.get, "/v1/chunks/\(sha256(fifty))", token: ada.token).status == .notFound)
        }
    }
}

/// Key-value stores count against the account's quota, in total: many stores of almost 1 MB
/// each do not get past it, and an account holds at most 256 stores.
@Suite struct KeyValueQuotaTests {
    @Test(arguments: Backend.all) func storesCountAgainstTheQuotaTogether(backend: Backend) async throws {
        let server = try await TestServer(backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ada", password: "correct horse", quotaBytes: 2_500_000)
        try await server.run { client in
            let ada = try await client.signIn("ada")
            let big = PropertyListValue.data(Data(repeating: 1, count: 600_000)) // 800,004 bytes as JSON
            func put(_ store: String, _ key: String, _ value: PropertyListValue?, at time: Double = 1) async throws -> Client.Answer {
                try await client.send(.post, "/v1/kv/ABCDE12345.com.example.s\(store)", token: ada.token,
                                      json: KeyValueUpdate(changes: [KeyValueChange(key: key, value: value, timestamp: time)]))
            }
            for store in 0..<3 { #expect(try await put("\(store)", "big", big).status == .ok) }
            let fourth = try await put("3", "big", big)
            #expect(fourth.status.code == 507 && fourth.errorCode == "quotaExceeded", "\(String(buffer: fourth.body))")
            let account = try await client.send(.get, "/v1/account", token: ada.token).decode(AccountResponse.self)
            #expect(account.usedBytes == 3 * 800_014, "the stores' bytes are the account's")
            // Rewriting a store's own bytes fits (what it holds is room it may reuse).
            #expect(try await put("0", "big", .data(Data(repeating: 2, count: 600_000)), at: 2).status == .ok)
            // And uploads see the room the stores took.
            let chunk = [UInt8](repeating: 9, count: 200_000)
            #expect(try await client.upload(chunk, token: ada.token).status.code == 507)
            // Freeing a store makes room.
            #expect(try await put("1", "big", nil, at: 3).status == .ok)
            #expect(try await put("3", "big", big).status == .ok)
        }
    }

    @Test func anAccountHoldsAtMost256Stores() async throws {
        let server = try await TestServer.withAccount("ada"); defer { server.remove() }
        try await server.run { client in
            let ada = try await client.signIn("ada")
            func put(_ store: Int) async throws -> Client.Answer {
                try await client.send(.post, "/v1/kv/ABCDE12345.com.example.s\(store)", token: ada.token,
                                      json: KeyValueUpdate(changes: [KeyValueChange(key: "k", value: .integer(1), timestamp: 1)]))
            }
            for store in 0..<KeyValueLimits.maximumStoresPerAccount { #expect(try await put(store).status == .ok) }
            let extra = try await put(KeyValueLimits.maximumStoresPerAccount)
            #expect(extra.status.code == 507 && extra.errorCode == "tooManyStores")
            #expect(try await put(0).status == .ok, "an existing store still takes changes")
        }
    }
}

@Suite struct NameCollisionTests {
    /// Items from before the name index get their keys when a server opens the database, and a
    /// clash with them is found.
    @Test(.enabled(if: Backend.all.contains(.postgres))) func itemsFromBeforeTheNameIndexGetTheirKeys() async throws {
        let server = try await TestServer.withAccount("ada", on: .postgres); defer { server.remove() }
        try await server.run { client in
            let ada = try await client.signIn("ada")
            _ = try await client.commit(notes, "b-item", fileUpdate("Café.txt", []), token: ada.token)
        }
        let database = try #require(server.admin.storage.database as? PostgresDatabase)
        try await database.transaction { db in _ = try await db.rows("UPDATE item SET parent_key = NULL, name_key = NULL") }
        let reopened = try await server.secondInstance(); defer { Task { await reopened.close() } }
        let keys = try await database.read { db in try await db.rows("SELECT parent_key, name_key FROM item").map { "\(try $0.get("parent_key", as: String.self)):\(try $0.get("name_key", as: String.self))" } }
        #expect(keys == [":café.txt"])
        try await server.run { client in
            let ada = try await client.signIn("ada", device: "phone")
            let clash = try await client.commit(notes, "c-item", fileUpdate("CAFÉ.txt", []), token: ada.token)
            #expect(clash.item.name == "CAFÉ 2.txt")
        }
    }

    /// (Names come composed, NFC — a decomposed one is refused, `NamePolicyTests` — so what can
    /// collide is case.)
    @Test(arguments: Backend.all) func namesDifferingOnlyByCaseAreRenamedDeterministically(backend: Backend) async throws {
        for order in [["item-a", "item-b"], ["item-b", "item-a"]] {
            let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
            let names = ["item-a": "Caf\u{E9}.txt", "item-b": "CAF\u{C9}.TXT"]
            try await server.run { client in
                let ada = try await client.signIn("ada")
                for id in order { _ = try await client.commit(notes, id, fileUpdate(names[id]!, []), token: ada.token) }
                let items = try await client.changes(notes, token: ada.token).items
                let byId = Dictionary(uniqueKeysWithValues: items.map { ($0.id, $0.name) })
                #expect(byId == ["item-a": "Caf\u{E9}.txt", "item-b": "CAF\u{C9} 2.TXT"], "whichever came first (\(order)): the greater id is renamed")
            }
        }
    }

    @Test func freeNamesSkipTakenOnes() {
        #expect(NameCollision.freeName(for: "Notes.txt", taken: [NameCollision.key("notes 2.txt")]) == "Notes 3.txt")
        #expect(NameCollision.freeName(for: ".hidden", taken: []) == ".hidden 2")
        #expect(NameCollision.freeName(for: "Archive.tar.gz", taken: []) == "Archive.tar 2.gz")
    }
}

@Suite struct RecoveryTests {
    @Test(arguments: Backend.all) func replacedRevisionsAndDeletedItemsAreRecoverableThenCollected(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        let old: [UInt8] = Array("first draft".utf8), new: [UInt8] = Array("second draft".utf8)
        let (first, second) = try await server.run { client in
            let ada = try await client.signIn("ada")
            let first = try await client.commit(notes, "doc", fileUpdate("Draft.txt", [old]), token: ada.token)
            _ = try await client.upload(old, token: ada.token)
            let second = try await client.commit(notes, "doc", fileUpdate("Draft v2.txt", [new], base: first.revision, date: 1_800_000_100), token: ada.token)
            _ = try await client.upload(new, token: ada.token)
            _ = try await client.commit(notes, "doc", fileUpdate("Draft v2.txt", [], base: second.revision, date: 1_800_000_200, deleted: true), token: ada.token)
            return (first.revision, second.revision)
        }
        let recoverable = try await server.admin.recoverable(accountName: "ada")
        #expect(recoverable.map(\.revision) == [second, first] && recoverable.allSatisfy(\.itemDeleted))
        #expect(try await server.admin.recoverable(accountName: "bob").isEmpty)
        #expect(try await server.admin.restore(accountName: "ada", revision: second))
        #expect(try await server.admin.restore(accountName: "ada", revision: "no-such-revision") == false)

        try await server.run { client in
            let ada = try await client.signIn("ada")
            let item = try await client.send(.get, "/v1/containers/\(notes)/items/doc", token: ada.token).decode(ItemState.self)
            #expect(!item.deleted && item.name == "Draft v2.txt" && item.uploaded && item.deviceName == "server")
        }

        // Within the retention nothing goes; past it, the old revisions go, and with them the
        // chunk only the first draft used.
        #expect(try await server.admin.collectGarbage().chunks == 0)
        #expect(try await server.storedChunk(sha256(old), of: "ada") == Data(old))
        let later = Date().addingTimeInterval(40 * 86_400)
        let collected = try await server.admin.collectGarbage(now: later)
        #expect(collected.revisions >= 2 && collected.chunks == 1 && collected.bytes == Int64(old.count))
        #expect(try await server.storedChunk(sha256(old), of: "ada") == nil, "the contents are gone too")
        try await server.run { client in
            let ada = try await client.signIn("ada")
            // The quota counts what is stored and the one revision kept (its record, name and chunk list).
            let usage = try await client.usage(token: ada.token)
            let kept = RevisionCost.record + Int64("Draft v2.txt".utf8.count) + Int64(try PreparedCommit.stored(fileUpdate("", [new]).manifest).count)
            #expect(usage.parts.chunkBytes == Int64(new.count) && usage.parts.metadataBytes == kept && usage.used == Int64(new.count) + kept)
            #expect(try await client.send(.get, "/v1/chunks/\(sha256(new))", token: ada.token).status == .ok)
        }
    }
}

/// What PostgreSQL adds: URLs, clear errors, and transactions that run side by side.
@Suite struct PostgresTests {
    @Test func databaseURLsAreParsedAndBadOnesExplained() throws {
        let location = try PostgresLocation(url: "postgres://ada:s%40cret@db.example:6543/sync?sslmode=require&search_path=ubiquity", environment: [:])
        #expect(location.host == "db.example" && location.port == 6543 && location.username == "ada" && location.password == "s@cret")
        #expect(location.database == "sync" && location.sslMode == "require" && location.schema == "ubiquity")
        #expect(location.redacted == "postgres://ada@db.example:6543/sync?sslmode=require&search_path=ubiquity", "no password in logs")
        let socket = try PostgresLocation(url: "postgresql://ada@/sync?host=/run/postgresql", environment: ["PGPASSWORD": "from-env"])
        #expect(socket.socketPath == "/run/postgresql/.s.PGSQL.5432" && socket.password == "from-env" && socket.host == nil)
        let patient = try PostgresLocation(url: "postgres://ada@db/sync?connect_timeout=30", environment: [:])
        #expect(patient.connectTimeout == .seconds(30) && location.connectTimeout == nil && patient.redacted.hasSuffix("?connect_timeout=30"))

        for (url, complaint) in [
            ("mysql://ada@db/sync", "postgres://"), ("postgres://ada@db/sync?sslmode=maybe", "sslmode"),
            ("postgres://ada@db/sync?search_path=x;DROP", "search_path"), ("postgres://ada@db/sync?colour=blue", "unknown parameter colour"),
            ("postgres://ada:hunter2@db:99999/sync", "port"), ("postgres://ada@db/sync?connect_timeout=0", "connect_timeout"),
            ("postgres://ada@db/sync?connect_timeout=soon", "connect_timeout"),
        ] {
            #expect {
                try PostgresLocation(url: url, environment: [:])
            } throws: { error in
                let message = "\(error)"
                return message.contains(complaint) && !message.contains("hunter2")
            }
        }
    }

    @Test func anUnreachableDatabaseIsAClearErrorAtOnce() async throws {
        let started = ContinuousClock.now
        await #expect {
            _ = try await SyncServer(configuration: {
                var configuration = SyncServer.Configuration(dataDirectory: NSTemporaryDirectory() + "unused-\(UUID())")
                configuration.database = "postgres://nobody@127.0.0.1:1/none?sslmode=disable"
                return configuration
            }())
        } throws: { error in
            (error as? SyncError)?.code == "databaseUnavailable" && "\(error)".contains("127.0.0.1:1")
        }
        // Refused at once when alone (~15 ms); the bound only tells "gives up" from "retries for
        // ever", with room for a full suite's load on two cores (once seen at 10.1 s there).
        #expect(ContinuousClock.now - started < .seconds(60))
    }

    /// Many devices committing at once: every commit gets its own sequence number, none is lost,
    /// and uploads racing for the last of the quota never overshoot it.
    @Test(arguments: Backend.all) func concurrentCommitsAndUploadsStayConsistent(backend: Backend) async throws {
        let server = try await TestServer(backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ada", password: "correct horse", quotaBytes: 1_000_000)
        try await server.run { client in
            var signedIn: [String] = []
            for device in 0..<4 { signedIn.append(try await client.signIn("ada", device: "device-\(device)").token) }
            let tokens = signedIn
            let sequences = try await withThrowingTaskGroup(of: Int64.self) { group in
                for (device, token) in tokens.enumerated() {
                    for round in 0..<10 {
                        group.addTask {
                            // Half to one shared item (conflicts), half to items of their own.
                            let item = round.isMultiple(of: 2) ? "shared" : "item-\(device)-\(round)"
                            return try await client.commit(notes, item, fileUpdate("n\(device)-\(round).txt", [], date: 1_800_000_000 + Double(round)), token: token).item.sequence
                        }
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(Set(sequences).count == 40, "each commit its own sequence")
            let changes = try await client.changes(notes, token: tokens[0])
            #expect(changes.sequence == 40 && changes.items.count == 21)
            let shared = try #require(changes.items.first { $0.id == "shared" })
            #expect(shared.conflicts.count + 1 <= 20 && !shared.conflicts.isEmpty, "concurrent edits kept as conflict versions")

            // Ten chunks racing for the room left: exactly three fit.
            let room = 1_000_000 - (try await client.usage(token: tokens[0])).used
            let chunks = (0..<10).map { [UInt8](repeating: UInt8($0), count: Int(room) * 2 / 7) }
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for (index, chunk) in chunks.enumerated() { group.addTask { try await client.upload(chunk, token: tokens[index % 4]).status.code } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 201 }.count == 3 && statuses.filter { $0 == 507 }.count == 7, "\(statuses)")
            let usage = try await client.usage(token: tokens[0])
            #expect(usage.parts.chunkBytes == 3 * Int64(chunks[0].count) && usage.used <= 1_000_000)
        }
    }
}
