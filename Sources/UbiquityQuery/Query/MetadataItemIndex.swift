/// A query's items by folder and name: what an event at a path looks up, without a path
/// string kept per item (the keys are the strings the records already hold).
struct MetadataItemIndex: Sendable {
    private var folders: [String: [String: NSMetadataItem]] = [:]

    /// How many items there are.
    private(set) var count = 0

    /// The item at an absolute `path`.
    subscript(path path: String) -> NSMetadataItem? {
        let (folder, name) = MetadataFolder.split(path)
        return folders[folder]?[name]
    }

    /// The item a record is of (its folder and name).
    subscript(_ record: MetadataRecord) -> NSMetadataItem? {
        folders[record.folder.path]?[record.name]
    }

    /// Makes an item of each record `include` takes that has none yet, and keeps it; returns
    /// them in the records' order. Records of one folder side by side (as a walk gives them)
    /// look their folder up once.
    mutating func insertNew(_ records: [MetadataRecord], where include: (MetadataRecord) -> Bool) -> [NSMetadataItem] {
        var added: [NSMetadataItem] = []
        added.reserveCapacity(records.count)
        var start = records.startIndex
        while start < records.endIndex {
            let folder = records[start].folder
            var end = start + 1
            while end < records.endIndex && records[end].folder === folder { end += 1 }
            var names = folders.removeValue(forKey: folder.path) ?? [:] // taken out: changed in place
            names.reserveCapacity(names.count + (end - start)) // grown once, not rehashed as it fills
            for record in records[start..<end] where names[record.name] == nil && include(record) {
                let item = NSMetadataItem(record)
                names[record.name] = item
                added.append(item)
            }
            if !names.isEmpty { folders[folder.path] = names }
            start = end
        }
        count += added.count
        return added
    }

    /// Keeps `item` for the record's folder and name.
    mutating func insert(_ item: NSMetadataItem, for record: MetadataRecord) {
        let previous = folders[record.folder.path, default: [:]].updateValue(item, forKey: record.name)
        if previous == nil { count += 1 }
    }

    /// Forgets the item at an absolute `path`; returns it.
    @discardableResult
    mutating func remove(path: String) -> NSMetadataItem? {
        let (folder, name) = MetadataFolder.split(path)
        guard let item = folders[folder]?.removeValue(forKey: name) else { return nil }
        count -= 1
        if folders[folder]?.isEmpty == true { folders[folder] = nil }
        return item
    }

    /// Forgets every item under the folder `path` (in it, or in folders in it); returns them.
    mutating func removeAll(under path: String) -> [NSMetadataItem] {
        let prefix = path + "/"
        let gone = folders.keys.filter { $0 == path || $0.hasPrefix(prefix) }
        var items: [NSMetadataItem] = []
        for folder in gone {
            if let names = folders.removeValue(forKey: folder) { items += names.values }
        }
        count -= items.count
        return items
    }

    /// Forgets the items under the folder `path` for whose folder and name `remove` is true;
    /// returns them.
    mutating func removeAll(under path: String, where remove: (_ folder: String, _ name: String) -> Bool) -> [NSMetadataItem] {
        let prefix = path + "/"
        var items: [NSMetadataItem] = []
        for folder in folders.keys.filter({ $0 == path || $0.hasPrefix(prefix) }) {
            let names = folders[folder, default: [:]].keys.filter { remove(folder, $0) }
            for name in names {
                if let item = folders[folder]?.removeValue(forKey: name) { items.append(item) }
            }
            if folders[folder]?.isEmpty == true { folders[folder] = nil }
        }
        count -= items.count
        return items
    }
}

/// An item's folder and name, as a set's element.
struct FolderAndName: Hashable {
    let folder: String
    let name: String
}
