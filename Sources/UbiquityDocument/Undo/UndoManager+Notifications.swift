import Foundation

extension Notification.Name {
    /// Posted when a group opens or closes, and before undo and redo.
    public static let NSUndoManagerCheckpoint = Notification.Name("NSUndoManagerCheckpointNotification")
    /// Posted just before an undo.
    public static let NSUndoManagerWillUndoChange = Notification.Name("NSUndoManagerWillUndoChangeNotification")
    /// Posted just after an undo.
    public static let NSUndoManagerDidUndoChange = Notification.Name("NSUndoManagerDidUndoChangeNotification")
    /// Posted just before a redo.
    public static let NSUndoManagerWillRedoChange = Notification.Name("NSUndoManagerWillRedoChangeNotification")
    /// Posted just after a redo.
    public static let NSUndoManagerDidRedoChange = Notification.Name("NSUndoManagerDidRedoChangeNotification")
    /// Posted after a group opens.
    public static let NSUndoManagerDidOpenUndoGroup = Notification.Name("NSUndoManagerDidOpenUndoGroupNotification")
    /// Posted before a group closes; userInfo holds ``UndoManager/groupIsDiscardableUserInfoKey``.
    public static let NSUndoManagerWillCloseUndoGroup = Notification.Name("NSUndoManagerWillCloseUndoGroupNotification")
    /// Posted after a group closes; userInfo holds ``UndoManager/groupIsDiscardableUserInfoKey``.
    public static let NSUndoManagerDidCloseUndoGroup = Notification.Name("NSUndoManagerDidCloseUndoGroupNotification")
}

/// The userInfo key of the close-group notifications: a `Bool`, whether the group is discardable.
public let NSUndoManagerGroupIsDiscardableKey = "NSUndoManagerGroupIsDiscardableKey"

extension UndoManager {
    /// The userInfo key of the close-group notifications: whether the group is discardable.
    public nonisolated static let groupIsDiscardableUserInfoKey = NSUndoManagerGroupIsDiscardableKey
    /// Same as `Notification.Name.NSUndoManagerCheckpoint`.
    public nonisolated static let checkpointNotification = Notification.Name.NSUndoManagerCheckpoint
    /// Same as `Notification.Name.NSUndoManagerWillUndoChange`.
    public nonisolated static let willUndoChangeNotification = Notification.Name.NSUndoManagerWillUndoChange
    /// Same as `Notification.Name.NSUndoManagerDidUndoChange`.
    public nonisolated static let didUndoChangeNotification = Notification.Name.NSUndoManagerDidUndoChange
    /// Same as `Notification.Name.NSUndoManagerWillRedoChange`.
    public nonisolated static let willRedoChangeNotification = Notification.Name.NSUndoManagerWillRedoChange
    /// Same as `Notification.Name.NSUndoManagerDidRedoChange`.
    public nonisolated static let didRedoChangeNotification = Notification.Name.NSUndoManagerDidRedoChange
    /// Same as `Notification.Name.NSUndoManagerDidOpenUndoGroup`.
    public nonisolated static let didOpenUndoGroupNotification = Notification.Name.NSUndoManagerDidOpenUndoGroup
    /// Same as `Notification.Name.NSUndoManagerWillCloseUndoGroup`.
    public nonisolated static let willCloseUndoGroupNotification = Notification.Name.NSUndoManagerWillCloseUndoGroup
    /// Same as `Notification.Name.NSUndoManagerDidCloseUndoGroup`.
    public nonisolated static let didCloseUndoGroupNotification = Notification.Name.NSUndoManagerDidCloseUndoGroup
}
