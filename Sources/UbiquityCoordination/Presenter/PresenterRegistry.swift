import Foundation
import UbiquityFiles
import Logging
import Synchronization

/// The process's registered file presenters (``NSFileCoordinator/addFilePresenter(_:)``), and
/// the rules for asking them things with a bounded wait.
final class PresenterRegistry: Sendable {
    static let shared = PresenterRegistry()

    /// A registered presenter, not retained. (Presenters are not `Sendable`, as Apple's are
    /// not: each is asked things on its own queue, so the registry only keeps and hands them out.)
    private struct Entry: @unchecked Sendable {
        weak var presenter: (any NSFilePresenter)?
        /// The watcher's mark from which on it hears changes nobody coordinated (what happened
        /// before it was added is not news to it, as on Apple's systems).
        var hearsFrom: UInt64
    }

    private let entries = Mutex<[ObjectIdentifier: Entry]>([:])

    func add(_ presenter: any NSFilePresenter) {
        let id = ObjectIdentifier(presenter)
        // Deaf to uncoordinated changes until the watcher has marked the moment it was added.
        entries.withLock { $0[id] = Entry(presenter: presenter, hearsFrom: .max) }
        PresenterChannel.shared.startServerIfNeeded()
        let mark = PresenterWatcher.shared.presentersChanged(marking: true)
        entries.withLock { entries in
            if entries[id]?.presenter === presenter { entries[id]?.hearsFrom = mark }
        }
    }

    func remove(_ presenter: any NSFilePresenter) {
        let id = ObjectIdentifier(presenter)
        _ = entries.withLock { $0.removeValue(forKey: id) }
        PresenterWatcher.shared.presentersChanged()
    }

    var all: [any NSFilePresenter] { live(heardAt: nil) }

    /// The presenters still alive (the others forgotten); with `mark`, only those that hear
    /// uncoordinated changes the watcher read at that mark.
    private func live(heardAt mark: UInt64?) -> [any NSFilePresenter] {
        entries.withLock { entries in
            entries = entries.filter { $0.value.presenter != nil }
            return entries.values.compactMap { entry in mark.map { entry.hearsFrom <= $0 } ?? true ? entry.presenter : nil }
        }
    }

    /// How a presenter relates to an accessed path.
    enum Relation {
        /// It presents the item itself.
        case item
        /// It presents something inside the item (which is a directory).
        case descendant
        /// It presents a directory that contains the item.
        case ancestor
    }

    /// Presenters related to `path`, excluding `excluded`; with `heardAt`, only those added
    /// before that mark of the watcher (``PresenterWatcher``: an uncoordinated change it read then).
    func presenters(relatedTo path: String, excluding excluded: (any NSFilePresenter)?, heardAt mark: UInt64? = nil) -> [(any NSFilePresenter, Relation, String)] {
        live(heardAt: mark).compactMap { presenter in
            guard presenter !== excluded, let url = presenter.presentedItemURL else { return nil }
            let presented = FileCoordinationLocks.canonicalPath(url)
            if presented == path { return (presenter, .item, presented) }
            if presented.hasPrefix(path == "/" ? "/" : path + "/") { return (presenter, .descendant, presented) }
            if path.hasPrefix(presented == "/" ? "/" : presented + "/") { return (presenter, .ancestor, presented) }
            return nil
        }
    }
}

/// Asks a presenter something on its queue and waits, at most `timeout`, for the answer.
/// Runs the question inline when the caller is already on the presenter's queue (waiting there
/// would deadlock). Returns nil (and logs) when the presenter does not answer in time.
func askPresenter<Answer: Sendable>(
    _ presenter: any NSFilePresenter,
    _ question: String,
    timeout: Duration,
    logger: Logger,
    _ ask: @escaping @Sendable (@escaping @Sendable (Answer) -> Void) -> Void
) -> Answer? {
    let answer = Mutex<Answer?>(nil)
    let answered = DispatchSemaphore(value: 0)
    let reply: @Sendable (Answer) -> Void = { value in
        let first = answer.withLock { stored -> Bool in
            guard stored == nil else { return false }
            stored = value
            return true
        }
        if first { answered.signal() }
    }
    let queue = presenter.presentedItemOperationQueue
    if OperationQueue.current === queue {
        ask(reply)
    } else {
        queue.addOperation { ask(reply) }
    }
    if answered.wait(timeout: .now() + timeout.inSeconds) == .timedOut {
        logger.warning("file presenter did not answer in time; proceeding without it", metadata: [
            "question": "\(question)", "presenter": "\(type(of: presenter))",
            "item": "\(presenter.presentedItemURL?.path ?? "-")", "timeout": "\(timeout)",
        ])
        return nil
    }
    return answer.withLock { $0 }
}
