import Foundation
import Crypto

/// The one rule every device agrees on when two revisions of an item were made concurrently:
/// the later modification date wins; on equal dates, the greater device id.
package enum ConflictRule {
    /// Whether `a` wins over `b`.
    package static func winner(_ a: (date: Double, device: String), over b: (date: Double, device: String)) -> Bool {
        a.date != b.date ? a.date > b.date : a.device > b.device
    }
}

/// Where a new revision goes, decided the same way by every backend.
package struct CommitPlacement: Sendable {
    /// `current`, `conflict` (kept as a conflict version) or `superseded` (a delete that lost).
    package var state = "current"
    /// The revision that stops being current, and what it becomes (`replaced` or `conflict`).
    package var demoted: (id: String, state: String)?

    /// - Parameters:
    ///   - current: The item's current revision, if the item exists.
    ///   - base: The revision the update was made from.
    ///   - deleted: Whether the update deletes the item.
    ///   - date: The update's modification date; `device`: the device making it.
    package init(current: (id: String, date: Double, device: String, deleted: Bool)?, base: String?, deleted: Bool, date: Double, device: String) {
        guard let current else { return }
        if base == current.id {
            demoted = (current.id, "replaced")
        } else if current.deleted && !deleted {
            demoted = (current.id, "replaced") // an edit concurrent with a delete wins over it
        } else if deleted && !current.deleted {
            state = "superseded" // a delete concurrent with an edit loses
        } else if ConflictRule.winner((date, device), over: (current.date, current.device)) {
            demoted = (current.id, "conflict")
        } else {
            state = "conflict"
        }
    }
}

/// Names that would be the same file on a case-insensitive or normalising file system.
package enum NameCollision {
    /// What two colliding names have in common: NFC, lowercased.
    package static func key(_ name: String) -> String { name.precomposedStringWithCanonicalMapping.lowercased() }

    /// Two live items in one folder whose names differ only by case or normalisation: the one
    /// with the greater id is renamed ("Name 2.ext"), whichever came first. Returns the name
    /// the item `id` gets, and the sibling to rename (and to what) if that is the other one.
    package static func settle(name: String, id: String, siblings: [(id: String, name: String)]) -> (name: String, renameOther: (id: String, name: String)?) {
        let taken = Set(siblings.map { key($0.name) })
        guard let clash = siblings.first(where: { key($0.name) == key(name) }) else { return (name, nil) }
        if id > clash.id { return (freeName(for: name, taken: taken), nil) }
        return (name, (clash.id, freeName(for: clash.name, taken: taken.union([key(name)]))))
    }

    /// The keys settling `name` may look at: its own, then those of `name 2` … `name N+1` (the
    /// free names tried first). A store looks these up with its index instead of reading the
    /// whole folder; only when every one is taken does it read the folder.
    package static func candidateKeys(for name: String, count: Int = 20) -> [String] {
        candidateNames(for: name, count: count).map(key)
    }

    /// `name`, then `name 2` … `name N+1` (" 2" before its extension): the names settling it tries.
    package static func candidateNames(for name: String, count: Int = 20) -> [String] {
        let dot = name.lastIndex(of: ".").flatMap { $0 == name.startIndex ? nil : $0 }
        let stem = dot.map { String(name[..<$0]) } ?? name
        let suffix = dot.map { String(name[$0...]) } ?? ""
        return [name] + (2..<(count + 2)).map { "\(stem) \($0)\(suffix)" }
    }

    /// What a store keeps for an item to find name clashes with its index: the folder (`""` at
    /// the top) and the name's key (`""` for a deleted item, which clashes with nothing).
    package static func indexKeys(name: String, parent: String?, deleted: Bool) -> (parent: String, name: String) {
        (parent ?? "", deleted ? "" : key(name))
    }

    /// `name` with " 2", " 3", … before its extension, the first whose key is not taken.
    package static func freeName(for name: String, taken: Set<String>) -> String {
        freeName(for: name) { taken.contains($0) }
    }

    /// `name` with " 2", " 3", … before its extension, the first whose key `isTaken` refuses.
    package static func freeName(for name: String, isTaken: (String) -> Bool) -> String {
        let dot = name.lastIndex(of: ".").flatMap { $0 == name.startIndex ? nil : $0 }
        let stem = dot.map { String(name[..<$0]) } ?? name
        let suffix = dot.map { String(name[$0...]) } ?? ""
        var number = 2
        while true {
            let candidate = "\(stem) \(number)\(suffix)"
            if !isTaken(key(candidate)), candidate.utf8.count <= 255 { return candidate }
            number += 1
        }
    }
}

/// Live items of one folder by name key — those whose keys a settlement may look at
/// (``NameCollision/candidateKeys(for:count:)``), or the whole folder: a commit settles its name
/// (``NameCollision``) against them.
package struct SiblingNames: Sendable {
    private var byKey: [String: (id: String, name: String)] = [:]
    private var keyById: [String: String] = [:]

    /// The folder's live items.
    package init(_ siblings: [(id: String, name: String)]) {
        for sibling in siblings { insert(sibling.id, name: sibling.name) }
    }

    /// Whether the item is in the folder.
    package func contains(_ id: String) -> Bool { keyById[id] != nil }

    /// The item left the folder (deleted, moved away, or about to be renamed).
    package mutating func remove(_ id: String) {
        guard let key = keyById.removeValue(forKey: id) else { return }
        if byKey[key]?.id == id { byKey[key] = nil }
    }

    /// The item is in the folder under `name`.
    package mutating func insert(_ id: String, name: String) {
        remove(id)
        let key = NameCollision.key(name)
        keyById[id] = key
        if byKey[key] == nil { byKey[key] = (id, name) }
    }

    /// ``NameCollision/settle(name:id:siblings:)`` against these siblings (the item itself,
    /// if listed, is not its own sibling).
    package func settle(name: String, id: String) -> (name: String, renameOther: (id: String, name: String)?) {
        let key = NameCollision.key(name)
        let taken: (String) -> Bool = { candidate in
            guard let holder = byKey[candidate] else { return false }
            return holder.id != id
        }
        guard let clash = byKey[key], clash.id != id else { return (name, nil) }
        if id > clash.id { return (NameCollision.freeName(for: name, isTaken: taken), nil) }
        return (name, (clash.id, NameCollision.freeName(for: clash.name) { $0 == key || taken($0) }))
    }
}

/// The id of a folder a device makes: derived from where it is (its parent's id and its name's
/// key), so that two devices that each make the same folder before hearing of the other name
/// the same item — one folder, with what both put in it — instead of two ("Name" and
/// "Name 2"). (Every device opening a database in iCloud makes the same log folders.)
package enum FolderIdentity {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The id of a folder named `name` in the folder `parent` (nil: the top of `Documents`).
    package static func id(parent: String?, name: String) -> String {
        let digest = Array(SHA256.hash(data: Data("folder\u{0}\(parent ?? "")\u{0}\(NameCollision.key(name))".utf8)))
        // 15 characters of the same alphabet as random ids (90 bits), prefixed so they never meet one.
        return "d" + String(decoding: digest.prefix(15).map { alphabet[Int($0 & 63)] }, as: UTF8.self)
    }

    /// The id of a folder whose name's keyed tag in its folder is `tag` (``ItemRecords/tag(_:parent:)``),
    /// on a device that seals records: the same for every device of the account, and no
    /// dictionary of names finds the name in it.
    package static func id(nameTag tag: String) -> String {
        let digest = Array(SHA256.hash(data: Data("sealed folder\u{0}\(tag)".utf8)))
        return "d" + String(decoding: digest.prefix(15).map { alphabet[Int($0 & 63)] }, as: UTF8.self)
    }
}
