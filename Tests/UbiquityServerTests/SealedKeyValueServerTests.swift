import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
import UbiquityKeys
import UbiquityProtocol
@testable import UbiquityServer

/// Sealed key-value changes on the server: kept as their devices sealed them under the keys'
/// tags, counted without being read (a removal is not a key), held to what sealing adds to
/// Apple's limits, and opened only for the web interface, only with the escrow, only under
/// Standard.
@Suite struct SealedKeyValueServerTests {
    let store = "ABCDE12345.com.example.notes"
    let laptop = DeviceKeys()

    func post(_ client: Client, _ changes: [KeyValueChange], token: String) async throws -> Client.Answer {
        try await client.send(.post, "/v1/kv/\(store)", token: token, json: KeyValueUpdate(changes: changes))
    }

    /// Sets the account's keys up as its first device does: the escrow named, the root key sealed to it.
    func setUpKeys(_ client: Client, _ signedIn: SignInResponse) async throws -> AccountRootKey {
        let keys = KeyDirectoryTests()
        let empty = try await keys.directory(client, token: signedIn.token)
        let escrow = try DevicePublicKeys(signing: Array(try #require(empty.escrow).signing), agreement: Array(try #require(empty.escrow).agreement))
        let root = AccountRootKey(epoch: 0)
        let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
        let named = try RosterEntry(.escrow(escrow), after: genesis, signedBy: laptop)
        let answer = try await keys.append(client, token: signedIn.token, after: 0, [genesis, named], [
            try keys.envelope(root, account: signedIn.identityToken, to: laptop.publicKeys, from: laptop),
            try keys.envelope(root, account: signedIn.identityToken, to: escrow, named: "escrow", from: laptop),
        ])
        #expect(answer.status == .ok, "\(String(buffer: answer.body))")
        return root
    }

    @Test(arguments: Backend.all) func sealedChangesAreKeptUnreadAndOpenedForTheWebOnlyByTheEscrow(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let signedIn = try await client.signIn("ada", device: "laptop")
            let root = try await setUpKeys(client, signedIn)
            let keys = try KeyValueKeys(store: store, rootKeys: [root])
            func change(_ key: String, _ value: PropertyListValue?, at time: Double = 1) throws -> KeyValueChange {
                let (name, sealed) = try keys.seal(key: key, value: try value.map { try JSONEncoder().encode($0) }, version: time.bitPattern)
                return KeyValueChange(key: name, sealed: sealed, removed: value == nil, timestamp: time)
            }
            let theme = try change("theme", .string("dark")), gone = try change("gone", nil)
            let answer = try await post(client, [theme, gone], token: signedIn.token)
            #expect(answer.status == .ok, "\(String(buffer: answer.body))")
            let entries = try answer.decode(KeyValueResponse.self).entries
            #expect(Set(entries.map(\.key)) == [theme.key, gone.key] && entries.allSatisfy { $0.value == nil })
            #expect(entries.first { $0.key == theme.key }.map { $0.sealed == theme.sealed && $0.removed == false } == true)
            #expect(entries.first { $0.key == gone.key }.map { $0.sealed == gone.sealed && $0.removed == true } == true)
            let pulled = try await client.send(.get, "/v1/kv/\(store)?since=0", token: signedIn.token).decode(KeyValueResponse.self)
            #expect(pulled.entries.map(\.sealed) == entries.sorted { $0.key < $1.key }.map(\.sealed) || Set(pulled.entries.map(\.sealed)) == Set(entries.map(\.sealed)))

            // Malformed sealed changes are refused, naming why.
            var both = theme
            both.value = .string("dark")
            #expect(try await post(client, [both], token: signedIn.token).errorCode == "invalidKeyValue")
            var flagOnly = KeyValueChange(key: "plain", value: .string("x"), timestamp: 2)
            flagOnly.removed = false
            #expect(try await post(client, [flagOnly], token: signedIn.token).errorCode == "invalidKeyValue")
            let bulkyRemoval = KeyValueChange(key: gone.key, sealed: Data(count: KeyValueKeys.maximumSealedRemoval + 1), removed: true, timestamp: 3)
            #expect(try await post(client, [bulkyRemoval], token: signedIn.token).errorCode == "keyValueQuotaViolation")

            // The web interface: one key (a removal is none), its value opened with the escrow.
            let web = WebInterfaceTests()
            let (cookie, csrf, _) = try await web.webSignIn(client)
            let headers = web.session(cookie, csrf: csrf)
            let storage = try await client.send(.get, "/web/api/storage", headers: headers).decode(WebStorageResponse.self)
            #expect(storage.keyValueStores.map(\.keys) == [1])
            let page = try await client.send(.get, "/web/api/kv/\(store)", headers: headers).decode(WebKeyValuesResponse.self)
            #expect(page.entries.map(\.key) == ["theme"] && page.entries[0].propertyList.contains("<string>dark</string>") && page.sealed == 0)

            // fsck opens every sealed value with the escrow's keys; one a device botched is damaged.
            let escrowKey = try EscrowKey.loadOrCreate(at: URL(fileURLWithPath: server.configuration.escrowKeyPath)).key
            let sound = try await server.admin.checkKeys(escrow: escrowKey)
            #expect(sound.problems.isEmpty && sound.sealedValuesChecked == 2, "\(sound.problems)")
            let botched = KeyValueChange(key: keys.storedName(of: "botched"), sealed: Data(repeating: 1, count: 120), removed: false, timestamp: 9)
            #expect(try await post(client, [botched], token: signedIn.token).status == .ok)
            let found = try await server.admin.checkKeys(escrow: escrowKey)
            #expect(found.problems.map(\.problem) == ["1 sealed value of key-value store \(store) does not open with the escrow's keys (damaged: devices refuse it)"])

            // Under Advanced the server holds no key: the page says how many values only the devices read.
            let roster = try await KeyDirectoryTests().directory(client, token: signedIn.token)
            let entries2 = try roster.roster.map { try RosterEntry(encoded: $0) }
            let advanced = try RosterEntry(.custody(.advanced), after: entries2.last, signedBy: laptop)
            let next = AccountRootKey(epoch: 1)
            let switched = try await KeyDirectoryTests().append(client, token: signedIn.token, after: entries2.count, [advanced],
                                                                [try KeyDirectoryTests().envelope(next, account: signedIn.identityToken, to: laptop.publicKeys, from: laptop)])
            #expect(switched.status == .ok, "\(String(buffer: switched.body))")
            let hidden = try await client.send(.get, "/web/api/kv/\(store)", headers: headers).decode(WebKeyValuesResponse.self)
            #expect(hidden.entries.isEmpty && hidden.sealed == 2, "the theme and the botched one")
            // fsck then checks each one's form and epoch: the botched one is malformed.
            #expect(try await server.admin.checkKeys(escrow: escrowKey).problems.map(\.problem) == ["1 sealed value of key-value store \(store) is malformed (damaged: devices refuse it)"])
            // And a device of an older build can no longer store plaintext.
            let plaintext = try await post(client, [KeyValueChange(key: "theme", value: .string("light"), timestamp: 5)], token: signedIn.token)
            #expect(plaintext.status == .conflict && plaintext.errorCode == "sealedOnly")
            #expect(try await post(client, [try change("theme", .string("light"), at: 5)], token: signedIn.token).status == .ok, "sealed, it is stored")
        }
    }

    @Test(arguments: Backend.all) func sealedValuesGetWhatSealingAddsToApplesLimitsAndNoMore(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let signedIn = try await client.signIn("ada", device: "laptop")
            func sealed(_ index: Int, bytes: Int) -> KeyValueChange {
                KeyValueChange(key: String(format: "%043d", index), sealed: Data(repeating: 7, count: bytes), removed: false, timestamp: 1)
            }
            // A plaintext store of 1 MiB and a bit is refused; sealed, that much is what sealing adds.
            let over = KeyValueLimits.maximumTotalBytes + 10_000
            let answer = try await post(client, (0..<4).map { sealed($0, bytes: over / 4) }, token: signedIn.token)
            #expect(answer.status == .ok, "\(String(buffer: answer.body))")
            #expect(try await post(client, [sealed(9, bytes: KeyValueLimits.maximumSealedValueBytes + 1)], token: signedIn.token).errorCode == "keyValueQuotaViolation")
            let more = (10..<14).map { sealed($0, bytes: KeyValueLimits.maximumSealedTotalBytes / 8) }
            #expect(try await post(client, more, token: signedIn.token).errorCode == "keyValueQuotaViolation", "past the sealed allowance")
        }
    }
}
