import Foundation

/// An opaque token for ``Document/changeCountToken(for:)``: the content state at that moment.
public struct DocumentChangeToken: Hashable, Sendable {
    let state: Int
}

extension Document {
    var hasUnsavedChangesDefault: Bool { changes.isDirty }

    func recordChange(_ change: ChangeKind) {
        guard MainQueueMarker.isCurrent else { return onMain { [self] in updateChangeCount(change) } }
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
    /// count as changes.
    func attach(_ manager: UndoManager?) {
        for observer in undoObservers { NotificationCenter.default.removeObserver(observer) }
        undoObservers = []
        storedUndoManager = manager
        guard let manager else { return }
        let center = MainActor.assumeIsolated { manager.notificationCenter }
        let kinds: [(Notification.Name, ChangeKind)] = [
            (.NSUndoManagerDidCloseUndoGroup, .done),
            (.NSUndoManagerDidUndoChange, .undone),
            (.NSUndoManagerDidRedoChange, .redone),
        ]
        let document = WeakHandoff(self)
        undoObservers = kinds.map { name, kind in
            center.addObserver(forName: name, object: manager, queue: nil) { _ in
                let counts = MainActor.assumeIsolated { () -> Bool in
                    guard kind == .done else { return true }
                    return manager.groupingLevel == 0 && !manager.lastClosedGroupWasEmpty && !manager.isUndoing && !manager.isRedoing
                }
                if counts { document.value?.updateChangeCount(kind) }
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
            DispatchQueue.main.async { document.value?.autosaveTimerFired() }
        }
    }

    func autosaveTimerFired() {
        autosaveTask = nil
        guard hasUnsavedChanges, !documentState.contains(.closed) else { return }
        autosave(completionHandler: mainQueueHandler { document, _ in document.scheduleAutosaveIfNeeded() })
    }
}
