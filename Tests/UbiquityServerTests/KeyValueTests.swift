import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
@testable import UbiquityServer

@Suite struct KeyValueTests {
    let store = "ABCDE12345.com.example.notes"

    func post(_ client: Client, _ changes: [KeyValueChange], token: String) async throws -> Client.Answer {
        try await client.send(.post, "/v1/kv/\(store)", token: token, json: KeyValueUpdate(changes: changes))
    }

    @Test func valuesRoundTripAndTheMostRecentTimestampWins() async throws {
        let server = try await TestServer.withAccount("ada"); defer { server.remove() }
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

    @Test func applesLimitsAreEnforcedExactlyAndAViolationChangesNothing() async throws {
        let server = try await TestServer.withAccount("ada"); defer { server.remove() }
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
    @Test func anUploadBeyondTheQuotaGets507AndIsNotKept() async throws {
        let server = try TestServer(); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ada", password: "correct horse", quotaBytes: 100)
        try await server.run { client in
            let ada = try await client.signIn("ada")
            let sixty = [UInt8](repeating: 6, count: 60), fifty = [UInt8](repeating: 5, count: 50)
            _ = try await client.commit(notes, "doc", fileUpdate("a.bin", [sixty, fifty]), token: ada.token)
            #expect(try await client.upload(sixty, token: ada.token).status == .created)
            #expect(try await client.upload(sixty, token: ada.token).status == .created, "the same chunk again costs nothing")
            let refused = try await client.upload(fifty, token: ada.token)
            #expect(refused.status.code == 507 && refused.errorCode == "quotaExceeded")
            let account = String(buffer: try await client.send(.get, "/v1/account", token: ada.token).body)
            #expect(account.contains("\"usedBytes\":60") && account.contains("\"quotaBytes\":100"))
            #expect(try await client.send(.get, "/v1/chunks/\(sha256(fifty))", token: ada.token).status == .notFound)
            #expect(try await client.changes(notes, token: ada.token).items.first?.uploaded == false)
        }
    }
}

@Suite struct NameCollisionTests {
    @Test func namesDifferingOnlyByCaseOrNormalisationAreRenamedDeterministically() async throws {
        for order in [["item-a", "item-b"], ["item-b", "item-a"]] {
            let server = try await TestServer.withAccount("ada"); defer { server.remove() }
            let names = ["item-a": "Caf\u{E9}.txt", "item-b": "CAFE\u{301}.TXT"]
            try await server.run { client in
                let ada = try await client.signIn("ada")
                for id in order { _ = try await client.commit(notes, id, fileUpdate(names[id]!, []), token: ada.token) }
                let items = try await client.changes(notes, token: ada.token).items
                let byId = Dictionary(uniqueKeysWithValues: items.map { ($0.id, $0.name) })
                #expect(byId == ["item-a": "Caf\u{E9}.txt", "item-b": "CAFE\u{301} 2.TXT"], "whichever came first (\(order)): the greater id is renamed")
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
    @Test func replacedRevisionsAndDeletedItemsAreRecoverableThenCollected() async throws {
        let server = try await TestServer.withAccount("ada"); defer { server.remove() }
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
        let firstChunk = server.directory + "/chunks/1/\(sha256(old).prefix(2))/\(sha256(old))"
        #expect(FileManager.default.fileExists(atPath: firstChunk))
        let later = Date().addingTimeInterval(40 * 86_400)
        let collected = try await server.admin.collectGarbage(now: later)
        #expect(collected.revisions >= 2 && collected.chunks == 1 && collected.bytes == Int64(old.count))
        #expect(!FileManager.default.fileExists(atPath: firstChunk))
        try await server.run { client in
            let ada = try await client.signIn("ada")
            let account = String(buffer: try await client.send(.get, "/v1/account", token: ada.token).body)
            #expect(account.contains("\"usedBytes\":\(new.count)"), "quota usage counts what is stored")
            #expect(try await client.send(.get, "/v1/chunks/\(sha256(new))", token: ada.token).status == .ok)
        }
    }
}
