import Foundation
import UbiquityFiles

/// A general-purpose recorder of operations for undo and redo, with Apple's `UndoManager` API.
///
/// Register the inverse of each change with ``registerUndo(withTarget:handler:)``; ``undo()``
/// runs the most recent group of registrations in reverse order, and whatever they register
/// while undoing becomes the redo group.
///
/// ## Events on Linux
/// With ``groupsByEvent`` (the default), the first registration outside any group opens a
/// group that closes at the end of the current *main-actor turn*: the undo manager enqueues the
/// closing on the main actor, so it runs as soon as the code that registered returns to the
/// main actor's executor or suspends at an `await`. Everything registered in one turn — one
/// user event, in a UI — is undone together. For groups that span `await`s, or when you want an
/// explicit boundary, call ``beginUndoGrouping()`` and ``endUndoGrouping()`` yourself.
@MainActor
open class UndoManager {
    /// One registered operation.
    struct Action {
        weak var target: AnyObject?
        let run: @MainActor (AnyObject) -> Void
    }

    /// An entry in a group: an operation or a nested group.
    enum Entry {
        case action(Action)
        case group(Group)
    }

    /// A group of operations undone together.
    final class Group {
        var entries: [Entry] = []
        var actionName = ""
        var isDiscardable = false
        var isEmpty: Bool { entries.isEmpty }

        func removeActions(withTarget target: AnyObject) {
            entries.removeAll { entry in
                switch entry {
                case .action(let action): return action.target === target
                case .group(let group):
                    group.removeActions(withTarget: target)
                    return group.isEmpty
                }
            }
        }
    }

    var undoStack: [Group] = []
    var redoStack: [Group] = []
    /// Open groups, outermost first.
    var openGroups: [Group] = []
    var disableCount = 0
    var eventGroupGeneration = 0
    var eventGroupIsOpen = false
    /// Whether the most recently closed top-level group held no operations.
    package var lastClosedGroupWasEmpty = true

    /// Whether an undo is in progress.
    public private(set) var isUndoing = false
    /// Whether a redo is in progress.
    public private(set) var isRedoing = false

    /// Whether registration opens a group that closes at the end of the main-actor turn.
    /// Default `true`.
    open var groupsByEvent = true

    /// The most undo groups kept; 0 (the default) keeps all. Older groups are dropped first.
    open var levelsOfUndo = 0 {
        didSet { trim() }
    }

    /// Where notifications are posted.
    public let notificationCenter: NotificationCenter

    /// Creates an undo manager.
    /// - Parameter notificationCenter: Where to post its notifications.
    public init(notificationCenter: NotificationCenter = .default) {
        self.notificationCenter = notificationCenter
    }

    // MARK: Registering

    /// Registers a closure that undoes a change to `target`.
    ///
    /// The undo manager keeps a weak reference to `target`; an operation whose target is gone
    /// is skipped. Registration while undoing records a redo operation; otherwise it clears the
    /// redo stack.
    /// - Parameters:
    ///   - target: The object the operation changes.
    ///   - handler: The operation, given `target`.
    open func registerUndo<TargetType: AnyObject>(withTarget target: TargetType, handler: @escaping @MainActor (TargetType) -> Void) {
        guard isUndoRegistrationEnabled else { return }
        if openGroups.isEmpty {
            precondition(groupsByEvent, "UndoManager: begin a group before registering undo when groupsByEvent is false")
            openEventGroup()
        }
        if !isUndoing && !isRedoing { redoStack.removeAll() }
        let action = Action(target: target) { object in
            if let typed = object as? TargetType { handler(typed) }
        }
        openGroups[openGroups.count - 1].entries.append(.action(action))
    }

    /// Marks the current group's operations as discardable (or not): they may be dropped when
    /// the document is saved, as with actions that change only transient state.
    /// - Parameter discardable: Whether they are discardable.
    open func setActionIsDiscardable(_ discardable: Bool) {
        (openGroups.last ?? (isUndoing ? redoStack.last : undoStack.last))?.isDiscardable = discardable
    }

    /// Whether the next undo group is discardable.
    open var undoActionIsDiscardable: Bool { undoStack.last?.isDiscardable ?? false }
    /// Whether the next redo group is discardable.
    open var redoActionIsDiscardable: Bool { redoStack.last?.isDiscardable ?? false }

    // MARK: Registration switches

    /// Stops recording; calls nest (each needs a matching ``enableUndoRegistration()``).
    open func disableUndoRegistration() { disableCount += 1 }

    /// Resumes recording after ``disableUndoRegistration()``.
    open func enableUndoRegistration() {
        precondition(disableCount > 0, "UndoManager: enableUndoRegistration() without a matching disableUndoRegistration()")
        disableCount -= 1
    }

    /// Whether registrations are recorded.
    open var isUndoRegistrationEnabled: Bool { disableCount == 0 }

    // MARK: Grouping

    /// How many groups are open.
    open var groupingLevel: Int { openGroups.count }

    /// Opens a group (nested inside any open group). Posts the checkpoint and
    /// did-open-group notifications.
    open func beginUndoGrouping() {
        post(.NSUndoManagerCheckpoint)
        openGroups.append(Group())
        post(.NSUndoManagerDidOpenUndoGroup)
    }

    /// Closes the innermost open group. A closed nested group becomes an entry of its parent;
    /// a closed top-level group goes on the undo (or, while undoing, the redo) stack unless empty.
    open func endUndoGrouping() {
        precondition(!openGroups.isEmpty, "UndoManager: endUndoGrouping() without beginUndoGrouping()")
        post(.NSUndoManagerCheckpoint)
        let group = openGroups[openGroups.count - 1]
        post(.NSUndoManagerWillCloseUndoGroup, discardable: group.isDiscardable)
        openGroups.removeLast()
        if openGroups.isEmpty { eventGroupIsOpen = false }
        if let parent = openGroups.last {
            if !group.isEmpty { parent.entries.append(.group(group)) }
        } else {
            lastClosedGroupWasEmpty = group.isEmpty
            if !group.isEmpty {
                if isUndoing { redoStack.append(group) } else { undoStack.append(group) }
                trim()
            }
        }
        post(.NSUndoManagerDidCloseUndoGroup, discardable: group.isDiscardable)
    }

    func openEventGroup() {
        beginUndoGrouping()
        eventGroupIsOpen = true
        eventGroupGeneration += 1
        let generation = eventGroupGeneration
        Task { @MainActor [weak self] in self?.eventEnded(generation) }
    }

    /// Ends the current event now: closes the group that registration opened automatically.
    /// Documents call this before saving, so a change made in the same turn is counted.
    package func endEventGroupIfOpen() {
        if eventGroupIsOpen && openGroups.count == 1 { endUndoGrouping() }
    }

    func eventEnded(_ generation: Int) {
        guard eventGroupIsOpen, generation == eventGroupGeneration, openGroups.count == 1 else { return }
        endUndoGrouping()
    }

    func trim() {
        guard levelsOfUndo > 0 else { return }
        if undoStack.count > levelsOfUndo { undoStack.removeFirst(undoStack.count - levelsOfUndo) }
        if redoStack.count > levelsOfUndo { redoStack.removeFirst(redoStack.count - levelsOfUndo) }
    }

    // MARK: Undo and redo

    /// Whether there is something to undo (an open group with operations counts).
    open var canUndo: Bool { !undoStack.isEmpty || openGroups.contains { !$0.isEmpty } }
    /// Whether there is something to redo.
    open var canRedo: Bool { !redoStack.isEmpty }
    /// How many groups can be undone.
    open var undoCount: Int { undoStack.count }
    /// How many groups can be redone.
    open var redoCount: Int { redoStack.count }

    /// Closes the top-level group if one is open, then undoes the most recent group.
    open func undo() {
        precondition(openGroups.count <= 1, "UndoManager: undo() with nested groups open; close them first")
        if openGroups.count == 1 { endUndoGrouping() }
        undoNestedGroup()
    }

    /// Undoes the most recent group without closing an open group first, recording its inverse
    /// as one redo group.
    open func undoNestedGroup() {
        guard !openGroups.contains(where: { !$0.isEmpty }) else {
            preconditionFailure("UndoManager: undoNestedGroup() while the open group has operations; close it first")
        }
        guard let group = undoStack.popLast() else { return }
        post(.NSUndoManagerCheckpoint)
        post(.NSUndoManagerWillUndoChange)
        isUndoing = true
        run(group, recordingInto: .redo)
        isUndoing = false
        post(.NSUndoManagerDidUndoChange)
    }

    /// Redoes the most recently undone group, recording its inverse as one undo group.
    open func redo() {
        precondition(openGroups.allSatisfy(\.isEmpty), "UndoManager: redo() while a group with operations is open")
        guard let group = redoStack.popLast() else { return }
        post(.NSUndoManagerCheckpoint)
        post(.NSUndoManagerWillRedoChange)
        isRedoing = true
        run(group, recordingInto: .undo)
        isRedoing = false
        post(.NSUndoManagerDidRedoChange)
    }

    enum Destination { case undo, redo }

    /// Runs a group's operations in reverse inside a fresh group that lands on `destination`.
    func run(_ group: Group, recordingInto destination: Destination) {
        let outer = openGroups
        openGroups = [Group()]
        openGroups[0].actionName = group.actionName
        openGroups[0].isDiscardable = group.isDiscardable
        perform(group)
        let inverse = openGroups[0]
        openGroups = outer
        if !inverse.isEmpty {
            switch destination {
            case .undo: undoStack.append(inverse)
            case .redo: redoStack.append(inverse)
            }
            trim()
        }
    }

    func perform(_ group: Group) {
        for entry in group.entries.reversed() {
            switch entry {
            case .action(let action):
                if let target = action.target { action.run(target) }
            case .group(let nested):
                perform(nested)
            }
        }
    }

    // MARK: Clearing

    /// Removes every undo and redo operation.
    open func removeAllActions() {
        undoStack.removeAll()
        redoStack.removeAll()
        openGroups.forEach { $0.entries.removeAll() }
    }

    /// Removes every operation whose target is `target`; groups left empty are dropped.
    /// - Parameter target: The object whose operations to remove.
    open func removeAllActions(withTarget target: Any) {
        let object = target as AnyObject
        for group in undoStack + redoStack + openGroups { group.removeActions(withTarget: object) }
        undoStack.removeAll(where: \.isEmpty)
        redoStack.removeAll(where: \.isEmpty)
    }

    // MARK: Action names

    /// Names the current group's action (e.g. "Typing"), shown in menu titles.
    /// - Parameter actionName: The name.
    open func setActionName(_ actionName: String) {
        (openGroups.first ?? (isUndoing ? redoStack.last : undoStack.last))?.actionName = actionName
    }

    /// The name of the action ``undo()`` would undo, or "".
    open var undoActionName: String { (openGroups.first(where: { !$0.isEmpty }) ?? undoStack.last)?.actionName ?? "" }
    /// The name of the action ``redo()`` would redo, or "".
    open var redoActionName: String { redoStack.last?.actionName ?? "" }

    /// "Undo NAME", or "Undo" when the action has no name.
    open var undoMenuItemTitle: String { undoMenuTitle(forUndoActionName: undoActionName) }
    /// "Redo NAME", or "Redo" when the action has no name.
    open var redoMenuItemTitle: String { redoMenuTitle(forUndoActionName: redoActionName) }

    /// The undo menu title for an action name.
    /// - Parameter actionName: An action name, possibly empty.
    open func undoMenuTitle(forUndoActionName actionName: String) -> String {
        actionName.isEmpty ? "Undo" : "Undo \(actionName)"
    }

    /// The redo menu title for an action name.
    /// - Parameter actionName: An action name, possibly empty.
    open func redoMenuTitle(forUndoActionName actionName: String) -> String {
        actionName.isEmpty ? "Redo" : "Redo \(actionName)"
    }

    // MARK: Notifications

    /// Those told of each notification at the moment it is posted, before its observers, by
    /// who listens: documents counting their changes, which must see the manager's state as it
    /// is then. A listener that answers false (its owner is gone) is dropped.
    var listeners: [ObjectIdentifier: @MainActor (Notification.Name) -> Bool] = [:]

    /// Tells `hear` of each notification this manager posts, at the moment it posts it, until
    /// `owner` stops listening or `hear` answers false.
    /// - Parameters:
    ///   - owner: Who listens (one listener an owner).
    ///   - hear: Called with each notification's name; answers whether to go on listening.
    package func listen(as owner: ObjectIdentifier, _ hear: @escaping @MainActor (Notification.Name) -> Bool) {
        listeners[owner] = hear
    }

    /// Stops telling `owner` (see ``listen(as:_:)``).
    /// - Parameter owner: Who listened.
    package func stopListening(as owner: ObjectIdentifier) {
        listeners[owner] = nil
    }

    func post(_ name: Notification.Name, discardable: Bool? = nil) {
        for (owner, hear) in listeners where !hear(name) { listeners[owner] = nil }
        let info: [AnyHashable: Any]? = discardable.map { [UndoManager.groupIsDiscardableUserInfoKey: $0] }
        MainQueue.post(Notification(name: name, object: self, userInfo: info), to: notificationCenter)
    }
}
