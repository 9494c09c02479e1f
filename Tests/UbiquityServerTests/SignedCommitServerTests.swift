import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
import UbiquityKeys
import UbiquityProtocol
@testable import UbiquityServer

/// The server's record of devices' signed commits (issue 45): kept as sent, in the order they
/// came, each device's chain in order and unforked; what does not read, is not signed by a
/// device of the roster or is not what its signature covers is refused and nothing is kept.
@Suite struct SignedCommitServerTests {
    let laptop = DeviceKeys(), phone = DeviceKeys()
    let container = "ABCDE12345.com.example.notes"

    func content(_ item: String) -> CommitContent {
        CommitContent(outcomes: [.init(item: item, folder: nil, recordHash: Array(SHA256.hash(data: Data(item.utf8))), revision: "r-\(item)", base: nil, deleted: false, sequence: 1)])
    }

    func commit(_ keys: DeviceKeys, after previous: SignedCommit?, _ item: String, roster: Roster, container: String? = nil) throws -> SignedCommitUpload {
        let content = content(item)
        let commit = try SignedCommit(container: container ?? self.container, contentHash: content.hash, after: previous, rosterHead: roster.head, seen: [:], signedBy: keys)
        return SignedCommitUpload(commit: commit.encoded, content: content.encoded)
    }

    func send(_ client: Client, token: String, _ uploads: [SignedCommitUpload]) async throws -> Client.Answer {
        try await client.send(.post, "/v1/containers/\(container)/signed-commits", token: token, json: SignedCommitsRequest(commits: uploads))
    }

    func page(_ client: Client, token: String, after: Int64) async throws -> SignedCommitsPage {
        let answer = try await client.send(.get, "/v1/containers/\(container)/signed-commits?after=\(after)", token: token)
        #expect(answer.status == .ok, "\(String(buffer: answer.body))")
        return try answer.decode(SignedCommitsPage.self)
    }

    @Test(arguments: Backend.all) func commitsAreKeptInOrderAndEachChainStaysInOrderAndUnforked(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let signedIn = try await client.signIn("ada", device: "laptop")
            let token = signedIn.token
            // No roster yet: nothing to check a signature against.
            let roster0 = try Roster.verify([try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)])
            let early = try await send(client, token: token, [try commit(laptop, after: nil, "a", roster: roster0)])
            #expect(early.status == .conflict && early.errorCode == "noRoster")

            let (_, _, roster) = try await client.setUpRoster(laptop, phone, token: token)

            let a1 = try commit(laptop, after: nil, "a1", roster: roster)
            let a1Commit = try SignedCommit(encoded: a1.commit)
            let a2 = try commit(laptop, after: a1Commit, "a2", roster: roster)
            let b1 = try commit(phone, after: nil, "b1", roster: roster)
            let kept = try await send(client, token: token, [a1, a2])
            #expect(kept.status == .ok, "\(String(buffer: kept.body))")
            #expect(try kept.decode(SignedCommitsResponse.self).positions == [1, 2])
            // Sent again (a lost answer): the same places, nothing kept twice.
            #expect(try await send(client, token: token, [a2]).decode(SignedCommitsResponse.self).positions == [2])
            #expect(try await send(client, token: token, [b1]).decode(SignedCommitsResponse.self).positions == [3])

            // Another commit at a place taken, or one that does not follow the one before: a fork.
            let other = try await send(client, token: token, [try commit(laptop, after: a1Commit, "other", roster: roster)])
            #expect(other.status == .conflict && other.errorCode == "forked")
            let b1Commit = try SignedCommit(encoded: b1.commit)
            let stranger = try SignedCommit(encoded: try commit(phone, after: nil, "x", roster: roster).commit)
            let b2 = try commit(phone, after: stranger, "b2", roster: roster)
            let detached = try await send(client, token: token, [b2])
            #expect(detached.status == .conflict && detached.errorCode == "forked")
            // A gap: the ones before first.
            let b2Good = try SignedCommit(encoded: try commit(phone, after: b1Commit, "b2", roster: roster).commit)
            let gap = try await send(client, token: token, [try commit(phone, after: b2Good, "b3", roster: roster)])
            #expect(gap.status == .conflict && gap.errorCode == "outOfOrder")

            // Served in the order they came, from any place.
            let all = try await page(client, token: token, after: 0)
            #expect(all.commits.map(\.position) == [1, 2, 3] && !all.more)
            #expect(all.commits.map(\.commit) == [a1.commit, a2.commit, b1.commit] && all.commits.map(\.content) == [a1.content, a2.content, b1.content])
            #expect(try await page(client, token: token, after: 2).commits.map(\.position) == [3])
            let bad = try await client.send(.get, "/v1/containers/\(container)/signed-commits?after=-1", token: token)
            #expect(bad.status == .badRequest)
        }
    }

    @Test(arguments: Backend.all) func whatDoesNotReadOrIsNotSignedByTheRosterIsRefusedAndNothingKept(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let token = try await client.signIn("ada", device: "laptop").token
            let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
            #expect(try await client.send(.post, "/v1/keys/roster", token: token, json: RosterAppendRequest(after: 0, entries: [genesis.encoded], envelopes: [])).status == .ok)
            let roster = try Roster.verify([genesis])
            let good = try commit(laptop, after: nil, "a1", roster: roster)
            var lies: [(String, SignedCommitUpload)] = []
            lies.append(("a stranger's", try commit(DeviceKeys(), after: nil, "a1", roster: roster)))
            lies.append(("another container's", try commit(laptop, after: nil, "a1", roster: roster, container: "ABCDE12345.com.example.other")))
            lies.append(("content other than signed", SignedCommitUpload(commit: good.commit, content: content("b").encoded)))
            var flipped = good.commit
            flipped[flipped.startIndex + 40] ^= 1
            lies.append(("changed", SignedCommitUpload(commit: flipped, content: good.content)))
            lies.append(("garbage", SignedCommitUpload(commit: Data([1, 2, 3]), content: good.content)))
            lies.append(("garbage content", SignedCommitUpload(commit: good.commit, content: Data([9]))))
            for (what, lie) in lies {
                let answer = try await send(client, token: token, [lie])
                #expect(answer.status == .badRequest && answer.errorCode == "invalidCommit", "\(what): \(answer.status)")
            }
            let tooMany = try await send(client, token: token, Array(repeating: good, count: SignedCommitsRequest.maximumCount + 1))
            #expect(tooMany.status == .badRequest && tooMany.errorCode == "tooMany")
            #expect(try await page(client, token: token, after: 0).commits.isEmpty, "nothing kept")
            #expect(try await send(client, token: token, [good]).decode(SignedCommitsResponse.self).positions == [1])
        }
    }

    /// What the escrow signs is kept only while the roster still ends at the entry it named,
    /// checked with the commit in one transaction: a switch to Advanced landing between the
    /// server's reading of the roster and its keeping of the commit leaves the commit out (a
    /// device closing the escrow's chains at the switch must have read all of it).
    @Test(arguments: Backend.all) func anEscrowCommitIsKeptOnlyWhileTheRosterEndsWhereItSaid(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let token = try await client.signIn("ada", device: "laptop").token
            let (genesis, _, roster) = try await client.setUpRoster(laptop, phone, token: token)
            let account = try #require(try await server.admin.database.accounts().first { $0.name == "ada" }).id
            func kept(_ item: String, after previous: SignedCommit?, naming head: RosterHead) throws -> (KeptCommit, SignedCommit) {
                let content = content(item)
                let commit = try SignedCommit(container: container, contentHash: content.hash, after: previous, rosterHead: head, seen: [:], signedBy: laptop)
                return (KeptCommit(device: commit.device, sequence: Int64(commit.sequence), previous: Data(commit.previous), hash: Data(commit.hash),
                                   body: commit.encoded, content: content.encoded), commit)
            }
            let (stale, _) = try kept("a", after: nil, naming: RosterHead(index: 0, hash: genesis.hash))
            #expect(try await server.admin.database.keepCommit(accountId: account, container: container, commit: stale, rosterEntry: 0) == .rosterMoved)
            let (current, first) = try kept("a", after: nil, naming: roster.head)
            #expect(try await server.admin.database.keepCommit(accountId: account, container: container, commit: current, rosterEntry: 1) == .kept(1))
            // Without a roster entry to hold to (a device's commit), the roster is not asked.
            let (next, _) = try kept("b", after: first, naming: RosterHead(index: 0, hash: genesis.hash))
            #expect(try await server.admin.database.keepCommit(accountId: account, container: container, commit: next, rosterEntry: nil) == .kept(2))
        }
    }

    /// A removed device's commits are kept no more, though signed before its removal (naming an
    /// entry from before it, they verify): the devices close its chain at what they read after
    /// the removal, and a commit kept later would be one past it — a fork to every ledger.
    @Test(arguments: Backend.all) func aRemovedDevicesCommitIsNotKeptThoughSignedBefore(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let token = try await client.signIn("ada", device: "laptop").token
            let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
            let addPhone = try RosterEntry(.addDevice(keys: phone.publicKeys, name: "phone"), after: genesis, signedBy: laptop)
            #expect(try await client.send(.post, "/v1/keys/roster", token: token, json: RosterAppendRequest(after: 0, entries: [genesis.encoded, addPhone.encoded], envelopes: [])).status == .ok)
            let roster = try Roster.verify([genesis, addPhone])
            let p1 = try commit(phone, after: nil, "p1", roster: roster)
            let p2 = try commit(phone, after: try SignedCommit(encoded: p1.commit), "p2", roster: roster)
            #expect(try await send(client, token: token, [p1]).decode(SignedCommitsResponse.self).positions == [1])
            let removal = try RosterEntry(.removeDevice(identifier: phone.publicKeys.deviceIdentifier), after: addPhone, signedBy: laptop)
            let removed = try await client.send(.post, "/v1/keys/roster", token: token, json: RosterAppendRequest(after: 2, entries: [removal.encoded], envelopes: []))
            #expect(removed.status == .ok, "\(String(buffer: removed.body))")
            let late = try await send(client, token: token, [p2])
            #expect(late.status == .badRequest && late.errorCode == "invalidCommit", "\(late.status)")
            #expect(try await page(client, token: token, after: 0).commits.count == 1, "nothing more kept")
            // The laptop's own, checked against the roster as it is now, is kept.
            #expect(try await send(client, token: token, [try commit(laptop, after: nil, "a1", roster: try Roster.verify([genesis, addPhone, removal]))]).status == .ok)
        }
    }

    /// A commit is kept a few milliseconds after the change it signs, whose push came first: the
    /// account's other devices are told (`signed`) so that one holding that change back (under
    /// Advanced, until a commit names it) looks again at once; the sender is not told, nor is a
    /// commit sent again.
    @Test(arguments: Backend.all) func keepingACommitTellsTheOtherDevices(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.server.makeApplication().test(.live) { raw in
            let client = Client(client: raw)
            let laptop = try await client.signIn("ada", device: "laptop")
            let phone = try await client.signIn("ada", device: "phone")
            let genesis = try RosterEntry(.genesis(keys: self.laptop.publicKeys, name: "laptop"), after: nil, signedBy: self.laptop)
            let setUp = try await client.send(.post, "/v1/keys/roster", token: laptop.token, json: RosterAppendRequest(after: 0, entries: [genesis.encoded], envelopes: []))
            #expect(setUp.status == .ok, "\(String(buffer: setUp.body))")
            let roster = try Roster.verify([genesis])
            let connected = Confirmations()
            async let phoneEvents = PushTests().listen(raw, token: phone.token) { events in
                if events.count == 1 { connected.mark("phone") }
                return events.count >= 3
            }
            async let laptopEvents = PushTests().listen(raw, token: laptop.token) { events in
                if events.count == 1 { connected.mark("laptop") }
                return events.contains { $0.type == "changed" }
            }
            try await connected.wait(for: ["phone", "laptop"])
            let a1 = try commit(self.laptop, after: nil, "a1", roster: roster)
            #expect(try await send(client, token: laptop.token, [a1]).status == .ok)
            #expect(try await send(client, token: laptop.token, [a1]).status == .ok) // (sent again: nothing new kept)
            let a2 = try commit(self.laptop, after: try SignedCommit(encoded: a1.commit), "a2", roster: roster)
            #expect(try await send(client, token: laptop.token, [a2]).status == .ok)
            _ = try await client.commit(container, "p", ItemUpdate(baseRevision: nil, name: "from the phone.txt", kind: .file, modificationDate: 1, manifest: Manifest(chunks: [])), token: phone.token)
            let signed = PushEvent(type: "signed", container: container, sequence: nil)
            #expect(try await phoneEvents == [.connected, signed, signed], "one for each commit newly kept")
            #expect(try await laptopEvents == [.connected, PushEvent(type: "changed", container: container, sequence: 1)], "not told of its own")
        }
    }
}
