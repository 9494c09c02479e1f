import Foundation
import Hummingbird
import Logging
import UbiquityKeys
import UbiquityProtocol

extension SignedCommitsResponse: ResponseEncodable {}
extension SignedCommitsPage: ResponseEncodable {}

extension SyncServices {
    /// `POST /v1/containers/C/signed-commits`, `GET /v1/containers/C/signed-commits?after=N`:
    /// devices' signed commits (issue 45, docs/Encryption.md "Signed commits"), kept as sent in
    /// the order they came. The server checks what it can — the format, the content against its
    /// hash, the signature against the account's roster, the chain of each device — and serves
    /// them to the other devices, whose ledgers check the rest.
    func addSignedCommitRoutes(to containers: RouterGroup<SyncContext>) {
        containers.post("signed-commits") { request, context in
            let container = try context.parameters.require("container")
            let device = try context.requireDevice(for: container)
            return try await keepSignedCommits(request, context: context, container: container, device: device)
        }
        containers.get("signed-commits") { request, context in
            let container = try context.parameters.require("container")
            let device = try context.requireDevice(for: container)
            let after = try request.uri.queryParameters["after"].map { text -> Int64 in
                guard let value = Int64(text), value >= 0 else { throw SyncError.badRequest("invalidPosition", "after is a position, 0 or more") }
                return value
            } ?? 0
            let limit = SignedCommitsPage.maximumCount
            // (Commits before the container's last checkpoint are dropped: a device behind it
            // reads from the checkpoint, which gives the history's state up to there.)
            let (total, checkpoint) = try await database.commitFigures(accountId: device.accountId, container: container)
            let jump = checkpoint.map { after < $0.start - 1 } ?? false
            let page = try await database.keptCommits(accountId: device.accountId, container: container, after: jump ? checkpoint!.start - 1 : after, limit: limit + 1)
            let due = CommitCheckpoint.isDue(kept: CommitCheckpoint.kept(total: total, since: checkpoint), since: checkpoint, after: accountLimits.checkpointAfterBytes)
            return SignedCommitsPage(commits: Array(page.prefix(limit)), more: page.count > limit, checkpoint: jump ? checkpoint?.start : nil,
                                     checkpointDue: due ? true : nil)
        }
    }

    /// Keeps the signed commits a device sent — or a page a device let in under Advanced Data
    /// Protection, signing its own changes — each checked on its own and against its chain.
    func keepSignedCommits(_ request: Request, context: SyncContext, container: String, device: DeviceAuth) async throws -> SignedCommitsResponse {
        let sent = try await request.decode(as: SignedCommitsRequest.self, context: context)
        guard (1...SignedCommitsRequest.maximumCount).contains(sent.commits.count) else {
            throw SyncError.badRequest("tooMany", "send 1 to \(SignedCommitsRequest.maximumCount) signed commits at a time")
        }
        guard sent.commits.allSatisfy({ $0.commit.count <= SignedCommitsRequest.maximumBytes && $0.content.count <= SignedCommitsRequest.maximumBytes }) else {
            throw SyncError.badRequest("tooLarge", "a signed commit and its content are at most \(SignedCommitsRequest.maximumBytes) bytes each")
        }
        var roster = try await accountRoster(of: device)
        var positions: [Int64] = []
        var rosterMoves = 0
        var index = 0
        var stored = false
        while index < sent.commits.count {
            let kept = try Self.checked(sent.commits[index], of: container, roster: roster, logger: context.logger, device: device)
            // Kept only while the roster still ends where it was checked against, as the
            // escrow's are: the devices close a removed device's chain at what they read
            // after its removal (`CommitLedger.closings`), so nothing of its may be kept later.
            switch try await database.keepCommit(accountId: device.accountId, container: container, commit: kept, rosterEntry: Int64(roster.head.index)) {
            case .kept(let position):
                positions.append(position)
                stored = true
                index += 1
            case .alreadyKept(let position):
                positions.append(position)
                index += 1
            case .forked:
                context.logger.warning("signed commit refused: another is kept at its place", metadata: ["device": "\(device.deviceId)", "sequence": "\(kept.sequence)"])
                throw SyncError(.conflict, "forked", "another commit is kept at place \(kept.sequence) of this device's chain, or this one does not follow the one before")
            case .outOfOrder(let expected):
                throw SyncError(.conflict, "outOfOrder", "this device's next commit is \(expected), not \(kept.sequence): send the ones before first")
            case .overBudget:
                context.logger.warning("signed commit refused: the container keeps its most bytes of commits", metadata: ["device": "\(device.deviceId)"])
                throw SyncError(.contentTooLarge, "commitBudget", "this container keeps \(KeptCommit.containerBudget) bytes of signed commits, the most it may")
            case .rosterMoved:
                // An entry appended since the roster was read: checked again against it.
                rosterMoves += 1
                guard rosterMoves <= 8 else { throw SyncError(.conflict, "rosterMoved", "the account's roster kept moving on: send again") }
                roster = try await accountRoster(of: device)
            }
        }
        if stored { notifier.publishSigned(account: device.accountId, container: container, except: device.deviceId) }
        return SignedCommitsResponse(positions: positions)
    }

    /// The account's roster as the server keeps it, verified.
    private func accountRoster(of device: DeviceAuth) async throws -> Roster {
        let stored = try await database.accountKeys(accountId: device.accountId, recipients: [])
        guard !stored.roster.isEmpty else { throw SyncError(.conflict, "noRoster", "no device has set up this account's keys yet") }
        do {
            return try Roster.verify(try stored.roster.map { try RosterEntry(encoded: $0) })
        } catch {
            throw SyncError(.conflict, "badRoster", "the account's stored roster does not read: \(error)")
        }
    }

    /// `upload` read and checked on its own (format, container, content hash, signature): what
    /// the database keeps of it.
    private static func checked(_ upload: SignedCommitUpload, of container: String, roster: Roster, logger: Logger, device: DeviceAuth) throws -> KeptCommit {
        do {
            let commit = try SignedCommit(encoded: upload.commit)
            let content = try CommitPayload(encoded: upload.content)
            guard content.hash == commit.contentHash else { throw EncryptionError(.authenticationFailed, "its content is not what it signed") }
            try commit.verify(container: container, roster: roster)
            // A checkpoint vouches for the history its device read: a device's alone.
            var checkpoint: KeptCommit.CheckpointFacts?
            if case .checkpoint(let part) = content {
                guard roster.everyDevice[commit.device] != nil else { throw EncryptionError(.badSignature, "a checkpoint is signed by a device of the roster") }
                checkpoint = KeptCommit.CheckpointFacts(index: Int64(part.index), count: Int64(part.count), heads: try part.ledger.map { state in
                    try CommitLedger(encoded: state, container: container).heads.mapValues { KeptCommit.Head(sequence: Int64(clamping: $0.sequence), hash: Data($0.hash)) }
                })
            }
            // (A removed device's commits from before its removal verify; kept after it, the
            // devices' closing commits would have passed them.)
            guard roster.removedAt[commit.device] == nil else { throw EncryptionError(.badSignature, "its device was removed from the account") }
            if let session = roster.webSessions[commit.device], session.until != nil {
                throw EncryptionError(.badSignature, "its browser's session has ended")
            }
            return KeptCommit(device: commit.device, sequence: Int64(clamping: commit.sequence), previous: Data(commit.previous), hash: Data(commit.hash),
                              body: upload.commit, content: upload.content, checkpoint: checkpoint)
        } catch let error as EncryptionError {
            logger.notice("signed commit refused", metadata: ["device": "\(device.deviceId)", "code": "\(error.code)"])
            throw SyncError.badRequest("invalidCommit", "a signed commit refused: \(error.description)")
        }
    }
}
