import Foundation
import UbiquityProtocol
import UbiquitySync

// Incoming revisions, the uploading side (docs/SyncProtocol.md, "Incoming revisions"): a large
// file's new contents are announced before their chunks go, so that the account's other
// devices fetch each batch as it lands instead of waiting for the commit.
extension Uploader {
    /// A flat file with at least this many bytes to upload is announced.
    static let announcedBytes = 4 << 20

    /// Announces the large flat files among `changes` — those with at least ``announcedBytes``
    /// their base revision does not have — each with the update its commit will carry (from
    /// `commits`); returns the items announced. Nothing here stops the upload: a server that
    /// does not know announcements, or one that fails to take one, leaves the others to fetch at
    /// the commit, as before.
    func announce(_ changes: [(change: LocalChange, members: [LocalMember])], of commits: [ItemCommit], in sync: isolated ContainerSync) async -> Set<String> {
        guard sync.share == nil, sync.prefetches.streams else { return [] } // (a share's participants get the item at its commit)
        var announced = Set<String>()
        for entry in changes where !entry.change.deleted && entry.members.count == 1 && entry.members[0].path.isEmpty {
            let base = sync.state.persisted.remote[entry.change.item].flatMap { sync.localContents[$0.content] }
            let known = base.map { Set($0.flatMap(\.chunks).map(\.hash)) } ?? []
            let bytes = entry.members[0].chunks.reduce(0) { $0 + (known.contains($1.hash) ? 0 : $1.length) }
            guard bytes >= Self.announcedBytes, let update = commits.first(where: { $0.item == entry.change.item })?.update else { continue }
            do {
                try await sync.client.announceIncoming(container: sync.container, item: entry.change.item, update: update)
                announced.insert(entry.change.item)
            } catch {
                sync.logger.debug("an upload was not announced", metadata: ["container": "\(sync.container)", "item": "\(entry.change.item)", "error": "\(error)"])
            }
        }
        return announced
    }

    /// Withdraws the announcements of `items` (committed, or the round failed: a later round
    /// announces again). A withdrawal that fails lapses on its own within
    /// ``IncomingRevision/lifetime``.
    func withdraw(_ items: Set<String>, in sync: isolated ContainerSync) async {
        for item in items.sorted() { try? await sync.client.withdrawIncoming(container: sync.container, item: item) }
    }
}
