import Foundation
import Logging

/// What one coordinated access touches, in a form that can cross to another process.
struct AccessDescription: Codable, Sendable {
    struct Item: Codable, Sendable {
        /// The canonical path (what presenters are matched against).
        var path: String
        /// The URL the accessor was given, as a path.
        var url: String
        /// The reading or writing options' raw value.
        var options: UInt
    }
    var reading: [Item]
    var writing: [Item]
}

/// A coordinated access as this process's presenters live through it: asked to save and
/// relinquish before, told what changed and given their items back after.
final class PresenterSession: @unchecked Sendable {
    // Used by one access at a time (the coordinating thread, or one channel connection).
    private var reacquirers: [(any NSFilePresenter, @Sendable () -> Void)] = []
    private let description: AccessDescription
    private let excluded: (any NSFilePresenter)?
    private let timeout: Duration
    private let logger: Logger
    /// Holds back the watcher's notices of changes this access's writes make.
    private let watcherToken: UInt64?
    /// Why presenters refused the access (an eviction they do not accommodate), if any did.
    private(set) var refusals: [String] = []

    /// Asks this process's presenters of the described items to save and relinquish them.
    /// Accesses to version stores concern no presenter (the watcher reports version changes).
    init(_ description: AccessDescription, excluding excluded: (any NSFilePresenter)?, timeout: Duration, logger: Logger) {
        var description = description
        description.reading.removeAll { VersionStore.isInsideStore($0.path) }
        description.writing.removeAll { VersionStore.isInsideStore($0.path) }
        self.description = description
        self.excluded = excluded
        self.timeout = timeout
        self.logger = logger
        watcherToken = PresenterWatcher.shared.beginWrite(description.writing.map(\.path))
        let registry = PresenterRegistry.shared
        for item in description.reading {
            let options = NSFileCoordinator.ReadingOptions(rawValue: item.options)
            for (presenter, relation, _) in registry.presenters(relatedTo: item.path, excluding: excluded) where relation != .ancestor {
                nonisolated(unsafe) let presenter = presenter // (presenters are not Sendable, as Apple's are not: each is called on its own queue)
                if !options.contains(.withoutChanges) && !options.contains(.immediatelyAvailableMetadataOnly) { save(presenter) }
                relinquish(presenter, toWriter: false)
            }
        }
        for item in description.writing {
            let options = NSFileCoordinator.WritingOptions(rawValue: item.options)
            if options.contains(.contentIndependentMetadataOnly) { continue }
            let url = URL(fileURLWithPath: item.url)
            for (presenter, relation, _) in registry.presenters(relatedTo: item.path, excluding: excluded) {
                nonisolated(unsafe) let presenter = presenter // (presenters are not Sendable, as Apple's are not: each is called on its own queue)
                if options.contains(.forEvicting) {
                    guard relation != .ancestor else { continue } // the folder stays; nothing of it is evicted
                    let answer = askPresenter(presenter, "accommodate eviction", timeout: timeout, logger: logger) { (reply: @escaping @Sendable (String?) -> Void) in
                        presenter.accommodatePresentedItemEviction { error in reply(error.map { "\($0)" }) }
                    }
                    // No answer in time is a refusal too: nothing is evicted from under a presenter that did not agree.
                    switch answer {
                    case .some(let refusal): if let refusal { refusals.append(refusal) }
                    case .none: refusals.append("the presenter of \(presenter.presentedItemURL?.path ?? item.path) did not answer in time")
                    }
                } else if options.contains(.forDeleting) {
                    _ = askPresenter(presenter, relation == .ancestor ? "accommodate subitem deletion" : "accommodate deletion", timeout: timeout, logger: logger) { (reply: @escaping @Sendable (Bool) -> Void) in
                        if relation == .ancestor {
                            presenter.accommodatePresentedSubitemDeletion(at: url) { _ in reply(true) }
                        } else {
                            presenter.accommodatePresentedItemDeletion { _ in reply(true) }
                        }
                    }
                } else if relation != .ancestor {
                    if !options.contains(.forReplacing) { save(presenter) }
                    relinquish(presenter, toWriter: true)
                }
            }
        }
    }

    /// Tells presenters what changed (written items not deleted, moved or metadata-only; moved
    /// paths are excluded) and gives them their items back.
    func finish(moved: Set<String>, changed: Bool) {
        let registry = PresenterRegistry.shared
        for item in description.writing where changed {
            let options = NSFileCoordinator.WritingOptions(rawValue: item.options)
            guard options.isDisjoint(with: [.forDeleting, .forEvicting, .forMoving, .contentIndependentMetadataOnly]), !moved.contains(item.path) else { continue }
            let url = URL(fileURLWithPath: item.url)
            for (presenter, relation, _) in registry.presenters(relatedTo: item.path, excluding: excluded) {
                nonisolated(unsafe) let presenter = presenter // (presenters are not Sendable, as Apple's are not: each is called on its own queue)
                let queue = presenter.presentedItemOperationQueue
                switch relation {
                case .item, .descendant: queue.addOperation { presenter.presentedItemDidChange() }
                case .ancestor: queue.addOperation { presenter.presentedSubitemDidChange(at: url) }
                }
            }
        }
        if let watcherToken { PresenterWatcher.shared.finishWrite(watcherToken, changed: changed) }
        for (presenter, reacquire) in reacquirers { presenter.presentedItemOperationQueue.addOperation(reacquire) }
        reacquirers = []
    }

    /// Tells this process's presenters of the item at `path` (canonical) that observe some of
    /// `attributes` that those changed.
    static func deliverUbiquityAttributes(_ attributes: Set<URLResourceKey>, of path: String) {
        for (presenter, relation, _) in PresenterRegistry.shared.presenters(relatedTo: path, excluding: nil) where relation == .item {
            nonisolated(unsafe) let presenter = presenter // (presenters are not Sendable, as Apple's are not: each is called on its own queue)
            let observed = presenter.observedPresentedItemUbiquityAttributes.intersection(attributes)
            guard !observed.isEmpty else { continue }
            presenter.presentedItemOperationQueue.addOperation { presenter.presentedItemDidChangeUbiquityAttributes(observed) }
        }
    }

    /// Tells this process's presenters that `oldPath` moved to `newURL`.
    static func deliverMove(from oldPath: String, oldURL: URL, to newURL: URL, excluding excluded: (any NSFilePresenter)?) {
        for (presenter, relation, presented) in PresenterRegistry.shared.presenters(relatedTo: oldPath, excluding: excluded) {
            nonisolated(unsafe) let presenter = presenter // (presenters are not Sendable, as Apple's are not: each is called on its own queue)
            let queue = presenter.presentedItemOperationQueue
            switch relation {
            case .item:
                PresenterWatcher.shared.noteMove(from: presented, to: FileCoordinationLocks.canonicalPath(newURL))
                queue.addOperation { presenter.presentedItemDidMove(to: newURL) }
            case .descendant:
                let moved = newURL.appendingPathComponent(String(presented.dropFirst(oldPath.count + 1)))
                PresenterWatcher.shared.noteMove(from: presented, to: FileCoordinationLocks.canonicalPath(moved))
                queue.addOperation { presenter.presentedItemDidMove(to: moved) }
            case .ancestor:
                queue.addOperation { presenter.presentedSubitem(at: oldURL, didMoveTo: newURL) }
            }
        }
    }

    private func save(_ presenter: any NSFilePresenter) {
        nonisolated(unsafe) let presenter = presenter // (presenters are not Sendable, as Apple's are not: each is called on its own queue)
        let error = askPresenter(presenter, "save changes", timeout: timeout, logger: logger) { (reply: @escaping @Sendable (String?) -> Void) in
            presenter.savePresentedItemChanges { error in reply(error.map { "\($0)" }) }
        }
        if let error, let message = error {
            logger.warning("file presenter could not save before another access", metadata: ["item": "\(presenter.presentedItemURL?.path ?? "-")", "error": "\(message)"])
        }
    }

    private func relinquish(_ presenter: any NSFilePresenter, toWriter: Bool) {
        nonisolated(unsafe) let presenter = presenter // (presenters are not Sendable, as Apple's are not: each is called on its own queue)
        typealias Reacquirer = (@Sendable () -> Void)?
        let answer = askPresenter(presenter, toWriter ? "relinquish to writer" : "relinquish to reader", timeout: timeout, logger: logger) { (reply: @escaping @Sendable (Reacquirer) -> Void) in
            if toWriter {
                presenter.relinquishPresentedItem(toWriter: { reply($0) })
            } else {
                presenter.relinquishPresentedItem(toReader: { reply($0) })
            }
        }
        if let answer, let reacquire = answer { reacquirers.append((presenter, reacquire)) }
    }
}
