import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityServer

/// The account's minimum format on the server (issue 45): a device raises it to "everything
/// sealed" only once the server holds nothing of the account in plaintext, and from then on the
/// server takes no plaintext name or value (its devices would refuse them as a downgrade).
@Suite struct SealedOnlyServerTests {
    static let notes = "ABCDE12345.com.example.notes"
    static let store = "ABCDE12345.com.example.notes"

    @Test(arguments: Backend.all) func requiringEverythingSealedWaitsUntilNothingIsLeftInPlaintextThenRefusesIt(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let keys = KeyDirectoryTests()
            let laptop = try await client.signIn("ada", device: "laptop")
            let served = try #require(try await keys.directory(client, token: laptop.token).escrow)
            let escrow = try DevicePublicKeys(signing: Array(served.signing), agreement: Array(served.agreement))
            let root = AccountRootKey(epoch: 0)
            let genesis = try RosterEntry(.genesis(keys: keys.laptop.publicKeys, name: "laptop"), after: nil, signedBy: keys.laptop)
            let named = try RosterEntry(.escrow(escrow), after: genesis, signedBy: keys.laptop)
            let setUp = try await keys.append(client, token: laptop.token, after: 0, [genesis, named], [
                try keys.envelope(root, account: laptop.identityToken, to: keys.laptop.publicKeys, from: keys.laptop),
                try keys.envelope(root, account: laptop.identityToken, to: escrow, named: "escrow", from: keys.laptop),
            ])
            #expect(setUp.status == .ok, "\(String(buffer: setUp.body))")

            // What an older build left in plaintext: a folder's name, a key-value pair.
            let plain = ItemUpdate(baseRevision: nil, name: "Plain folder", kind: .directory, modificationDate: 1_800_000_300, manifest: Manifest())
            #expect(try await client.send(.put, "/v1/containers/\(Self.notes)/items/plain", token: laptop.token, json: plain).status == .ok)
            func values(_ changes: [KeyValueChange]) async throws -> Client.Answer {
                try await client.send(.post, "/v1/kv/\(Self.store)", token: laptop.token, json: KeyValueUpdate(changes: changes))
            }
            #expect(try await values([KeyValueChange(key: "theme", value: .string("dark"), timestamp: 1_800_000_000)]).status == .ok)

            // Raising the account's format: refused while any of it is left, saying how much.
            let raise = try RosterEntry(.minimumFormat(Roster.sealedOnlyFormat), after: named, signedBy: keys.laptop)
            let early = try await keys.append(client, token: laptop.token, after: 2, [raise])
            #expect(early.status == .conflict && early.errorCode == "plaintextRemains", "\(String(buffer: early.body))")
            #expect(String(buffer: early.body).contains("1 revisions and 1 key-value values"), "\(String(buffer: early.body))")
            // A format newer than the server knows: refused whatever is left.
            let future = try RosterEntry(.minimumFormat(Roster.newestFormat + 1), after: named, signedBy: keys.laptop)
            let unknown = try await keys.append(client, token: laptop.token, after: 2, [future])
            #expect(unknown.status == .badRequest && unknown.errorCode == "badRoster", "\(String(buffer: unknown.body))")

            // The plaintext goes: the server seals the folder's name in place (Standard), a device
            // seals the value under its tag and removes the plaintext one.
            let sealedNow = try await client.send(.post, "/v1/keys/seal-in-place", token: laptop.token)
            #expect(sealedNow.status == .ok, "\(String(buffer: sealedNow.body))")
            #expect(try sealedNow.decode(SealNowResponse.self).revisions == 1)
            let valueKeys = try KeyValueKeys(store: Self.store, rootKeys: [root])
            let (tag, sealedValue) = try valueKeys.seal(key: "theme", value: try JSONEncoder().encode(PropertyListValue.string("dark")), version: 2)
            #expect(try await values([KeyValueChange(key: tag, sealed: sealedValue, removed: false, timestamp: 1_800_000_001),
                                      KeyValueChange(key: "theme", value: nil, timestamp: 1_800_000_001)]).status == .ok)
            let raised = try await keys.append(client, token: laptop.token, after: 2, [raise])
            #expect(raised.status == .ok, "\(String(buffer: raised.body))")
            let roster = try Roster.verify(try await keys.directory(client, token: laptop.token).roster.map { try RosterEntry(encoded: $0) })
            #expect(roster.requiresSealing && roster.custody == .standard)

            // From then on, under Standard still: no name and no value in plaintext.
            let another = ItemUpdate(baseRevision: nil, name: "Another plain folder", kind: .directory, modificationDate: 1_800_000_400, manifest: Manifest())
            let refusedName = try await client.send(.put, "/v1/containers/\(Self.notes)/items/another", token: laptop.token, json: another)
            #expect(refusedName.status == .conflict && refusedName.errorCode == "sealedOnly", "\(String(buffer: refusedName.body))")
            let refusedValue = try await values([KeyValueChange(key: "font", value: .string("serif"), timestamp: 1_800_000_002)])
            #expect(refusedValue.status == .conflict && refusedValue.errorCode == "sealedOnly", "\(String(buffer: refusedValue.body))")
            // Sealed ones go.
            let records = try #require(ItemRecords.keyed(container: Self.notes, rootKeys: [root], sealing: true))
            let sealedName = try records.sealed(another, item: "another", manifest: Manifest())
            #expect(try await client.send(.put, "/v1/containers/\(Self.notes)/items/another", token: laptop.token, json: sealedName).status == .ok)
            let account = try #require(try await server.admin.accounts().first { $0.name == "ada" })
            let left = try await server.server.services.database.plaintextLeft(accountId: account.id)
            #expect(left.revisions == 0 && left.values == 0)
        }
    }
}
