import Foundation
import UbiquityProtocol

// What the server pushed: whether pushes reach this device, how far they said the container
// went, and the pages of changes they brought (taken as fetches).
extension ContainerSync {
    /// Whether the server's pushes now reach this device (a push connection is up): while they
    /// do, rounds started by local changes do not fetch the page of changes; when they start
    /// again, the next round catches up.
    package func notePushes(live: Bool) {
        pushesLive = live
        if live { fetchDue = true }
    }

    /// A push said the container changed, up to `sequence` (nil: it did not say how far).
    package func noteRemoteChange(upTo sequence: Int64?) {
        if let sequence { heardOf = max(heardOf, sequence) } else { fetchDue = true }
    }

    /// A push brought the page of changes after `since`: the next fetch from `since` takes it
    /// instead of asking. Pages that follow one another while the device is busy are joined
    /// (a folder of many small files comes as many pushed pages: without joining, each newer
    /// page replaced the one the cursor could take, and the device fetched every page's
    /// bytes a second time); one from elsewhere is kept only while nothing usable is.
    package func notePushedPage(_ page: ChangesResponse, since: Int64) {
        let cursor = state.persisted.cursor
        guard page.sequence > cursor else { return }
        if let kept = pushedPage, !kept.page.more, since == kept.page.sequence, kept.page.items.count + page.items.count <= Self.joinedPageItems {
            let newer = Set(page.items.map(\.id))
            pushedPage = (kept.since, ChangesResponse(sequence: page.sequence, items: kept.page.items.filter { !newer.contains($0.id) } + page.items, more: page.more,
                                                            signedCommits: page.signedCommits))
        } else if since == cursor || pushedPage?.since != cursor {
            pushedPage = (since, page)
        } // else: the kept page still starts at the cursor; this one is fetched when its turn comes
    }

    /// At most this many items in pushed pages joined (each page brings at most
    /// ``PushEvent/maximumPageItems`` items and ``PushEvent/maximumPageContentBytes`` of contents:
    /// a few MiB at most are held).
    static let joinedPageItems = 4_096
}
