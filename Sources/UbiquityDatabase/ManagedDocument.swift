import Foundation
import GRDB
import Synchronization
import UbiquityCoordination
import UbiquityDocument
import UbiquityFiles

/// The option naming a managed document's store in iCloud: its change logs go under this name
/// in the content folder (``NSPersistentStoreUbiquitousContentURLKey``). A document with this
/// option syncs; without it, its store stays on the device.
public let NSPersistentStoreUbiquitousContentNameKey = "NSPersistentStoreUbiquitousContentNameKey"

/// The option giving the folder (a `URL` in the ubiquity container, outside `Documents`) where
/// the change logs of managed documents go. Default: `TransactionLogs` at the container's top.
public let NSPersistentStoreUbiquitousContentURLKey = "NSPersistentStoreUbiquitousContentURLKey"

/// `UIManagedDocument`: Apple's name for ``ManagedDocument``.
public typealias UIManagedDocument = ManagedDocument

/// A document whose model is a database (UIManagedDocument, on GRDB): a package holding
/// `DocumentMetadata.plist` and, in `StoreContent`, the SQLite store (``persistentStoreName``)
/// the app reads and writes through ``writer``.
///
/// With ``persistentStoreOptions`` naming its content (``NSPersistentStoreUbiquitousContentNameKey``)
/// the document syncs as the reference's managed documents in iCloud do: the store is in
/// `StoreContent.nosync` (it stays on each device, a cache), each device's transactions go as
/// change logs into the content folder (``NSPersistentStoreUbiquitousContentURLKey``, outside
/// `Documents`), and `DocumentMetadata.plist` — which syncs with the package — tells every
/// device the content's name and folder, so a device that opens the document builds its store
/// from the logs. Other devices' changes arrive as ``UbiquitousDatabase`` imports do (see
/// ``database`` and `.NSPersistentStoreDidImportUbiquitousContentChanges`).
///
/// Change tracking: a transaction committed through ``writer`` marks the document edited, so
/// autosave publishes it; saving writes the metadata and publishes the captured transactions.
/// Errors of the store reach ``Document/handleError(_:userInteractionPermitted:)`` as save or
/// read failures.
open class ManagedDocument: Document {
    /// The name of the store file inside the package's `StoreContent` folder.
    nonisolated open class var persistentStoreName: String { "persistentStore" }

    /// Options for the store, read when it is opened: ``NSPersistentStoreUbiquitousContentNameKey``
    /// and ``NSPersistentStoreUbiquitousContentURLKey`` make it sync.
    open var persistentStoreOptions: [AnyHashable: Any]?

    /// A configuration name passed on to ``configurePersistentStoreCoordinator(for:ofType:modelConfiguration:storeOptions:)``;
    /// nil by default.
    open var modelConfiguration: String?

    /// The document's schema (Core Data's model): the app's migrations. Set it (or override it)
    /// before opening or creating the document.
    open var migrator = DatabaseMigrator()

    /// The store's writer, once the document is open (or saved for creating).
    public private(set) var writer: DatabasePool?

    /// The synced database, when the document is in iCloud (its content is named).
    public private(set) var database: UbiquitousDatabase?

    /// The content's name and folder in effect (from the options, or from the metadata read).
    private var content: (name: String, folder: URL)?
    private var changeObservation: AnyDatabaseCancellable?

    /// Whether the document has changes not yet saved: for a document in iCloud, whether the
    /// store holds transactions of this device not yet published (exact, whenever asked: a
    /// transaction is published by the next save, autosave, or the database's own
    /// synchronization); otherwise the document's change count.
    open override var hasUnsavedChanges: Bool {
        guard let database else { return super.hasUnsavedChanges }
        do { return try database.hasUnpublishedChanges() } catch {
            return super.hasUnsavedChanges // the store cannot be read now: what the change count says
        }
    }

    /// The store's type for a file type: SQLite, always.
    open func persistentStoreType(forFileType fileType: String) -> String { "SQLite" }

    /// Opens the store at `storeURL` (creating it and migrating it with ``migrator``): Core
    /// Data's configure-the-coordinator hook. Override to configure the store (call super).
    /// - Parameters:
    ///   - storeURL: The store's file in the package.
    ///   - fileType: The document's file type.
    ///   - configuration: ``modelConfiguration``.
    ///   - storeOptions: ``persistentStoreOptions`` with the metadata's content name and folder.
    open func configurePersistentStoreCoordinator(for storeURL: URL, ofType fileType: String, modelConfiguration configuration: String?,
                                                  storeOptions: [AnyHashable: Any]? = nil) throws {
        guard writer == nil else { return }
        if let name = storeOptions?[NSPersistentStoreUbiquitousContentNameKey] as? String {
            let folder = (storeOptions?[NSPersistentStoreUbiquitousContentURLKey] as? URL) ?? Self.defaultContentFolder(for: fileURL)
            let database = try UbiquitousDatabase(storeURL: storeURL, logsURL: Self.logsURL(folder: folder, name: name), name: name, migrator: migrator)
            self.database = database
            content = (name, folder)
            writer = database.writer
        } else {
            try FileManager.default.createDirectory(at: storeURL.deletingLastPathComponent(), withIntermediateDirectories: true)
            let pool = try DatabasePool(path: storeURL.path)
            try migrator.migrate(pool)
            writer = pool
        }
        observeChanges()
    }

    /// Reads content kept beside the store (only for documents not in iCloud). The default
    /// reads nothing.
    /// - Parameter absoluteURL: The package's `AdditionalContent` folder.
    open func readAdditionalContent(from absoluteURL: URL) throws {}

    /// Content to keep beside the store, saved with the document (only for documents not in
    /// iCloud: a document in iCloud that returns any fails to save, as the reference says).
    /// The default returns none (`nil`, as `Optional<Data>.none`; `NSNull()` also means none).
    open func additionalContent(for absoluteURL: URL) throws -> Any { Optional<Data>.none as Any }

    /// Writes ``additionalContent(for:)``'s content; the default writes `Data` or a
    /// `FileWrapper` there.
    /// - Parameters:
    ///   - content: What ``additionalContent(for:)`` returned.
    ///   - absoluteURL: The package's `AdditionalContent` folder.
    ///   - absoluteOriginalContentsURL: The folder as it was, if any.
    open func writeAdditionalContent(_ content: Any, to absoluteURL: URL, originalContentsURL absoluteOriginalContentsURL: URL?) throws {
        try? FileManager.default.removeItem(at: absoluteURL) // replaced whole; absent the first time
        switch content {
        case let data as Data: try POSIX.createFile(absoluteURL.path, contents: data)
        case let wrapper as FileWrapper: try wrapper.write(to: absoluteURL, options: [], originalContentsURL: nil)
        default: throw DocumentError(.unsupportedContents, "additional content must be Data or a FileWrapper, not \(type(of: content))", url: absoluteURL)
        }
    }

    // MARK: Reading and saving

    nonisolated open override func read(from url: URL) throws {
        let metadata = try ManagedDocumentMetadata.read(from: url)
        try performOnMainQueueAndWait { try openStore(in: url, metadata: metadata) }
    }

    /// Opens the store of the package at `url`, with what its metadata says.
    private func openStore(in url: URL, metadata: ManagedDocumentMetadata?) throws {
        var options = persistentStoreOptions ?? [:]
        if let metadata, let name = metadata.contentName {
            options[NSPersistentStoreUbiquitousContentNameKey] = name
            options[NSPersistentStoreUbiquitousContentURLKey] = metadata.contentFolder(for: url)
        }
        let ubiquitous = options[NSPersistentStoreUbiquitousContentNameKey] is String
        try configurePersistentStoreCoordinator(for: Self.storeURL(package: url, ubiquitous: ubiquitous), ofType: fileType ?? "",
                                                modelConfiguration: modelConfiguration, storeOptions: options)
        let additional = url.appendingPathComponent("AdditionalContent")
        if !ubiquitous, FileManager.default.fileExists(atPath: additional.path) { try readAdditionalContent(from: additional) }
    }

    /// What a save writes: the metadata, and additional content (the store is written by its
    /// transactions as they commit).
    open override func contents(forType typeName: String) throws -> Any {
        let options = persistentStoreOptions ?? [:]
        let name = content?.name ?? options[NSPersistentStoreUbiquitousContentNameKey] as? String
        let folder = content?.folder ?? (options[NSPersistentStoreUbiquitousContentURLKey] as? URL) ?? Self.defaultContentFolder(for: fileURL)
        let additional = Self.something(try additionalContent(for: fileURL.appendingPathComponent("AdditionalContent")))
        if name != nil, additional != nil {
            throw DocumentError(.saveFailed, "a managed document in iCloud cannot keep additional content: keep it in its store", url: fileURL)
        }
        return Snapshot(metadata: ManagedDocumentMetadata(contentName: name, contentFolder: name == nil ? nil : folder, documentURL: fileURL), additional: additional)
    }

    /// Saves in place: the package is created if new (its store opened), its metadata written
    /// whole, the store's captured transactions published. A managed document is never
    /// written aside and moved over (its store is live in the package).
    nonisolated open override func writeContents(_ contents: Any, andAttributes additionalFileAttributes: [AnyHashable: Any]? = nil,
                                                 safelyTo url: URL, for saveOperation: SaveOperation) throws {
        guard let snapshot = contents as? Snapshot else {
            throw DocumentError(.unsupportedContents, "a managed document saves what its contents(forType:) returns", url: url)
        }
        let exists = FileManager.default.fileExists(atPath: url.path)
        if saveOperation == .forCreating, exists {
            throw DocumentError(.fileExists, "a file already exists; saving for creating does not overwrite it", url: url)
        }
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        try snapshot.metadata.write(to: url)
        let synced = try performOnMainQueueAndWait { () -> UbiquitousDatabase? in
            if let additional = snapshot.additional {
                try writeAdditionalContent(additional, to: url.appendingPathComponent("AdditionalContent"), originalContentsURL: nil)
            }
            if writer == nil { try openStore(in: url, metadata: snapshot.metadata) }
            return database
        }
        try synced?.synchronize()
    }

    open override func close(completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        super.close(completionHandler: mainQueueHandler { document, closed in
            if closed { (document as? ManagedDocument)?.closeStore() }
            completionHandler?(closed)
        })
    }

    /// Closes the store (after the document closed).
    private func closeStore() {
        changeObservation?.cancel()
        changeObservation = nil
        do {
            if let database { try database.close() } else { try writer?.close() }
        } catch {
            handleError(DocumentError(.saveFailed, "the store did not close cleanly", url: fileURL, underlying: error), userInteractionPermitted: false)
        }
        database = nil
        writer = nil
        content = nil
    }

    /// A committed transaction marks the document edited (autosave then publishes it): for a
    /// document in iCloud, each of this device's transactions the database captured (imports
    /// are not edits); otherwise each transaction that changed the store.
    private func observeChanges() {
        guard let writer else { return }
        if let database {
            let document = WeakHandoff(self)
            database.onLocalCommit {
                MainQueue.async { document.value?.updateChangeCount(.done) }
            }
            return
        }
        let observation = DatabaseRegionObservation(tracking: .fullDatabase)
        let document = WeakHandoff(self)
        changeObservation = observation.start(in: writer, onError: { error in
            MainQueue.async { document.value?.handleError(error, userInteractionPermitted: false) }
        }, onChange: { _ in
            MainQueue.async { document.value?.updateChangeCount(.done) }
        })
    }

    // MARK: Deleting

    /// Deletes a managed document as the reference describes: the package, and — for one in
    /// iCloud — its change logs on every device (the folder its `DocumentMetadata.plist`
    /// names), each under a coordinated write. Close the document first.
    /// - Parameter url: The document's package.
    nonisolated public static func deleteDocument(at url: URL) throws {
        let metadata = try ManagedDocumentMetadata.read(from: url)
        let coordinator = NSFileCoordinator(filePresenter: nil)
        try coordinator.coordinate(writingItemAt: url, options: .forDeleting) { try FileManager.default.removeItem(at: $0) }
        if let metadata, let name = metadata.contentName {
            let logs = logsURL(folder: metadata.contentFolder(for: url), name: name).deletingLastPathComponent()
            if FileManager.default.fileExists(atPath: logs.path) {
                try coordinator.coordinate(writingItemAt: logs, options: .forDeleting) { try FileManager.default.removeItem(at: $0) }
            }
        }
    }

    // MARK: Layout

    /// The store's file in a package: `StoreContent/<persistentStoreName>`, or in
    /// `StoreContent.nosync` for a document in iCloud (the store stays on its device).
    nonisolated static func storeURL(package: URL, ubiquitous: Bool) -> URL {
        package.appendingPathComponent(ubiquitous ? "StoreContent.nosync" : "StoreContent", isDirectory: true).appendingPathComponent(persistentStoreName)
    }

    /// Where a content's logs are: `<folder>/<name>/logs`.
    nonisolated static func logsURL(folder: URL, name: String) -> URL {
        folder.appendingPathComponent(name, isDirectory: true).appendingPathComponent("logs", isDirectory: true)
    }

    /// `TransactionLogs` at the top of the container the document is in (beside `Documents`).
    nonisolated static func defaultContentFolder(for document: URL) -> URL {
        (ManagedDocumentMetadata.containerRoot(of: document) ?? document.deletingLastPathComponent()).appendingPathComponent("TransactionLogs", isDirectory: true)
    }

    /// `value`, unless it is none (a nil optional, or `NSNull`).
    nonisolated static func something(_ value: Any) -> Any? {
        if value is NSNull { return nil }
        let mirror = Mirror(reflecting: value)
        if mirror.displayStyle == .optional { return mirror.children.first.map(\.value) }
        return value
    }

    /// What ``contents(forType:)`` hands to the save.
    private struct Snapshot {
        var metadata: ManagedDocumentMetadata
        var additional: Any?
    }
}

/// `DocumentMetadata.plist` in a managed document's package: the content's name and folder, the
/// folder relative to the container (each device has the container elsewhere).
struct ManagedDocumentMetadata: Equatable, Sendable {
    var contentName: String?
    /// The content folder, relative to the container's root when it is in the document's
    /// container, else absolute.
    var contentPath: String?

    init(contentName: String?, contentFolder: URL?, documentURL: URL) {
        self.contentName = contentName
        guard let contentFolder else { return }
        let folder = contentFolder.standardizedFileURL.path
        if let root = Self.containerRoot(of: documentURL)?.standardizedFileURL.path, folder.hasPrefix(root + "/") {
            contentPath = String(folder.dropFirst(root.count + 1))
        } else {
            contentPath = folder
        }
    }

    /// The content folder for the document at `url` on this device.
    func contentFolder(for url: URL) -> URL {
        guard let contentPath else { return ManagedDocument.defaultContentFolder(for: url) }
        if contentPath.hasPrefix("/") { return URL(fileURLWithPath: contentPath, isDirectory: true) }
        return (Self.containerRoot(of: url) ?? url.deletingLastPathComponent()).appendingPathComponent(contentPath, isDirectory: true)
    }

    /// The container's root for a document inside its `Documents` folder: the folder above the
    /// nearest `Documents`.
    static func containerRoot(of document: URL) -> URL? {
        var folder = document.standardizedFileURL.deletingLastPathComponent()
        while folder.path != "/" {
            if folder.lastPathComponent == "Documents" { return folder.deletingLastPathComponent() }
            folder = folder.deletingLastPathComponent()
        }
        return nil
    }

    static let fileName = "DocumentMetadata.plist"

    /// Reads the package's metadata; nil if it has none (a document not saved yet).
    /// - Throws: `DocumentError` for metadata that cannot be read.
    static func read(from package: URL) throws -> ManagedDocumentMetadata? {
        let url = package.appendingPathComponent(fileName)
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        do {
            let plist = try PropertyListSerialization.propertyList(from: Data(contentsOf: url), format: nil)
            guard let dictionary = plist as? [String: Any] else { throw CocoaError(.propertyListReadCorrupt) }
            var metadata = ManagedDocumentMetadata(contentName: nil, contentFolder: nil, documentURL: package)
            metadata.contentName = dictionary[NSPersistentStoreUbiquitousContentNameKey] as? String
            metadata.contentPath = dictionary[NSPersistentStoreUbiquitousContentURLKey] as? String
            if let name = metadata.contentName, !UbiquitousDatabase.isValidName(name) {
                throw DocumentError(.readFailed, "the document's content name \"\(name)\" cannot name a folder", url: url)
            }
            return metadata
        } catch let error as DocumentError {
            throw error
        } catch {
            throw DocumentError(.readFailed, "the document's metadata cannot be read", url: url, underlying: error)
        }
    }

    /// Writes the metadata whole (aside, then moved into place), if it changed.
    func write(to package: URL) throws {
        var dictionary: [String: Any] = [:]
        if let contentName { dictionary[NSPersistentStoreUbiquitousContentNameKey] = contentName }
        if let contentPath { dictionary[NSPersistentStoreUbiquitousContentURLKey] = contentPath }
        let data = try PropertyListSerialization.data(fromPropertyList: dictionary, format: .xml, options: 0)
        let url = package.appendingPathComponent(Self.fileName)
        if (try? Data(contentsOf: url)) == data { return } // unchanged: the file (and its sync) left alone
        try data.write(to: url, options: .atomic)
    }
}
