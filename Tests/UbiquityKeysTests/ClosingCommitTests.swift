import Crypto
import Foundation
import Testing
@testable import UbiquityKeys

/// A key whose term ended — the escrow's at the switch to Advanced, a removed device's — can
/// still sign commits naming a roster entry from before the end, which the roster alone must
/// take as valid (what it signed then stays good). A device's closing commit names how far it
/// saw that key's chain once the term had ended; every ledger then refuses what the key signs
/// past it in the closed term, in whichever order the server serves the two.
@Suite struct ClosingCommitTests {
    let laptop = DeviceKeys(), phone = DeviceKeys(), escrow = DeviceKeys()
    let container = "A.com.example.notes"

    /// laptop (genesis) → names the escrow → adds the phone.
    func standardEntries() throws -> [RosterEntry] {
        let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
        let named = try RosterEntry(.escrow(escrow.publicKeys), after: genesis, signedBy: laptop)
        return [genesis, named, try RosterEntry(.addDevice(keys: phone.publicKeys, name: "phone"), after: named, signedBy: laptop)]
    }

    func commit(_ keys: DeviceKeys, after previous: SignedCommit?, _ content: String, naming head: RosterHead, seen: [String: CommitHead] = [:]) throws -> SignedCommit {
        try SignedCommit(container: container, contentHash: Array(SHA256.hash(data: Data(content.utf8))), after: previous, rosterHead: head, seen: seen, signedBy: keys)
    }

    func closing(_ keys: DeviceKeys, after previous: SignedCommit?, naming head: RosterHead, seen: [String: CommitHead]) throws -> SignedCommit {
        try SignedCommit(container: container, contentHash: CommitContent.closingHash, after: previous, rosterHead: head, seen: seen, signedBy: keys)
    }

    func ledger(_ commits: [SignedCommit], _ roster: Roster) throws -> CommitLedger {
        var ledger = CommitLedger(container: container)
        for commit in commits { try ledger.accept(commit, roster: roster) }
        return ledger
    }

    @Test func theSwitchToAdvancedClosesTheEscrowsChainWhereTheDevicesSawIt() throws {
        var entries = try standardEntries()
        let standard = try Roster.verify(entries)
        let e1 = try commit(escrow, after: nil, "web rename", naming: standard.head)
        let e2 = try commit(escrow, after: e1, "web upload", naming: standard.head)
        entries.append(try RosterEntry(.custody(.advanced), after: entries[2], signedBy: laptop))
        let advanced = try Roster.verify(entries)
        let term = Roster.EndedTerm(signer: escrow.publicKeys.deviceIdentifier, until: 3)
        #expect(advanced.endedTerms == [term])

        var ledger = try self.ledger([e1, e2], advanced)
        #expect(ledger.unclosed(in: advanced) == [term], "a device signs a closing commit in each container")
        let close = try closing(laptop, after: nil, naming: advanced.head, seen: [escrow.publicKeys.deviceIdentifier: e2.head])
        #expect(try ledger.accept(close, roster: advanced) == .accepted)
        #expect(ledger.closings == [term: 2] && ledger.unclosed(in: advanced).isEmpty)

        // The server, still holding the escrow key, signs a commit dated before the switch: the
        // roster alone takes it (its entry falls in the escrow's term)…
        let forged = try commit(escrow, after: e2, "an old revision made current", naming: standard.head)
        try forged.verify(container: container, roster: advanced)
        var open = try self.ledger([e1, e2], advanced)
        #expect(try open.accept(forged, roster: advanced) == .accepted, "without the closing commit it is taken")
        // …the closed chain refuses it,
        var closed = ledger
        expectRefused(.forked) { try closed.accept(forged, roster: advanced) }
        // and served before the closing commit, the closing commit is refused instead: the
        // switching device was never shown it.
        var early = try self.ledger([e1, e2, forged], advanced)
        expectRefused(.forked) { try early.accept(close, roster: advanced) }

        // A stored ledger keeps the closing (and refuses the same).
        var stored = try CommitLedger(encoded: ledger.encoded(), container: container)
        #expect(stored == ledger)
        expectRefused(.forked) { try stored.accept(forged, roster: advanced) }
    }

    @Test func anEscrowKeyNamedAgainSignsInItsNewTermOnly() throws {
        var entries = try standardEntries()
        let standard = try Roster.verify(entries)
        let e1 = try commit(escrow, after: nil, "web rename", naming: standard.head)
        entries.append(try RosterEntry(.custody(.advanced), after: entries[2], signedBy: laptop))
        let advanced = try Roster.verify(entries)
        let close = try closing(phone, after: nil, naming: advanced.head, seen: [escrow.publicKeys.deviceIdentifier: e1.head])
        // Back to Standard with the same escrow key: a term of its own.
        entries.append(try RosterEntry(.custody(.standard), after: entries[3], signedBy: laptop))
        entries.append(try RosterEntry(.escrow(escrow.publicKeys), after: entries[4], signedBy: laptop))
        let again = try Roster.verify(entries)
        let e2 = try commit(escrow, after: e1, "web upload", naming: again.head)
        var ledger = try self.ledger([e1, close], again)
        #expect(try ledger.accept(e2, roster: again) == .accepted, "its new term is not closed")
        #expect(ledger.unclosed(in: again).isEmpty)
        // Its commits name roster entries in order: one naming its old term after one of the
        // new is refused, closed or not.
        let back = try commit(escrow, after: e2, "dated back", naming: standard.head)
        for commits in [[e1, close, e2], [e1, e2]] {
            var copy = try self.ledger(commits, again)
            expectRefused(.forked) { try copy.accept(back, roster: again) }
        }
        // The closing commit served after the new term's commits still holds: what it closed is the old term's.
        var later = try self.ledger([e1, e2], again)
        #expect(try later.accept(close, roster: again) == .accepted)
        #expect(later.closings == [Roster.EndedTerm(signer: escrow.publicKeys.deviceIdentifier, until: 3): 1])
        var stored = try CommitLedger(encoded: later.encoded(), container: container)
        #expect(stored == later)
        expectRefused(.forked) { try stored.accept(back, roster: again) }
    }

    @Test func aRemovalClosesTheRemovedDevicesChain() throws {
        var entries = try standardEntries()
        let before = try Roster.verify(entries)
        let p1 = try commit(phone, after: nil, "a note", naming: before.head)
        entries.append(try RosterEntry(.removeDevice(identifier: phone.publicKeys.deviceIdentifier), after: entries[2], signedBy: laptop))
        let after = try Roster.verify(entries)
        let term = Roster.EndedTerm(signer: phone.publicKeys.deviceIdentifier, until: 3)
        #expect(after.endedTerms == [term])
        // The stolen phone signs a commit dated before its removal: the roster takes it.
        let stolen = try commit(phone, after: p1, "the note emptied", naming: before.head)
        var open = try self.ledger([p1], after)
        #expect(try open.accept(stolen, roster: after) == .accepted, "without the closing commit it is taken")
        let close = try closing(laptop, after: nil, naming: after.head, seen: [phone.publicKeys.deviceIdentifier: p1.head])
        var ledger = try self.ledger([p1, close], after)
        #expect(ledger.closings == [term: 1])
        expectRefused(.forked) { try ledger.accept(stolen, roster: after) }
        var early = try self.ledger([p1, stolen], after)
        expectRefused(.forked) { try early.accept(close, roster: after) }
        // A closing that names nothing of the phone closes it at its first commit.
        let none = try closing(laptop, after: nil, naming: after.head, seen: [:])
        var empty = try self.ledger([none], after)
        expectRefused(.forked) { try empty.accept(p1, roster: after) }
    }

    @Test func aClosingCommitBeforeTheEndClosesNothing() throws {
        let entries = try standardEntries()
        let standard = try Roster.verify(entries)
        let close = try closing(laptop, after: nil, naming: standard.head, seen: [:])
        let ledger = try self.ledger([close], standard)
        #expect(ledger.closings.isEmpty)
        // And a closing commit signed by the escrow closes nothing either (only devices close).
        #expect(try self.ledger([try closing(escrow, after: nil, naming: standard.head, seen: [:])], standard).closings.isEmpty)
    }
}
