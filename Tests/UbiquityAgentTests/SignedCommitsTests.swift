import Foundation
import Testing
import UbiquityCoordination
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityAgent

/// Devices sign what their commits made (issue 45, docs/Encryption.md "Signed commits"): once a
/// batch's answer is in, a sealing device signs the server's outcomes, keeps the commit with the
/// answer and sends it; the server keeps the commits in order, and another device can check each
/// against the roster and every item's state against the commit that made it.
extension ContainerSyncTests {
    @Test func aSealingDeviceSignsWhatItsCommitsMadeAndItsChainOutlivesARestart() async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            try laptop.write("Note.txt", Data("one".utf8))
            try laptop.write("Folder/Other.txt", Data("two".utf8))
            try await laptop.sync.syncOnce()
            // The agent started again over the same store: its chain goes on where it was.
            let again = try await sealingDevice("laptop", base: base, dir: dir)
            try again.write("Note.txt", Data("one, edited".utf8))
            try FileManager.default.removeItem(at: again.documents.appendingPathComponent("Folder/Other.txt"))
            try await again.sync.syncOnce()

            let page = try await laptop.client.signedCommits(container: notes, after: 0)
            #expect(page.commits.count >= 2 && !page.more, "\(page.commits.count) commits")
            // Checked as another device checks them: signed by the roster, each chain in order,
            // each content what its commit signed.
            let directory = try await laptop.client.keyDirectory(for: [])
            let roster = try Roster.verify(try directory.roster.map { try RosterEntry(encoded: $0) })
            var ledger = CommitLedger(container: notes)
            var newest: [String: CommitContent.Outcome] = [:]
            for stored in page.commits {
                let commit = try SignedCommit(encoded: stored.commit)
                let content = try CommitContent(encoded: stored.content)
                #expect(content.hash == commit.contentHash)
                #expect(try ledger.accept(commit, roster: roster) == .accepted)
                for outcome in content.outcomes { newest[outcome.item] = outcome }
            }
            #expect(ledger.heads.count == 1 && ledger.heads.values.first?.sequence == UInt64(page.commits.count))
            // Every item's state on the server is what the newest commit naming it says.
            let states = try await laptop.client.items(container: notes, ids: Array(newest.keys))
            #expect(states.count == newest.count)
            for state in states {
                let outcome = try #require(newest[state.id])
                #expect(state.revision == outcome.revision && state.deleted == outcome.deleted && state.parent == outcome.folder, "\(state.id)")
                if !state.deleted { #expect(CommitContent.recordHash(of: state.record) == outcome.recordHash, "\(state.id)") }
            }
            #expect(states.contains { $0.deleted }, "the deletion is signed too")
            #expect(states.filter { !$0.deleted }.count >= 2, "the note and the folder")
            // The edit names the revision it was made from.
            let edits = newest.values.filter { $0.base != nil && !$0.deleted }
            #expect(!edits.isEmpty)
        }
    }

    /// A restarted device goes on from what it had read of the signed commits (its store keeps
    /// its ledger with the sync state): it reads only the commits made since, with every
    /// device's chain where it had accepted it (`CommitLedgerTests` shows a kept ledger refusing
    /// what it refused before). A device that just joined checks commits from its first round.
    @Test func aRestartedDeviceReadsOnlyTheCommitsMadeSinceItStopped() async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            let phone = try await sealingDevice("phone", base: base, dir: dir)
            for index in 1...12 {
                try laptop.write("Note \(index).txt", Data("note \(index)".utf8))
                try await laptop.sync.syncOnce()
            }
            try await phone.sync.syncOnce()
            let read = await phone.sync.signedCommitsRead
            #expect(read >= 12, "\(read)")
            // The store keeps its own commits' chain head only (the server keeps the rest).
            let own = try #require(try AgentStore(path: dir + "/laptop.sqlite").lastSignedCommit(of: notes))
            #expect(try SignedCommit(encoded: own).sequence == 12)

            // The phone's agent starts again over the same store; the laptop edits once more.
            let restarted = try await sealingDevice("phone", base: base, dir: dir)
            try laptop.write("Note 1.txt", Data("note 1, edited".utf8))
            try await laptop.sync.syncOnce()
            try await restarted.sync.syncOnce()
            let readSince = await restarted.sync.signedCommitsRead
            #expect(readSince == 1, "only the commit made since: \(readSince)")
            #expect(restarted.read("Note 1.txt") == "note 1, edited")
            let stored = try #require(try AgentStore(path: dir + "/phone.sqlite").ledgerCheckpoint(of: notes))
            let ledger = try CommitLedger(encoded: stored.ledger, container: notes)
            #expect(ledger.heads.values.map(\.sequence).max() == 13)

            // A store whose checkpoint does not read is no harm: the commits are read from the start.
            let store = try AgentStore(path: dir + "/phone.sqlite")
            let state = try #require(try store.state(of: notes))
            try await store.record(notes, state: state, touched: [], changed: false,
                                   checkpoint: .some(LedgerCheckpoint(position: stored.position, ledger: Data([9, 9]), pending: stored.pending)))
            let again = try await sealingDevice("phone", base: base, dir: dir)
            try await again.sync.syncOnce()
            #expect(await again.sync.signedCommitsRead >= 13, "read again from the start")
        }
    }

    /// A conflict resolved on a device is signed as its other changes are: the commit names the
    /// item's state as the server made it (the kept revision current, at the sequence of the
    /// resolution), so a server that serves the conflict again is caught like any older state.
    @Test func aResolutionIsSignedByTheDeviceThatMadeIt() async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            let phone = try await sealingDevice("phone", base: base, dir: dir)
            try await makeConflict(laptop, phone)
            let url = phone.documents.appendingPathComponent("Trip.txt")
            #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: url)?.count == 1)
            let before = try await phone.client.signedCommits(container: notes, after: 0).commits.count

            for version in NSFileVersion.unresolvedConflictVersionsOfItem(at: url) ?? [] { version.isResolved = true }
            try NSFileVersion.removeOtherVersionsOfItem(at: url)
            try await phone.sync.syncOnce()

            let page = try await phone.client.signedCommits(container: notes, after: 0)
            #expect(page.commits.count == before + 1, "one commit more: the resolution's")
            let last = try #require(page.commits.last)
            let content = try CommitContent(encoded: last.content)
            let outcome = try #require(content.outcomes.first)
            let state = try #require(try await phone.client.items(container: notes, ids: [outcome.item]).first)
            #expect(content.outcomes.count == 1 && state.conflicts.isEmpty)
            #expect(outcome.revision == state.revision && outcome.sequence == state.sequence && outcome.base == nil && !outcome.deleted)
            #expect(CommitContent.recordHash(of: state.record) == outcome.recordHash)
            // The laptop's ledger takes it, and the laptop follows the resolution.
            try await laptop.sync.syncOnce()
            #expect(await laptop.sync.conflicts(of: "Documents/Trip.txt").isEmpty)
        }
    }
}

/// A page a push brought says where the container's signed commits ended when it was made: a
/// device that has read up to there takes the page without asking for commits (one round trip
/// less for every pushed change); one that has not reads them first, as before, and the commit
/// signed after the push is read at the next look.
extension ContainerSyncTests {
    @Test func aPushedPageSaysWhereTheSignedCommitsEnd() async throws {
        try await withServer { base, dir in
            let laptop = try await sealingDevice("laptop", base: base, dir: dir)
            let phone = try await sealingDevice("phone", base: base, dir: dir)
            await phone.sync.notePushes(live: true)
            try laptop.write("Note.txt", Data("one".utf8))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            func requests() -> Int { phone.client.traffic.snapshot.requests }
            func lastPosition() async throws -> Int64 { try await laptop.client.signedCommits(container: notes, after: 0).commits.last?.position ?? 0 }

            /// An edit by the laptop, pushed to the phone with `hint` (given where the commits
            /// ended before the edit): the phone's commits read for it.
            func edit(_ text: String, hint: (Int64) -> Int64?) async throws -> (requests: Int, read: Int) {
                let ended = try await lastPosition()
                try laptop.write("Note.txt", Data(text.utf8))
                try await laptop.sync.syncOnce() // (its signed commit kept after the commit, as a push would precede it)
                let since = await phone.sync.cursor
                var page = try await phone.client.changes(container: notes, since: since, brief: true, inline: ItemUpdate.maximumInlineBytes)
                page.signedCommits = hint(ended)
                let (before, read) = (requests(), await phone.sync.signedCommitsRead)
                await phone.sync.noteRemoteChange(upTo: page.sequence)
                await phone.sync.notePushedPage(page, since: since)
                try await phone.sync.syncOnce()
                #expect(phone.read("Note.txt") == text)
                return (requests() - before, await phone.sync.signedCommitsRead - read)
            }
            // (Commits read, not requests counted: a keyed device reads the account's keys again
            // once a minute, which a slow run meets. Asked, the phone would read the commit the
            // laptop signed after the push: none read means none asked for.)
            let (_, caughtUp) = try await edit("two", hint: { _ in nil }) // the phone reads what it had not yet
            #expect(caughtUp >= 1)
            let unsaid = try await edit("three", hint: { _ in nil })
            #expect(unsaid.read == 1, "unsaid: the commit signed after the push is read first")
            let said = try await edit("four", hint: { $0 })
            #expect(said.read == 0, "read up to where the push said they end: not asked")
            let ahead = try await edit("five", hint: { $0 + 1 })
            #expect(ahead.read == 2, "behind where the push said: read, the one not read before too")
        }
    }
}
