import Foundation
import Logging
import UbiquityKeys
import UbiquityProtocol

extension SyncServices {
    /// Signs, as the account's escrow, what the server made of a change the web page asked
    /// for (issue 45, docs/Encryption.md "Signed commits"): under Standard Data Protection the
    /// server seals the page's records with the escrow's keys, and signs the outcome as a device
    /// signs its own — a chain of the escrow's commits per container, kept with the devices'
    /// and read by them, so that a change the page made is held to the same checks (a newer
    /// state served older again, or hidden) as one a device made. The roster lets the escrow
    /// sign only while it is the escrow under Standard (`Roster.escrowKeys(_:at:)`).
    ///
    /// Nothing is signed for an account without keys, under Advanced, or when this server's
    /// escrow key is not the roster's. A failure is logged, never thrown: the change is made,
    /// and reading devices check what is signed.
    /// - Parameters:
    ///   - outcomes: Each change the server made, as ``CommitContent/Outcome``.
    ///   - account: The account.
    ///   - container: The container.
    func signAsEscrow(_ outcomes: [CommitContent.Outcome], account: Int64, container: String, logger: Logger) async {
        guard let escrow else { return }
        await EscrowSigner(database: database, keys: escrow.key.keys).sign(outcomes, account: account, container: container, logger: logger)
    }
}

/// Signs, with the server's escrow key, what the server made on its own or for the web page,
/// as a chain of the escrow's commits per container kept with the devices'
/// (``SyncServices/signAsEscrow(_:account:container:logger:)``; `ubiquity recover --restore`).
struct EscrowSigner: Sendable {
    /// Where the roster and the commits are kept.
    let database: any SyncDatabase
    /// The escrow's keys (``EscrowKey/keys``).
    let keys: DeviceKeys

    /// Signs `outcomes` (in commits of at most ``CommitContent/maximumCount``) and keeps them.
    /// Nothing is signed for an account without keys, under Advanced, or when this escrow key
    /// is not the roster's. A failure is logged, never thrown: the change is made, and reading
    /// devices check what is signed.
    func sign(_ outcomes: [CommitContent.Outcome], account: Int64, container: String, logger: Logger) async {
        guard !outcomes.isEmpty else { return }
        do {
            var remaining = Array(outcomes)
            while !remaining.isEmpty {
                let content = CommitContent(outcomes: Array(remaining.prefix(CommitContent.maximumCount)))
                remaining.removeFirst(content.outcomes.count)
                guard try await keep(content, account: account, container: container, logger: logger) else { return }
            }
        } catch {
            logger.error("the escrow could not sign the server's change", metadata: ["container": "\(container)", "error": "\(error)"])
        }
    }

    /// Signs `content` after the escrow's last commit of the container, naming the roster's
    /// head, and keeps it only while the roster still ends there (``SyncDatabase/keepCommit(accountId:container:commit:rosterEntry:)``).
    /// Another request signing at the same place first (two pages' changes at once), or the
    /// roster moving on meanwhile, has it signed again. Returns false when the escrow signs
    /// nothing for the account (no keys, Advanced, another escrow key named).
    private func keep(_ content: CommitContent, account: Int64, container: String, logger: Logger) async throws -> Bool {
        let device = keys.publicKeys.deviceIdentifier
        for _ in 0..<8 {
            let stored = try await database.accountKeys(accountId: account, recipients: [])
            guard !stored.roster.isEmpty else { return false }
            let roster = try Roster.verify(try stored.roster.map { try RosterEntry(encoded: $0) })
            guard roster.custody == .standard, roster.escrow?.deviceIdentifier == device else { return false }
            let last = try await database.lastKeptCommit(accountId: account, container: container, device: device).map { try SignedCommit(encoded: $0) }
            let commit = try SignedCommit(container: container, contentHash: content.hash, after: last, rosterHead: roster.head, seen: [:], signedBy: keys)
            let kept = KeptCommit(device: device, sequence: Int64(clamping: commit.sequence), previous: Data(commit.previous), hash: Data(commit.hash),
                                  body: commit.encoded, content: content.encoded)
            switch try await database.keepCommit(accountId: account, container: container, commit: kept, rosterEntry: Int64(clamping: roster.head.index)) {
            case .kept, .alreadyKept:
                return true
            case .forked, .outOfOrder, .rosterMoved:
                continue // (another signed at that place meanwhile, or the roster moved: again, after it)
            case .overBudget:
                logger.warning("the escrow's commit was not kept: the container keeps its most bytes of commits", metadata: ["container": "\(container)"])
                return true
            }
        }
        throw EncryptionError(.forked, "the escrow's commit found its place taken eight times")
    }
}
