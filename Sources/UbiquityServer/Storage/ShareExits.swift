import Foundation

/// Items that leave a share by a move (docs/Sharing.md, "Where it lives"): the share's changes
/// show each as gone from the sequence of its move on, so every participant's device removes it.
enum ShareExits {
    /// Notes that `item` of `container` moved from folder `old` to folder `new` at `sequence`:
    /// an exit of each share it was inside and is not any more. Nothing is read for a container
    /// no share is in.
    static func note(_ item: String, from old: String?, to new: String?, container: Int64, sequence: Int64, in storage: some RuleStorage) async throws {
        let roots = try await storage.shareRoots(of: container)
        guard !roots.isEmpty else { return }
        for (share, root) in roots where root != item {
            if try await isInside(old, root: root, container: container, storage: storage),
               try await !isInside(new, root: root, container: container, storage: storage) {
                try await storage.recordShareExit(share: share, item: item, sequence: sequence)
            }
        }
    }

    /// Whether folder `folder` is `root` or inside it (looked at most 256 folders up).
    private static func isInside(_ folder: String?, root: String, container: Int64, storage: some RuleStorage) async throws -> Bool {
        var next = folder, depth = 0
        while let current = next, depth < SyncServices.maximumShareDepth {
            if current == root { return true }
            next = try await storage.folder(of: current, in: container)
            depth += 1
        }
        return false
    }
}
