import Foundation
import Testing
import UbiquityTestSupport
@testable import UbiquityKeys

/// The roster: what a device accepts of the account's devices, and each way a server may lie
/// about it refused.
@Suite struct RosterTests {
    let laptop = DeviceKeys(), phone = DeviceKeys(), tablet = DeviceKeys()

    /// laptop (genesis) → adds phone → adds tablet → removes tablet → minimum format 1.
    func history() throws -> [RosterEntry] {
        let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
        let addPhone = try RosterEntry(.addDevice(keys: phone.publicKeys, name: "phone"), after: genesis, signedBy: laptop)
        let addTablet = try RosterEntry(.addDevice(keys: tablet.publicKeys, name: "tablet"), after: addPhone, signedBy: phone)
        let removeTablet = try RosterEntry(.removeDevice(identifier: tablet.publicKeys.deviceIdentifier), after: addTablet, signedBy: laptop)
        let minimum = try RosterEntry(.minimumFormat(1), after: removeTablet, signedBy: phone)
        return [genesis, addPhone, addTablet, removeTablet, minimum]
    }

    func refused(_ code: EncryptionError.Code, _ entries: [RosterEntry], pinned: RosterHead? = nil) {
        expectRefused(code) { try Roster.verify(entries, pinned: pinned) }
    }

    @Test func aRosterOfSignedChangesGivesTheAccountsDevicesAndEpoch() throws {
        let entries = try history()
        let roster = try Roster.verify(entries, pinned: RosterHead(index: 2, hash: entries[2].hash))
        #expect(Set(roster.members.keys) == [laptop.publicKeys.deviceIdentifier, phone.publicKeys.deviceIdentifier])
        #expect(roster.removed == [tablet.publicKeys.deviceIdentifier] && roster.epoch == 1, "a removal starts a new epoch")
        #expect(roster.head == RosterHead(index: 4, hash: entries[4].hash))
        let advanced = try RosterEntry(.custody(.advanced), after: entries[4], signedBy: laptop)
        let switched = try Roster.verify(entries + [advanced])
        #expect(switched.custody == .advanced && switched.epoch == 2, "turning Advanced on starts a new epoch")
    }

    @Test func aForgedSignatureOrASignerOutsideTheRosterIsRefused() throws {
        var entries = try history()
        let last = entries[4]
        var signature = last.signature
        signature[0] ^= 1
        entries[4] = RosterEntry(index: last.index, previous: last.previous, change: last.change, signer: last.signer, signature: signature)
        refused(.badSignature, entries)
        // A device's keys replaced in the entry that added it (the server's keys put in the phone's place).
        let good0 = try history()
        let add = good0[1]
        let swapped = RosterEntry(index: add.index, previous: add.previous, change: .addDevice(keys: DeviceKeys().publicKeys, name: "phone"),
                                  signer: add.signer, signature: add.signature)
        refused(.badSignature, [good0[0], swapped] + good0.dropFirst(2))
        // A stranger (the server's own key) adding itself.
        let stranger = DeviceKeys()
        let good = try history()
        refused(.badSignature, good + [try RosterEntry(.addDevice(keys: stranger.publicKeys, name: "server"), after: good[4], signedBy: stranger)])
        // The removed tablet signing after its removal.
        refused(.badSignature, good + [try RosterEntry(.newEpoch(2), after: good[4], signedBy: tablet)])
    }

    @Test func aReorderedDroppedOrRewrittenRosterIsRefused() throws {
        let entries = try history()
        refused(.rosterNotExtended, [entries[0], entries[2], entries[1], entries[3], entries[4]])
        refused(.rosterNotExtended, [entries[0], entries[1], entries[3], entries[4]])
        // Rolled back: the server serves the roster as it was before the tablet's removal.
        refused(.rosterNotExtended, Array(entries.prefix(3)), pinned: RosterHead(index: 4, hash: entries[4].hash))
        // Forked: a different history from entry 2 on (the tablet never removed).
        let fork = try RosterEntry(.minimumFormat(1), after: entries[2], signedBy: laptop)
        refused(.rosterNotExtended, Array(entries.prefix(3)) + [fork], pinned: RosterHead(index: 3, hash: entries[3].hash))
        // A genesis not signed by its own device, or a second genesis.
        let other = DeviceKeys()
        let fake = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: other)
        refused(.rosterRuleBroken, [fake] + entries.dropFirst())
        refused(.rosterRuleBroken, entries + [try RosterEntry(.genesis(keys: other.publicKeys, name: "x"), after: entries[4], signedBy: laptop)])
    }

    @Test func theRulesOfChangesHold() throws {
        let entries = try history()
        let head = entries[4]
        // A device's keys replaced under its identifier: the identifier is the keys'.
        let impostor = DeviceKeys()
        let readd = try RosterEntry(.addDevice(keys: tablet.publicKeys, name: "tablet"), after: head, signedBy: laptop)
        refused(.rosterRuleBroken, entries + [readd])
        refused(.rosterRuleBroken, entries + [try RosterEntry(.removeDevice(identifier: impostor.publicKeys.deviceIdentifier), after: head, signedBy: laptop)])
        refused(.rosterRuleBroken, entries + [try RosterEntry(.newEpoch(5), after: head, signedBy: laptop)])
        let raised = try RosterEntry(.minimumFormat(2), after: head, signedBy: laptop)
        refused(.rosterRuleBroken, entries + [raised, try RosterEntry(.minimumFormat(1), after: raised, signedBy: phone)])
        refused(.rosterRuleBroken, entries + [try RosterEntry(.custody(.standard), after: head, signedBy: laptop)])
        let alone = try Roster.verify(Array(entries.prefix(1)))
        #expect(alone.members.count == 1)
        refused(.rosterRuleBroken, [entries[0], try RosterEntry(.removeDevice(identifier: laptop.publicKeys.deviceIdentifier), after: entries[0], signedBy: laptop)])
    }

    @Test func deviceKeysAreKeptPrivateAndAFileOthersCanReadIsRefused() throws {
        let directory = try TemporaryDirectory("keys")
        defer { directory.remove() }
        let file = directory.file("device.keys")
        let keys = DeviceKeys()
        try keys.write(to: file)
        #expect(try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? Int == 0o600)
        #expect(try DeviceKeys(contentsOf: file).publicKeys == keys.publicKeys)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file.path)
        #expect(throws: EncryptionError.self) { try DeviceKeys(contentsOf: file) }
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file.path)
        try Data(#"{"format":2,"signing":"","agreement":""}"#.utf8).write(to: file)
        #expect(throws: EncryptionError.self) { try DeviceKeys(contentsOf: file) }
        // A signature another device made does not pass for this one's.
        let message = Array("commit".utf8)
        #expect(keys.publicKeys.isValidSignature(try keys.sign(message), for: message))
        #expect(!keys.publicKeys.isValidSignature(try DeviceKeys().sign(message), for: message))
    }
}
