import Foundation
import UbiquityProtocol
import UbiquitySync

// A small edit's chunk-list difference, pushed along with its change (docs/SyncProtocol.md,
// "Pushed pages"): a device whose copy is the revision the difference starts from rebuilds the
// new list from its own and goes straight to the chunks, one round trip sooner.
extension Materialiser {
    /// Keeps the chunk-list differences of a pushed page's files (plaintext records only: a
    /// sealed record's list is checked against the record, which comes with the whole state),
    /// until the round that lists them is over.
    func keepPushedDeltas(_ items: [ItemState]) {
        for item in items where item.kind == .file && !item.deleted && item.record == nil && item.manifestDelta != nil && item.deltaBase != nil && item.digest != nil {
            pushedDeltas[item.id] = item
        }
    }

    /// The pushed state of `download`'s item with its chunk-list difference, if it names the
    /// contents wanted and starts from the revision the local copy is.
    func pushedDelta(for download: Download) -> ItemState? {
        guard download.kind == .file, let state = pushedDeltas[download.item], let digest = state.digest, ContentToken(digest) == download.content,
              let previous = download.previous, state.deltaBase == previous.revision else { return nil }
        return state
    }
}
