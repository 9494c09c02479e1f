import Foundation
import UbiquityProtocol
import UbiquitySync

// A container's contents as the agent handles them: cut from disk (and what was cut
// remembered for the upload), forgotten when no longer of use; where an item goes, and how
// much of a file a page of changes brings.
extension ContainerSync {
    /// Cuts the contents of the file or package at `path` into chunks (remembered for the
    /// upload) and returns their token; nil if it vanished meanwhile (a temporary renamed
    /// away: the next scan sees what it became) or waits for the keys of the sealed share it
    /// is in (``waitsForShareKeys(at:)``).
    func cut(_ path: String, kind: ItemKind, scanner: LocalScanner) throws -> ContentToken? {
        guard kind != .directory else { return LocalContents.folderToken }
        if waitsForShareKeys(at: path) {
            errors[path] = Self.waitingForShareKeys // (looked at again once they come)
            return nil
        }
        if errors[path] == Self.waitingForShareKeys { errors[path] = nil }
        let members: [LocalMember]
        do {
            // A flat file's chunks before this change, when still known, guide its cut.
            let previous = kind == .file ? files[path].flatMap { localContents[$0.content] }.flatMap { $0.count == 1 && $0[0].path.isEmpty ? $0[0].chunks : nil } : nil
            members = try LocalContents.cut(root.appendingPathComponent(path), kind: kind, scanner: scanner, relative: path, codec: codec(at: path), previous: previous)
        } catch where scanner.fingerprint(of: path)?.kind != kind {
            return nil
        }
        let content = LocalContents.token(LocalContents.manifest(members, kind: kind), kind: kind)
        localContents[content] = members
        if ownedShareRoot(at: path) != nil { sharesCut.insert(content) } // (cut by a share's codec)
        return content
    }

    /// Forgets the chunk lists of one chunk, which cost more to keep than to cut again (a file
    /// of at most the standard ``ContentChunker/maximumSize`` bytes; kept through the round that cut them),
    /// and those nothing refers to any more (local files, the server's current contents,
    /// changes not acknowledged yet) — once they have grown by half since the last time, so
    /// that a round's cost follows what changed, not how many items there are. What stays is
    /// what a small edit of a large file needs: the chunk list it is a difference from.
    func forgetUnusedContents() {
        localContents = localContents.filter { $0.value.count > 1 || ($0.value.first?.chunks.count ?? 0) > 1 }
        guard localContents.count > contentsKept + max(256, contentsKept / 2) else { return }
        defer { contentsKept = localContents.count }
        var used = Set(files.byPath.values.map(\.content))
        for remote in state.persisted.remote.values { used.insert(remote.content) }
        for change in state.persisted.sending.values { used.insert(change.content) }
        for change in state.persisted.queued.values { used.insert(change.content) }
        localContents = localContents.filter { used.contains($0.key) }
    }

    /// The parent an item in `folder` (relative to the container's folder) has on the server:
    /// nil for the top of `Documents`, ``ContainerLayout/topLevel`` for the container's top
    /// level, else the folder's item; `.none` when the folder is not recorded (yet).
    func parent(ofFolder folder: String) -> String?? {
        if folder.isEmpty { return .some(ContainerLayout.topLevel) }
        if folder == ContainerLayout.documentsFolder { return .some(nil) }
        guard let record = files[folder], record.fingerprint.kind == .directory else { return .none }
        return .some(record.item)
    }

    /// How large a file a page of changes should bring inline: on a greedy device (which
    /// downloads everything anyway) as large as the protocol allows; elsewhere none, since
    /// items are listed first and downloaded when asked (metadata first).
    var inlineLimit: Int { greedy && !codec.sealed ? ItemUpdate.maximumInlineBytes : 0 }
}
