import Foundation
import HTTPTypes
import Hummingbird
import Logging
import UbiquityKeys
import UbiquityProtocol

extension SharingIdentityRecord: ResponseEncodable {}
extension ShareKeysResponse: ResponseEncodable {}

// The keys of sharing (issue 46, docs/Sharing.md "Keys"): each account's sharing identity and
// each share's key envelopes. The server keeps them and opens none: what it could do is swap a
// public key, which the people's safety code shows, and which their devices refuse once pinned.
extension SyncServices {
    /// The largest sealed identity, and the largest envelope, taken (both are far smaller).
    static let shareKeyObjectBytes = 512
    /// The most envelopes one request keeps.
    static let shareKeyEnvelopesPerRequest = 256

    func addShareKeyRoutes(to v1: RouterGroup<SyncContext>, shares: RouterGroup<SyncContext>) {
        let sharing = v1.group("sharing")
        // The account's own identity, with its sealed private keys, for its devices.
        sharing.get("identity") { _, context -> SharingIdentityRecord in
            let device = try context.requireDevice()
            guard let account = try await database.account(id: device.accountId) else { throw SyncError.unauthorized }
            guard let stored = try await database.sharingIdentity(accountId: device.accountId) else {
                throw SyncError(.notFound, "noIdentity", "the account has published no sharing identity yet")
            }
            return SharingIdentityRecord(account: account.name, signing: stored.signing, agreement: stored.agreement, sealed: stored.sealed)
        }
        // Publish it: the first, or in place of the one named (never one over another unseen).
        sharing.put("identity") { request, context -> SharingIdentityRecord in
            let device = try context.requireDevice()
            guard device.containers == nil else {
                throw SyncError(.forbidden, "limitedToken", "a token limited to some containers does not publish the account's sharing identity")
            }
            let asked = try await request.decode(as: SharingIdentityPublishRequest.self, context: context)
            guard (try? DevicePublicKeys(signing: Array(asked.signing), agreement: Array(asked.agreement))) != nil,
                  (1...Self.shareKeyObjectBytes).contains(asked.sealed.count), asked.replacing.map({ $0.count == 32 }) ?? true else {
                throw SyncError.badRequest("badIdentity", "a sharing identity is two 32-byte public keys and sealed private keys of at most \(Self.shareKeyObjectBytes) bytes")
            }
            guard let account = try await database.account(id: device.accountId) else { throw SyncError.unauthorized }
            let wanted = StoredSharingIdentity(signing: asked.signing, agreement: asked.agreement, sealed: asked.sealed)
            let after = try await database.publishSharingIdentity(accountId: device.accountId, wanted, replacing: asked.replacing, now: Date().timeIntervalSince1970)
            guard after == wanted else {
                throw SyncError(.conflict, "identityChanged", "the account's sharing identity is not the one this replaces: read it again")
            }
            context.logger.info("published the account's sharing identity", metadata: ["account": "\(device.accountId)", "replaced": "\(asked.replacing != nil)"])
            return SharingIdentityRecord(account: account.name, signing: after.signing, agreement: after.agreement, sealed: after.sealed)
        }
        // Another account's identity — only an account this one shares with: a participant who
        // accepted one of its shares, or the owner of a share it accepted or is invited to.
        // Every other name (absent, unrelated, without an identity) is answered alike.
        sharing.get("identities/:name") { _, context -> SharingIdentityRecord in
            let device = try context.requireDevice()
            let name = try context.parameters.require("name")
            try Validate.name(name, field: "account name")
            let unknown = SyncError(.notFound, "notFound", "no sharing identity of that name is known to this account")
            guard let other = try await relatedAccount(named: name, to: device.accountId),
                  let stored = try await database.sharingIdentity(accountId: other) else { throw unknown }
            return SharingIdentityRecord(account: name, signing: stored.signing, agreement: stored.agreement)
        }
        // The share's key envelopes sealed to the caller's account (its owner or a participant who
        // accepted it).
        shares.get(":share/keys") { _, context -> ShareKeysResponse in
            let share = try await reachableShare(context).share
            return try await shareKeys(share, for: try context.requireDevice().accountId)
        }
        // The owner's device keeps the current epoch's envelopes.
        shares.put(":share/keys") { request, context -> ShareKeysResponse in
            let (device, share) = try await ownersShare(context)
            let asked = try await request.decode(as: ShareKeysPublishRequest.self, context: context)
            guard (1...Self.shareKeyEnvelopesPerRequest).contains(asked.envelopes.count),
                  asked.epoch >= 1, asked.envelopes.allSatisfy({ (1...asked.epoch).contains($0.epoch) && (1...Self.shareKeyObjectBytes).contains($0.envelope.count) }),
                  Set(asked.envelopes.map { "\($0.account)\u{0}\($0.epoch)" }).count == asked.envelopes.count,
                  !asked.envelopes.contains(where: { $0.account == share.owner && $0.epoch != asked.epoch }) else {
                throw SyncError.badRequest("badEnvelopes",
                                           "1 to \(Self.shareKeyEnvelopesPerRequest) envelopes of the request's epoch or earlier ones (the owner's of the request's only), one per account and epoch, each at most \(Self.shareKeyObjectBytes) bytes")
            }
            let now = Date().timeIntervalSince1970
            var accepted: [String: Int64] = [:]
            for participant in try await database.participants(shareId: share.id) where participant.state(at: now) == .accepted {
                if let account = participant.accountId { accepted[participant.name] = account }
            }
            var envelopes: [(accountId: Int64, epoch: Int64, envelope: Data)] = []
            for envelope in asked.envelopes {
                if envelope.account == share.owner {
                    envelopes.append((share.accountId, envelope.epoch, envelope.envelope))
                } else if let account = accepted[envelope.account] {
                    envelopes.append((account, envelope.epoch, envelope.envelope))
                } else {
                    throw SyncError(.conflict, "notAccepted", "an envelope is to an account that has not accepted this share (or left it): nothing was kept")
                }
            }
            switch try await database.keepShareKeyEnvelopes(shareId: share.id, ownerId: device.accountId, epoch: asked.epoch, envelopes: envelopes) {
            case .kept:
                context.logger.info("kept a share's key envelopes", metadata: ["share": "\(share.id)", "epoch": "\(asked.epoch)", "envelopes": "\(envelopes.count)"])
                publishSharesChanged(accounts: envelopes.map(\.accountId), container: share.container, logger: context.logger)
                var now = share
                now.epoch = asked.epoch
                return try await shareKeys(now, for: device.accountId)
            case .staleEpoch(let current):
                throw SyncError(.conflict, "staleEpoch", "the share is in epoch \(current.map(String.init) ?? "?") now, not \(asked.epoch): read its keys again")
            case .ownerKeyDiffers:
                throw SyncError(.conflict, "shareKeyExists", "another device of the owner's gave this epoch its key: read the share's keys again and seal that one")
            case .ownerKeyMissing:
                throw SyncError(.conflict, "ownerKeyFirst", "the epoch's key is the one sealed to its owner: that envelope comes first")
            }
        }
    }

    /// The share's envelopes sealed to `account`, and, to its owner, who waits for one of the
    /// current epoch.
    private func shareKeys(_ share: StoredShare, for account: Int64) async throws -> ShareKeysResponse {
        guard let name = try await database.account(id: account)?.name else { throw SyncError.unauthorized }
        let mine = try await database.shareKeyEnvelopes(shareId: share.id, accountId: account)
        var waiting: [String]?
        if account == share.accountId {
            let holders = try await database.shareKeyHolders(shareId: share.id, epoch: share.epoch), now = Date().timeIntervalSince1970
            waiting = try await database.participants(shareId: share.id).filter {
                $0.state(at: now) == .accepted && $0.accountId.map { !holders.contains($0) } == true
            }.map(\.name)
        }
        return ShareKeysResponse(share: share.id, epoch: share.epoch, owner: share.owner,
                                 envelopes: mine.map { ShareKeyEnvelopeRecord(account: name, epoch: $0.epoch, envelope: $0.envelope) }, waiting: waiting)
    }

    /// The account named `name` if `account` shares with it: it accepted one of `account`'s
    /// shares, or owns one `account` accepted or is invited to.
    private func relatedAccount(named name: String, to account: Int64) async throws -> Int64? {
        let now = Date().timeIntervalSince1970
        for share in try await database.ownedShares(accountId: account) {
            if let participant = try await database.participants(shareId: share.id).first(where: { $0.name == name && $0.state(at: now) == .accepted }) {
                return participant.accountId
            }
        }
        for (share, participant) in try await database.participations(accountId: account) where share.owner == name {
            if [.accepted, .invited].contains(participant.state(at: now)) { return share.accountId }
        }
        return nil
    }
}
