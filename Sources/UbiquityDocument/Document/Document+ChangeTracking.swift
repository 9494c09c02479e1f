import Foundation

/// An opaque token for ``Document/changeCountToken(for:)``: the content state at that moment.
public struct DocumentChangeToken: Hashable, Sendable {
    let state: Int
}

extension Document {
    var hasUnsavedChangesDefault: Bool { changes.isDirty }

    func recordChange(_ change: ChangeKind) {
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
        storedUndoManager?.removeAllActions()
        autosaveTask?.cancel()
        autosaveTask = nil
    }

    // MARK: Undo

    var undoManagerDefault: UndoManager! {
        get {
            if let storedUndoManager { return storedUndoManager }
            let manager = UndoManager()
            attach(manager)
            return manager
        }
        set {
            attach(newValue)
        }
    }

    func attach(_ manager: UndoManager?) {
        for observer in undoObservers { NotificationCenter.default.removeObserver(observer) }
        undoObservers = []
        storedUndoManager = manager
        guard let manager else { return }
        let center = manager.notificationCenter
        let kinds: [(Notification.Name, ChangeKind)] = [
            (.NSUndoManagerDidCloseUndoGroup, .done),
            (.NSUndoManagerDidUndoChange, .undone),
            (.NSUndoManagerDidRedoChange, .redone),
        ]
        undoObservers = kinds.map { name, kind in
            center.addObserver(forName: name, object: manager, queue: nil) { [weak self] _ in
                MainActor.assumeIsolated { self?.undoManager(manager, didRecord: kind) }
            }
        }
    }

    func undoManager(_ manager: UndoManager, didRecord kind: ChangeKind) {
        if kind == .done {
            guard manager.groupingLevel == 0, !manager.lastClosedGroupWasEmpty, !manager.isUndoing, !manager.isRedoing else { return }
        }
        updateChangeCount(kind)
    }

    // MARK: Autosave

    func scheduleAutosaveIfNeeded() {
        guard hasUnsavedChanges, !documentState.contains(.closed), autosaveTask == nil else { return }
        let clock = autosaveClock
        let interval = autosaveInterval
        autosaveTask = Task { [weak self] in
            do { try await clock.sleep(for: interval) } catch { return }
            self?.autosaveTimerFired()
        }
    }

    func autosaveTimerFired() {
        autosaveTask = nil
        guard hasUnsavedChanges, !documentState.contains(.closed) else { return }
        autosave { [weak self] _ in onMainQueue { self?.scheduleAutosaveIfNeeded() } }
    }
}
