import Foundation
import GRDB
import Ubiquity
import UbiquityDatabase

/// The file name of the managed version of the MyStuff document.
package let managedThingsDocumentName = "Things I Own.mystuffdb"

/// The reference book's MyStuff as a managed document (UIManagedDocument): the things in a
/// database in the document's package instead of an archive. In a ubiquity container's
/// `Documents` it syncs through change logs (content name "MyStuff"); each device's edits merge
/// thing by thing and field by field.
package final class ManagedThingsDocument: UIManagedDocument {
    /// A thing: what it is and where it is kept.
    package struct Thing: Equatable, Sendable {
        package var id: String
        package var name: String
        package var location: String
    }

    /// A document at `url`; `inICloud` names its content so that it syncs.
    package init(fileURL url: URL, inICloud: Bool) {
        super.init(fileURL: url)
        if inICloud { persistentStoreOptions = [NSPersistentStoreUbiquitousContentNameKey: "MyStuff"] }
        migrator.registerMigration("v1") { db in
            try db.create(table: "thing") { t in
                t.primaryKey("id", .text)
                t.column("name", .text).notNull()
                t.column("location", .text).notNull().defaults(to: "")
                t.column("created", .double).notNull()
            }
        }
    }

    /// Apple's initializer: a document on this device only.
    override convenience init(fileURL url: URL) {
        self.init(fileURL: url, inICloud: false)
    }

    /// Adds a thing; returns its id.
    @discardableResult
    package func add(name: String, location: String) throws -> String {
        let id = UUID().uuidString
        try writer?.write { db in
            try db.execute(sql: "INSERT INTO thing VALUES (?, ?, ?, ?)", arguments: [id, name, location, Date().timeIntervalSince1970])
        }
        return id
    }

    /// Moves a thing somewhere else.
    package func move(_ id: String, to location: String) throws {
        try writer?.write { db in try db.execute(sql: "UPDATE thing SET location = ? WHERE id = ?", arguments: [location, id]) }
    }

    /// Removes a thing.
    package func remove(_ id: String) throws {
        try writer?.write { db in try db.execute(sql: "DELETE FROM thing WHERE id = ?", arguments: [id]) }
    }

    /// The things, oldest first.
    package func things() throws -> [Thing] {
        try writer?.read { db in
            try Row.fetchAll(db, sql: "SELECT id, name, location FROM thing ORDER BY created, id").map { Thing(id: $0["id"], name: $0["name"], location: $0["location"]) }
        } ?? []
    }
}
