import Foundation
import UbiquityFiles

/// An opaque token for ``Document/changeCountToken(for:)``: the content state at that moment.
public struct DocumentChangeToken: Hashable, Sendable {
    let state: Int
}

extension Document {
    var hasUnsavedChangesDefault: Bool { changes.isDirty }

    func recordChange(_ change: ChangeKind) {
        guard MainQueue.isCurrent else { return onMain { [self] in updateChangeCount(change) } }
        changes.record(change)
        scheduleAutosaveIfNeeded()
    }

    func currentChangeToken(for saveOperation: SaveOperation) -> Any {
        DocumentChangeToken(state: changes.current)
    }

    func markSaved(withToken changeCountToken: Any, for saveOperation: SaveOperation) {
        guard let token = changeCountToken as? DocumentChangeToken else { return }
        changes.markSaved(token.state)
        scheduleAutosaveIfNeeded()
    }

    func resetChangeTracking() {
        changes = ChangeTracker()
        if let manager = storedUndoManager { MainActor.assumeIsolated { manager.removeAllActions() } }
        autosaveTask?.cancel()
        autosaveTask = nil
    }

    // MARK: Undo

    /// The undo manager (a main-actor object, as Apple's), made on the main queue on first use.
    var undoManagerDefault: UndoManager! {
        get {
            if let storedUndoManager { return storedUndoManager }
            return try? onMainAndWait { () -> UndoManager in // cannot throw: the body does not
                if let storedUndoManager { return storedUndoManager }
                let manager = MainActor.assumeIsolated { UndoManager() }
                attach(manager)
                return manager
            }
        }
        set {
            _ = try? onMainAndWait { attach(newValue) } // cannot throw: the body does not
        }
    }

    /// Closes the undo group of the current event, if one is open (before a save's snapshot).
    func endUndoEventGroup() {
        guard let manager = storedUndoManager else { return }
        MainActor.assumeIsolated { manager.endEventGroupIfOpen() }
    }

    /// Listens to `manager` (on the main queue) so that its registrations, undos and redos
    /// count as changes — told by the manager as it posts, not through the notification center,
    /// so the count never lags behind the manager (a post from main-queue work may be delivered
    /// at the main queue's next turn: see `MainQueue.post`).
    func attach(_ manager: UndoManager?) {
        let id = ObjectIdentifier(self)
        if let previous = storedUndoManager, previous !== manager {
            MainActor.assumeIsolated { previous.stopListening(as: id) }
        }
        storedUndoManager = manager
        guard let manager else { return }
        let document = WeakHandoff(self)
        MainActor.assumeIsolated {
            manager.listen(as: id) { name in
                guard let listening = document.value else { return false }
                let kind: ChangeKind
                switch name {
                case .NSUndoManagerDidCloseUndoGroup:
                    guard manager.groupingLevel == 0 && !manager.lastClosedGroupWasEmpty && !manager.isUndoing && !manager.isRedoing else { return true }
                    kind = .done
                case .NSUndoManagerDidUndoChange: kind = .undone
                case .NSUndoManagerDidRedoChange: kind = .redone
                default: return true
                }
                listening.updateChangeCount(kind)
                return true
            }
        }
    }

    // MARK: Autosave

    func scheduleAutosaveIfNeeded() {
        guard hasUnsavedChanges, !documentState.contains(.closed), autosaveTask == nil else { return }
        let clock = autosaveClock
        let interval = autosaveInterval
        let document = WeakHandoff(self)
        autosaveTask = Task {
            do { try await clock.sleep(for: interval) } catch { return }
            MainQueue.async { document.value?.autosaveTimerFired() }
        }
    }

    func autosaveTimerFired() {
        autosaveTask = nil
        guard hasUnsavedChanges, !documentState.contains(.closed) else { return }
        autosave(completionHandler: mainQueueHandler { document, _ in document.scheduleAutosaveIfNeeded() })
    }
}
