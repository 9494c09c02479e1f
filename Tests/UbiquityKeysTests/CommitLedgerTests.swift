import Crypto
import Foundation
import Testing
@testable import UbiquityKeys

/// A device's view of a container's history: every way a server may drop, replay, reorder,
/// fork or withhold commits is refused, with the failure named.
@Suite struct CommitLedgerTests {
    let laptop = DeviceKeys(), phone = DeviceKeys(), tablet = DeviceKeys()
    let container = "A.com.example.notes"

    func roster(removingTablet: Bool = false) throws -> (Roster, [RosterEntry]) {
        let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
        let addPhone = try RosterEntry(.addDevice(keys: phone.publicKeys, name: "phone"), after: genesis, signedBy: laptop)
        var entries = [genesis, addPhone, try RosterEntry(.addDevice(keys: tablet.publicKeys, name: "tablet"), after: addPhone, signedBy: laptop)]
        if removingTablet { entries.append(try RosterEntry(.removeDevice(identifier: tablet.publicKeys.deviceIdentifier), after: entries[2], signedBy: laptop)) }
        return (try Roster.verify(entries), entries)
    }

    func commit(_ keys: DeviceKeys, after previous: SignedCommit?, _ content: String, roster: Roster, seen: [String: CommitHead] = [:]) throws -> SignedCommit {
        try SignedCommit(container: container, contentHash: Array(SHA256.hash(data: Data(content.utf8))), after: previous,
                         rosterHead: roster.head, seen: seen, signedBy: keys)
    }

    func refused(_ code: EncryptionError.Code, _ ledger: CommitLedger, _ commit: SignedCommit, _ roster: Roster) {
        var copy = ledger
        expectRefused(code) { try copy.accept(commit, roster: roster) }
    }

    @Test func eachDevicesChainIsTakenInOrderAndServedAgainHarmlessly() throws {
        let (roster, _) = try roster()
        var ledger = CommitLedger(container: container)
        let a1 = try commit(laptop, after: nil, "a1", roster: roster)
        let a2 = try commit(laptop, after: a1, "a2", roster: roster)
        let b1 = try commit(phone, after: nil, "b1", roster: roster, seen: [a1.device: a2.head])
        #expect(try ledger.accept(a1, roster: roster) == .accepted)
        #expect(try ledger.accept(a2, roster: roster) == .accepted)
        #expect(try ledger.accept(b1, roster: roster) == .accepted)
        #expect(try ledger.accept(a1, roster: roster) == .alreadyKnown, "the same commit served again changes nothing")
        #expect(ledger.heads[a1.device] == a2.head && ledger.heads[b1.device] == b1.head)
    }

    @Test func forgedStrangersAndRemovedDevicesCommitsAreRefused() throws {
        let (roster, entries) = try roster()
        let ledger = CommitLedger(container: container)
        let a1 = try commit(laptop, after: nil, "a1", roster: roster)
        var signature = a1.signature
        signature[3] ^= 1
        refused(.badSignature, ledger, SignedCommit(container: a1.container, device: a1.device, sequence: 1, previous: a1.previous, contentHash: a1.contentHash,
                                                   rosterHead: a1.rosterHead, seen: [:], signature: signature), roster)
        // The content changed under a valid signature.
        refused(.badSignature, ledger, SignedCommit(container: a1.container, device: a1.device, sequence: 1, previous: a1.previous, contentHash: Array(repeating: 7, count: 32),
                                                   rosterHead: a1.rosterHead, seen: [:], signature: a1.signature), roster)
        refused(.badSignature, ledger, try commit(DeviceKeys(), after: nil, "injected", roster: roster), roster)
        refused(.authenticationFailed, ledger, try SignedCommit(container: "A.com.example.other", contentHash: a1.contentHash, after: nil, rosterHead: roster.head, seen: [:], signedBy: laptop), roster)
        // The tablet, removed: what it committed before stays good, what it signs after does not.
        let (after, _) = try self.roster(removingTablet: true)
        let before = try commit(tablet, after: nil, "t1", roster: roster)
        var fresh = CommitLedger(container: container)
        #expect(try fresh.accept(before, roster: after) == .accepted)
        refused(.badSignature, fresh, try commit(tablet, after: before, "t2", roster: after), after)
        // A commit naming a roster past this device's: fetch the roster first.
        let (short, _) = (try Roster.verify(Array(entries.prefix(2))), 0)
        refused(.rosterNotExtended, ledger, a1, short)
    }

    @Test func droppedReplayedReorderedAndForkedCommitsAreRefused() throws {
        let (roster, _) = try roster()
        var ledger = CommitLedger(container: container)
        let a1 = try commit(laptop, after: nil, "a1", roster: roster)
        let a2 = try commit(laptop, after: a1, "a2", roster: roster)
        let a3 = try commit(laptop, after: a2, "a3", roster: roster)
        // Dropped (a2 withheld), or reordered (a3 before a2).
        refused(.withheld, ledger, a2, roster)
        try ledger.accept(a1, roster: roster)
        refused(.withheld, ledger, a3, roster)
        try ledger.accept(a2, roster: roster)
        // Forked: another second commit of the laptop, after a1.
        let a2prime = try commit(laptop, after: a1, "a2'", roster: roster)
        refused(.forked, ledger, a2prime, roster)
        // A commit at the next place that does not follow the accepted one.
        let fakeNext = SignedCommit(container: container, device: a3.device, sequence: 3, previous: a2prime.hash, contentHash: a3.contentHash,
                                    rosterHead: a3.rosterHead, seen: [:], signature: [])
        refused(.badSignature, ledger, fakeNext, roster) // re-signed only by the device itself: the server cannot
        let forkedThird = try commit(laptop, after: a2prime, "a3 on the fork", roster: roster)
        refused(.forked, ledger, forkedThird, roster)
        try ledger.accept(a3, roster: roster)
        #expect(ledger.heads[a1.device]?.sequence == 3)
    }

    @Test func aCommitWithheldFromThisDeviceIsFoundWhenAnotherDevicesHeadsMeetIt() throws {
        let (roster, _) = try roster()
        var ledger = CommitLedger(container: container)
        let a1 = try commit(laptop, after: nil, "a1", roster: roster)
        let a2 = try commit(laptop, after: a1, "a2", roster: roster)
        try ledger.accept(a1, roster: roster)
        // The phone saw the laptop's a2; this device was never shown it.
        let b1 = try commit(phone, after: nil, "b1", roster: roster, seen: [a1.device: a2.head])
        refused(.withheld, ledger, b1, roster)
        // The phone was shown another a1 than this device (the server forked the two views).
        let a1prime = try commit(laptop, after: nil, "a1 for the phone", roster: roster)
        let b1forked = try commit(phone, after: nil, "b1", roster: roster, seen: [a1.device: a1prime.head])
        refused(.forked, ledger, b1forked, roster)
        try ledger.accept(a2, roster: roster)
        #expect(try ledger.accept(b1, roster: roster) == .accepted)
    }
}

/// Signed commits as stored and sent.
@Suite struct SignedCommitWireTests {
    let tests = CommitLedgerTests()

    @Test func aCommitRoundTripsItsWireEncodingAndStillVerifies() throws {
        let (roster, _) = try tests.roster()
        let a1 = try tests.commit(tests.laptop, after: nil, "a1", roster: roster)
        let t1 = try tests.commit(tests.tablet, after: nil, "t1", roster: roster)
        let b1 = try tests.commit(tests.phone, after: nil, "b1", roster: roster, seen: [a1.device: a1.head, t1.device: t1.head])
        var ledger = CommitLedger(container: tests.container)
        for commit in [a1, t1, b1] {
            let read = try SignedCommit(encoded: commit.encoded)
            #expect(read == commit)
            #expect(read.encoded == commit.encoded)
            #expect(try ledger.accept(read, roster: roster) == .accepted)
        }
    }

    @Test func garbageTruncatedPaddedOrOfAnotherFormatIsRefused() throws {
        let (roster, _) = try tests.roster()
        let b1 = try tests.commit(tests.phone, after: nil, "b1", roster: roster,
                                  seen: [tests.laptop.publicKeys.deviceIdentifier: CommitHead(sequence: 2, hash: Array(repeating: 1, count: 32)),
                                         tests.tablet.publicKeys.deviceIdentifier: CommitHead(sequence: 9, hash: Array(repeating: 3, count: 32))])
        let bytes = b1.encoded
        expectRefused(.malformed) { _ = try SignedCommit(encoded: bytes.dropLast()) }
        expectRefused(.malformed) { _ = try SignedCommit(encoded: bytes + [0]) }
        expectRefused(.malformed) { _ = try SignedCommit(encoded: Data()) }
        var other = bytes
        other[other.startIndex] = 2
        expectRefused(.unsupportedFormat) { _ = try SignedCommit(encoded: other) }
        // More heads than allowed, said before any is read.
        let countAt = 1 + 2 + b1.container.utf8.count + 2 + b1.device.utf8.count + 8 + 32 + 32 + 8 + 32
        var many = bytes
        many[many.startIndex + countAt] = 0xff
        expectRefused(.malformed) { _ = try SignedCommit(encoded: many) }
        // The two heads swapped: another encoding of the same commit is not accepted.
        let first = tests.laptop.publicKeys.deviceIdentifier, second = tests.tablet.publicKeys.deviceIdentifier
        let (low, high) = first < second ? (first, second) : (second, first)
        func head(_ device: String) -> [UInt8] {
            var writer = [UInt8]()
            writer += [UInt8(device.utf8.count >> 8), UInt8(device.utf8.count & 0xff)] + Array(device.utf8)
            let value = b1.seen[device]!
            writer += withUnsafeBytes(of: value.sequence.bigEndian) { Array($0) } + value.hash
            return writer
        }
        var swapped = Array(bytes)
        let start = countAt + 2, lowBytes = head(low), highBytes = head(high)
        #expect(Array(swapped[start..<(start + lowBytes.count)]) == lowBytes)
        swapped.replaceSubrange(start..<(start + lowBytes.count + highBytes.count), with: highBytes + lowBytes)
        expectRefused(.malformed) { _ = try SignedCommit(encoded: swapped) }
    }
}

/// What a commit vouches for, as stored and sent.
@Suite struct CommitContentTests {
    static let sample = CommitContent(outcomes: [
        .init(item: "folder-1", folder: nil, recordHash: Array(repeating: 1, count: 32), revision: "r1", base: nil, deleted: false, sequence: 1),
        .init(item: "note-2", folder: "folder-1", recordHash: Array(repeating: 2, count: 32), revision: "r7", base: "r6", deleted: false, sequence: 7),
        .init(item: "old-3", folder: "folder-1", recordHash: Array(repeating: 3, count: 32), revision: "r9", base: "r8", deleted: true, sequence: 9),
        .init(item: "lost-4", folder: nil, recordHash: Array(repeating: 4, count: 32), revision: "r11", base: "r10", deleted: false, conflict: true, sequence: 11),
    ])

    @Test func contentRoundTripsAndItsHashIsItsBytes() throws {
        let read = try CommitContent(encoded: Self.sample.encoded)
        #expect(read == Self.sample)
        #expect(read.hash == Array(SHA256.hash(data: Self.sample.encoded)))
        var other = Self.sample
        other.outcomes[1].base = "r5"
        #expect(other.hash != Self.sample.hash)
        other = Self.sample
        other.outcomes[3].conflict = false
        #expect(other.hash != Self.sample.hash)
        #expect(try CommitContent(encoded: CommitContent(outcomes: []).encoded).outcomes.isEmpty)
    }

    @Test func garbageTruncatedPaddedRepeatedOrOfAnotherFormatIsRefused() throws {
        let bytes = Self.sample.encoded
        expectRefused(.malformed) { _ = try CommitContent(encoded: bytes.dropLast()) }
        expectRefused(.malformed) { _ = try CommitContent(encoded: bytes + [0]) }
        var other = bytes
        other[other.startIndex] = 2
        expectRefused(.unsupportedFormat) { _ = try CommitContent(encoded: other) }
        let twice = CommitContent(outcomes: [Self.sample.outcomes[0], Self.sample.outcomes[0]])
        expectRefused(.malformed) { _ = try CommitContent(encoded: twice.encoded) }
        var flag = Array(bytes)
        flag[1 + 2 + 2 + "folder-1".utf8.count] = 2 // the first item's folder flag (after format, count, the item's length and id)
        expectRefused(.malformed) { _ = try CommitContent(encoded: flag) }
    }
}

extension CommitLedgerTests {
    /// A ledger kept between runs goes on as if it had never stopped: the next commits are
    /// taken, and what it refused before it still refuses — a fork at a remembered place, a gap,
    /// a commit older than its remembered hashes; a stored ledger that is changed, of another
    /// container or another format does not read.
    @Test func aKeptLedgerGoesOnWhereItStoppedAndRefusesWhatItRefusedBefore() throws {
        let (roster, _) = try roster()
        var ledger = CommitLedger(container: container)
        var laptopChain: [SignedCommit] = []
        for index in 1...600 {
            let next = try commit(laptop, after: laptopChain.last, "a\(index)", roster: roster)
            try ledger.accept(next, roster: roster)
            laptopChain.append(next)
        }
        let b1 = try commit(phone, after: nil, "b1", roster: roster, seen: [laptop.publicKeys.deviceIdentifier: laptopChain[599].head])
        try ledger.accept(b1, roster: roster)

        let kept = try CommitLedger(encoded: ledger.encoded(), container: container)
        #expect(kept.heads == ledger.heads)
        // The next commits of both devices are taken.
        var going = kept
        let a601 = try commit(laptop, after: laptopChain[599], "a601", roster: roster)
        #expect(try going.accept(a601, roster: roster) == .accepted)
        #expect(try going.accept(try commit(phone, after: b1, "b2", roster: roster), roster: roster) == .accepted)
        // The same commit served again is known; another at a remembered place is a fork; one
        // past the head with a gap is withheld; one older than what is remembered is a replay.
        #expect(try going.accept(laptopChain[599], roster: roster) == .alreadyKnown)
        refused(.forked, kept, try commit(laptop, after: laptopChain[498], "a500'", roster: roster), roster)
        refused(.withheld, kept, try commit(laptop, after: a601, "a602", roster: roster), roster)
        refused(.replayed, kept, laptopChain[10], roster)
        // Another device's view of a remembered commit that differs from it: forked histories.
        let a500other = try commit(laptop, after: laptopChain[498], "a500-other", roster: roster)
        refused(.forked, kept, try commit(phone, after: b1, "b2", roster: roster, seen: [laptop.publicKeys.deviceIdentifier: a500other.head]), roster)

        // Bytes that are not this container's ledger as kept are refused.
        var changed = Array(ledger.encoded())
        changed[changed.count - 5] ^= 1
        expectRefused(.malformed) { _ = try CommitLedger(encoded: changed, container: container) }
        expectRefused(.malformed) { _ = try CommitLedger(encoded: ledger.encoded(), container: "A.com.example.other") }
        expectRefused(.malformed) { _ = try CommitLedger(encoded: ledger.encoded().dropLast(), container: container) }
        var otherFormat = Array(ledger.encoded())
        otherFormat[0] = 1 // (format 1 had no closings: read from the start instead)
        expectRefused(.unsupportedFormat) { _ = try CommitLedger(encoded: otherFormat, container: container) }
    }
}
