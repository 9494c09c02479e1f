import Foundation
import UbiquityCoordination

/// A document presents its file: its own reads and writes are coordinated, and coordinated
/// accesses by others — in this process or another — reach it as the reference describes.
/// - A reader makes a dirty document save first, so the reader sees the latest content.
/// - A writer makes the document disable editing until the write is over; if the file
///   changed, the document then reverts to it.
/// - A coordinated move makes ``fileURL`` follow the file; a coordinated deletion closes the
///   document.
/// Callbacks arrive on a private queue and are handled on the main actor.
extension Document: NSFilePresenter {
    /// The document's file, as a presenter sees it.
    public nonisolated var presentedItemURL: URL? { presented.withLock { $0 } }

    /// A private serial queue; the document handles each callback on the main actor.
    public nonisolated var presentedItemOperationQueue: OperationQueue { presenterQueue }

    /// Saves unsaved changes before another process reads the file.
    /// - Parameter completionHandler: Called with nil, or the error if the save failed.
    public nonisolated func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        Task { @MainActor in
            guard hasUnsavedChanges, !documentState.contains(.closed) else { return completionHandler(nil) }
            autosave { [fileURL] success in
                completionHandler(success ? nil : DocumentError(.saveFailed, "could not save before another access", url: fileURL))
            }
        }
    }

    /// Lets another process read; nothing to do while it reads.
    /// - Parameter reader: Called at once.
    public nonisolated func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        reader(nil)
    }

    /// Disables editing while another process writes the file; reverts afterwards if it changed.
    /// - Parameter writer: Called once editing is disabled, with the block that re-enables it.
    public nonisolated func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        Task { @MainActor in
            relinquishCount += 1
            if relinquishCount == 1 { setEditingDisabled(true) }
            writer { Task { @MainActor in self.reacquire() } }
        }
    }

    /// Notes that the file changed (a coordinated write, or a change seen without coordination):
    /// reverts now, or when the current writer is done.
    public nonisolated func presentedItemDidChange() {
        Task { @MainActor in
            if relinquishCount > 0 { revertWhenReacquired = true } else { revertToChangedFile() }
        }
    }

    /// A package document's member changed: the document reverts, as for any change.
    /// - Parameter url: The member.
    public nonisolated func presentedSubitemDidChange(at url: URL) { presentedItemDidChange() }

    /// A package document gained a member: the document reverts, as for any change.
    /// - Parameter url: The new member.
    public nonisolated func presentedSubitemDidAppear(at url: URL) { presentedItemDidChange() }

    /// A package document's member was renamed: the document reverts, as for any change.
    /// - Parameters:
    ///   - oldURL: Where the member was.
    ///   - newURL: Where it is now.
    public nonisolated func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) { presentedItemDidChange() }

    /// Follows the file to its new place.
    /// - Parameter newURL: Where the file is now.
    public nonisolated func presentedItemDidMove(to newURL: URL) {
        Task { @MainActor in
            fileURL = newURL.standardizedFileURL
            refreshConflictState()
        }
    }

    /// Closes the document (without saving) because its file is being deleted.
    /// - Parameter completionHandler: Called with nil once the document is closed.
    public nonisolated func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        Task { @MainActor in
            logger.notice("the document's file is being deleted; closing it", metadata: ["document": "\(fileURL.path)"])
            autosaveTask?.cancel()
            autosaveTask = nil
            stopPresenting()
            setState(.closed)
            completionHandler(nil)
        }
    }

    /// A conflict version (or any version) of the file appeared: the document re-checks
    /// whether it is in conflict.
    /// - Parameter version: The new version.
    public nonisolated func presentedItemDidGain(_ version: NSFileVersion) { refreshConflictState() }

    /// A version of the file was removed: the document re-checks whether it is in conflict.
    /// - Parameter version: The removed version.
    public nonisolated func presentedItemDidLose(_ version: NSFileVersion) { refreshConflictState() }

    /// Someone resolved a conflict version: the document re-checks whether it is in conflict.
    /// - Parameter version: The resolved version.
    public nonisolated func presentedItemDidResolveConflict(_ version: NSFileVersion) { refreshConflictState() }

    /// Whether the file has conflict versions nobody has resolved.
    nonisolated static func hasUnresolvedConflicts(_ url: URL) -> Bool {
        !(NSFileVersion.unresolvedConflictVersionsOfItem(at: url) ?? []).isEmpty
    }

    /// Looks at the file's versions (on the document's queue) and sets or clears `.inConflict`.
    nonisolated func refreshConflictState() {
        performAsynchronousFileAccess { [self] in
            let url = presentedItemURL ?? URL(fileURLWithPath: "/")
            let conflicted = Self.hasUnresolvedConflicts(url)
            Task { @MainActor in
                guard !documentState.contains(.closed), fileURL == url.standardizedFileURL || fileURL == url else { return }
                guard documentState.contains(.inConflict) != conflicted else { return }
                updateState(inserting: conflicted ? .inConflict : [], removing: conflicted ? [] : .inConflict)
            }
        }
    }

    func reacquire() {
        relinquishCount = max(0, relinquishCount - 1)
        guard relinquishCount == 0 else { return }
        if revertWhenReacquired {
            revertWhenReacquired = false
            revertToChangedFile()
        } else {
            setEditingDisabled(false)
        }
    }

    func revertToChangedFile() {
        guard !documentState.contains(.closed) else { return }
        guard FileManager.default.fileExists(atPath: fileURL.path) else {
            // Removed by something that did not coordinate: keep what the user sees (saving
            // writes it back) rather than lose it.
            logger.notice("the document's file vanished without a coordinated deletion; keeping the document open", metadata: ["document": "\(fileURL.path)"])
            if documentState.contains(.editingDisabled) { setEditingDisabled(false) }
            return
        }
        revert(toContentsOf: fileURL) { _ in }
    }

    func startPresenting() { NSFileCoordinator.addFilePresenter(self) }
    func stopPresenting() { NSFileCoordinator.removeFilePresenter(self) }

    /// A coordinator for the document's own accesses (which do not disturb the document itself).
    nonisolated var ownCoordinator: NSFileCoordinator { NSFileCoordinator(filePresenter: self) }
}
