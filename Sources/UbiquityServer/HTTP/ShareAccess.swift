import Foundation
import Hummingbird
import Logging
import UbiquityProtocol

/// Which items are inside a share, for a request that asks about many: each folder's answer is
/// remembered, so that the items of one folder cost one walk up to the share's root (at most
/// ``SyncServices/maximumShareDepth`` folders, each an indexed lookup).
struct ShareBorder {
    /// The share.
    let share: StoredShare
    private var known: [String: Bool] = [:]

    /// A border of `share`, knowing nothing yet.
    init(_ share: StoredShare) {
        self.share = share
        known[share.item] = true
    }

    /// Whether item `id` of the owner's container is the share's root or inside it (an item
    /// that does not exist is not).
    /// - Throws: ``SyncError`` 400 `tooDeep` for an item more than
    ///   ``SyncServices/maximumShareDepth`` folders deep (or in a cycle of folders).
    mutating func contains(_ id: String, in database: any SyncDatabase) async throws -> Bool {
        var walked: [String] = [], current = id, answer = false
        while true {
            if let found = known[current] {
                answer = found
                break
            }
            guard walked.count <= SyncServices.maximumShareDepth, !walked.contains(current) else {
                throw SyncError.badRequest("tooDeep", "an item is at most \(SyncServices.maximumShareDepth) folders deep to be shared or reached through a share")
            }
            walked.append(current)
            guard let parent = try await database.item(accountId: share.accountId, container: share.container, id: current, brief: true)?.parent else { break }
            current = parent
        }
        for item in walked { known[item] = answer }
        return answer
    }
}

// Sharing (issue 46): the routes a participant's device syncs a share with besides its changes,
// items and chunks (ShareRoutes.swift), and the pushes that tell participants' devices of changes.
extension SyncServices {
    func addShareItemRoutes(to shares: RouterGroup<SyncContext>) {
        // Many items' present states, those inside the share (any other id is left out, as an
        // unknown one is).
        shares.post(":share/fetch") { request, context -> ItemsResponse in
            let share = try await reachableShare(context).share
            let asked = try await request.decode(as: ItemsFetchRequest.self, context: context)
            guard (1...ItemsFetchRequest.maximumCount).contains(asked.ids.count) else {
                throw SyncError.badRequest("tooMany", "ask for 1 to \(ItemsFetchRequest.maximumCount) items at a time")
            }
            for id in asked.ids { try Validate.identifier(id, field: "item id") }
            var border = ShareBorder(share), inside: [String] = []
            for id in asked.ids where try await border.contains(id, in: database) { inside.append(id) }
            let items = inside.isEmpty ? [] : try await database.items(accountId: share.accountId, container: share.container, ids: inside)
            return ItemsResponse(items: items.map { Self.seen($0, through: share) })
        }
        // An item's earlier revisions, and one of them, as for the owner's own.
        shares.get(":share/items/:item/revisions") { _, context -> ItemRevisionsResponse in
            let (share, item) = try await sharedItem(context)
            guard var revisions = try await database.itemRevisions(accountId: share.accountId, container: share.container, item: item,
                                                                   since: Date().timeIntervalSince1970 - retention, limit: ItemRevisionsResponse.maximumCount) else {
                throw SyncError.notFound
            }
            if item == share.item { for index in revisions.indices { revisions[index].parent = nil } }
            return ItemRevisionsResponse(revisions: revisions)
        }
        shares.get(":share/items/:item/revisions/:revision") { _, context -> RevisionContentsResponse in
            let (share, item) = try await sharedItem(context)
            let revision = try context.parameters.require("revision")
            try Validate.identifier(revision, field: "revision")
            guard var contents = try await database.revisionContents(accountId: share.accountId, container: share.container, item: item, revision: revision) else {
                throw SyncError.notFound
            }
            if item == share.item { contents.parent = nil }
            return contents
        }
        // Resolving a conflict: the owner's and read-write participants'.
        shares.post(":share/items/:item/resolve") { request, context -> ItemState in
            let (share, item) = try await sharedItem(context)
            let (_, acting) = try await acting(context, writing: true)
            let resolution = try await request.decode(as: ResolveRequest.self, context: context)
            try Validate.identifier(resolution.keep, field: "keep")
            for removed in resolution.remove { try Validate.identifier(removed, field: "remove") }
            let state = try await database.resolve(accountId: share.accountId, container: share.container, itemId: item, request: resolution)
            notifier.publish(account: share.accountId, container: share.container, sequence: state.sequence)
            await publishToParticipants(of: share.accountId, container: share.container, changed: [state], except: acting.deviceId, logger: context.logger)
            return Self.seen(state, through: share)
        }
    }

    /// The share and item the route names, the item inside the share (else 404, as for an id
    /// that does not exist).
    private func sharedItem(_ context: SyncContext) async throws -> (StoredShare, String) {
        let share = try await reachableShare(context).share
        let item = try context.parameters.require("item")
        try Validate.identifier(item, field: "item")
        var border = ShareBorder(share)
        guard try await border.contains(item, in: database) else { throw SyncError.notFound }
        return (share, item)
    }

    /// Tells the devices of every participant who accepted a share of `container` that it moved
    /// on (`{"type":"shareChanged","container":SHARE,"sequence":N}`) — only the shares that
    /// something of `changed` is inside, or left by a move: a participant learns nothing of the
    /// owner's other work. A failure to read the shares is logged; the devices' slow timers
    /// catch up. `acting`: the owner's device that made the change, whose account's shares
    /// are read as ``AccountFacts`` keeps them.
    func publishToParticipants(of owner: Int64, container: String, changed: [ItemState], except origin: String?, acting: DeviceAuth? = nil,
                               logger: Logger) async {
        guard let sequence = changed.map(\.sequence).max(), let first = changed.map(\.sequence).min() else { return }
        do {
            let database = database
            let load = { try await database.ownedShares(accountId: owner) }
            let owned = if let acting, acting.accountId == owner { try await accountFacts.ownedShares(of: acting, load: load) } else { try await load() }
            let shares = owned.filter { $0.container == container }
            let now = Date().timeIntervalSince1970
            for share in shares {
                var border = ShareBorder(share), touched = false
                // (An item too deep to be inside is not: the others' pushes still go.)
                for item in changed where !touched { touched = (try? await border.contains(item.id, in: database)) ?? false }
                if !touched { touched = !(try await database.shareExits(shareId: share.id, after: first - 1, through: sequence)).isEmpty }
                guard touched else { continue }
                let accounts = try await database.participants(shareId: share.id).filter { $0.state(at: now) == .accepted }.compactMap(\.accountId)
                notifier.publishShare(share: share.id, sequence: sequence, accounts: accounts, container: container, except: origin)
                try await database.relayShare(share: share.id, sequence: sequence, accounts: accounts, container: container, except: origin)
            }
        } catch {
            logger.warning("cannot tell participants of a shared change", metadata: ["error": "\(error)"])
        }
    }

    /// Tells every device of `accounts` (that may use `container`) that the shares they own,
    /// joined or are invited to changed (`{"type":"sharesChanged"}`): they read their shares
    /// again — the device that made the change too (its agent may not be what made it: a
    /// command, a page).
    func publishSharesChanged(accounts: [Int64?], container: String, logger: Logger) {
        let accounts = accounts.compactMap { $0 }
        notifier.publishShare(share: nil, sequence: nil, accounts: accounts, container: container, except: nil)
        // The devices connected to other instances: told there (failing that, their slow timers catch up).
        Task { [database] in
            do { try await database.relayShare(share: nil, sequence: nil, accounts: accounts, container: container, except: nil) } catch {
                logger.warning("cannot tell the other server instances that shares changed", metadata: ["error": "\(error)"])
            }
        }
    }
}
