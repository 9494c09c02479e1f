import Foundation
import Testing
import UbiquityDocument

@MainActor
final class Counter {
    var value = 0
    let undoManager: UndoManager
    init(_ undoManager: UndoManager) { self.undoManager = undoManager }
    func add(_ n: Int) {
        value += n
        undoManager.registerUndo(withTarget: self) { $0.add(-n) }
    }
}

@MainActor
@Suite struct UndoManagerTests {
    func manual() -> UndoManager {
        let manager = UndoManager(notificationCenter: NotificationCenter())
        manager.groupsByEvent = false
        return manager
    }

    @Test func undoAndRedoGroups() {
        let manager = manual()
        let counter = Counter(manager)
        manager.beginUndoGrouping(); counter.add(1); counter.add(2); manager.endUndoGrouping()
        manager.beginUndoGrouping(); counter.add(10); manager.endUndoGrouping()
        #expect(counter.value == 13 && manager.undoCount == 2 && manager.canUndo && !manager.canRedo)
        manager.undo()
        #expect(counter.value == 3 && manager.canRedo && manager.redoCount == 1)
        manager.undo()
        #expect(counter.value == 0 && !manager.canUndo)
        manager.redo()
        #expect(counter.value == 3)
        manager.redo()
        #expect(counter.value == 13 && !manager.canRedo && manager.undoCount == 2)
        // A new change clears the redo stack.
        manager.undo()
        manager.beginUndoGrouping(); counter.add(100); manager.endUndoGrouping()
        #expect(!manager.canRedo && counter.value == 103)
    }

    @Test func nestedGroupsUndoTogetherAndUndoNestedGroup() {
        let manager = manual()
        let counter = Counter(manager)
        manager.beginUndoGrouping()
        counter.add(1)
        manager.beginUndoGrouping(); counter.add(2); manager.endUndoGrouping()
        #expect(manager.groupingLevel == 1)
        manager.endUndoGrouping()
        #expect(manager.groupingLevel == 0 && manager.undoCount == 1)
        manager.undoNestedGroup()
        #expect(counter.value == 0)
    }

    @Test func isUndoingDuringHandlersAndActionNames() {
        let manager = manual()
        final class Probe { var sawUndoing = false }
        let probe = Probe()
        manager.beginUndoGrouping()
        manager.registerUndo(withTarget: probe) { [manager] p in p.sawUndoing = manager.isUndoing }
        manager.setActionName("Paint")
        manager.endUndoGrouping()
        #expect(manager.undoActionName == "Paint" && manager.undoMenuItemTitle == "Undo Paint")
        #expect(manager.redoMenuItemTitle == "Redo")
        manager.undo()
        #expect(probe.sawUndoing && !manager.isUndoing)
        #expect(manager.undoMenuTitle(forUndoActionName: "") == "Undo")
        #expect(manager.redoMenuTitle(forUndoActionName: "Move") == "Redo Move")
    }

    @Test func levelsOfUndoDropsOldest() {
        let manager = manual()
        let counter = Counter(manager)
        manager.levelsOfUndo = 2
        for n in [1, 2, 3] { manager.beginUndoGrouping(); counter.add(n); manager.endUndoGrouping() }
        #expect(manager.undoCount == 2)
        manager.undo(); manager.undo(); manager.undo()
        #expect(counter.value == 1)
    }

    @Test func removeAllActionsWithTargetAndDisabling() {
        let manager = manual()
        let a = Counter(manager), b = Counter(manager)
        manager.beginUndoGrouping(); a.add(1); manager.endUndoGrouping()
        manager.beginUndoGrouping(); b.add(1); a.add(5); manager.endUndoGrouping()
        manager.removeAllActions(withTarget: a)
        #expect(manager.undoCount == 1)
        manager.undo()
        #expect(b.value == 0 && a.value == 6)
        manager.disableUndoRegistration()
        #expect(!manager.isUndoRegistrationEnabled)
        manager.beginUndoGrouping(); a.add(1); manager.endUndoGrouping()
        manager.enableUndoRegistration()
        #expect(manager.undoCount == 0 && manager.isUndoRegistrationEnabled)
        manager.beginUndoGrouping(); a.add(1); manager.endUndoGrouping()
        manager.removeAllActions()
        #expect(!manager.canUndo && !manager.canRedo)
    }

    @Test func notificationsInOrderWithDiscardableKey() {
        let center = NotificationCenter()
        let manager = UndoManager(notificationCenter: center)
        manager.groupsByEvent = false
        final class Log: @unchecked Sendable { var names: [String] = []; var discardable: [Bool] = [] }
        let log = Log()
        let names: [Notification.Name] = [.NSUndoManagerCheckpoint, .NSUndoManagerDidOpenUndoGroup, .NSUndoManagerWillCloseUndoGroup,
                                          .NSUndoManagerDidCloseUndoGroup, .NSUndoManagerWillUndoChange, .NSUndoManagerDidUndoChange,
                                          .NSUndoManagerWillRedoChange, .NSUndoManagerDidRedoChange]
        let tokens = names.map { name in
            center.addObserver(forName: name, object: manager, queue: nil) { note in
                log.names.append(note.name.rawValue.replacingOccurrences(of: "NSUndoManager", with: "").replacingOccurrences(of: "Notification", with: ""))
                if let flag = note.userInfo?[UndoManager.groupIsDiscardableUserInfoKey] as? Bool { log.discardable.append(flag) }
            }
        }
        defer { tokens.forEach(center.removeObserver) }
        let counter = Counter(manager)
        manager.beginUndoGrouping(); counter.add(1); manager.setActionIsDiscardable(true); manager.endUndoGrouping()
        #expect(manager.undoActionIsDiscardable)
        manager.undo()
        manager.redo()
        #expect(log.names == ["Checkpoint", "DidOpenUndoGroup", "Checkpoint", "WillCloseUndoGroup", "DidCloseUndoGroup",
                              "Checkpoint", "WillUndoChange", "DidUndoChange", "Checkpoint", "WillRedoChange", "DidRedoChange"])
        #expect(log.discardable == [true, true])
    }

    @Test func groupsByEventClosesAtTheEndOfTheTurn() async {
        let manager = UndoManager(notificationCenter: NotificationCenter())
        let counter = Counter(manager)
        counter.add(1)
        counter.add(2)
        #expect(manager.groupingLevel == 1)
        await Task.yield()
        #expect(manager.groupingLevel == 0 && manager.undoCount == 1)
        counter.add(3)
        // undo() closes the open event group first, then undoes it.
        manager.undo()
        #expect(counter.value == 3 && manager.undoCount == 1)
        manager.undo()
        #expect(counter.value == 0)
    }

    @Test func targetsAreNotRetained() {
        let manager = manual()
        var counter: Counter? = Counter(manager)
        weak let weakCounter = counter
        manager.beginUndoGrouping(); counter!.add(1); manager.endUndoGrouping()
        counter = nil
        #expect(weakCounter == nil)
        manager.undo() // the operation's target is gone: skipped, no crash
    }
}
