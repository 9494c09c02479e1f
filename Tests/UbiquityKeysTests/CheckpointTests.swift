import Crypto
import Foundation
import Testing
@testable import UbiquityKeys

/// Checkpoints (docs/Encryption.md "Checkpoints"): a device that read a container's commits signs
/// the state its ledger reached and every item's latest outcome; a device reading from the
/// checkpoint (the commits before it dropped) takes that state — but only from a device, and
/// only if it agrees with everything it already knows.
@Suite struct CheckpointTests {
    let laptop = DeviceKeys(), phone = DeviceKeys(), tablet = DeviceKeys()
    let container = "A.com.example.notes"

    func roster() throws -> Roster {
        let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
        let addPhone = try RosterEntry(.addDevice(keys: phone.publicKeys, name: "phone"), after: genesis, signedBy: laptop)
        return try Roster.verify([genesis, addPhone, try RosterEntry(.addDevice(keys: tablet.publicKeys, name: "tablet"), after: addPhone, signedBy: laptop)])
    }

    func commit(_ keys: DeviceKeys, after previous: SignedCommit?, _ content: String, roster: Roster, seen: [String: CommitHead] = [:]) throws -> SignedCommit {
        try SignedCommit(container: container, contentHash: Array(SHA256.hash(data: Data(content.utf8))), after: previous,
                         rosterHead: roster.head, seen: seen, signedBy: keys)
    }

    func outcome(_ item: String, _ sequence: Int64) -> CommitContent.Outcome {
        CommitContent.Outcome(item: item, folder: nil, recordHash: Array(repeating: UInt8(sequence & 0xff), count: 32), revision: "r\(sequence)", base: nil,
                              deleted: false, sequence: sequence)
    }

    /// The laptop's chain a1 a2, the phone's b1: the laptop's ledger after reading them all.
    func history(_ roster: Roster) throws -> (ledger: CommitLedger, a2: SignedCommit, b1: SignedCommit, commits: [SignedCommit]) {
        let a1 = try commit(laptop, after: nil, "a1", roster: roster)
        let a2 = try commit(laptop, after: a1, "a2", roster: roster)
        let b1 = try commit(phone, after: nil, "b1", roster: roster, seen: [a1.device: a2.head])
        var ledger = CommitLedger(container: container)
        for commit in [a1, a2, b1] { try ledger.accept(commit, roster: roster) }
        return (ledger, a2, b1, [a1, a2, b1])
    }

    /// That history, and the laptop's checkpoint of it (one item's outcome) after a2.
    func checkpointed() throws -> (roster: Roster, ledger: CommitLedger, a2: SignedCommit, b1: SignedCommit, commits: [SignedCommit],
                                   parts: [CheckpointPart], checkpoint: SignedCommit) {
        let roster = try roster()
        let (ledger, a2, b1, commits) = try history(roster)
        let parts = try CheckpointPart.parts(of: ledger, outcomes: [outcome("note", 7)])
        let checkpoint = try SignedCommit(container: container, contentHash: parts[0].hash, after: a2, rosterHead: roster.head,
                                          seen: [b1.device: b1.head], signedBy: laptop)
        return (roster, ledger, a2, b1, commits, parts, checkpoint)
    }

    @Test func partsCarryTheStateAndEveryOutcomeAndReadBackAsWritten() throws {
        let roster = try roster()
        let (ledger, _, _, _) = try history(roster)
        let outcomes = (0..<2_500).map { outcome(String(format: "item%05d", $0), Int64($0)) }
        let parts = try CheckpointPart.parts(of: ledger, outcomes: outcomes.shuffled())
        #expect(parts.map(\.index) == [0, 1, 2] && parts.allSatisfy { $0.count == 3 } && parts.last?.isLast == true)
        #expect(parts[0].ledger != nil && parts[1].ledger == nil && parts.map(\.outcomes.count) == [1_000, 1_000, 500])
        #expect(parts.flatMap(\.outcomes) == outcomes, "every outcome once, in item order")
        for part in parts {
            #expect(try CheckpointPart(encoded: part.encoded) == part)
            guard case .checkpoint(let read) = try CommitPayload(encoded: part.encoded) else { Issue.record("not read as a checkpoint"); continue }
            #expect(read == part)
        }
        // Many chains and long names still fit the server's limit for a commit's content: the
        // state remembers fewer commits of each chain, and parts hold fewer outcomes.
        var crowded = CommitLedger(container: container)
        for index in 0..<3_000 {
            crowded.restore(device: String(format: "%032x", index), head: CommitHead(sequence: 100, hash: Array(repeating: 1, count: 32)),
                            recent: Dictionary(uniqueKeysWithValues: (37...100).map { (UInt64($0), Array(repeating: UInt8($0), count: 32)) }))
        }
        let long = (0..<1_000).map { index in
            CommitContent.Outcome(item: String(repeating: "i", count: 200) + "\(index)", folder: String(repeating: "f", count: 200), recordHash: Array(repeating: 2, count: 32),
                                  revision: String(repeating: "r", count: 200), base: String(repeating: "b", count: 200), deleted: false, sequence: Int64(index))
        }
        let heavy = try CheckpointPart.parts(of: crowded, outcomes: long)
        #expect(heavy.allSatisfy { $0.encoded.count <= CheckpointPart.maximumBytes } && heavy.count > 1, "\(heavy.map(\.encoded.count))")
        #expect(heavy.flatMap(\.outcomes).count == 1_000)
        #expect(try CommitLedger(encoded: try #require(heavy[0].ledger), container: container).heads.count == 3_000)
        // A batch's content still reads as one; a part is not a batch's content (an older device refuses it).
        #expect(try CommitPayload(encoded: CommitContent(outcomes: [outcome("x", 1)]).encoded) == .changes(CommitContent(outcomes: [outcome("x", 1)])))
        expectRefused(.unsupportedFormat) { _ = try CommitContent(encoded: parts[0].encoded) }
        // A part past its count, or cut short, is refused.
        var bad = parts[1].encoded
        bad[5...8] = Data([0, 0, 0, 1])
        expectRefused(.malformed) { _ = try CheckpointPart(encoded: bad) }
        expectRefused(.malformed) { _ = try CheckpointPart(encoded: parts[0].encoded.dropLast()) }
    }

    @Test func aDeviceReadingFromTheCheckpointTakesItsStateAndGoesOn() throws {
        let (roster, _, a2, b1, commits, parts, checkpoint) = try checkpointed()
        // The tablet, new, reads from the checkpoint (the commits before it were dropped).
        var tablet = CommitLedger(container: container)
        try tablet.adopt(checkpoint, part: parts[0], roster: roster)
        #expect(tablet.heads[b1.device] == b1.head && tablet.heads[a2.device] == checkpoint.head)
        // … and the commits after it as any others; a commit the phone makes next follows b1.
        let b2 = try commit(phone, after: b1, "b2", roster: roster, seen: [a2.device: checkpoint.head])
        #expect(try tablet.accept(b2, roster: roster) == .accepted)
        // A device that had read the laptop's a1 takes the checkpoint too; one shown another
        // first commit of the laptop than the checkpoint remembers refuses it (forked histories).
        var partly = CommitLedger(container: container)
        try partly.accept(commits[0], roster: roster)
        try partly.adopt(checkpoint, part: parts[0], roster: roster)
        #expect(partly.heads[a2.device] == checkpoint.head && partly.heads[b1.device] == b1.head)
        var other = CommitLedger(container: container)
        try other.accept(try commit(laptop, after: nil, "another a1", roster: roster), roster: roster)
        expectRefused(.forked) { try other.adopt(checkpoint, part: parts[0], roster: roster) }
    }

    @Test func aCheckpointNotFromADeviceOrDisagreeingWithWhatIsKnownIsRefused() throws {
        let (roster, ledger, a2, b1, commits, parts, checkpoint) = try checkpointed()
        // An older checkpoint served to a device that read further: refused as a replay.
        let b2 = try commit(phone, after: b1, "b2", roster: roster, seen: [a2.device: a2.head])
        var further = CommitLedger(container: container)
        for commit in commits + [b2] { try further.accept(commit, roster: roster) }
        var copy = further
        expectRefused(.replayed) { try copy.adopt(checkpoint, part: parts[0], roster: roster) }
        // One that leaves out a device this device knows: refused too.
        var withoutPhone = CommitLedger(container: container)
        try withoutPhone.accept(commits[0], roster: roster)
        try withoutPhone.accept(commits[1], roster: roster)
        let partsWithoutPhone = try CheckpointPart.parts(of: withoutPhone, outcomes: [])
        let skipping = try SignedCommit(container: container, contentHash: partsWithoutPhone[0].hash, after: a2, rosterHead: roster.head, seen: [:], signedBy: laptop)
        var knowsPhone = CommitLedger(container: container)
        for commit in commits { try knowsPhone.accept(commit, roster: roster) }
        expectRefused(.replayed) { try knowsPhone.adopt(skipping, part: partsWithoutPhone[0], roster: roster) }
        // Signed by a stranger, or by the signer of another state than it names as its own head.
        let stranger = try SignedCommit(container: container, contentHash: parts[0].hash, after: nil, rosterHead: roster.head, seen: [:], signedBy: DeviceKeys())
        var fresh = CommitLedger(container: container)
        expectRefused(.badSignature) { try fresh.adopt(stranger, part: parts[0], roster: roster) }
        // Signed by the escrow key (it signs what the server makes under Standard, and reads
        // no device's commits): it vouches for no history.
        let escrow = DeviceKeys()
        let withEscrow = try Roster.verify(try {
            let genesis = try RosterEntry(.genesis(keys: laptop.publicKeys, name: "laptop"), after: nil, signedBy: laptop)
            return [genesis, try RosterEntry(.escrow(escrow.publicKeys), after: genesis, signedBy: laptop)]
        }())
        let empty = try CheckpointPart.parts(of: CommitLedger(container: container), outcomes: [])
        let byEscrow = try SignedCommit(container: container, contentHash: empty[0].hash, after: nil, rosterHead: withEscrow.head, seen: [:], signedBy: escrow)
        var reader = CommitLedger(container: container)
        expectRefused(.badSignature) { try reader.adopt(byEscrow, part: empty[0], roster: withEscrow) }
        let notAfterItsHead = try SignedCommit(container: container, contentHash: parts[0].hash, after: nil, rosterHead: roster.head, seen: [:], signedBy: laptop)
        expectRefused(.forked) { try fresh.adopt(notAfterItsHead, part: parts[0], roster: roster) }
        // A part that is not the one signed, or not the first part.
        let other = try CheckpointPart.parts(of: ledger, outcomes: [outcome("note", 8)])
        expectRefused(.malformed) { try fresh.adopt(checkpoint, part: other[0], roster: roster) }
        #expect(fresh.heads.isEmpty, "nothing taken from a refused checkpoint")
    }
}
