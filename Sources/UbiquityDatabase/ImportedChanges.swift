import Foundation

/// What an import changed in the app's tables: rows inserted, updated (with the columns that
/// took new values) and deleted, by table and primary key, and the devices the changes came
/// from. A row appears under one kind only: what it went through overall in that import.
public struct ImportedChanges: Equatable, Sendable {
    /// Rows that appeared.
    public var inserted: Set<RowKey> = []
    /// Rows that stayed, with the columns that took new values.
    public var updated: [RowKey: Set<String>] = [:]
    /// Rows that went away.
    public var deleted: Set<RowKey> = []
    /// The devices whose changes these are.
    public var devices: Set<String> = []

    /// No changes.
    public init() {}

    /// Whether nothing changed.
    public var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty }

    /// Every row changed in `table`, whatever the kind.
    public func rows(in table: String) -> Set<RowKey> {
        inserted.filter { $0.table == table }
            .union(updated.keys.filter { $0.table == table })
            .union(deleted.filter { $0.table == table })
    }

    /// Adds one applied change, folding it into what the row went through before.
    /// - Parameters:
    ///   - change: The change.
    ///   - allColumns: The table's value columns (a row deleted and inserted again in one
    ///     import is reported as updated in all of them).
    mutating func add(_ change: AppliedChange, allColumns: [String]) {
        let key = RowKey(table: change.table, primaryKey: change.primaryKey)
        devices.insert(change.device)
        switch change.kind {
        case .inserted:
            if deleted.remove(key) != nil {
                updated[key, default: []].formUnion(allColumns)
            } else {
                inserted.insert(key)
            }
        case .updated(let columns):
            if !inserted.contains(key) { updated[key, default: []].formUnion(columns) }
        case .deleted:
            updated[key] = nil
            if inserted.remove(key) == nil { deleted.insert(key) }
        }
    }
}

/// The notification posted after a database imported other devices' changes, once the import
/// transaction committed. Its `object` is the ``UbiquitousDatabase``; its user info holds the
/// rows under ``NSInsertedObjectsKey``, ``NSUpdatedObjectsKey`` and ``NSDeletedObjectsKey``
/// (sets of ``RowKey``), and the whole ``ImportedChanges`` under
/// ``UbiquitousDatabase/importedChangesKey``.
extension NSNotification.Name {
    /// Posted after records are imported from the ubiquitous content store.
    public static let NSPersistentStoreDidImportUbiquitousContentChanges = NSNotification.Name("NSPersistentStoreDidImportUbiquitousContentChangesNotification")
}

/// The user-info key of the rows an import inserted (a `Set<RowKey>`).
public let NSInsertedObjectsKey = "inserted"
/// The user-info key of the rows an import updated (a `Set<RowKey>`).
public let NSUpdatedObjectsKey = "updated"
/// The user-info key of the rows an import deleted (a `Set<RowKey>`).
public let NSDeletedObjectsKey = "deleted"

/// Two rows that collide on a unique index after an import (the reference's "duplicate
/// records": two devices that each created the default "Inbox"). Every device keeps the same
/// one — the row inserted first, by its insert's hybrid-clock stamp (then device id) — and
/// removes the other, as its own change. The app's hook sees both rows before the removal, inside
/// the import transaction: move what refers to `removed` over to `kept` there (those writes sync).
public struct DuplicateRows: Hashable, Sendable {
    /// The table.
    public var table: String
    /// The row kept.
    public var kept: RowKey
    /// The row removed (it may not be in the table: another device's row that lost arrives
    /// already removed).
    public var removed: RowKey
}

extension NSNotification.Name {
    /// Posted before a database's store closes because the account changed or its content was
    /// deleted; its user info's ``NSPersistentStoreUbiquitousTransitionTypeKey`` says which.
    /// Stop using the database's writer then.
    public static let NSPersistentStoreCoordinatorStoresWillChange = NSNotification.Name("NSPersistentStoreCoordinatorStoresWillChangeNotification")
    /// Posted after that store closed: open the database again for the account now signed in
    /// (its container is another folder), or not at all when nobody is.
    public static let NSPersistentStoreCoordinatorStoresDidChange = NSNotification.Name("NSPersistentStoreCoordinatorStoresDidChangeNotification")
}

/// The user-info key of a store change's ``NSPersistentStoreUbiquitousTransitionType`` (an
/// `NSNumber` of its raw value).
public let NSPersistentStoreUbiquitousTransitionTypeKey = "NSPersistentStoreUbiquitousTransitionTypeKey"

/// Why a database's store changed.
public enum NSPersistentStoreUbiquitousTransitionType: UInt, Sendable {
    /// Another account signed in (the store was the previous account's).
    case accountAdded = 1
    /// The account signed out.
    case accountRemoved = 2
    /// The database's content was deleted (every device removes its store).
    case contentRemoved = 3
    /// The first import finished.
    case initialImportCompleted = 4
}
