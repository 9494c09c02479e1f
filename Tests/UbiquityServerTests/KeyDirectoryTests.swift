import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
import UbiquityKeys
import UbiquityProtocol
@testable import UbiquityServer

/// The account's key directory on the server: devices write the roster and the sealed copies of
/// the root key; the server keeps them, checks the roster as a device would, lets a device in by
/// password only under Standard (its escrow key signs it in), and never opens what is sealed to
/// devices.
@Suite struct KeyDirectoryTests {
    let laptop = DeviceKeys(), phone = DeviceKeys(), tablet = DeviceKeys()

    func directory(_ client: Client, token: String, for holders: [String] = []) async throws -> KeyDirectoryResponse {
        let answer = try await client.send(.get, "/v1/keys" + (holders.isEmpty ? "" : "?for=\(holders.joined(separator: ","))"), token: token)
        #expect(answer.status == .ok, "\(String(buffer: answer.body))")
        return try answer.decode(KeyDirectoryResponse.self)
    }

    func append(_ client: Client, token: String, after: Int, _ entries: [RosterEntry], _ envelopes: [KeyEnvelopeRecord] = []) async throws -> Client.Answer {
        try await client.send(.post, "/v1/keys/roster", token: token, json: RosterAppendRequest(after: after, entries: entries.map(\.encoded), envelopes: envelopes))
    }

    func envelope(_ root: AccountRootKey, account: String, to recipient: DevicePublicKeys, named name: String? = nil, from sender: DeviceKeys) throws -> KeyEnvelopeRecord {
        KeyEnvelopeRecord(epoch: Int64(root.epoch), recipient: name ?? recipient.deviceIdentifier, sender: sender.publicKeys.deviceIdentifier,
                          body: try KeyEnvelope.seal(root, account: account, to: recipient, from: sender))
    }

    @Test(arguments: Backend.all) func aDeviceSetsUpTheKeysAndAnotherJoinsByPasswordUnderStandardOnly(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let signedIn = try await client.signIn("ada", device: "laptop")
            let account = signedIn.identityToken
            let empty = try await directory(client, token: signedIn.token)
            #expect(empty.roster.isEmpty)
            let escrow = try DevicePublicKeys(signing: Array(try #require(empty.escrow).signing), agreement: Array(try #require(empty.escrow).agreement))

            // The first device: genesis, the escrow named, the root key sealed to itself and the escrow.
            let root = AccountRootKey(epoch: 0)
            let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
            let named = try RosterEntry(.escrow(escrow), after: genesis, signedBy: laptop)
            let setUp = try await append(client, token: signedIn.token, after: 0, [genesis, named], [
                try envelope(root, account: account, to: laptop.publicKeys, from: laptop),
                try envelope(root, account: account, to: escrow, named: "escrow", from: laptop),
            ])
            #expect(setUp.status == .ok, "\(String(buffer: setUp.body))")
            let mine = try await directory(client, token: signedIn.token, for: [laptop.publicKeys.deviceIdentifier])
            #expect(mine.roster == [genesis.encoded, named.encoded] && mine.envelopes.count == 1)
            let opened = try KeyEnvelope.open(mine.envelopes[0].body, account: account, recipient: laptop, sender: laptop.publicKeys)
            #expect(opened.withUnsafeBytes { Array($0) } == root.withUnsafeBytes { Array($0) })

            // Appending after a roster that has moved on: refused, nothing changed.
            let stale = try await append(client, token: signedIn.token, after: 0, [genesis])
            #expect(stale.status == .conflict && stale.errorCode == "rosterChanged")

            // The phone signs in by password and joins: the escrow signs it in and seals it the key.
            let phoneIn = try await client.signIn("ada", device: "phone")
            let join = try await client.send(.post, "/v1/keys/join", token: phoneIn.token,
                                             json: JoinRequest(signing: Data(phone.publicKeys.signing), agreement: Data(phone.publicKeys.agreement), name: "phone"))
            #expect(join.status == .ok, "\(String(buffer: join.body))")
            let joined = try join.decode(KeyDirectoryResponse.self)
            let roster = try Roster.verify(try joined.roster.map { try RosterEntry(encoded: $0) }, pinned: RosterHead(index: 1, hash: named.hash))
            #expect(roster.members[phone.publicKeys.deviceIdentifier]?.name == "phone")
            let phoneRoot = try KeyEnvelope.open(try #require(joined.envelopes.first).body, account: account, recipient: phone, sender: escrow)
            #expect(phoneRoot.withUnsafeBytes { Array($0) } == root.withUnsafeBytes { Array($0) })

            // Advanced: turned on by the laptop; a new epoch sealed to the devices alone.
            let advanced = try RosterEntry(.custody(.advanced), after: try RosterEntry(encoded: joined.roster.last!), signedBy: laptop)
            let next = AccountRootKey(epoch: 1)
            let switched = try await append(client, token: signedIn.token, after: 3, [advanced], [
                try envelope(next, account: account, to: laptop.publicKeys, from: laptop),
                try envelope(next, account: account, to: phone.publicKeys, from: laptop),
            ])
            #expect(switched.status == .ok, "\(String(buffer: switched.body))")
            let tabletIn = try await client.signIn("ada", device: "tablet")
            let refused = try await client.send(.post, "/v1/keys/join", token: tabletIn.token,
                                                json: JoinRequest(signing: Data(tablet.publicKeys.signing), agreement: Data(tablet.publicKeys.agreement), name: "tablet"))
            #expect(refused.status == .conflict && refused.errorCode == "advancedProtection", "\(String(buffer: refused.body))")
            let after = try await directory(client, token: tabletIn.token, for: ["escrow"])
            #expect(after.roster.count == 4 && after.envelopes.isEmpty, "the escrow's copies are destroyed with the switch")
        }
    }

    @Test(arguments: Backend.all) func aRosterThatDoesNotVerifyOrOverstepsItsBoundsIsRefused(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let token = try await client.signIn("ada").token
            let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
            let stranger = DeviceKeys()
            let forged = try RosterEntry(.addDevice(keys: stranger.publicKeys, name: "server"), after: genesis, signedBy: stranger)
            let answers = [
                try await append(client, token: token, after: 0, [genesis, forged]),
                try await append(client, token: token, after: 0, [try RosterEntry(.addDevice(keys: phone.publicKeys, name: "phone"), after: nil, signedBy: laptop)]),
                try await client.send(.post, "/v1/keys/roster", token: token, json: RosterAppendRequest(after: 0, entries: [Data([1, 2, 3])], envelopes: [])),
            ]
            for answer in answers { #expect(answer.status == .badRequest && answer.errorCode == "badRoster", "\(String(buffer: answer.body))") }
            let many = try await client.send(.post, "/v1/keys/roster", token: token,
                                             json: RosterAppendRequest(after: 0, entries: Array(repeating: genesis.encoded, count: 65), envelopes: []))
            #expect(many.status == .badRequest && many.errorCode == "tooMany")
            let badHolder = try await client.send(.post, "/v1/keys/roster", token: token, json: RosterAppendRequest(after: 0, entries: [genesis.encoded], envelopes: [
                KeyEnvelopeRecord(epoch: 0, recipient: "../../etc", sender: "escrow", body: Data([1])),
            ]))
            #expect(badHolder.status == .badRequest && badHolder.errorCode == "invalidHolder")
            // Envelopes for a holder the roster does not have, or an epoch it has not reached: refused
            // (what the server keeps stays bounded by the roster).
            for envelope in [KeyEnvelopeRecord(epoch: 0, recipient: stranger.publicKeys.deviceIdentifier, sender: laptop.publicKeys.deviceIdentifier, body: Data([1])),
                             KeyEnvelopeRecord(epoch: 7, recipient: laptop.publicKeys.deviceIdentifier, sender: laptop.publicKeys.deviceIdentifier, body: Data([1])),
                             KeyEnvelopeRecord(epoch: 0, recipient: "escrow", sender: laptop.publicKeys.deviceIdentifier, body: Data([1]))] {
                let answer = try await client.send(.post, "/v1/keys/roster", token: token, json: RosterAppendRequest(after: 0, entries: [genesis.encoded], envelopes: [envelope]))
                #expect(answer.status == .badRequest && answer.errorCode == "badEnvelope", "\(String(buffer: answer.body))")
            }
            let huge = try await client.send(.post, "/v1/keys/roster", token: token, json: RosterAppendRequest(after: Int.max, entries: [genesis.encoded], envelopes: []))
            #expect(huge.status == .badRequest)
            #expect(try await directory(client, token: token).roster.isEmpty, "nothing stored")
            let noRoster = try await client.send(.post, "/v1/keys/join", token: token,
                                                 json: JoinRequest(signing: Data(phone.publicKeys.signing), agreement: Data(phone.publicKeys.agreement), name: "phone"))
            #expect(noRoster.status == .conflict && noRoster.errorCode == "noRoster")
            let anonymous = try await client.send(.get, "/v1/keys")
            #expect(anonymous.status == .unauthorized)
        }
    }

    @Test(arguments: Backend.all) func aRequestToJoinGoesThroughItsStepsInOrderAndOnlyThem(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop").token
            let phone = try await client.signIn("ada", device: "phone").token
            let keys = tablet.publicKeys
            func create(commitment: Data = Data(repeating: 1, count: 32), name: String = "tablet") async throws -> Client.Answer {
                try await client.send(.post, "/v1/keys/requests", token: phone, json: KeyRequestCreate(signing: Data(keys.signing), agreement: Data(keys.agreement),
                                                                                                       name: name, commitment: commitment))
            }
            #expect(try await create(commitment: Data([1, 2])).errorCode == "invalidKeys")
            #expect(try await create(name: "").errorCode == "invalidName")
            let made = try await create()
            #expect(made.status == .ok, "\(String(buffer: made.body))")
            let request = try made.decode(KeyRequestRecord.self)
            let answerer = String(repeating: "a", count: 32)
            // Revealed before an answer: refused.
            let early = try await client.send(.post, "/v1/keys/requests/\(request.id)/reveal", token: phone, json: KeyRequestNonce(nonce: Data(repeating: 2, count: 32)))
            #expect(early.status == .conflict && early.errorCode == "notPending")
            let answer = try await client.send(.post, "/v1/keys/requests/\(request.id)/answer", token: laptop,
                                               json: KeyRequestNonce(nonce: Data(repeating: 3, count: 32), answerer: answerer))
            let answered = try answer.decode(KeyRequestRecord.self)
            #expect(answer.status == .ok && answered.answerer == answerer)
            let again = try await client.send(.post, "/v1/keys/requests/\(request.id)/answer", token: laptop,
                                              json: KeyRequestNonce(nonce: Data(repeating: 4, count: 32), answerer: answerer))
            #expect(again.status == .conflict, "answered once only")
            // Only the device that made it reveals, once.
            let stranger = try await client.send(.post, "/v1/keys/requests/\(request.id)/reveal", token: laptop, json: KeyRequestNonce(nonce: Data(repeating: 2, count: 32)))
            #expect(stranger.status == .conflict)
            let reveal = try await client.send(.post, "/v1/keys/requests/\(request.id)/reveal", token: phone, json: KeyRequestNonce(nonce: Data(repeating: 2, count: 32)))
            let revealed = try reveal.decode(KeyRequestRecord.self)
            #expect(reveal.status == .ok && revealed.revealNonce == Data(repeating: 2, count: 32))
            let twice = try await client.send(.post, "/v1/keys/requests/\(request.id)/reveal", token: phone, json: KeyRequestNonce(nonce: Data(repeating: 5, count: 32)))
            #expect(twice.status == .conflict)
            let listed = try await client.send(.get, "/v1/keys/requests", token: laptop).decode(KeyRequestsResponse.self)
            #expect(listed.requests.map(\.id) == [request.id])
            // At most eight wait.
            for _ in 0..<7 { #expect(try await create().status == .ok) }
            let ninth = try await create()
            #expect(ninth.status == .tooManyRequests && ninth.errorCode == "tooManyRequests")
            #expect(try await client.send(.delete, "/v1/keys/requests/\(request.id)", token: laptop).status == .noContent)
            #expect(try await client.send(.get, "/v1/keys/requests", token: laptop).decode(KeyRequestsResponse.self).requests.count == 7)
        }
    }

    @Test(arguments: Backend.all) func anAccountKeepsABoundedNumberOfSealedKeys(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        let account = try #require(try await server.admin.accounts().first).id
        let database = server.server.storage.database
        func envelope(_ epoch: Int64) -> KeyEnvelopeRecord { KeyEnvelopeRecord(epoch: epoch, recipient: "recovery", sender: "escrow", body: Data([1])) }
        #expect(try await database.appendKeys(accountId: account, after: 0, entries: [], envelopes: [envelope(0), envelope(1)], envelopeLimit: 3) { _ in false })
        await #expect { _ = try await database.appendKeys(accountId: account, after: 0, entries: [], envelopes: [envelope(2), envelope(3)], envelopeLimit: 3) { _ in false } } throws: { error in
            (error as? SyncError)?.code == "tooManyEnvelopes"
        }
        #expect(try await database.accountKeys(accountId: account, recipients: ["recovery"]).envelopes.count == 2, "nothing of the refused append kept")
    }

    @Test(arguments: Backend.all) func fsckChecksThatEveryEscrowCopyOpensWithTheServersKey(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        let escrowKey = try EscrowKey.loadOrCreate(at: URL(fileURLWithPath: server.configuration.escrowKeyPath)).key
        #expect(try await server.admin.checkKeys(escrow: escrowKey) == KeyCheckReport(), "no account set up: nothing to check")
        try await server.run { client in
            let signedIn = try await client.signIn("ada", device: "laptop")
            let root = AccountRootKey(epoch: 0)
            let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
            let named = try RosterEntry(.escrow(escrowKey.publicKeys), after: genesis, signedBy: laptop)
            let setUp = try await append(client, token: signedIn.token, after: 0, [genesis, named], [
                try envelope(root, account: signedIn.identityToken, to: escrowKey.publicKeys, named: "escrow", from: laptop),
            ])
            #expect(setUp.status == .ok)
        }
        let clean = try await server.admin.checkKeys(escrow: escrowKey)
        #expect(clean.accountsChecked == 1 && clean.problems.isEmpty, "\(clean.problems)")
        // The key file of another server (or another backup), or none at all.
        let other = try await server.admin.checkKeys(escrow: EscrowKey(keys: DeviceKeys()))
        #expect(other.problems.map(\.problem) == ["its roster names another escrow key than this server's (a key file from another server or backup?)"])
        #expect(try await server.admin.checkKeys(escrow: nil).problems.first?.problem.contains("no escrow key file") == true)
        // A damaged escrow copy.
        let account = try #require(try await server.admin.accounts().first).id
        _ = try await server.server.storage.database.appendKeys(accountId: account, after: 2, entries: [], envelopes: [
            KeyEnvelopeRecord(epoch: 0, recipient: "escrow", sender: laptop.publicKeys.deviceIdentifier, body: Data(repeating: 1, count: 90)),
        ], envelopeLimit: 10) { _ in false }
        #expect(try await server.admin.checkKeys(escrow: escrowKey).problems.map(\.problem) == ["the escrow's copy of epoch 0 does not open with this server's escrow key"])
    }

    @Test func theEscrowKeyIsAFileOfItsOwnAndEveryInstanceMustShareIt() async throws {
        let server = try await TestServer.withAccount("ada"); defer { server.remove() }
        let path = server.configuration.escrowKeyPath
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
        #expect(mode & 0o077 == 0, "mode \(String(mode, radix: 8))")
        let again = try await server.secondInstance()
        await again.close()
        // Another key file for the same database: refused, naming the fix.
        var other = server.configuration
        other.escrowKeyFile = server.directory + "/other-escrow.key"
        await #expect { _ = try await SyncServer(configuration: other) } throws: { error in
            (error as? SyncError)?.code == "escrowKeyMismatch" && "\(error)".contains("copy the escrow key file")
        }
        // A key file others can read is not used.
        chmod(path, 0o644)
        await #expect { _ = try await SyncServer(configuration: server.configuration) } throws: { error in (error as? SyncError)?.code == "escrowKeyUnusable" }
    }
}
