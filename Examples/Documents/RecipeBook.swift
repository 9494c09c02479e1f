import Foundation
import GRDB
import Ubiquity
import UbiquityDatabase

/// A shoebox app's model (the reference's iPhoto kind of app, as a recipe book): one database in
/// the ubiquity container, no documents — every device has all the recipes, each device's
/// additions and edits reach the others, and concurrent edits of different fields of one recipe
/// both stand.
package final class RecipeBook: Sendable {
    /// A recipe as the book lists it.
    package struct Recipe: Equatable, Sendable {
        package var id: String
        package var title: String
        package var minutes: Int?
        package var rating: Int?
        package var ingredients: [String]
    }

    /// The synced database.
    package let database: UbiquitousDatabase

    /// The book's schema: recipes, and their ingredients in order (keys every device agrees on:
    /// a recipe's UUID, and a place in it).
    package static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "recipe") { t in
                t.primaryKey("id", .text)
                t.column("title", .text).notNull()
                t.column("minutes", .integer)
                t.column("rating", .integer)
            }
            try db.create(table: "ingredient") { t in
                t.column("recipe", .text).notNull().references("recipe", onDelete: .cascade)
                t.column("position", .integer).notNull()
                t.column("text", .text).notNull()
                t.primaryKey(["recipe", "position"])
            }
        }
        return migrator
    }

    /// Opens the book in `container` (a ubiquity container's folder).
    package init(container: URL, automaticallySynchronizes: Bool = true, containers: UbiquityContainers = .shared) throws {
        database = try UbiquitousDatabase(container: container, name: "Recipes", migrator: Self.migrator,
                                          automaticallySynchronizes: automaticallySynchronizes, containers: containers)
    }

    /// Adds a recipe; returns its id.
    @discardableResult
    package func add(title: String, minutes: Int? = nil, ingredients: [String] = []) throws -> String {
        let id = UUID().uuidString
        try database.writer.write { db in
            try db.execute(sql: "INSERT INTO recipe(id, title, minutes) VALUES (?, ?, ?)", arguments: [id, title, minutes])
            for (position, text) in ingredients.enumerated() {
                try db.execute(sql: "INSERT INTO ingredient VALUES (?, ?, ?)", arguments: [id, position, text])
            }
        }
        return id
    }

    /// Rates a recipe (1 to 5 stars).
    package func rate(_ id: String, stars: Int) throws {
        try database.writer.write { db in try db.execute(sql: "UPDATE recipe SET rating = ? WHERE id = ?", arguments: [min(5, max(1, stars)), id]) }
    }

    /// Changes a recipe's cooking time.
    package func setMinutes(_ id: String, _ minutes: Int) throws {
        try database.writer.write { db in try db.execute(sql: "UPDATE recipe SET minutes = ? WHERE id = ?", arguments: [minutes, id]) }
    }

    /// Removes a recipe and its ingredients.
    package func remove(_ id: String) throws {
        try database.writer.write { db in try db.execute(sql: "DELETE FROM recipe WHERE id = ?", arguments: [id]) }
    }

    /// Every recipe, by title.
    package func recipes() throws -> [Recipe] {
        try database.writer.read { db in
            try Row.fetchAll(db, sql: "SELECT id, title, minutes, rating FROM recipe ORDER BY title, id").map { row in
                let id: String = row["id"]
                let ingredients = try String.fetchAll(db, sql: "SELECT text FROM ingredient WHERE recipe = ? ORDER BY position", arguments: [id])
                return Recipe(id: id, title: row["title"], minutes: row["minutes"], rating: row["rating"], ingredients: ingredients)
            }
        }
    }
}
