import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
import UbiquityKeys
import UbiquityProtocol
@testable import UbiquityServer

/// Checkpoints on the server (docs/Encryption.md "Checkpoints"): once a device's checkpoint —
/// signed with every device's last kept commit — is kept whole, the commits before it go (but
/// each device's last, which its chain goes on from); a device reading from before it is served
/// the checkpoint first, and its ledger takes the history from there. A checkpoint signed with
/// an older history is kept as ordinary commits and lets nothing go.
@Suite struct CheckpointServerTests {
    let laptop = DeviceKeys(), phone = DeviceKeys()
    let container = "ABCDE12345.com.example.notes"

    func upload(_ keys: DeviceKeys, after previous: SignedCommit?, _ content: CommitPayload, roster: Roster, seen: [String: CommitHead] = [:]) throws -> (SignedCommitUpload, SignedCommit) {
        let commit = try SignedCommit(container: container, contentHash: content.hash, after: previous, rosterHead: roster.head, seen: seen, signedBy: keys)
        return (SignedCommitUpload(commit: commit.encoded, content: content.encoded), commit)
    }

    func outcome(_ item: String, _ sequence: Int64) -> CommitContent.Outcome {
        CommitContent.Outcome(item: item, folder: nil, recordHash: Array(SHA256.hash(data: Data(item.utf8))), revision: "r\(sequence)", base: nil, deleted: false, sequence: sequence)
    }

    func page(_ client: Client, token: String, after: Int64) async throws -> SignedCommitsPage {
        let answer = try await client.send(.get, "/v1/containers/\(container)/signed-commits?after=\(after)", token: token)
        #expect(answer.status == .ok, "\(String(buffer: answer.body))")
        return try answer.decode(SignedCommitsPage.self)
    }

    func send(_ client: Client, token: String, _ uploads: [SignedCommitUpload]) async throws -> [Int64] {
        let answer = try await client.send(.post, "/v1/containers/\(container)/signed-commits", token: token, json: SignedCommitsRequest(commits: uploads))
        #expect(answer.status == .ok, "\(String(buffer: answer.body))")
        return try answer.decode(SignedCommitsResponse.self).positions
    }

    /// Reads every commit from `after` as a device does: the checkpoint first when the page says so.
    func read(_ client: Client, token: String, into ledger: inout CommitLedger, after: Int64, roster: Roster) async throws -> (position: Int64, outcomes: [String: Int64]) {
        var position = after, outcomes: [String: Int64] = [:]
        while true {
            let page = try await page(client, token: token, after: position)
            for stored in page.commits {
                let commit = try SignedCommit(encoded: stored.commit), content = try CommitPayload(encoded: stored.content)
                if stored.position == page.checkpoint, case .checkpoint(let part) = content {
                    try ledger.adopt(commit, part: part, roster: roster)
                } else {
                    try ledger.accept(commit, roster: roster)
                }
                for outcome in content.outcomes { outcomes[outcome.item] = max(outcomes[outcome.item] ?? 0, outcome.sequence) }
                position = stored.position
            }
            guard page.more else { return (position, outcomes) }
        }
    }

    @Test(arguments: Backend.all) func aWholeCheckpointLetsTheCommitsBeforeItGo(backend: Backend) async throws {
        var limits = AccountLimits()
        limits.checkpointAfterBytes = 2_000
        let server = try await TestServer(backend, accountLimits: limits); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ada", password: "correct horse")
        try await server.run { client in
            let token = try await client.signIn("ada", device: "laptop").token
            let (genesis, addPhone, roster) = try await client.setUpRoster(laptop, phone, token: token)

            // The laptop's a1…a8 and the phone's b1, b2: the container keeps more than asked.
            var laptopHead: SignedCommit?, phoneHead: SignedCommit?
            for index in 1...8 {
                let (sent, commit) = try upload(laptop, after: laptopHead, .changes(CommitContent(outcomes: [outcome("note\(index)", Int64(index))])), roster: roster)
                _ = try await send(client, token: token, [sent])
                laptopHead = commit
            }
            for index in 1...2 {
                let (sent, commit) = try upload(phone, after: phoneHead, .changes(CommitContent(outcomes: [outcome("photo\(index)", Int64(10 + index))])), roster: roster)
                _ = try await send(client, token: token, [sent])
                phoneHead = commit
            }
            let before = try await page(client, token: token, after: 0)
            #expect(before.commits.count == 10 && before.checkpointDue == true && before.checkpoint == nil)

            // The laptop reads them all and signs a checkpoint of 1,200 items: two parts.
            var ledger = CommitLedger(container: container)
            let (_, outcomes) = try await read(client, token: token, into: &ledger, after: 0, roster: roster)
            #expect(outcomes.count == 10)
            let items = (0..<1_200).map { outcome(String(format: "item%04d", $0), Int64($0)) }
            let parts = try CheckpointPart.parts(of: ledger, outcomes: items)
            #expect(parts.count == 2)
            let seen = ledger.heads.filter { $0.key != laptop.publicKeys.deviceIdentifier }
            let (part0, first) = try upload(laptop, after: laptopHead, .checkpoint(parts[0]), roster: roster, seen: seen)
            let (part1, second) = try upload(laptop, after: first, .checkpoint(parts[1]), roster: roster, seen: seen)
            // Part 0 alone lets nothing go.
            let start = try #require(try await send(client, token: token, [part0]).first)
            #expect(try await page(client, token: token, after: 0).commits.count == 11)
            #expect(try await send(client, token: token, [part1]) == [start + 1])

            // From before it, a device is served the checkpoint first: the commits before went
            // (the phone's last, b2, is still kept: its chain goes on from it).
            let fromStart = try await page(client, token: token, after: 0)
            #expect(fromStart.checkpoint == start && fromStart.commits.map(\.position) == [start, start + 1], "\(fromStart.commits.map(\.position))")
            #expect(fromStart.checkpointDue == nil, "the checkpoint is new: none due")
            #expect(try await page(client, token: token, after: 3).checkpoint == start)
            #expect(try await page(client, token: token, after: start - 1).checkpoint == nil)
            let (next, _) = try upload(phone, after: phoneHead, .changes(CommitContent(outcomes: [outcome("photo3", 20)])), roster: roster,
                                       seen: [laptop.publicKeys.deviceIdentifier: second.head])
            #expect(try await send(client, token: token, [next]) == [start + 2])

            // A new device's ledger takes the history from the checkpoint, every item's outcome with it.
            var fresh = CommitLedger(container: container)
            let (_, restated) = try await read(client, token: token, into: &fresh, after: 0, roster: roster)
            #expect(fresh.heads[laptop.publicKeys.deviceIdentifier] == second.head && fresh.heads[phone.publicKeys.deviceIdentifier]?.sequence == 3)
            #expect(restated.count == 1_201, "the checkpoint's items and the phone's next")

            // A checkpoint signed with an older history (the phone's, the laptop's a9 unread) is
            // kept as ordinary commits and lets nothing go.
            let (a9, _) = try upload(laptop, after: second, .changes(CommitContent(outcomes: [outcome("note9", 21)])), roster: roster)
            #expect(try await send(client, token: token, [a9]) == [start + 3])
            let staleParts = try CheckpointPart.parts(of: fresh, outcomes: [])
            let (late, _) = try upload(phone, after: try SignedCommit(encoded: next.commit), .checkpoint(staleParts[0]), roster: roster,
                                       seen: fresh.heads.filter { $0.key != phone.publicKeys.deviceIdentifier })
            #expect(try await send(client, token: token, [late]) == [start + 4])
            #expect(try await page(client, token: token, after: 0).checkpoint == start, "the checkpoint stays the laptop's")

            // One signed by a browser's session (Advanced: its key signs the page's changes) is
            // refused: only a device vouches for the history it read.
            let browser = DeviceKeys()
            let custody = try RosterEntry(.custody(.advanced), after: addPhone, signedBy: laptop)
            let session = try RosterEntry(.addWebSession(keys: browser.publicKeys, expires: UInt64(Date().timeIntervalSince1970) + 3_600), after: custody, signedBy: laptop)
            let appended = try await client.send(.post, "/v1/keys/roster", token: token, json: RosterAppendRequest(after: 2, entries: [custody.encoded, session.encoded], envelopes: []))
            #expect(appended.status == .ok, "\(String(buffer: appended.body))")
            let withBrowser = try Roster.verify([genesis, addPhone, custody, session])
            let (byBrowser, _) = try upload(browser, after: nil, .checkpoint(try CheckpointPart.parts(of: CommitLedger(container: container), outcomes: [])[0]), roster: withBrowser)
            let notADevice = try await client.send(.post, "/v1/containers/\(container)/signed-commits", token: token, json: SignedCommitsRequest(commits: [byBrowser]))
            #expect(notADevice.status == .badRequest && notADevice.errorCode == "invalidCommit", "\(String(buffer: notADevice.body))")
            let (changeByBrowser, _) = try upload(browser, after: nil, .changes(CommitContent(outcomes: [outcome("page", 30)])), roster: withBrowser)
            #expect(try await send(client, token: token, [changeByBrowser]).count == 1, "the same key's change is kept")

            // A checkpoint's part signed by a stranger is refused, as any commit.
            let (forged, _) = try upload(DeviceKeys(), after: nil, .checkpoint(parts[0]), roster: roster)
            let refused = try await client.send(.post, "/v1/containers/\(container)/signed-commits", token: token, json: SignedCommitsRequest(commits: [forged]))
            #expect(refused.status == .badRequest && refused.errorCode == "invalidCommit")
        }
    }
}
