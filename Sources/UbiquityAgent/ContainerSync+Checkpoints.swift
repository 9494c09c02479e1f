import Foundation
import Logging
import UbiquityKeys
import UbiquityProtocol

// Checkpoints (issue 45, docs/Encryption.md "Checkpoints"): when the server says a container
// keeps enough signed commits since its last checkpoint, a device that has read them all signs
// the state its ledger reached and every item's latest signed outcome, and the server then
// drops the commits before it.
extension ContainerSync {
    /// How long after an attempt the next one waits (another device's commit meanwhile makes the
    /// server keep a checkpoint as ordinary commits: a busy container is not sent one a round).
    static let checkpointPause: Duration = .seconds(30)

    /// Signs a checkpoint of the container's commits, if the server asked for one at the end of
    /// the commits last read and this device signs as a device of the roster: its own commits
    /// sent and read back first (the checkpoint's state names its own head), then the parts —
    /// consecutive commits of its chain — kept with the next write and sent. A failure is logged
    /// and left for a later round.
    func signCheckpointIfDue() async {
        guard checkpointDue, ContinuousClock.now >= checkpointNotBefore, let signer = codec.signer, codec.records?.seals == true,
              signer.roster?.everyDevice[signer.device] != nil else { return }
        checkpointDue = false
        checkpointNotBefore = ContinuousClock.now + Self.checkpointPause
        do {
            await sendSignedCommits()
            guard unsavedSigned.isEmpty, try store.unsentSignedCommits(of: storeKey, limit: 1).isEmpty,
                  let history = try await readSignedCommits(), history.ledger.heads[signer.device] == (try lastSignedCommit()?.head) else { return }
            var outcomes = try store.allSignedOutcomes(of: storeKey)
            for (item, unsaved) in unsavedOutcomes where unsaved.sequence > outcomes[item]?.sequence ?? Int64.min { outcomes[item] = unsaved }
            let parts = try CheckpointPart.parts(of: history.ledger, outcomes: outcomes.values.map {
                CommitContent.Outcome(item: $0.item, folder: nil, recordHash: Array($0.recordHash), revision: $0.revision, base: nil, deleted: $0.deleted,
                                      sequence: $0.sequence)
            })
            let seen = seenHeads(of: signer)
            var previous = try lastSignedCommit()
            for part in parts {
                let commit = try signer.sign(part, container: container, after: previous, seen: seen)
                unsavedSigned.append((commit, .checkpoint(part)))
                previous = commit
            }
            try await persist()
            checkpointsSigned += 1
            logger.info("signed a checkpoint of the container's commits", metadata: ["container": "\(container)", "parts": "\(parts.count)", "items": "\(outcomes.count)"])
        } catch {
            logger.warning("checkpoint not signed", metadata: ["container": "\(container)", "error": "\(error)"])
            return
        }
        await sendSignedCommits()
    }
}
