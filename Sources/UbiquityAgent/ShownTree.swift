import UbiquityClient
import UbiquityProtocol
import UbiquitySync

/// Where each item a device shows is, relative to the container's folder, kept in step with
/// ``DeviceSyncState`` item by item: an item whose shown state changed is placed again, and so
/// is everything under a folder whose path changed; nothing else is looked at. (The agent's
/// rounds, its status and the lookups by path all read it instead of walking every item.)
///
/// An item is in its folder, at the top of `Documents` (no parent) or at the container's top
/// level (``ContainerLayout/topLevel``). An item whose folder is not shown (deleted, not a
/// folder, not known yet, or in a cycle of folders) is at the top of `Documents`: an item moved
/// into a folder deleted elsewhere at the same time is kept, not lost.
struct ShownTree {
    /// Where a shown item is, and the parent it names ("" for none).
    private struct Placement {
        var path: String
        var parent: String
    }

    /// Item → placement, for every item shown (not deleted). (An entry per item: dense tables,
    /// see ``CompactDictionary``.)
    private var placements = CompactDictionary<String, Placement>()
    /// Path → item.
    private var items = CompactDictionary<String, String>()
    /// Items shown, by the parent they name (shown or not: when it appears, they move under it).
    private var children: [String: Set<String>] = [:]

    /// How many items are shown.
    var count: Int { placements.count }

    /// Where `item` is shown, if it is.
    func path(of item: String) -> String? { placements[item]?.path }

    /// The item shown at `path`, if any.
    func item(at path: String) -> String? { items[path] }

    /// Every item shown with its path, by path.
    var byPath: [(item: String, path: String)] {
        placements.map { ($0.key, $0.value.path) }.sorted { $0.path < $1.path }
    }

    /// Places `changed` again from `state`, and everything under those whose path changed.
    /// Returns every item whose path changed (appeared, moved or went). `onDisk` tells where an
    /// item's file is: a path equal to it is kept as that string, not a copy.
    @discardableResult
    mutating func update(_ changed: some Sequence<String>, from state: DeviceSyncState, onDisk: (String) -> String? = { _ in nil }) -> Set<String> {
        var moved = Set<String>()
        var pending = Array(changed)
        while let item = pending.popLast() {
            let shown = state.visible(item).flatMap { $0.deleted ? nil : $0 }
            let old = placements[item]
            var placement: Placement?
            if let shown, var path = Self.path(of: item, in: state) {
                if let existing = onDisk(item), existing == path { path = existing }
                placement = Placement(path: path, parent: shown.parent ?? "")
            }
            if old?.parent != placement?.parent {
                if let parent = old?.parent {
                    children[parent]?.remove(item)
                    if children[parent]?.isEmpty == true { children[parent] = nil }
                }
                if let parent = placement?.parent { children[parent, default: []].insert(item) }
            }
            placements[item] = placement
            guard old?.path != placement?.path else { continue }
            if let path = old?.path, items[path] == item { items[path] = nil }
            if let path = placement?.path { items[path] = item }
            moved.insert(item)
            pending.append(contentsOf: children[item] ?? []) // what is in a folder moves with it
        }
        return moved
    }

    /// The path of a shown item, walking up its folders (at most 256).
    static func path(of item: String, in state: DeviceSyncState) -> String? {
        guard var current = state.visible(item), !current.deleted else { return nil }
        var components = [current.name], seen: Set<String> = [item]
        while true {
            if current.parent == ContainerLayout.topLevel { break }
            guard let parent = current.parent, seen.count < 256, seen.insert(parent).inserted,
                  let folder = state.visible(parent), !folder.deleted, folder.kind == .directory else {
                components.append(ContainerLayout.documentsFolder)
                break
            }
            components.append(folder.name)
            current = folder
        }
        return components.reversed().joined(separator: "/")
    }
}

/// The placeholders in a container's folder (path → what it says), found by path, by item and
/// by folder, so that a round touches only those of the items and folders it looks at.
struct Placeholders {
    private(set) var byPath: [String: UbiquityPlaceholder] = [:]
    private var byItem: [String: Set<String>] = [:]
    private var byFolder: [String: Set<String>] = [:]

    /// The placeholders `found` (by path).
    init(_ found: [String: UbiquityPlaceholder] = [:]) {
        for (path, placeholder) in found { self[path] = placeholder }
    }

    /// The placeholder at `path`.
    subscript(path: String) -> UbiquityPlaceholder? {
        get { byPath[path] }
        set {
            if let old = byPath[path] {
                byItem[old.item]?.remove(path)
                if byItem[old.item]?.isEmpty == true { byItem[old.item] = nil }
            }
            let folder = LocalContents.folder(of: path)
            if let newValue {
                byItem[newValue.item, default: []].insert(path)
                byFolder[folder, default: []].insert(path)
            } else {
                byFolder[folder]?.remove(path)
                if byFolder[folder]?.isEmpty == true { byFolder[folder] = nil }
            }
            byPath[path] = newValue
        }
    }

    /// The paths of `item`'s placeholders.
    func paths(ofItem item: String) -> Set<String> { byItem[item] ?? [] }

    /// The paths of the placeholders in `folder`.
    func paths(inFolder folder: String) -> Set<String> { byFolder[folder] ?? [] }
}
