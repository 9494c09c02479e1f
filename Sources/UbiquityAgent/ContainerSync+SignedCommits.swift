import Foundation
import Logging
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync

// Signed commits (issue 45, docs/Encryption.md "Signed commits"): once a batch's answer is in,
// a device whose records go sealed signs what the server made of it, keeps the commit in the
// transaction that records the answer, and sends it; what it could not send goes with the next
// round.
extension ContainerSync {
    /// One change the server made of this device's batch, as a commit names it.
    struct MadeChange {
        var item: String
        var folder: String?
        /// The sealed record sent (nil: none, a deletion).
        var record: Data?
        var revision: String
        var base: String?
        var deleted: Bool
        var conflict: Bool
    }

    /// The signed commit of `made` after this device's last (nil: this device does not sign —
    /// no keys, or its records are not sealed — or nothing was made).
    func signedCommit(of made: [MadeChange]) throws -> (commit: SignedCommit, content: CommitContent)? {
        guard let signer = codec.signer, !made.isEmpty else { return nil }
        let content = CommitContent(outcomes: made.map {
            CommitContent.Outcome(item: $0.item, folder: $0.folder, recordHash: CommitContent.recordHash(of: $0.record), revision: $0.revision,
                                  base: $0.base, deleted: $0.deleted, conflict: $0.conflict)
        })
        // (After a commit whose write failed, if there is one: it goes first.)
        return (try signer.sign(content, container: container, after: try unsavedSigned.last?.commit ?? lastSignedCommit()), content)
    }

    /// This device's newest signed commit here (read from the store the first time).
    func lastSignedCommit() throws -> SignedCommit? {
        if let head = signedHead { return head }
        let head = try store.lastSignedCommit(of: container).map { try SignedCommit(encoded: $0) }
        signedHead = .some(head)
        return head
    }

    /// Sends the signed commits the server has not said it keeps, oldest first. A failure is
    /// logged and left for the next round (the commits stay in the store).
    func sendSignedCommits() async {
        do {
            while true {
                let unsent = try store.unsentSignedCommits(of: container, limit: SignedCommitsRequest.maximumCount)
                guard !unsent.isEmpty else { return }
                let positions = try await client.sendSignedCommits(container: container, unsent.map(\.upload))
                try await store.markSent(zip(unsent, positions).map { (sequence: $0.sequence, position: $1) }, of: container)
            }
        } catch {
            logger.warning("signed commits not sent", metadata: ["container": "\(container)", "error": "\(error)"])
        }
    }
}
