import Foundation
import HTTPTypes
import Hummingbird
import Logging
import UbiquityProtocol

extension ShareInfo: ResponseEncodable {}
extension SharesResponse: ResponseEncodable {}
extension ShareInvitationResponse: ResponseEncodable {}

// Sharing with other accounts (issue 46, docs/Sharing.md): shares and their invitations.
extension SyncServices {
    /// The answer for a share no one asking may see: the same as for one that does not exist.
    static let noSuchShare = SyncError(.notFound, "notFound", "no such share")

    /// A new share's or invitation's id: 128 random bits in hexadecimal.
    static func shareIdentifier() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<2).map { _ in String(generator.next() as UInt64, radix: 16).leftPadded(to: 16) }.joined()
    }

    func addShareRoutes(to v1: RouterGroup<SyncContext>) {
        let shares = v1.group("shares")
        addShareItemRoutes(to: shares)
        addShareKeyRoutes(to: v1, shares: shares)
        // Share an item: the share made, or the one it is the root of already.
        shares.post { request, context -> ShareInfo in
            let asked = try await request.decode(as: ShareCreateRequest.self, context: context)
            let device = try context.requireDevice(for: asked.container)
            try Validate.identifier(asked.item, field: "item")
            guard let item = try await database.item(accountId: device.accountId, container: asked.container, id: asked.item, brief: true), !item.deleted else {
                throw SyncError.notFound
            }
            // A sealed item is shared sealed: its owner's devices seal it again with the share's
            // keys, which they seal to each participant (docs/Sharing.md, "Keys") — unless the
            // server is told not to (`--no-sealed-shares`).
            guard item.record == nil || sealedShares else {
                throw SyncError(.conflict, "sealedShare", "this item is sealed with the account's keys, and this server shares no sealed items (ubiquity serve --no-sealed-shares)")
            }
            let roots = try await database.shareRoots(accountId: device.accountId, container: asked.container)
            if !roots.contains(asked.item) {
                // Shares do not nest: not inside a shared item, nor around one.
                let around = try await folders(around: asked.item, accountId: device.accountId, container: asked.container)
                var overlaps = roots.contains(where: around.contains)
                for root in roots where !overlaps {
                    overlaps = try await folders(around: root, accountId: device.accountId, container: asked.container).contains(asked.item)
                }
                if overlaps {
                    throw SyncError(.conflict, "shareOverlaps", "that item is inside a shared item, or holds one: shares do not nest")
                }
            }
            let share = try await database.makeShare(accountId: device.accountId, container: asked.container, item: asked.item,
                                                     id: Self.shareIdentifier(), now: Date().timeIntervalSince1970)
            context.logger.info("shared an item", metadata: ["share": "\(share.id)"])
            return try await ownerInfo(share, root: (item.record == nil ? item.name : nil, item.record != nil))
        }
        // The account's shares, those it joined and its invitations (of containers this device may use).
        shares.get { _, context -> SharesResponse in
            let device = try context.requireDevice()
            let now = Date().timeIntervalSince1970
            var owned: [ShareInfo] = []
            for share in try await database.ownedShares(accountId: device.accountId) where device.allows(share.container) {
                owned.append(try await ownerInfo(share, root: try await root(of: share)))
            }
            var joined: [ShareInfo] = [], invitations: [ShareInfo] = []
            for (share, participant) in try await database.participations(accountId: device.accountId) where device.allows(share.container) {
                let state = participant.state(at: now)
                guard state == .accepted || state == .invited else { continue }
                let root = try await root(of: share)
                let info = ShareInfo(id: share.id, owner: share.owner, container: share.container, item: share.item, name: root.name,
                                     epoch: share.epoch, role: participant.role, invitation: participant.id,
                                     expires: state == .invited ? participant.expires : nil, sealed: root.sealed ? true : nil)
                if state == .accepted { joined.append(info) } else { invitations.append(info) }
            }
            return SharesResponse(owned: owned, joined: joined, invitations: invitations)
        }
        // Invite an account by name: answered alike whether or not one has that name.
        shares.post(":share/participants") { request, context -> EditedResponse<ShareInvitationResponse> in
            let (device, share) = try await ownersShare(context)
            let asked = try await request.decode(as: ShareInviteRequest.self, context: context)
            try Validate.name(asked.name, field: "account name")
            guard let owner = try await database.account(id: device.accountId) else { throw SyncError.unauthorized }
            guard asked.name != owner.name else { throw SyncError.badRequest("ownShare", "the share is yours already") }
            guard let invited = try await database.invite(shareId: share.id, ownerId: device.accountId, name: asked.name, role: asked.role,
                                                          id: Self.shareIdentifier(), now: Date().timeIntervalSince1970, limits: invitationLimits) else {
                context.logger.notice("invitation refused: too many", metadata: ["share": "\(share.id)"])
                throw SyncError(.tooManyRequests, "tooManyInvitations",
                                "at most \(invitationLimits.perHour) invitations an hour and \(invitationLimits.pending) waiting for an answer")
            }
            context.logger.info("invited to a share", metadata: ["share": "\(share.id)", "invitation": "\(invited.id)"])
            publishSharesChanged(accounts: [invited.accountId, device.accountId], container: share.container, logger: context.logger)
            return EditedResponse(status: .created, response: ShareInvitationResponse(id: invited.id, expires: invited.expires))
        }
        // The owner changes a participant's role, or removes them.
        shares.patch(":share/participants/:participant") { request, context -> HTTPResponse.Status in
            let (device, share) = try await ownersShare(context)
            let participant = try context.parameters.require("participant")
            try Validate.identifier(participant, field: "participant")
            let asked = try await request.decode(as: ShareRoleRequest.self, context: context)
            let whom = try await database.participants(shareId: share.id).first { $0.id == participant }?.accountId
            guard try await database.updateParticipant(ParticipantMatch(id: participant, share: share.id, owner: device.accountId), from: [.invited, .accepted],
                                                       to: nil, role: asked.role, now: Date().timeIntervalSince1970) else {
                throw SyncError(.notFound, "notFound", "no such participant")
            }
            publishSharesChanged(accounts: [whom, device.accountId], container: share.container, logger: context.logger)
            return .noContent
        }
        shares.delete(":share/participants/:participant") { _, context -> HTTPResponse.Status in
            let (device, share) = try await ownersShare(context)
            let participant = try context.parameters.require("participant")
            try Validate.identifier(participant, field: "participant")
            let now = Date().timeIntervalSince1970
            let removed = try await database.participants(shareId: share.id).first { $0.id == participant }
            let whom = removed?.accountId
            guard try await database.updateParticipant(ParticipantMatch(id: participant, share: share.id, owner: device.accountId), from: [.invited, .accepted],
                                                       to: .removed, role: nil, now: now) else {
                throw SyncError(.notFound, "notFound", "no such participant")
            }
            // Whoever held the share's key: what is written from now on is sealed with a new one.
            if removed?.state(at: now) == .accepted { try await database.advanceShareEpoch(shareId: share.id, removed: whom) }
            context.logger.info("removed from a share", metadata: ["share": "\(share.id)", "invitation": "\(participant)"])
            publishSharesChanged(accounts: [whom, device.accountId], container: share.container, logger: context.logger)
            return .noContent
        }
        // Stop sharing: every participant's access ends.
        shares.delete(":share") { _, context -> HTTPResponse.Status in
            let (device, share) = try await ownersShare(context)
            let everyone = try await database.participants(shareId: share.id).map(\.accountId)
            guard try await database.stopShare(accountId: device.accountId, id: share.id) else { throw Self.noSuchShare }
            context.logger.info("stopped sharing", metadata: ["share": "\(share.id)"])
            publishSharesChanged(accounts: everyone + [device.accountId], container: share.container, logger: context.logger)
            return .noContent
        }
        // A participant's answers: accept, decline; and leaving once accepted.
        for (action, to) in [("accept", ShareParticipantState.accepted), ("decline", .declined)] {
            shares.post("invitations/:invitation/\(action)") { _, context -> HTTPResponse.Status in
                let device = try context.requireDevice()
                let invitation = try context.parameters.require("invitation")
                try Validate.identifier(invitation, field: "invitation")
                guard let (share, _) = try await database.participations(accountId: device.accountId).first(where: { $0.participant.id == invitation }),
                      device.allows(share.container),
                      try await database.updateParticipant(ParticipantMatch(id: invitation, participant: device.accountId), from: [.invited], to: to, role: nil,
                                                           now: Date().timeIntervalSince1970) else {
                    throw SyncError(.notFound, "notFound", "no such invitation (or it expired)")
                }
                context.logger.info(to == .accepted ? "accepted a share" : "declined a share", metadata: ["share": "\(share.id)"])
                publishSharesChanged(accounts: [share.accountId, device.accountId], container: share.container, logger: context.logger)
                return .noContent
            }
        }
        // What a share holds, to its owner and to the participants who accepted it (docs/Sharing.md,
        // "Where it lives"): the owner's container's changes, only those inside the share; the
        // root at the top (no folder of the owner's named).
        shares.get(":share/changes") { request, context -> ChangesResponse in
            let share = try await reachableShare(context).share
            let since = try Self.integer(request.uri.queryParameters["since"], name: "since", default: 0)
            let limit = try Self.integer(request.uri.queryParameters["limit"], name: "limit", default: 500)
            guard since >= 0, (1...5_000).contains(limit) else { throw SyncError.badRequest("invalidCursor", "since must be ≥ 0 and limit 1 to 5000") }
            // The page first, then what is inside: an item made inside after the page was read
            // is in the next page; one made before is in this page and inside (read the other
            // way round, an item made between the two reads was left out while the cursor
            // passed it — never shown: found by `ubiquity-chaos --share`).
            var page = try await database.changes(accountId: share.accountId, container: share.container, since: since, limit: Int(limit), brief: Self.brief(request))
            guard let inside = try await database.subtree(accountId: share.accountId, container: share.container, root: share.item, limit: Self.maximumSharedItems) else {
                throw SyncError(.contentTooLarge, "shareTooLarge", "a share holds at most \(Self.maximumSharedItems) items")
            }
            // What left the share by a move within the page's span: shown as gone, nothing of
            // where it went.
            let through = page.more ? page.items.last?.sequence ?? page.sequence : page.sequence
            var gone: [ItemState] = []
            for (id, sequence) in try await database.shareExits(shareId: share.id, after: since, through: through) {
                let kind = try await database.item(accountId: share.accountId, container: share.container, id: id, brief: true)?.kind ?? .file
                gone.append(ItemState(id: id, revision: "exit-\(sequence)", name: "", kind: kind, size: 0, modificationDate: 0, deleted: true, uploaded: true,
                                      deviceName: "", sequence: sequence, manifest: Manifest(), conflicts: []))
            }
            // Inside now, and inside as the page has it (one moved in since is in the next page,
            // not shown here in a folder of the owner's outside the share).
            let shown = page.items.filter { inside.contains($0.id) && ($0.id == share.item || $0.parent.map(inside.contains) == true) }
            page.items = (shown.map { Self.seen($0, through: share) } + gone).sorted { $0.sequence < $1.sequence }
            // (What was passed over outside the share counts: the next page starts after it.)
            if page.more { page.next = through }
            return page
        }
        shares.get(":share/items/:item") { request, context -> ItemState in
            let share = try await reachableShare(context).share
            let id = try context.parameters.require("item")
            try Validate.identifier(id, field: "item")
            guard try await isInside(id, share),
                  let item = try await database.item(accountId: share.accountId, container: share.container, id: id, brief: Self.brief(request)) else {
                throw SyncError.notFound
            }
            return Self.seen(item, through: share)
        }
        // Changes through a share (its owner's, or a read-write participant's): kept in the
        // owner's container and counted against the owner, each only inside the share.
        shares.post(":share/commits") { request, context -> CommitBatchResponse in
            let (share, acting) = try await acting(context, writing: true)
            var answer = try await commitBatch(request, context: context, container: share.container, device: acting) { commit in
                try await self.throughShare(commit, share)
            }
            for index in answer.results.indices {
                if let item = answer.results[index].commit?.item { answer.results[index].commit?.item = Self.seen(item, through: share) }
            }
            return answer
        }
        // Chunks through a share: what is sent is kept in the owner's account; what is read or
        // asked about is only what a revision inside the share names — any other chunk of the
        // owner's is answered as absent (whether the owner holds a file is not told).
        shares.post(":share/chunks") { request, context -> Response in
            let (_, acting) = try await acting(context, writing: true)
            return try await receiveChunkBatch(request, context: context, device: acting)
        }
        shares.post(":share/chunks/missing") { request, context -> MissingChunksResponse in
            let (share, _) = try await acting(context, writing: false)
            let asked = try await request.decode(as: MissingChunksRequest.self, context: context)
            guard asked.hashes.count <= 100_000 else { throw SyncError.badRequest("tooMany", "at most 100,000 hashes per request") }
            for hash in asked.hashes { try Validate.hash(hash) }
            let lacking = Set(try await database.missingChunks(accountId: share.accountId, hashes: asked.hashes))
            let named = try await database.chunksNamed(accountId: share.accountId, container: share.container, inside: share.item,
                                                       hashes: asked.hashes.filter { !lacking.contains($0) })
            return MissingChunksResponse(missing: asked.hashes.filter { lacking.contains($0) || !named.contains($0) })
        }
        shares.post(":share/chunks/fetch") { request, context -> Response in
            let (share, acting) = try await acting(context, writing: false)
            let database = database
            return try await fetchChunkBatch(request, context: context, device: acting) { hashes in
                try await database.chunksNamed(accountId: share.accountId, container: share.container, inside: share.item, hashes: hashes)
            }
        }
        shares.post(":share/leave") { _, context -> HTTPResponse.Status in
            let device = try context.requireDevice()
            let id = try context.parameters.require("share")
            try Validate.identifier(id, field: "share")
            guard try await database.updateParticipant(ParticipantMatch(share: id, participant: device.accountId), from: [.accepted], to: .left, role: nil,
                                                       now: Date().timeIntervalSince1970) else {
                throw Self.noSuchShare
            }
            context.logger.info("left a share", metadata: ["share": "\(id)"])
            try await database.advanceShareEpoch(shareId: id, removed: device.accountId)
            if let share = try await database.share(id: id) {
                publishSharesChanged(accounts: [share.accountId, device.accountId], container: share.container, logger: context.logger)
            }
            return .noContent
        }
    }

    /// The share the route names, if the caller's account owns it: 403 `notOwner` for one of
    /// its participants, 404 for anyone else (as for a share that does not exist).
    func ownersShare(_ context: SyncContext) async throws -> (DeviceAuth, StoredShare) {
        let device = try context.requireDevice()
        let id = try context.parameters.require("share")
        try Validate.identifier(id, field: "share")
        guard let share = try await database.share(id: id) else { throw Self.noSuchShare }
        if share.accountId == device.accountId, device.allows(share.container) { return (device, share) }
        if try await acceptance(of: device.accountId, in: id) != nil {
            throw SyncError(.forbidden, "notOwner", "only the share's owner changes who it is shared with")
        }
        throw Self.noSuchShare
    }

    /// The role of `account` in share `id`, if it accepted the share and is still in it.
    private func acceptance(of account: Int64, in id: String) async throws -> StoredParticipant? {
        let now = Date().timeIntervalSince1970
        return try await database.participations(accountId: account).first { $0.share.id == id && $0.participant.state(at: now) == .accepted }?.participant
    }

    /// The share the route names, if the caller's account owns it or accepted it (and this
    /// device may use its container), with the caller's role (nil: its owner); 404 otherwise,
    /// as for a share that does not exist.
    func reachableShare(_ context: SyncContext) async throws -> (share: StoredShare, role: ShareRole?, participant: String?) {
        let device = try context.requireDevice()
        let id = try context.parameters.require("share")
        try Validate.identifier(id, field: "share")
        guard let share = try await database.share(id: id), device.allows(share.container) else { throw Self.noSuchShare }
        if share.accountId == device.accountId { return (share, nil, nil) }
        guard let accepted = try await acceptance(of: device.accountId, in: id) else { throw Self.noSuchShare }
        return (share, accepted.role, accepted.name)
    }

    /// A change made through `share`, checked and put in the owner's terms: an item already
    /// there must be inside the share, and stay inside (moving out is the owner's, in their own
    /// container); a new one goes inside; the root keeps its name and its place (the owner's:
    /// shown at the top through the share, sent with no folder). Refused with 409 `outsideShare`.
    func throughShare(_ commit: ItemCommit, _ share: StoredShare) async throws -> ItemCommit {
        let outside = SyncError(.conflict, "outsideShare", "a change through a share stays inside it (and its top item keeps its name and place)")
        var commit = commit
        let current = try await database.item(accountId: share.accountId, container: share.container, id: commit.item, brief: true)
        if commit.item == share.item {
            // The top item's name and place are the owner's: a participant's device shows it under
            // a name of its own (a clash at the top of its Documents), which is not sent on.
            guard let current, commit.update.parent == nil, commit.update.deleted != true else { throw outside }
            commit.update.parent = current.parent
            commit.update.name = current.name
            return commit
        }
        if current != nil {
            guard try await isInside(commit.item, share) else { throw SyncError.notFound } // (as an id that does not exist)
        }
        guard let folder = commit.update.parent, try await isInside(folder, share) else { throw outside }
        return commit
    }

    /// The share the route names, and the caller's device acting in its owner's account (its
    /// own id and name kept: the revisions it makes are named with it), limited to the share's
    /// container. `writing`: only for the owner and read-write participants (403 `readOnly`).
    func acting(_ context: SyncContext, writing: Bool) async throws -> (StoredShare, DeviceAuth) {
        let (share, role, participant) = try await reachableShare(context)
        let device = try context.requireDevice()
        if writing, let role {
            guard role == .readWrite else {
                context.logger.notice("a change through a read-only share refused", metadata: ["share": "\(share.id)"])
                throw SyncError(.forbidden, "readOnly", "this share is read-only for you: nothing was changed")
            }
        }
        var acting = device
        acting.accountId = share.accountId
        acting.containers = [share.container]
        acting.editor = participant
        return (share, acting)
    }

    /// Whether item `id` of the share's owner's container is its root or inside it (one walk up
    /// its folders: ``ShareBorder``).
    private func isInside(_ id: String, _ share: StoredShare) async throws -> Bool {
        var border = ShareBorder(share)
        return try await border.contains(id, in: database)
    }

    /// An item as a share shows it: the root at the top, no folder of the owner's named.
    static func seen(_ item: ItemState, through share: StoredShare) -> ItemState {
        guard item.id == share.item else { return item }
        var root = item
        root.parent = nil
        for index in root.conflicts.indices { root.conflicts[index].parent = nil }
        return root
    }

    /// The most items a share holds (its changes are read against all of them).
    static let maximumSharedItems = 1_000_000

    /// The share as its owner sees it: every invitation.
    private func ownerInfo(_ share: StoredShare, root: (name: String?, sealed: Bool)) async throws -> ShareInfo {
        let now = Date().timeIntervalSince1970
        let participants = try await database.participants(shareId: share.id).map {
            ShareParticipantInfo(id: $0.id, name: $0.name, role: $0.role, state: $0.state(at: now), invited: $0.invited, expires: $0.expires)
        }
        return ShareInfo(id: share.id, owner: share.owner, container: share.container, item: share.item, name: root.name, epoch: share.epoch, role: nil,
                         participants: participants, sealed: root.sealed ? true : nil)
    }

    /// The share's root's name, when it is not sealed; and whether it is.
    private func root(of share: StoredShare) async throws -> (name: String?, sealed: Bool) {
        guard let root = try await database.item(accountId: share.accountId, container: share.container, id: share.item, brief: true) else { return (nil, false) }
        return root.record == nil ? (root.name, false) : (nil, true)
    }

    /// The folders `item` is in, innermost first (at most ``maximumShareDepth``: deeper is refused).
    func folders(around item: String, accountId: Int64, container: String) async throws -> [String] {
        var chain: [String] = [], next = try await database.item(accountId: accountId, container: container, id: item, brief: true)?.parent
        while let folder = next {
            guard chain.count < Self.maximumShareDepth, !chain.contains(folder) else {
                throw SyncError.badRequest("tooDeep", "an item is at most \(Self.maximumShareDepth) folders deep to be shared or reached through a share")
            }
            chain.append(folder)
            next = try await database.item(accountId: accountId, container: container, id: folder, brief: true)?.parent
        }
        return chain
    }

    /// How many folders deep a shared item, or one reached through a share, may be.
    static let maximumShareDepth = 256
}

private extension String {
    func leftPadded(to length: Int) -> String { count >= length ? self : String(repeating: "0", count: length - count) + self }
}
