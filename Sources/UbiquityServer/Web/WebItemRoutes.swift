import Foundation
import HTTPTypes
import Hummingbird
import Logging
import UbiquityKeys
import UbiquityProtocol

/// `POST …/items/:item/move`: a new name, a new folder, or both.
struct WebMoveRequest: Codable {
    var name: String?
    /// The folder to move into ("" or absent: stays where it is; `top`: the top of Documents).
    var parent: String?
    /// Whether `parent` names the top of Documents (JSON cannot tell "absent" from null).
    var toTop: Bool?
}

/// `GET …/items/:item/versions`: the current revision, unresolved conflict versions and the
/// earlier revisions the server keeps (newest first).
struct WebVersionsResponse: Codable, ResponseEncodable {
    var item: WebItem
    var current: WebVersion
    var conflicts: [WebVersion]
    var earlier: [WebVersion]
}

/// One revision of an item, as the versions page lists it.
struct WebVersion: Codable, Sendable, Equatable {
    var revision: String
    var deviceName: String
    var modificationDate: Double
    var size: Int64
    var uploaded: Bool
}

/// `POST …/items/:item/resolve`: the revision that wins (the current one or a conflict
/// version); every other one (the current one too, when a conflict version wins) is resolved.
struct WebResolveRequest: Codable {
    var keep: String
}

/// `GET /web/api/deleted`: items deleted within the retention period, newest first.
struct WebDeletedResponse: Codable, ResponseEncodable {
    var items: [WebDeletedItem]
    /// How many days deleted items stay recoverable.
    var retentionDays: Int
}

/// A deleted item: its last revision before the deletion.
struct WebDeletedItem: Codable, Sendable, Equatable {
    var container: String
    var item: String
    var revision: String
    var name: String
    var deviceName: String
    var size: Int64
    var deletedAt: Double
}

/// `POST /web/api/deleted/restore`: revisions to make current again (all deleted items when empty and `all`).
struct WebRestoreRequest: Codable {
    var revisions: [String]
}

/// What a change through the web answered: the item's new state.
extension WebVersionsResponse {
    init(_ item: ItemState, earlier: [ItemRevision]) {
        self.item = WebItem(item)
        current = WebVersion(revision: item.revision, deviceName: item.deviceName, modificationDate: item.modificationDate, size: item.size, uploaded: item.uploaded)
        conflicts = item.conflicts.map { WebVersion(revision: $0.revision, deviceName: $0.deviceName, modificationDate: $0.modificationDate, size: $0.size, uploaded: $0.uploaded) }
        self.earlier = earlier.filter { $0.revision != item.revision }
            .map { WebVersion(revision: $0.revision, deviceName: $0.deviceName, modificationDate: $0.modificationDate, size: $0.size, uploaded: $0.uploaded) }
    }
}

extension SyncServices {
    /// Renaming, moving, deleting; versions and conflicts; Recently Deleted.
    func addWebItemRoutes(to api: RouterGroup<SyncContext>) {
        let items = api.group("containers/:container/items/:item")
        items.post("move") { request, context in
            let (device, container, id) = try Self.webItem(context)
            let asked = try await request.decode(as: WebMoveRequest.self, context: context)
            let records = try await webRecords(ofAccount: device.accountId, container: container)
            guard let stored = try await database.item(accountId: device.accountId, container: container, id: id, brief: false), !stored.deleted else { throw SyncError.notFound }
            let item = try records.open(stored)
            let name = asked.name ?? item.name
            try Validate.name(name)
            var parent = item.parent
            if asked.toTop == true {
                parent = nil
            } else if let target = try Self.folderId(asked.parent) {
                // A folder cannot go into itself or into a folder inside it.
                guard try await !webPath(to: target, container: container, account: device.accountId, records: records).contains(where: { $0.id == id }) else {
                    throw SyncError.badRequest("intoItself", "a folder cannot move into itself")
                }
                parent = target
            }
            if let taken = try await webSibling(named: name, in: parent, excluding: id, container: container, account: device.accountId, records: records) {
                throw SyncError(.conflict, "nameTaken", "\(taken.kind == .directory ? "a folder" : "an item") of that name is there already")
            }
            let update = ItemUpdate(baseRevision: item.revision, name: name, parent: parent, kind: item.kind, modificationDate: item.modificationDate,
                                    type: item.type, manifest: item.manifest, changeId: RandomIdentifier.make())
            return try await webCommit([(id, update)], container: container, device: device, records: records, logger: context.logger)[0]
        }
        items.delete { _, context -> HTTPResponse.Status in
            let (device, container, id) = try Self.webItem(context)
            let records = try await webRecords(ofAccount: device.accountId, container: container)
            let listing = try await WebListing.load(database: database, account: device.accountId, container: container, records: records)
            guard listing.items[id] != nil else { throw SyncError.notFound }
            // A folder goes with everything in it, the innermost first (each a deletion devices apply).
            var doomed: [ItemState] = [], next = [id]
            while let current = next.popLast() {
                guard let item = listing.items[current] else { continue }
                doomed.append(item)
                if item.kind == .directory { next += listing.children(of: current).map(\.id) }
            }
            try await webDelete(doomed.reversed(), container: container, device: device, records: records, logger: context.logger)
            return .noContent
        }
        items.get("versions") { _, context in
            let (device, container, id) = try Self.webItem(context)
            let records = try await webRecords(ofAccount: device.accountId, container: container)
            guard let item = try await database.item(accountId: device.accountId, container: container, id: id, brief: true), !item.deleted else { throw SyncError.notFound }
            let earlier = try await database.itemRevisions(accountId: device.accountId, container: container, item: id,
                                                           since: Date().timeIntervalSince1970 - retention, limit: ItemRevisionsResponse.maximumCount) ?? []
            return WebVersionsResponse(try records.open(item), earlier: try earlier.map { try records.open($0, item: id) })
        }
        items.get("revisions/:revision/download") { _, context -> Response in
            let (device, container, id) = try Self.webItem(context)
            let revision = try context.parameters.require("revision")
            try Validate.identifier(revision, field: "revision")
            let records = try await webRecords(ofAccount: device.accountId, container: container)
            guard let stored = try await database.item(accountId: device.accountId, container: container, id: id, brief: false) else { throw SyncError.notFound }
            var item = try records.open(stored)
            if revision != item.revision {
                if let conflict = item.conflicts.first(where: { $0.revision == revision }) {
                    (item.manifest, item.uploaded, item.size) = (conflict.manifest, conflict.uploaded, conflict.size)
                } else {
                    guard let stored = try await database.revisionContents(accountId: device.accountId, container: container, item: id, revision: revision) else {
                        throw SyncError(.notFound, "notFound", "no such version")
                    }
                    let earlier = try records.open(stored, item: id)
                    (item.manifest, item.name, item.kind, item.uploaded) = (earlier.manifest, earlier.name, earlier.kind, earlier.uploaded)
                }
            }
            guard !item.deleted || revision != item.revision else { throw SyncError.notFound }
            return try await WebDownload.response(for: item, chunks: chunks, account: device.accountId,
                                                  opener: try await sealedChunkOpener(ofAccount: device.accountId, container: container))
        }
        // An earlier version made current again: a new revision, the current one kept as a version.
        items.post("revisions/:revision/restore") { _, context in
            let (device, container, id) = try Self.webItem(context)
            let revision = try context.parameters.require("revision")
            try Validate.identifier(revision, field: "revision")
            let records = try await webRecords(ofAccount: device.accountId, container: container)
            guard let stored = try await database.item(accountId: device.accountId, container: container, id: id, brief: false), !stored.deleted else { throw SyncError.notFound }
            guard let storedEarlier = try await database.revisionContents(accountId: device.accountId, container: container, item: id, revision: revision) else {
                throw SyncError(.notFound, "notFound", "no such version")
            }
            let (item, earlier) = (try records.open(stored), try records.open(storedEarlier, item: id))
            let update = ItemUpdate(baseRevision: item.revision, name: item.name, parent: item.parent, kind: item.kind, modificationDate: Date().timeIntervalSince1970,
                                    type: item.type, manifest: earlier.manifest, changeId: RandomIdentifier.make())
            return try await webCommit([(id, update)], container: container, device: device, records: records, logger: context.logger)[0]
        }
        // The winner of a conflict: every device hears of the resolution.
        items.post("resolve") { request, context in
            let (device, container, id) = try Self.webItem(context)
            let asked = try await request.decode(as: WebResolveRequest.self, context: context)
            let records = try await webRecords(ofAccount: device.accountId, container: container)
            // (Its record opened first: under Advanced this page cannot, and resolves in the
            // browser — a resolution made here would be one nobody signed.)
            let (state, replaced) = try await webResolve(id, keeping: asked.keep, container: container, device: device) { try _ = records.open($0) }
            if records.records != nil {
                await signAsEscrow([Self.outcome(of: state, replacing: replaced)], account: device.accountId, container: container, logger: context.logger)
            }
            return WebItem(try records.open(state))
        }

        // Recently Deleted: what `ubiquity recover` lists and restores.
        api.get("deleted") { _, context in
            let device = try context.requireDevice()
            guard let account = try await database.account(id: device.accountId) else { throw SyncError.unauthorized }
            let recoverable = try await database.recoverable(accountName: account.name, now: Date(), retention: retention)
            var latest: [String: RecoverableRevision] = [:]
            for revision in recoverable where revision.itemDeleted && device.allows(revision.container) {
                let key = revision.container + "\u{0}" + revision.item
                if (latest[key]?.replacedAt ?? -1) < revision.replacedAt { latest[key] = revision }
            }
            var records: [String: WebRecords] = [:]
            var items: [WebDeletedItem] = []
            for revision in latest.values.sorted(by: { $0.replacedAt > $1.replacedAt }) {
                if revision.record != nil, records[revision.container] == nil {
                    records[revision.container] = try await webRecords(ofAccount: device.accountId, container: revision.container)
                }
                guard let opened = try? records[revision.container]?.open(revision) ?? revision else { continue } // (sealed under Advanced)
                items.append(WebDeletedItem(container: revision.container, item: revision.item, revision: revision.revision, name: opened.name,
                                            deviceName: revision.deviceName, size: opened.size, deletedAt: revision.replacedAt))
            }
            return WebDeletedResponse(items: items, retentionDays: Int(retention / 86_400))
        }
        api.post("deleted/restore") { request, context -> HTTPResponse.Status in
            let device = try context.requireDevice()
            let asked = try await request.decode(as: WebRestoreRequest.self, context: context)
            guard (1...CommitBatchRequest.maximumCount).contains(asked.revisions.count) else {
                throw SyncError.badRequest("tooMany", "restore 1 to \(CommitBatchRequest.maximumCount) items at a time")
            }
            for revision in asked.revisions { try Validate.identifier(revision, field: "revision") }
            guard let account = try await database.account(id: device.accountId) else { throw SyncError.unauthorized }
            let allowed = Dictionary(try await database.recoverable(accountName: account.name, now: Date(), retention: retention).map { ($0.revision, ($0.container, $0.item, $0.record != nil)) },
                                     uniquingKeysWith: { first, _ in first })
            var keyed: [String: Bool] = [:] // (whether each container's records are sealed: the escrow's keys opened once per container)
            for revision in asked.revisions {
                guard let (container, _, _) = allowed[revision], device.allows(container) else { throw SyncError(.notFound, "notFound", "no such deleted item") }
                if keyed[container] == nil { keyed[container] = try await webRecords(ofAccount: device.accountId, container: container).records != nil }
            }
            // A sealed item under Advanced is restored on a device (which signs it): restored
            // here, nobody would sign it and devices would hold it back. Refused before anything changes.
            if asked.revisions.contains(where: { allowed[$0]?.2 == true && keyed[allowed[$0]?.0 ?? ""] == false }) { throw WebRecords.sealedOnDevices }
            for revision in asked.revisions {
                guard let (container, item, _) = allowed[revision] else { throw SyncError(.notFound, "notFound", "no such deleted item") }
                let before = try await database.item(accountId: device.accountId, container: container, id: item, brief: true)
                guard let (container, sequence) = try await database.restore(accountName: account.name, revision: revision, now: Date()) else {
                    throw SyncError(.notFound, "notFound", "no such deleted item")
                }
                // (Signed by the escrow under Standard, as the page's other changes.)
                if keyed[container] == true,
                   let state = try await database.item(accountId: device.accountId, container: container, id: item, brief: true) {
                    await signAsEscrow([Self.outcome(of: state, replacing: before?.revision)], account: device.accountId, container: container, logger: context.logger)
                }
                notifier.publish(account: device.accountId, container: container, sequence: sequence)
            }
            return .noContent
        }
    }

    /// Commits updates made through the web interface in one transaction, as the browser's
    /// device; a refused one throws its error.
    /// Each update's record is sealed with `records` when the account has keys (``WebRecords``).
    func webCommit(_ updates: [(id: String, update: ItemUpdate)], container: String, device: DeviceAuth, records: WebRecords, logger: Logger) async throws -> [WebItem] {
        var commits: [ItemCommit] = []
        for (id, update) in updates {
            commits.append(ItemCommit(item: id, update: try await prepared(try records.sealed(update, item: id), of: id, in: container, for: device)))
        }
        // (Sealed by the escrow's keys when the account has keys: names compared by their tags.)
        let tags = await nameTags(of: commits.map { ($0.item, $0.update) }, device: device, container: container)
        let verdicts = try await database.commit(accountId: device.accountId, container: container, commits: commits, device: device, now: Date(),
                                                 brief: true, limits: accountLimits, nameTags: tags)
        let outcomes = try verdicts.map { try $0.get() }
        metrics.count(.commits, by: outcomes.count)
        // Signed by the escrow (under Standard, records sealed), before devices hear of it.
        if records.records != nil {
            await signAsEscrow(zip(commits, outcomes).filter { !$1.repeated }.map { commit, outcome in
                CommitContent.Outcome(item: commit.item, folder: outcome.item.parent, recordHash: CommitContent.recordHash(of: commit.update.record),
                                      revision: outcome.revision, base: commit.update.baseRevision, deleted: commit.update.deleted ?? false,
                                      conflict: !outcome.isCurrent, sequence: outcome.item.sequence)
            }, account: device.accountId, container: container, logger: logger)
        }
        if let sequence = outcomes.map(\.item.sequence).max() {
            notifier.publish(account: device.accountId, container: container, sequence: sequence, except: device.deviceId)
        }
        return try outcomes.map { WebItem(try records.open($0.item)) }
    }

    /// What a change the server made for the page (a resolution, a restore from Recently
    /// Deleted) made of an item, as a signed commit names it: its state now, made from
    /// `replaced` (the revision current before, unless it is the one kept).
    static func outcome(of state: ItemState, replacing replaced: String?) -> CommitContent.Outcome {
        CommitContent.Outcome(item: state.id, folder: state.parent, recordHash: CommitContent.recordHash(of: state.record), revision: state.revision,
                              base: replaced == state.revision ? nil : replaced, deleted: state.deleted, sequence: state.sequence)
    }

    /// Deletes `items` in that order (what is in a folder before it), in batches of at most
    /// ``CommitBatchRequest/maximumCount``: each a deletion every device applies, recoverable
    /// from Recently Deleted.
    func webDelete(_ items: [ItemState], container: String, device: DeviceAuth, records: WebRecords, logger: Logger) async throws {
        let now = Date().timeIntervalSince1970
        let updates = items.map { item in
            (item.id, ItemUpdate(baseRevision: item.revision, name: item.name, parent: item.parent, kind: item.kind, modificationDate: now,
                                 manifest: Manifest(), deleted: true, changeId: RandomIdentifier.make()))
        }
        for start in stride(from: 0, to: updates.count, by: CommitBatchRequest.maximumCount) {
            _ = try await webCommit(Array(updates[start..<min(updates.count, start + CommitBatchRequest.maximumCount)]), container: container, device: device, records: records, logger: logger)
        }
    }

    /// Resolves item `id`'s conflict from the web: `keep` (its current revision or a conflict
    /// version) wins and every other one is resolved; devices hear of it. `check` sees the
    /// item before anything changes (and may refuse it). Returns the state made and the
    /// revision that was current before.
    func webResolve(_ id: String, keeping keep: String, container: String, device: DeviceAuth,
                    check: (ItemState) throws -> Void = { _ in }) async throws -> (state: ItemState, replaced: String) {
        try Validate.identifier(keep, field: "keep")
        guard let item = try await database.item(accountId: device.accountId, container: container, id: id, brief: true), !item.deleted else { throw SyncError.notFound }
        guard keep == item.revision || item.conflicts.contains(where: { $0.revision == keep }) else {
            throw SyncError(.conflict, "notAVersion", "that revision is neither the current one nor a conflict version (the page is out of date: reload it)")
        }
        try check(item)
        let state = try await database.resolve(accountId: device.accountId, container: container, itemId: id,
                                               request: ResolveRequest(keep: keep, remove: ([item.revision] + item.conflicts.map(\.revision)).filter { $0 != keep }))
        metrics.count(.commits)
        notifier.publish(account: device.accountId, container: container, sequence: state.sequence)
        return (state, item.revision)
    }

    /// The signed-in device, the container and the item the route names.
    static func webItem(_ context: SyncContext) throws -> (DeviceAuth, String, String) {
        let (device, container) = try webContainer(context)
        let item = try context.parameters.require("item")
        try Validate.identifier(item, field: "item id")
        return (device, container, item)
    }
}
