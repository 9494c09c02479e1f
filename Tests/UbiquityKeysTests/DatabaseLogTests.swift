import Crypto
import Foundation
import Testing
@testable import UbiquityKeys

/// A database's change-log segments open only at their place in their device's chain; the
/// chain's head is a signed commit, so the newest segment cannot be held back unnoticed.
@Suite struct DatabaseLogTests {
    @Test func aSegmentOpensOnlyAtItsPlace() throws {
        let root = AccountRootKey(epoch: 1)
        let key = root.databaseLogKey(container: "A.com.example.recipes", database: "Recipes")
        let first = SegmentPlace(device: "laptop", number: 1, previous: Array(repeating: 0, count: 32))
        let one = try key.seal(Data("INSERT Bread".utf8), at: first)
        let second = SegmentPlace(device: "laptop", number: 2, previous: Array(SHA256.hash(data: one)))
        let two = try key.seal(Data("UPDATE Bread".utf8), at: second)
        #expect(try key.open(one, at: first) == Data("INSERT Bread".utf8))
        #expect(try key.open(two, at: second) == Data("UPDATE Bread".utf8))
        #expect(one.range(of: Data("Bread".utf8)) == nil)
        // Reordered, moved to another device, spliced after another previous segment.
        expectRefused(.authenticationFailed) { try key.open(two, at: first) }
        expectRefused(.authenticationFailed) { try key.open(one, at: SegmentPlace(device: "phone", number: 1, previous: first.previous)) }
        expectRefused(.authenticationFailed) { try key.open(two, at: SegmentPlace(device: "laptop", number: 2, previous: Array(repeating: 9, count: 32))) }
        // Another database, another epoch, changed bytes.
        expectRefused(.authenticationFailed) { try root.databaseLogKey(container: "A.com.example.recipes", database: "Pantry").open(one, at: first) }
        expectRefused(.authenticationFailed) { try AccountRootKey(epoch: 1).databaseLogKey(container: "A.com.example.recipes", database: "Recipes").open(one, at: first) }
        var flipped = two
        flipped[8] ^= 2
        expectRefused(.authenticationFailed) { try key.open(flipped, at: second) }
    }

    @Test func theChainsHeadIsASignedCommitSoTheNewestSegmentCannotBeHeldBack() throws {
        // The device signs each new head (its last segment's hash) as a commit of the database's
        // chain: a ledger that has seen head 2 refuses a server that serves only segment 1 as newest.
        let laptop = DeviceKeys()
        let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
        let roster = try Roster.verify([genesis])
        let chain = "A.com.example.recipes/Recipes"
        let head1 = try SignedCommit(container: chain, contentHash: Array(repeating: 1, count: 32), after: nil, rosterHead: roster.head, seen: [:], signedBy: laptop)
        let head2 = try SignedCommit(container: chain, contentHash: Array(repeating: 2, count: 32), after: head1, rosterHead: roster.head, seen: [:], signedBy: laptop)
        var ledger = CommitLedger(container: chain)
        try ledger.accept(head1, roster: roster)
        try ledger.accept(head2, roster: roster)
        #expect(try ledger.accept(head1, roster: roster) == .alreadyKnown)
        #expect(ledger.heads[laptop.publicKeys.deviceIdentifier]?.sequence == 2, "the newest head stays the one seen")
    }
}
