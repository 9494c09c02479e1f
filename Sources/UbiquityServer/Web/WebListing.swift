import Foundation
import UbiquityProtocol

/// A whole container's items, for what needs them all (deleting a folder with what is in it,
/// Delete All): every item not deleted, by id, read page by page from the container's changes.
/// Browsing one folder does not read them: see ``WebFolderQuery`` and ``SyncDatabase/folderEntries(accountId:container:parent:)``.
struct WebListing: Sendable {
    /// Items not deleted, by id.
    let items: [String: ItemState]

    /// Reads the container's items (brief: manifests left out), their records opened.
    static func load(database: any SyncDatabase, account: Int64, container: String, records: WebRecords) async throws -> WebListing {
        var items: [String: ItemState] = [:], since: Int64 = 0
        while true {
            let page = try await database.changes(accountId: account, container: container, since: since, limit: 5_000, brief: true)
            for item in page.items {
                if item.deleted { items[item.id] = nil } else { items[item.id] = try records.open(item) }
            }
            guard page.more, let last = page.items.last?.sequence else { break }
            since = last
        }
        return WebListing(items: items)
    }

    /// The items in folder `parent` (nil: the top of the container's `Documents`).
    func children(of parent: String?) -> [ItemState] {
        items.values.filter { $0.parent == parent }
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

/// How a folder's page asks for its items: sorted by name (in the order people expect: case,
/// accents and the value of numbers taken into account, "Track 2" before "Track 10"), date or
/// size, folders first; filtered by a part of the name; a page of them.
struct WebFolderQuery: Sendable, Equatable {
    /// The orders a folder can be listed in.
    enum Sort: String, Sendable { case name, date, size }
    var sort = Sort.name
    /// Only names containing this (without regard to case or accents); empty: all.
    var filter = ""
    /// Items to skip.
    var offset = 0
    /// Items to return at most.
    var limit = WebFolderQuery.defaultLimit

    /// Items a page holds unless asked otherwise.
    static let defaultLimit = 200
    /// Items a page holds at most.
    static let maximumLimit = 2_000

    /// The query in a request's parameters (`sort`, `filter`, `offset`, `limit`).
    /// - Throws: ``SyncError`` (400) for a value out of range.
    init(sort: String?, filter: String?, offset: String?, limit: String?) throws {
        if let sort {
            guard let known = Sort(rawValue: sort) else { throw SyncError.badRequest("badSort", "sort is name, date or size") }
            self.sort = known
        }
        if let filter {
            guard filter.utf8.count <= 1_024 else { throw SyncError.badRequest("badFilter", "a filter is at most 1,024 bytes") }
            self.filter = filter
        }
        if let offset {
            guard let value = Int(offset), value >= 0 else { throw SyncError.badRequest("badOffset", "offset is a whole number") }
            self.offset = value
        }
        if let limit {
            guard let value = Int(limit), (1...Self.maximumLimit).contains(value) else {
                throw SyncError.badRequest("badLimit", "limit is from 1 to \(Self.maximumLimit)")
            }
            self.limit = value
        }
    }

    init() {}

    /// The entries matching the filter, in order: how many, and the asked page of them.
    func page(of entries: [FolderEntry]) -> (total: Int, items: [FolderEntry]) {
        let wanted = filter.isEmpty ? nil : NaturalOrder.folded(filter)
        // Each name folded once (not once per comparison); positions sorted, not the entries
        // (moving an entry copies its strings).
        let keys = entries.map { NaturalOrder.folded($0.name) }
        var order = Array(entries.indices)
        if let wanted { order.removeAll { !keys[$0].contains(wanted) } }
        order.sort { a, b in
            let folderA = entries[a].kind == .directory, folderB = entries[b].kind == .directory
            if folderA != folderB { return folderA }
            switch sort {
            case .date where entries[a].modificationDate != entries[b].modificationDate: return entries[a].modificationDate > entries[b].modificationDate
            case .size where entries[a].size != entries[b].size: return entries[a].size > entries[b].size
            default: break
            }
            if let before = NaturalOrder.compare(keys[a], keys[b]) { return before }
            return (entries[a].name, entries[a].id) < (entries[b].name, entries[b].id)
        }
        let start = min(offset, order.count)
        return (order.count, order[start..<min(order.count, start + limit)].map { entries[$0] })
    }
}

/// Names in the order people expect in a file list ("Track 2" before "Track 10", "é" with "e",
/// case not counted) — what Finder's and iCloud.com's lists do.
enum NaturalOrder {
    /// `name` without case or accents, as Unicode scalar values.
    static func folded(_ name: String) -> [UInt32] {
        // Most names are ASCII: folded here without Foundation's (much slower) Unicode folding.
        var ascii: [UInt32] = []
        ascii.reserveCapacity(name.utf8.count)
        for byte in name.utf8 {
            guard byte < 0x80 else {
                return name.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil).unicodeScalars.map(\.value)
            }
            ascii.append(UInt32((0x41...0x5A).contains(byte) ? byte + 0x20 : byte))
        }
        return ascii
    }

    /// Whether folded name `a` goes before `b`; nil when they are equal in this order.
    static func compare(_ a: [UInt32], _ b: [UInt32]) -> Bool? {
        var i = 0, j = 0
        while i < a.count, j < b.count {
            if isDigit(a[i]), isDigit(b[j]) {
                // Numbers by value: without their leading zeros, the longer is the larger.
                let startA = i, startB = j
                while i < a.count, isDigit(a[i]) { i += 1 }
                while j < b.count, isDigit(b[j]) { j += 1 }
                let digitsA = a[startA..<i].drop { $0 == 0x30 }, digitsB = b[startB..<j].drop { $0 == 0x30 }
                if digitsA.count != digitsB.count { return digitsA.count < digitsB.count }
                if !digitsA.elementsEqual(digitsB) { return digitsA.lexicographicallyPrecedes(digitsB) }
            } else {
                if a[i] != b[j] { return a[i] < b[j] }
                i += 1
                j += 1
            }
        }
        let restA = a.count - i, restB = b.count - j
        return restA == restB ? nil : restA < restB
    }

    private static func isDigit(_ value: UInt32) -> Bool { (0x30...0x39).contains(value) }
}
