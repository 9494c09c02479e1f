import Foundation
import UbiquityFiles

/// Telling presenters what the watcher gathered: `presentedItemDidChange`,
/// `presentedItemDidMove(to:)` and the `presentedSubitem…` forms, to the presenters added before
/// the change was read.
extension PresenterWatcher {
    /// Delivers every gathered change that is due (quiet, or waited for long enough).
    func deliverDue() {
        let now = ContinuousClock.now
        let due: [(String, Change)] = state.withLock { state in
            let ready = state.pending.filter { now >= $0.value.due }
            for path in ready.keys { state.pending[path] = nil }
            return ready.sorted { $0.key < $1.key }
        }
        for (path, change) in due { deliver(path, change) }
    }

    /// Tells the presenters related to `path` what happened to it (a vanished presented item is
    /// given ``settle`` to come back first).
    private func deliver(_ path: String, _ change: Change) {
        let exists = (try? POSIX.status(path)) != nil // cannot be read: not called gone
        let presenters = PresenterRegistry.shared.presenters(relatedTo: path, excluding: nil, heardAt: change.mark)
        if !exists, change.notBefore == nil, presenters.contains(where: { $0.1 != .ancestor }) {
            // A presented item vanished: give it a moment to come back before calling it gone.
            var waiting = change
            waiting.notBefore = change.first + Self.settle
            state.withLock { $0.pending[path, default: waiting].merge(waiting) }
            return
        }
        let url = URL(fileURLWithPath: path)
        for (presenter, relation, presented) in presenters {
            nonisolated(unsafe) let presenter = presenter // (presenters are not Sendable, as Apple's are not: each is called on its own queue)
            let queue = presenter.presentedItemOperationQueue
            switch relation {
            case .item:
                if !exists, let target = change.movedTo {
                    noteMove(from: presented, to: target)
                    queue.addOperation { presenter.presentedItemDidMove(to: URL(fileURLWithPath: target)) }
                } else {
                    queue.addOperation { presenter.presentedItemDidChange() }
                }
            case .descendant:
                // Something above the presented item was renamed.
                guard !exists, let target = change.movedTo else { continue }
                let moved = URL(fileURLWithPath: target + String(presented.dropFirst(path.count)))
                noteMove(from: presented, to: moved.path)
                queue.addOperation { presenter.presentedItemDidMove(to: moved) }
            case .ancestor:
                if exists {
                    if change.created {
                        queue.addOperation { presenter.presentedSubitemDidAppear(at: url) }
                    } else {
                        queue.addOperation { presenter.presentedSubitemDidChange(at: url) }
                    }
                } else if let target = change.movedTo {
                    queue.addOperation { presenter.presentedSubitem(at: url, didMoveTo: URL(fileURLWithPath: target)) }
                } else if !change.created {
                    // Deleted (something that appeared and vanished again within the window is not news).
                    queue.addOperation { presenter.presentedSubitemDidChange(at: url) }
                }
            }
        }
    }
}
