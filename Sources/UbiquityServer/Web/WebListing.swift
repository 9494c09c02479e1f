import Foundation
import UbiquityProtocol

/// A container's items as the web interface browses them: every item not deleted, by id, read
/// page by page from the container's changes.
struct WebListing: Sendable {
    /// Items not deleted, by id.
    let items: [String: ItemState]
    /// The container's sequence when read.
    let sequence: Int64

    /// Reads the container's items (brief: manifests left out).
    static func load(database: any SyncDatabase, account: Int64, container: String) async throws -> WebListing {
        var items: [String: ItemState] = [:], since: Int64 = 0, sequence: Int64 = 0
        while true {
            let page = try await database.changes(accountId: account, container: container, since: since, limit: 5_000, brief: true)
            sequence = max(sequence, page.sequence)
            for item in page.items {
                if item.deleted { items[item.id] = nil } else { items[item.id] = item }
            }
            guard page.more, let last = page.items.last?.sequence else { break }
            since = last
        }
        return WebListing(items: items, sequence: sequence)
    }

    /// The folder item `id` (a directory, not deleted), or nil.
    func folder(_ id: String) -> ItemState? {
        guard let item = items[id], item.kind == .directory else { return nil }
        return item
    }

    /// The items in folder `parent` (nil: the container's top), folders first, then by name.
    func children(of parent: String?) -> [ItemState] {
        items.values.filter { $0.parent == parent }.sorted { a, b in
            if (a.kind == .directory) != (b.kind == .directory) { return a.kind == .directory }
            let order = a.name.localizedStandardCompare(b.name)
            return order == .orderedSame ? a.id < b.id : order == .orderedAscending
        }
    }

    /// The folders from the container's top down to `folder` (empty for the top).
    func path(to folder: String?) -> [WebCrumb] {
        var crumbs: [WebCrumb] = [], next = folder, seen = Set<String>()
        while let id = next, let item = items[id], seen.insert(id).inserted {
            crumbs.append(WebCrumb(id: item.id, name: item.name))
            next = item.parent
        }
        return crumbs.reversed()
    }
}
