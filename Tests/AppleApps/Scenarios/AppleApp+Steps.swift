import Foundation
import GRDB
import Ubiquity
import UbiquityDatabase
import UbiquityTestSupport

extension Notification.Name {
    /// The app's own notification, posted from a completion handler.
    static let appFinishedClosing = Notification.Name("AppFinishedClosingNotification")
    /// The app's own notification, posted from main-actor code.
    static let appDidSomething = Notification.Name("AppDidSomethingNotification")
}

extension AppleApp {
    /// What document-picker and app-group code calls: security-scoped access, the app group's
    /// shared folder (entitled in the test's entitlements file), and the ubiquity calls through
    /// the protocol an app's tests can mock.
    func compatibilitySteps() {
        let picked = folder.appendingPathComponent("Picked.txt")
        do { try Data("picked".utf8).write(to: picked) } catch { check(false, "picked-file \(error)") }
        if picked.startAccessingSecurityScopedResource() {
            defer { picked.stopAccessingSecurityScopedResource() }
            check((try? Data(contentsOf: picked)) == Data("picked".utf8), "security-scoped-read")
        } else {
            check(false, "security-scoped-read")
        }
        check((picked as NSURL).startAccessingSecurityScopedResource(), "security-scoped-nsurl")
        (picked as NSURL).stopAccessingSecurityScopedResource()
        check(!URL(string: "https://example.com/a.txt")!.startAccessingSecurityScopedResource(), "security-scoped-refuses-a-web-url")
        let group = FileManager.default.containerURL(forSecurityApplicationGroupIdentifier: "group.com.example.notes")
        let mode = group.flatMap { try? FileManager.default.attributesOfItem(atPath: $0.path)[.posixPermissions] as? Int }
        check(group != nil && mode == 0o700, "app-group-container")
        check(FileManager.default.containerURL(forSecurityApplicationGroupIdentifier: "group.com.example.other") == nil, "app-group-not-entitled")
        let files: any UbiquityFileManaging = FileManager.default
        check(files.url(forUbiquityContainerIdentifier: nil) != nil, "ubiquity-calls-through-the-protocol")
    }

    /// A document saved for creating and closed: its state changes reach the observers, and
    /// so does the app's own notification posted from the close's completion handler.
    func documentSteps() async {
        let url = folder.appendingPathComponent("Note.txt")
        let document = TextDocument(fileURL: url)
        observe(UIDocument.stateChangedNotification, object: document, as: "document-state")
        observe(.appFinishedClosing, object: nil, as: "own-notification-from-completion-handler")
        var mark = ear.count("document-state")
        document.text = "hello"
        check(await document.save(to: url, for: .forCreating), "document-saved-for-creating")
        await expect("document-state", after: mark)
        document.text = "hello again"
        document.updateChangeCount(.done)
        mark = ear.count("document-state")
        let ownMark = ear.count("own-notification-from-completion-handler")
        let handler = await withCheckedContinuation { (continuation: CheckedContinuation<(Bool, Bool), Never>) in
            document.close { success in
                NotificationCenter.default.post(name: .appFinishedClosing, object: nil)
                continuation.resume(returning: (success, DispatchQueue.getSpecific(key: AppleApp.mainKey) == true))
            }
        }
        check(handler.0, "document-closed")
        check(handler.1, "completion-handler-on-main-queue")
        await expect("document-state", after: mark)
        await expect("own-notification-from-completion-handler", after: ownMark)
        check(document.documentState == .closed, "document-state-closed")
        check(await TextDocument(fileURL: url).open(), "document-reopens")

        // The app's own notification from main-actor code: Foundation's post where the main
        // queue is the main thread's (async entry points, RunLoop.main.run()); everywhere
        // through postSafely.
        observe(.appDidSomething, object: nil, as: "own-notification-from-main-actor")
        let mainActorMark = ear.count("own-notification-from-main-actor")
        if Thread.isMainThread {
            NotificationCenter.default.post(name: .appDidSomething, object: nil)
        } else {
            NotificationCenter.default.postSafely(name: .appDidSomething, object: nil)
        }
        await expect("own-notification-from-main-actor", after: mainActorMark)
    }

    /// Undo registered by main-actor code: the undo manager's notifications, and the document
    /// counts the change.
    func undoSteps() async {
        let url = folder.appendingPathComponent("Undo.txt")
        let document = TextDocument(fileURL: url)
        check(await document.save(to: url, for: .forCreating), "undo-document-saved")
        let manager: UndoManager = document.undoManager
        observe(.NSUndoManagerDidCloseUndoGroup, object: manager, as: "undo-did-close-group")
        observe(.NSUndoManagerDidUndoChange, object: manager, as: "undo-did-undo")
        observe(.NSUndoManagerDidRedoChange, object: manager, as: "undo-did-redo")
        let closeMark = ear.count("undo-did-close-group")
        document.setText("typed")
        await expect("undo-did-close-group", after: closeMark)
        check(document.hasUnsavedChanges, "undo-counts-as-a-change")
        let undoMark = ear.count("undo-did-undo")
        manager.undo()
        await expect("undo-did-undo", after: undoMark)
        let redoMark = ear.count("undo-did-redo")
        manager.redo()
        await expect("undo-did-redo", after: redoMark)
        check(await document.close(), "undo-document-closed")
    }

    /// A metadata query over a folder: gathering, then a live update.
    func querySteps() async {
        let searched = folder.appendingPathComponent("Search")
        do {
            try FileManager.default.createDirectory(at: searched, withIntermediateDirectories: true)
            try Data("a".utf8).write(to: searched.appendingPathComponent("a.txt"))
        } catch { check(false, "query-folder \(error)") }
        let query = NSMetadataQuery()
        query.searchScopes = [searched]
        query.predicate = NSPredicate(format: "%K LIKE '*.txt'", NSMetadataItemFSNameKey)
        query.notificationBatchingInterval = 0.01
        observe(.NSMetadataQueryDidStartGathering, object: query, as: "query-did-start-gathering")
        observe(.NSMetadataQueryGatheringProgress, object: query, as: "query-gathering-progress")
        observe(.NSMetadataQueryDidFinishGathering, object: query, as: "query-did-finish-gathering")
        observe(.NSMetadataQueryDidUpdate, object: query, as: "query-did-update")
        check(query.start(), "query-started")
        await expect("query-did-start-gathering", after: 0)
        await expect("query-gathering-progress", after: 0)
        await expect("query-did-finish-gathering", after: 0)
        check(query.resultCount == 1, "query-found-the-file")
        let updateMark = ear.count("query-did-update")
        do { try Data("b".utf8).write(to: searched.appendingPathComponent("b.txt"), options: .atomic) } catch { check(false, "query-write \(error)") }
        await expect("query-did-update", after: updateMark)
        query.stop()
    }

    /// A presenter on the app's queue hears another writer's coordinated write.
    func presenterSteps() async {
        let url = folder.appendingPathComponent("Presented.txt")
        do { try Data("first".utf8).write(to: url) } catch { check(false, "presented-file \(error)") }
        let queue: OperationQueue = kind == .privateQueue ? privateQueue : .main
        let kind = kind, privateQueue = privateQueue
        let presenter = FilePresenterObject(url: url, queue: queue, ear: ear) {
            kind == .privateQueue ? OperationQueue.current === privateQueue : DispatchQueue.getSpecific(key: AppleApp.mainKey) == true
        }
        NSFileCoordinator.addFilePresenter(presenter)
        let mark = ear.count("presentedItemDidChange")
        await Task.detached {
            var error: NSError?
            NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: [], error: &error) { url in
                try? Data("second".utf8).write(to: url)
            }
        }.value
        await expect("presentedItemDidChange", after: mark)
        NSFileCoordinator.removeFilePresenter(presenter)
    }

    /// A database in iCloud: a row from another device (its log copied over, as the agent
    /// does) is announced when `synchronize()` — called from main-actor code — imports it.
    func databaseSteps() async {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "recipe") { table in
                table.primaryKey("id", .text)
                table.column("title", .text).notNull()
            }
        }
        do {
            let first = folder.appendingPathComponent("Device A"), second = folder.appendingPathComponent("Device B")
            let a = try UbiquitousDatabase(container: first, name: "Recipes", migrator: migrator, automaticallySynchronizes: false)
            let b = try UbiquitousDatabase(container: second, name: "Recipes", migrator: migrator, automaticallySynchronizes: false)
            observe(.NSPersistentStoreDidImportUbiquitousContentChanges, object: b, as: "database-did-import")
            try await a.writer.write { db in try db.execute(sql: "INSERT INTO recipe VALUES ('r1', 'Bread')") }
            try Self.synchronizeNow(a)
            try copyDatabaseLogs(from: first, to: second)
            let mark = ear.count("database-did-import")
            try Self.synchronizeNow(b)
            await expect("database-did-import", after: mark)
            try a.close()
            try b.close()
        } catch {
            check(false, "database \(error)")
        }
    }

    /// The blocking `synchronize()`, as an app calls it from main-actor code.
    static func synchronizeNow(_ database: UbiquitousDatabase) throws {
        try database.synchronize()
    }

    /// How long a step waits for the test (playing the agent) to do its part.
    static let testsTurn: Double = 150

    /// The key-value store: a change from another device (which the test, playing the agent,
    /// writes once told the app is ready).
    func keyValueStoreSteps() async {
        let store = NSUbiquitousKeyValueStore.default
        observe(NSUbiquitousKeyValueStore.didChangeExternallyNotification, object: store, as: "key-value-store-changed-externally")
        store.set("mine", forKey: "here")
        check(store.synchronize(), "key-value-store-synchronized")
        let mark = ear.count("key-value-store-changed-externally")
        Self.say("ready key-value-store")
        // The test writes the change once it reads "ready": under a full suite's load its
        // process can take far longer than a user's agent would (a CI run missed it in 30 s).
        await expect("key-value-store-changed-externally", after: mark, within: Self.testsTurn)
    }

    /// The identity token: signing in as another account (which the test does once told).
    func identitySteps() async {
        observe(.NSUbiquityIdentityDidChange, object: nil, as: "identity-did-change")
        check(FileManager.default.ubiquityIdentityToken != nil, "signed-in")
        let mark = ear.count("identity-did-change")
        Self.say("ready identity")
        await expect("identity-did-change", after: mark, within: Self.testsTurn)
    }
}
