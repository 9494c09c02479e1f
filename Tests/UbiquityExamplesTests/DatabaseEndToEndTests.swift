import Foundation
import GRDB
import Testing
import Ubiquity
import UbiquityDatabase
import UbiquityExamples
import UbiquityTestSupport

/// A database in iCloud between two devices with real processes: a server, two `ubiquity agent`s
/// (not greedy: other devices' log segments arrive as placeholders, and the database asks for
/// them), and each device's `UbiquitousDatabase` in its container.
@Suite(.serialized) struct DatabaseEndToEndTests {
    static func recipe(_ database: UbiquitousDatabase, _ id: String) throws -> String? {
        try database.writer.read { db in
            try Row.fetchOne(db, sql: "SELECT title, minutes FROM recipe WHERE id = ?", arguments: [id]).map { "\($0["title"] as String)|\($0["minutes"] as Int?, default: "-")" }
        }
    }

    /// The first import a database announces within `timeout`.
    static func firstImport(_ changes: AsyncStream<ImportedChanges>, timeout: Duration) async throws -> ImportedChanges? {
        try await withThrowingTaskGroup(of: ImportedChanges?.self) { group in
            group.addTask { for await change in changes where !change.isEmpty { return change }; return nil }
            group.addTask { try await Task.sleep(for: timeout); return nil }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
    }

    @Test func rowsTravelBetweenDevicesAndOfflineEditsMerge() async throws {
        let dir = try TemporaryDirectory("db-e2e"); defer { if ProcessInfo.processInfo.environment["UBIQUITY_KEEP_E2E"] == nil { dir.remove() } }
        let container = "ABCDE12345.com.example.recipes"
        let (server, laptop, phone) = try await serverAndTwoDevices(in: dir, container: container)
        defer { server.stop() }
        let laptopContainer = try #require(laptop.containers.url(forContainer: container))
        let phoneContainer = try #require(phone.containers.url(forContainer: container))
        let a = try UbiquitousDatabase(container: laptopContainer, name: "Recipes", migrator: RecipeBook.migrator, containers: laptop.containers)
        let b = try UbiquitousDatabase(container: phoneContainer, name: "Recipes", migrator: RecipeBook.migrator, containers: phone.containers)
        defer { try? a.close(); try? b.close() }

        // A row written on the laptop appears in the phone's database, and the phone is told.
        let changes = b.importedChanges()
        let start = ContinuousClock.now
        try await a.writer.write { db in try db.execute(sql: "INSERT INTO recipe(id, title, minutes) VALUES ('r1', 'Bread', 90)") }
        let imported = try await Self.firstImport(changes, timeout: .seconds(30))
        #expect(imported?.inserted == [RowKey(table: "recipe", primaryKey: [.text("r1")])], "\(String(describing: b.lastImport)) \(String(describing: b.lastError))")
        #expect(imported?.devices == [a.deviceIdentifier])
        #expect(try Self.recipe(b, "r1") == "Bread|90")
        print("a row reached the other device's database in \(ContinuousClock.now - start)")
        // The store stays on its device; the logs live beside Documents.
        #expect(FileManager.default.fileExists(atPath: phoneContainer.appendingPathComponent("Recipes.nosync/store.sqlite").path))
        #expect(FileManager.default.fileExists(atPath: phoneContainer.appendingPathComponent("Databases/Recipes/logs/\(a.deviceIdentifier)/000000000001.ubqlog").path))

        // Offline on both devices: the laptop renames the recipe, the phone changes its time and adds one.
        try await eventually("both agents are in step") { laptop.isIdle && phone.isIdle }
        let stopped = try await onOwnThread { (laptop.stopAgent(), phone.stopAgent()) }
        #expect(stopped == (0, 0))
        try await a.writer.write { db in try db.execute(sql: "UPDATE recipe SET title = 'Sourdough' WHERE id = 'r1'") }
        try await b.writer.write { db in
            try db.execute(sql: "UPDATE recipe SET minutes = 120 WHERE id = 'r1'")
            try db.execute(sql: "INSERT INTO recipe(id, title, minutes) VALUES ('r2', 'Soup', 30)")
        }
        try await a.synchronize(); try await b.synchronize()
        try await laptop.startAgent()
        try await phone.startAgent()
        try await eventually("both databases merged the offline edits", timeout: .seconds(60)) {
            try Self.recipe(a, "r1") == "Sourdough|120" && Self.recipe(b, "r1") == "Sourdough|120" && Self.recipe(a, "r2") == "Soup|30"
        }
        #expect(a.lastError == nil && b.lastError == nil)
    }
}
