import Crypto
import Foundation
import Testing
@testable import UbiquityKeys

/// A browser a device lets in under Advanced Data Protection signs the page's own changes: the
/// approving device appends its key to the roster (`addWebSession`), and it signs commits from
/// that entry until a device ends the session (`endWebSession`: its grant ran out) or its
/// approver is removed — and nothing else. What it signs naming a later entry is refused, and
/// the devices close its chain as a removed device's (docs/Encryption.md, "The page's changes
/// under Advanced").
@Suite struct WebSessionRosterTests {
    let laptop = DeviceKeys(), phone = DeviceKeys(), browser = DeviceKeys()
    let container = "A.com.example.notes"
    var browserId: String { browser.publicKeys.deviceIdentifier }

    /// laptop (genesis) → adds the phone → Advanced → the laptop lets the browser in.
    func advancedEntries(expires: UInt64 = 1_000) throws -> [RosterEntry] {
        let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
        let phoneAdded = try RosterEntry(.addDevice(keys: phone.publicKeys, name: "phone"), after: genesis, signedBy: laptop)
        let advanced = try RosterEntry(.custody(.advanced), after: phoneAdded, signedBy: laptop)
        return [genesis, phoneAdded, advanced, try RosterEntry(.addWebSession(keys: browser.publicKeys, expires: expires), after: advanced, signedBy: laptop)]
    }

    func commit(_ keys: DeviceKeys, after previous: SignedCommit?, _ content: String, naming head: RosterHead, seen: [String: CommitHead] = [:]) throws -> SignedCommit {
        try SignedCommit(container: container, contentHash: Array(SHA256.hash(data: Data(content.utf8))), after: previous, rosterHead: head, seen: seen, signedBy: keys)
    }

    @Test func aBrowserLetInSignsCommitsUntilItsSessionEnds() throws {
        var entries = try advancedEntries(expires: 1_000)
        let open = try Roster.verify(entries)
        #expect(open.webSessions[browserId]?.approver == laptop.publicKeys.deviceIdentifier && open.webSessions[browserId]?.from == 3)
        #expect(open.members[browserId] == nil, "a browser is no device: it holds no root key and signs no roster entry")
        #expect(open.expiredWebSessions(now: 999).isEmpty && open.expiredWebSessions(now: 1_001) == [browserId])

        // The page's rename, signed naming the entry that let it in: taken as a device's commit.
        let renamed = try commit(browser, after: nil, "a rename made in the page", naming: open.head)
        var ledger = CommitLedger(container: container)
        #expect(try ledger.accept(renamed, roster: open) == .accepted)

        // The grant ran out: the phone ends the session.
        entries.append(try RosterEntry(.endWebSession(identifier: browserId), after: entries[3], signedBy: phone))
        let ended = try Roster.verify(entries)
        #expect(ended.webSessions[browserId]?.until == 4 && ended.expiredWebSessions(now: 2_000).isEmpty)
        let term = Roster.EndedTerm(signer: browserId, until: 4)
        #expect(ended.endedTerms == [term])

        // Naming the entry that ended it or a later one: not the browser's to sign.
        let late = try commit(browser, after: renamed, "a change after the session", naming: ended.head)
        expectRefused(.badSignature) { try ledger.accept(late, roster: ended) }
        // Naming the entry that let it in, the roster alone takes it; once a device closed the
        // browser's chain where it saw it, what the key signs past that is a forked history.
        let backdated = try commit(browser, after: renamed, "a change after the session, backdated", naming: open.head)
        var unclosed = ledger
        #expect(try unclosed.accept(backdated, roster: ended) == .accepted, "without the closing commit it is taken")
        #expect(ledger.unclosed(in: ended) == [term], "a device signs a closing commit in each container")
        let close = try SignedCommit(container: container, contentHash: CommitContent.closingHash, after: nil, rosterHead: ended.head,
                                     seen: [browserId: renamed.head], signedBy: phone)
        #expect(try ledger.accept(close, roster: ended) == .accepted)
        expectRefused(.forked) { try ledger.accept(backdated, roster: ended) }
        // The server refuses to keep anything of an ended session (a check of its own), and the
        // browser's key signs no closing commit that would close others' chains.
        #expect(ledger.closings == [term: 1])
    }

    @Test func removingItsApproverEndsABrowsersSession() throws {
        var entries = try advancedEntries()
        entries.append(try RosterEntry(.removeDevice(identifier: laptop.publicKeys.deviceIdentifier), after: entries[3], signedBy: phone))
        let roster = try Roster.verify(entries)
        #expect(roster.webSessions[browserId]?.until == 4)
        #expect(roster.webSessionKeys(browserId, at: 3) != nil && roster.webSessionKeys(browserId, at: 4) == nil)
        #expect(roster.endedTerms.contains(Roster.EndedTerm(signer: browserId, until: 4)))
    }

    @Test func theRosterRefusesABrowserOutsideItsRules() throws {
        let entries = try advancedEntries()
        func refused(_ entry: RosterEntry, _ code: EncryptionError.Code = .rosterRuleBroken) {
            expectRefused(code) { try Roster.verify(entries + [entry]) }
        }
        // Its key signs no roster entry: not another device's joining, not its own session's end.
        refused(try RosterEntry(.addDevice(keys: DeviceKeys().publicKeys, name: "phone 2"), after: entries[3], signedBy: browser), .badSignature)
        refused(try RosterEntry(.endWebSession(identifier: browserId), after: entries[3], signedBy: browser), .badSignature)
        // Let in once: not again, not as a device, not as the recovery key.
        refused(try RosterEntry(.addWebSession(keys: browser.publicKeys, expires: 5), after: entries[3], signedBy: phone))
        refused(try RosterEntry(.addDevice(keys: browser.publicKeys, name: "browser"), after: entries[3], signedBy: phone))
        refused(try RosterEntry(.recovery(browser.publicKeys), after: entries[3], signedBy: phone))
        // Only a session that is open ends.
        refused(try RosterEntry(.endWebSession(identifier: DeviceKeys().publicKeys.deviceIdentifier), after: entries[3], signedBy: phone))
        // Under Standard the server signs the page's changes: no browser is let in there.
        let standard = Array(entries.prefix(2))
        expectRefused(.rosterRuleBroken) {
            try Roster.verify(standard + [try RosterEntry(.addWebSession(keys: browser.publicKeys, expires: 5), after: standard[1], signedBy: laptop)])
        }
        // Back to Standard ends every open session.
        let back = try RosterEntry(.custody(.standard), after: entries[3], signedBy: laptop)
        #expect(try Roster.verify(entries + [back]).webSessions[browserId]?.until == 4)
    }

    @Test func bothEntriesReadBackAsWritten() throws {
        var entries = try advancedEntries(expires: 1_790_000_000)
        entries.append(try RosterEntry(.endWebSession(identifier: browserId), after: entries[3], signedBy: laptop))
        let read = try entries.map { try RosterEntry(encoded: $0.encoded) }
        #expect(read == entries)
        #expect(try Roster.verify(read).webSessions[browserId]?.expires == 1_790_000_000)
    }
}
