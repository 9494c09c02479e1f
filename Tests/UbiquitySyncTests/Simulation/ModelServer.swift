import Foundation
import UbiquitySync

/// An in-memory server with the real server's rules (``CommitPlacement``, ``NameCollision``,
/// the same revision states and sequences), for the simulation. It is durable: a "restart"
/// only loses messages on the wire.
struct ModelServer {
    struct Revision {
        var id: String
        var item: String
        var name: String
        var content: ContentToken
        var deleted: Bool
        var date: Double
        var device: String
        var state: String // current, replaced, conflict, superseded, resolved
    }

    enum Refusal: Error { case notAVersion }

    private(set) var revisions: [String: Revision] = [:]
    private(set) var current: [String: String] = [:] // item → revision
    private(set) var itemSequence: [String: Int64] = [:]
    private(set) var sequence: Int64 = 0
    /// What each change id became: a repeated change gets the same answer, and is not applied again.
    private var answered: [String: String] = [:]
    /// Contents a user removed by resolving a conflict (their decision, not a loss).
    private(set) var resolvedAway: Set<ContentToken> = []
    private var revisionsMade = 0

    private mutating func newRevision() -> String {
        revisionsMade += 1
        return "r\(revisionsMade)"
    }

    private mutating func bump(_ item: String) {
        sequence += 1
        itemSequence[item] = sequence
    }

    func snapshot(_ item: String) -> ItemSnapshot? {
        guard let id = current[item], let revision = revisions[id] else { return nil }
        let conflicts = revisions.values.filter { $0.item == item && $0.state == "conflict" }
            .sorted { ($0.date, $0.id) < ($1.date, $1.id) }
            .map { ConflictSnapshot(revision: $0.id, content: $0.content) }
        return ItemSnapshot(id: item, revision: id, name: revision.name, content: revision.content, deleted: revision.deleted,
                            sequence: itemSequence[item] ?? 0, conflicts: conflicts)
    }

    mutating func commit(_ change: LocalChange, device: String) -> CommitAnswer {
        if let revision = answered[change.changeId] {
            return CommitAnswer(changeId: change.changeId, revision: revision, item: snapshot(change.item)!)
        }
        let existing = current[change.item].flatMap { revisions[$0] }
        let placement = CommitPlacement(
            current: existing.map { (id: $0.id, date: $0.date, device: $0.device, deleted: $0.deleted) },
            base: change.base, deleted: change.deleted, date: change.date, device: device)
        var name = change.name
        var renameOther: (id: String, name: String)?
        if placement.state == "current" && !change.deleted {
            let siblings = current.compactMap { item, revision -> (id: String, name: String)? in
                guard item != change.item, let revision = revisions[revision], !revision.deleted else { return nil }
                return (item, revision.name)
            }.sorted { $0.id < $1.id }
            (name, renameOther) = NameCollision.settle(name: name, id: change.item, siblings: siblings)
        }
        let id = newRevision()
        revisions[id] = Revision(id: id, item: change.item, name: name, content: change.content, deleted: change.deleted,
                                 date: change.date, device: device, state: placement.state)
        if let demoted = placement.demoted { revisions[demoted.id]?.state = demoted.state }
        if placement.state == "current" { current[change.item] = id }
        bump(change.item)
        if let renameOther { serverRename(renameOther.id, to: renameOther.name) }
        answered[change.changeId] = id
        return CommitAnswer(changeId: change.changeId, revision: id, item: snapshot(change.item)!)
    }

    private mutating func serverRename(_ item: String, to name: String) {
        guard let old = current[item].flatMap({ revisions[$0] }) else { return }
        let id = newRevision()
        var renamed = old
        renamed.id = id
        renamed.name = name
        renamed.device = "server"
        revisions[id] = renamed
        revisions[old.id]?.state = "replaced"
        current[item] = id
        bump(item)
    }

    mutating func resolve(item: String, keep: String, remove: [String]) throws -> ItemSnapshot {
        guard let currentId = current[item] else { throw Refusal.notAVersion }
        let conflicts = Set(revisions.values.filter { $0.item == item && $0.state == "conflict" }.map(\.id))
        guard keep == currentId || conflicts.contains(keep) else { throw Refusal.notAVersion }
        for removed in remove where !conflicts.contains(removed) && removed != currentId { throw Refusal.notAVersion }
        if keep != currentId {
            revisions[currentId]?.state = "conflict"
            revisions[keep]?.state = "current"
        }
        for removed in remove where removed != keep {
            revisions[removed]?.state = "resolved"
            if let content = revisions[removed]?.content { resolvedAway.insert(content) }
        }
        current[item] = keep
        bump(item)
        return snapshot(item)!
    }

    func changes(since: Int64) -> (items: [ItemSnapshot], sequence: Int64) {
        let items = itemSequence.filter { $0.value > since }.sorted { $0.value < $1.value }.compactMap { snapshot($0.key) }
        return (items, sequence)
    }

    /// Every item as the server has it now.
    var items: [String: ItemSnapshot] {
        Dictionary(uniqueKeysWithValues: current.keys.compactMap { snapshot($0) }.map { ($0.id, $0) })
    }
}
