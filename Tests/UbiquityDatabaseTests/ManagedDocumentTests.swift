import Foundation
import GRDB
import Testing
import UbiquityDocument
import UbiquityTestSupport
@testable import UbiquityDatabase

/// The reference book's MyStuff as a managed document: things with a name and a place.
final class ThingsDocument: UIManagedDocument {
    var errors: [any Error] = []
    var extra: Any = Optional<Data>.none as Any
    var readExtra: Data?

    override init(fileURL url: URL) {
        super.init(fileURL: url)
        migrator.registerMigration("v1") { db in
            try db.execute(sql: "CREATE TABLE thing(id TEXT PRIMARY KEY, name TEXT NOT NULL, location TEXT)")
        }
    }

    override func handleError(_ error: any Error, userInteractionPermitted: Bool) {
        errors.append(error)
        super.handleError(error, userInteractionPermitted: userInteractionPermitted)
    }

    override func additionalContent(for absoluteURL: URL) throws -> Any { extra }

    override func readAdditionalContent(from absoluteURL: URL) throws {
        readExtra = try Data(contentsOf: absoluteURL)
    }

    func add(_ id: String, _ name: String, at location: String? = nil) throws {
        try writer?.write { db in try db.execute(sql: "INSERT INTO thing VALUES (?, ?, ?)", arguments: [id, name, location]) }
    }

    func names() throws -> [String] {
        try writer?.read { db in try String.fetchAll(db, sql: "SELECT name FROM thing ORDER BY name") } ?? []
    }
}

@MainActor
@Suite struct ManagedDocumentTests {
    /// Copies what the agent would carry between two containers: everything but `.nosync`.
    static func carry(from source: URL, to destination: URL) throws {
        let manager = FileManager.default
        guard let walker = manager.enumerator(atPath: source.path) else { return }
        while let relative = walker.nextObject() as? String {
            if relative.split(separator: "/").contains(where: { $0.hasSuffix(".nosync") }) { continue }
            let from = source.appendingPathComponent(relative), to = destination.appendingPathComponent(relative)
            var isFolder: ObjCBool = false
            _ = manager.fileExists(atPath: from.path, isDirectory: &isFolder)
            if isFolder.boolValue {
                try manager.createDirectory(at: to, withIntermediateDirectories: true)
            } else if !manager.fileExists(atPath: to.path) {
                try manager.copyItem(at: from, to: to)
            }
        }
    }

    @Test func aManagedDocumentInICloudReachesAnotherDeviceThroughItsLogs() async throws {
        let root = try TemporaryDirectory("managed"); defer { root.remove() }
        let a = root.file("a"), b = root.file("b")
        let url = a.appendingPathComponent("Documents/Stuff.things")
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        let document = ThingsDocument(fileURL: url)
        document.persistentStoreOptions = [NSPersistentStoreUbiquitousContentNameKey: "Stuff",
                                           NSPersistentStoreUbiquitousContentURLKey: a.appendingPathComponent("TransactionLogs")]
        #expect(await document.save(to: url, for: .forCreating), "\(document.errors)")
        try await document.writer?.write { db in
            try db.execute(sql: "INSERT INTO thing VALUES ('t1', 'Tent', 'garage'), ('t2', 'Stove', NULL)")
        }
        // The commit marks the document edited (autosave publishes it; so may the database by
        // itself): once saved, nothing of it is unsaved.
        #expect(await document.autosave())
        #expect(!document.hasUnsavedChanges, "every transaction committed is published")
        // The package: metadata (synced) and the store in a folder that stays on the device; the logs beside Documents.
        #expect(FileManager.default.fileExists(atPath: url.appendingPathComponent("DocumentMetadata.plist").path))
        #expect(FileManager.default.fileExists(atPath: url.appendingPathComponent("StoreContent.nosync/persistentStore").path))
        let device = try #require(document.database?.deviceIdentifier)
        #expect(FileManager.default.fileExists(atPath: a.appendingPathComponent("TransactionLogs/Stuff/logs/\(device)/000000000001.ubqlog").path))
        let metadata = try #require(try ManagedDocumentMetadata.read(from: url))
        #expect(metadata.contentName == "Stuff" && metadata.contentPath == "TransactionLogs", "the folder is kept relative to the container")

        // Another device: the package arrives without its store; opening it builds the store from the logs.
        try Self.carry(from: a, to: b)
        let other = ThingsDocument(fileURL: b.appendingPathComponent("Documents/Stuff.things"))
        #expect(await other.open(), "\(other.errors)")
        #expect(other.database?.logsURL.standardizedFileURL == b.appendingPathComponent("TransactionLogs/Stuff/logs").standardizedFileURL)
        try await other.database?.synchronize()
        #expect(try other.names() == ["Stove", "Tent"])
        #expect(await other.close())
        #expect(await document.close())
        #expect(document.writer == nil && document.database == nil)
    }

    @Test func additionalContentIsKeptLocallyAndRefusedInICloud() async throws {
        let root = try TemporaryDirectory("managed-extra"); defer { root.remove() }
        let local = ThingsDocument(fileURL: root.file("Local.things"))
        local.extra = Data("thumbnail".utf8)
        #expect(await local.save(to: local.fileURL, for: .forCreating), "\(local.errors)")
        try local.add("t1", "Lamp")
        #expect(await local.close())
        #expect(FileManager.default.fileExists(atPath: root.file("Local.things/StoreContent/persistentStore").path), "a local store is not in a .nosync folder")
        let reopened = ThingsDocument(fileURL: root.file("Local.things"))
        #expect(await reopened.open())
        #expect(reopened.readExtra == Data("thumbnail".utf8))
        #expect(try reopened.names() == ["Lamp"])
        #expect(await reopened.close())

        let synced = ThingsDocument(fileURL: root.file("Documents/Synced.things"))
        synced.persistentStoreOptions = [NSPersistentStoreUbiquitousContentNameKey: "Synced"]
        synced.extra = Data("thumbnail".utf8)
        #expect(await synced.save(to: synced.fileURL, for: .forCreating) == false)
        #expect(synced.errors.contains { "\($0)".contains("cannot keep additional content") })
    }

    @Test func deletingADocumentRemovesItsPackageAndItsLogs() async throws {
        let root = try TemporaryDirectory("managed-delete"); defer { root.remove() }
        let url = root.file("Documents/Gone.things")
        let document = ThingsDocument(fileURL: url)
        document.persistentStoreOptions = [NSPersistentStoreUbiquitousContentNameKey: "Gone"]
        #expect(await document.save(to: url, for: .forCreating))
        try document.add("t1", "Kite")
        #expect(await document.close())
        let logs = root.file("TransactionLogs/Gone")
        #expect(FileManager.default.fileExists(atPath: logs.path), "the default content folder is TransactionLogs beside Documents")
        try ManagedDocument.deleteDocument(at: url)
        #expect(!FileManager.default.fileExists(atPath: url.path) && !FileManager.default.fileExists(atPath: logs.path))
    }
}
