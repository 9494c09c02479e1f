import Foundation
import UbiquityProtocol
import UbiquitySync

// Sealed item records on the way up (docs/Encryption.md, "Sealed item records"): an update's
// record sealed at the client's edge, and a sealed name the server refused as clashing renamed
// here.
extension Uploader {
    /// The update as it goes to the server: with its record sealed (``ItemRecords``) when this
    /// device seals, else as it is.
    func wire(_ update: ItemUpdate, of item: String, members: [LocalMember], in sync: isolated ContainerSync) throws -> ItemUpdate {
        try sync.sealedRecord(update, of: item, manifest: LocalContents.manifest(members, kind: update.kind))
    }

    /// A sealed name the server refused because it clashes with another item's in its folder
    /// (names differing only by case or composition; the server sees tags and cannot rename
    /// either, as it does plaintext names): the file here is renamed as the server would have
    /// renamed it — " 2", " 3", … before its extension, the first free in the folder here and on
    /// the server — and sent again under that name. A file already under another name here
    /// than the one refused — moved aside since the change was made, when a download of the
    /// item holding the name took its place (found by `ubiquity-chaos`: the change kept the
    /// refused name and was refused for good) — is sent under the name it has, if that is free.
    /// False when it cannot be (not a sealing device, a deletion, the file gone or its new place
    /// taken): the change waits, saying why. It waits too, unrenamed, while the item holding the
    /// name on the server is one this device moves away or deletes, and the server has not
    /// taken that yet: the name is free once it has (renamed at once, a file moved out of its
    /// folder and back while its agent was killed twice came back as "Name 2.ext" beside the
    /// next file of its name — found by `ubiquity-chaos --sealed-share`, seed 56).
    func renameClashing(_ change: LocalChange, in sync: isolated ContainerSync) async throws -> Bool {
        guard sync.codec.records?.seals == true, !change.deleted, let file = sync.files.file(of: change.item),
              let current = file.path.split(separator: "/").last.map(String.init) else { return false }
        let asked = NameCollision.key(change.name)
        let remote = sync.state.persisted.remote
        if let leaving = remote.keys.first(where: { id in
            guard id != change.item, let held = remote[id], !held.deleted, held.parent == change.parent, NameCollision.key(held.name) == asked else { return false }
            return sync.state.visible(id).map { $0.deleted || $0.parent != change.parent || NameCollision.key($0.name) != asked } == true
        }) {
            // (Its status says the server's refusal until then.)
            sync.logger.debug("a change waits for its name to be freed by this device's own change", metadata: ["container": "\(sync.container)", "item": "\(change.item)", "holder": "\(leaving)"])
            return false
        }
        let folder = LocalContents.folder(of: file.path)
        // (Moved to another folder since: its own change says so.)
        guard case .some(let parent) = sync.parent(ofFolder: folder), parent == change.parent else { return false }
        // The names other items hold here: the server's and this device's, and the files here.
        var taken = Set<String>()
        for (id, item) in sync.state.visibleItems where id != change.item && item.parent == change.parent && !item.deleted {
            taken.insert(NameCollision.key(item.name))
        }
        let here = folder.isEmpty ? sync.root : sync.root.appendingPathComponent(folder)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: here.path)) ?? [] where name != current {
            taken.insert(NameCollision.key(name))
        }
        let free: String
        if current != change.name, !taken.contains(NameCollision.key(current)) {
            free = current // (where it is already)
        } else {
            free = NameCollision.freeName(for: current) { taken.contains($0) || $0 == NameCollision.key(current) }
            let path = folder.isEmpty ? free : folder + "/" + free
            guard try await sync.materialiser.relocate(file, to: path, in: sync), sync.files.file(of: change.item)?.path == path else { return false }
        }
        sync.state.abandoned(change)
        sync.state.save(item: change.item, name: free, parent: change.parent, kind: change.kind ?? .file, content: file.content, date: change.date)
        sync.errors[change.item] = nil
        sync.logger.notice("an item whose name clashes with another's in its folder was renamed", metadata: ["container": "\(sync.container)", "item": "\(change.item)"])
        return true
    }
}
