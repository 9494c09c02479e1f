import Foundation
import Testing
import UbiquityTestSupport
@testable import UbiquityKeys

/// The server's escrow key in the roster: under Standard it may add a device (a password
/// sign-in) and nothing else; under Advanced it may do nothing at all. And every entry survives
/// its wire encoding, which refuses what is not an entry.
@Suite struct EscrowRosterTests {
    let laptop = DeviceKeys(), phone = DeviceKeys(), escrow = DeviceKeys()

    /// laptop (genesis) → names the escrow key.
    func standard() throws -> [RosterEntry] {
        let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
        return [genesis, try RosterEntry(.escrow(escrow.publicKeys), after: genesis, signedBy: laptop)]
    }

    @Test func underStandardTheEscrowAddsADeviceAndNothingElse() throws {
        var entries = try standard()
        entries.append(try RosterEntry(.addDevice(keys: phone.publicKeys, name: "phone"), after: entries[1], signedBy: escrow))
        let roster = try Roster.verify(entries)
        #expect(roster.members[phone.publicKeys.deviceIdentifier]?.name == "phone" && roster.escrow == escrow.publicKeys)
        // Anything else it signs is refused: removing a device, a new epoch, the custody, itself as a device.
        for change in [RosterChange.removeDevice(identifier: laptop.publicKeys.deviceIdentifier), .newEpoch(1), .custody(.advanced), .minimumFormat(2), .escrow(nil)] {
            expectRefused(.badSignature) { try Roster.verify(entries + [try RosterEntry(change, after: entries[2], signedBy: escrow)]) }
        }
        expectRefused(.rosterRuleBroken) {
            try Roster.verify(entries + [try RosterEntry(.addDevice(keys: escrow.publicKeys, name: "server"), after: entries[2], signedBy: escrow)])
        }
        // A device's keys cannot be named the escrow.
        expectRefused(.rosterRuleBroken) { try Roster.verify(entries + [try RosterEntry(.escrow(phone.publicKeys), after: entries[2], signedBy: laptop)]) }
    }

    @Test func turningAdvancedOnTakesTheEscrowsRightsAwayForGood() throws {
        var entries = try standard()
        entries.append(try RosterEntry(.custody(.advanced), after: entries[1], signedBy: laptop))
        let roster = try Roster.verify(entries)
        #expect(roster.custody == .advanced && roster.escrow == nil && roster.epoch == 1)
        // The server adding a device after the switch (its key no longer in the roster).
        expectRefused(.badSignature) {
            try Roster.verify(entries + [try RosterEntry(.addDevice(keys: phone.publicKeys, name: "phone"), after: entries[2], signedBy: escrow)])
        }
        // Naming an escrow key under Advanced, even by a device.
        expectRefused(.rosterRuleBroken) { try Roster.verify(entries + [try RosterEntry(.escrow(escrow.publicKeys), after: entries[2], signedBy: laptop)]) }
        // Back to Standard is a device's choice; then it names the escrow again.
        let back = try RosterEntry(.custody(.standard), after: entries[2], signedBy: laptop)
        let named = try RosterEntry(.escrow(escrow.publicKeys), after: back, signedBy: laptop)
        #expect(try Roster.verify(entries + [back, named]).escrow == escrow.publicKeys)
    }

    @Test func theRecoveryKeyAddsADeviceUnderEitherCustodyAndNothingElse() throws {
        let recovery = RecoveryKey().deviceKeys(account: "ada")
        var entries = try standard()
        entries.append(try RosterEntry(.recovery(recovery.publicKeys), after: entries[1], signedBy: laptop))
        entries.append(try RosterEntry(.custody(.advanced), after: entries[2], signedBy: laptop))
        // Every device lost: the recovery key lets a new one in, under Advanced too.
        let added = try RosterEntry(.addDevice(keys: phone.publicKeys, name: "new phone"), after: entries[3], signedBy: recovery)
        #expect(try Roster.verify(entries + [added]).members[phone.publicKeys.deviceIdentifier] != nil)
        for change in [RosterChange.removeDevice(identifier: laptop.publicKeys.deviceIdentifier), .custody(.standard), .recovery(nil), .newEpoch(2)] {
            expectRefused(.badSignature) { try Roster.verify(entries + [try RosterEntry(change, after: entries[3], signedBy: recovery)]) }
        }
        expectRefused(.rosterRuleBroken) {
            try Roster.verify(entries + [try RosterEntry(.addDevice(keys: recovery.publicKeys, name: "x"), after: entries[3], signedBy: laptop)])
        }
        // Replaced by a device: the old recovery key signs nothing more.
        let replaced = try RosterEntry(.recovery(RecoveryKey().deviceKeys(account: "ada").publicKeys), after: entries[3], signedBy: laptop)
        expectRefused(.badSignature) {
            try Roster.verify(entries + [replaced, try RosterEntry(.addDevice(keys: phone.publicKeys, name: "phone"), after: replaced, signedBy: recovery)])
        }
    }

    @Test func everyEntryRoundTripsItsWireEncodingAndGarbageIsRefused() throws {
        let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop ☕"), after: nil, signedBy: laptop)
        var entries = [genesis]
        for change in [RosterChange.escrow(escrow.publicKeys), .addDevice(keys: phone.publicKeys, name: "phone"), .minimumFormat(1),
                       .newEpoch(1), .removeDevice(identifier: phone.publicKeys.deviceIdentifier), .custody(.advanced), .escrow(nil),
                       .recovery(RecoveryKey().deviceKeys(account: "ada").publicKeys), .recovery(nil)] {
            entries.append(try RosterEntry(change, after: entries.last, signedBy: laptop))
        }
        let decoded = try entries.map { try RosterEntry(encoded: $0.encoded) }
        #expect(decoded == entries)
        #expect(try Roster.verify(decoded).head == Roster.verify(entries).head)
        let bytes = entries[2].encoded
        expectRefused(.malformed) { try RosterEntry(encoded: bytes.dropLast()) }
        expectRefused(.malformed) { try RosterEntry(encoded: bytes + [0]) }
        expectRefused(.malformed) { try RosterEntry(encoded: Data()) }
        var older = bytes
        older[0] = 0
        expectRefused(.unsupportedFormat) { try RosterEntry(encoded: older) }
        var unknown = bytes
        unknown[1 + 8 + 32] = 99
        expectRefused(.malformed) { try RosterEntry(encoded: unknown) }
    }
}

extension EscrowRosterTests {
    /// The escrow signs commits (what the server makes for the web page under Standard) while
    /// it is the escrow: naming a roster entry of its term. Once Advanced is on, or another
    /// escrow named, what it signs naming a later entry is refused; what it signed before stays
    /// good. A key that was never the escrow signs nothing.
    @Test func theEscrowSignsCommitsWhileItIsTheEscrowUnderStandard() throws {
        let container = "A.com.example.notes"
        var entries = try standard()
        func commit(_ keys: DeviceKeys, after previous: SignedCommit?, naming head: RosterHead) throws -> SignedCommit {
            try SignedCommit(container: container, contentHash: Array(repeating: 1, count: 32), after: previous, rosterHead: head, seen: [:], signedBy: keys)
        }
        let standard = try Roster.verify(entries)
        let first = try commit(escrow, after: nil, naming: standard.head)
        var ledger = CommitLedger(container: container)
        #expect(try ledger.accept(first, roster: standard) == .accepted)
        expectRefused(.badSignature) { try commit(DeviceKeys(), after: nil, naming: standard.head).verify(container: container, roster: standard) }
        // Before it was named, it was not the escrow.
        expectRefused(.badSignature) { try commit(escrow, after: nil, naming: RosterHead(index: 0, hash: entries[0].hash)).verify(container: container, roster: standard) }

        // Advanced: its earlier commit stays good; one naming the switch or later is refused.
        entries.append(try RosterEntry(.custody(.advanced), after: entries[1], signedBy: laptop))
        let advanced = try Roster.verify(entries)
        var later = CommitLedger(container: container)
        #expect(try later.accept(first, roster: advanced) == .accepted)
        expectRefused(.badSignature) { try later.accept(try commit(escrow, after: first, naming: advanced.head), roster: advanced) }
        #expect(advanced.escrowTerms[escrow.publicKeys.deviceIdentifier] == [Roster.EscrowTerm(keys: escrow.publicKeys, from: 1, until: 2)])

        // Standard again with a new escrow key: the new one signs, the old one still not.
        let newEscrow = DeviceKeys()
        entries.append(try RosterEntry(.custody(.standard), after: entries[2], signedBy: laptop))
        entries.append(try RosterEntry(.escrow(newEscrow.publicKeys), after: entries[3], signedBy: laptop))
        let again = try Roster.verify(entries)
        try commit(newEscrow, after: nil, naming: again.head).verify(container: container, roster: again)
        expectRefused(.badSignature) { try commit(escrow, after: first, naming: again.head).verify(container: container, roster: again) }
    }
}
