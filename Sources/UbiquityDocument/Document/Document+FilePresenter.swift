import Foundation
import UbiquityCoordination
import UbiquityFiles

/// A document presents its file: its own reads and writes are coordinated, and coordinated
/// accesses by others — in this process or another — reach it as the reference describes.
/// - A reader makes a dirty document save first, so the reader sees the latest content.
/// - A writer makes the document disable editing until the write is over; if the file
///   changed, the document then reverts to it.
/// - A coordinated move makes ``fileURL`` follow the file; a coordinated deletion closes the
///   document.
/// Callbacks arrive on a private queue and are handled on the main queue. The presenter
/// methods themselves are members of ``Document`` (in its declaration, so that a subclass can
/// override them, calling `super`, as on Apple's platforms).
extension Document: NSFilePresenter {}

extension Document {
    /// Whether the file has conflict versions nobody has resolved.
    nonisolated static func hasUnresolvedConflicts(_ url: URL) -> Bool {
        !(NSFileVersion.unresolvedConflictVersionsOfItem(at: url) ?? []).isEmpty
    }

    /// Looks at the file's versions (on the document's queue) and sets or clears `.inConflict`.
    nonisolated func refreshConflictState() {
        onFileAccessQueue { [self] in
            let url = presentedItemURL ?? URL(fileURLWithPath: "/")
            let conflicted = Self.hasUnresolvedConflicts(url)
            onMain { [self] in
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
        // As Apple advises presenters: a flat file still as the document last read or wrote it
        // has not changed (a notice of attributes, or of the document's own save); reverting
        // would only throw away unsaved edits. (A package's members can change under an
        // unchanged folder: a package always reverts.)
        if let known = fileStatus, known.kind == .regular,
           let now = try? POSIX.status(fileURL.path), now.sameContents(as: known) { // unreadable: reverted, the read says why
            logger.debug("told the file changed, but it is as the document last read or wrote it", metadata: ["document": "\(fileURL.path)"])
            if documentState.contains(.editingDisabled) { setEditingDisabled(false) } // (a revert would have enabled it)
            return
        }
        revert(toContentsOf: fileURL) { _ in }
    }

    func startPresenting() { NSFileCoordinator.addFilePresenter(self) }
    func stopPresenting() { NSFileCoordinator.removeFilePresenter(self) }

    /// A coordinator for the document's own accesses (which do not disturb the document itself).
    nonisolated var ownCoordinator: NSFileCoordinator { NSFileCoordinator(filePresenter: self) }
}
