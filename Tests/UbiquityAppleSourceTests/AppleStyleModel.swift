// Written the way Apple's documentation and the reference documents use each API, with only
// the import changed (`import UIKit` → `import Ubiquity`). This target's point is that it
// compiles: a change to one of those declarations that breaks an app's code breaks this
// build. (Written here for this purpose, not copied from anywhere.)
import Foundation
import Ubiquity

// MARK: A package document

/// A note kept as a package: its text, and an optional image beside it.
final class NoteDocument: UIDocument {
    var text = ""
    var imageData: Data?
    private var packageWrapper: FileWrapper?

    override init(fileURL url: URL) {
        super.init(fileURL: url)
    }

    override func contents(forType typeName: String) throws -> Any {
        var children: [String: FileWrapper] = [:]
        let textWrapper = FileWrapper(regularFileWithContents: Data(text.utf8))
        textWrapper.preferredFilename = "Text.txt"
        children["Text.txt"] = textWrapper
        if let imageData {
            children["Image.png"] = FileWrapper(regularFileWithContents: imageData)
        }
        return FileWrapper(directoryWithFileWrappers: children)
    }

    override func load(fromContents contents: Any, ofType typeName: String?) throws {
        guard let wrapper = contents as? FileWrapper, let children = wrapper.fileWrappers else {
            throw CocoaError(.fileReadCorruptFile)
        }
        packageWrapper = wrapper
        text = children["Text.txt"]?.regularFileContents.map { String(decoding: $0, as: UTF8.self) } ?? ""
        imageData = children["Image.png"]?.regularFileContents
    }

    override func save(to url: URL, for saveOperation: UIDocument.SaveOperation, completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        super.save(to: url, for: saveOperation, completionHandler: completionHandler)
    }

    override func open(completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        super.open(completionHandler: completionHandler)
    }

    override func close(completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        super.close(completionHandler: completionHandler)
    }

    override func handleError(_ error: Error, userInteractionPermitted: Bool) {
        super.handleError(error, userInteractionPermitted: userInteractionPermitted)
    }

    override func presentedItemDidChange() {
        super.presentedItemDidChange()
    }

    override var observedPresentedItemUbiquityAttributes: Set<URLResourceKey> {
        [.ubiquitousItemDownloadingStatusKey]
    }

    override func presentedItemDidChangeUbiquityAttributes(_ attributes: Set<URLResourceKey>) {}

    // Handoff: the document's activity carries the page shown; continuing restores it.
    var page = 0

    override func updateUserActivityState(_ userActivity: NSUserActivity) {
        super.updateUserActivityState(userActivity)
        userActivity.addUserInfoEntries(from: ["page": page])
    }

    override func restoreUserActivityState(_ userActivity: NSUserActivity) {
        page = userActivity.userInfo?["page"] as? Int ?? 0
        if let url = userActivity.userInfo?[UIDocument.userActivityURLKey] as? URL { _ = url }
    }

    /// An undoable edit, as the Document-Based App Programming Guide describes. On the main
    /// actor, as edits are (`UIDocument` is `nonisolated`; its `UndoManager` is `@MainActor`).
    @MainActor
    func setText(_ newText: String) {
        let oldText = text
        undoManager.registerUndo(withTarget: self) { document in
            document.setText(oldText)
        }
        undoManager.setActionName("Typing")
        text = newText
    }

    /// UIDocument is an NSObject: its description is overridden as on Apple's platforms.
    override var description: String { "NoteDocument(\(fileURL.lastPathComponent))" }

    /// Watches the document's state, as apps do to show conflicts.
    func observeState() -> NSObjectProtocol {
        NotificationCenter.default.addObserver(forName: UIDocument.stateChangedNotification, object: self, queue: .main) { _ in }
    }
}

// MARK: A document that reads on its own (UIDocument is nonisolated)

/// A log document that reads its file itself in `read(from:)` — on the document's background
/// queue — and keeps what it read in its own stored properties, as Apple's nonisolated
/// `UIDocument` allows.
final class LogDocument: UIDocument {
    var lines: [String] = []
    var bytesRead = 0

    override func read(from url: URL) throws {
        let data = try Data(contentsOf: url)
        bytesRead = data.count
        lines = String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    override func contents(forType typeName: String) throws -> Any {
        Data(lines.joined(separator: "\n").utf8)
    }

    override func writeContents(_ contents: Any, andAttributes additionalFileAttributes: [AnyHashable: Any]? = nil,
                                safelyTo url: URL, for saveOperation: UIDocument.SaveOperation) throws {
        try super.writeContents(contents, andAttributes: additionalFileAttributes, safelyTo: url, for: saveOperation)
    }

    override func autosave(completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        super.autosave(completionHandler: completionHandler)
    }

    override func revert(toContentsOf url: URL, completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        super.revert(toContentsOf: url, completionHandler: completionHandler)
    }

    override var hasUnsavedChanges: Bool { super.hasUnsavedChanges }

    override func updateChangeCount(_ change: UIDocument.ChangeKind) {
        super.updateChangeCount(change)
    }

    override func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable (Error?) -> Void) {
        super.accommodatePresentedItemDeletion(completionHandler: completionHandler)
    }
}

/// Code off the main actor makes, opens and saves a document, as it may with `UIDocument`.
func appendToLog(at url: URL, line: String) async -> Bool {
    let document = LogDocument(fileURL: url)
    guard await document.open() else { return false }
    document.lines.append(line)
    document.updateChangeCount(.done)
    return await document.close()
}

/// A view controller keeps its document and awaits it on the main actor.
@MainActor
final class LogViewController {
    var document: LogDocument?
    private(set) var shown: [String] = []

    func show(_ url: URL) async {
        let document = LogDocument(fileURL: url)
        self.document = document
        if await document.open() { shown = document.lines }
    }

    func showWithHandler(_ url: URL, done: @escaping @MainActor () -> Void) {
        let document = LogDocument(fileURL: url)
        self.document = document
        document.open { success in
            DispatchQueue.main.async { done() }
            _ = success
        }
    }
}

// MARK: A presenter that is a plain class

/// A folder's presenter, as an app writes one.
final class FolderPresenter: NSObject, NSFilePresenter {
    var presentedItemURL: URL?
    let presentedItemOperationQueue = OperationQueue()

    init(url: URL) {
        presentedItemURL = url
        super.init()
        presentedItemOperationQueue.maxConcurrentOperationCount = 1
    }

    func presentedSubitemDidChange(at url: URL) {}

    func presentedItemDidMove(to newURL: URL) {
        presentedItemURL = newURL
    }

    func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable (Error?) -> Void) {
        completionHandler(nil)
    }
}

// MARK: Coordination, versions, containers, key-value store, queries

enum AppleStyleCalls {
    /// A coordinated write with an error pointer, as in Apple's documentation.
    static func write(_ data: Data, to url: URL) -> Bool {
        var coordinationError: NSError?
        var writeError: Error?
        NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forReplacing, error: &coordinationError) { newURL in
            do { try data.write(to: newURL) } catch { writeError = error }
        }
        return coordinationError == nil && writeError == nil
    }

    /// Versions and metadata items are NSObjects: equatable and hashable, as apps use them.
    static func isListed(_ version: NSFileVersion, at url: URL) -> Bool {
        let versions = NSFileVersion.otherVersionsOfItem(at: url) ?? []
        return versions.firstIndex(of: version) != nil || Set(versions).contains(version)
    }

    /// The same item in two lists of results.
    static func sameItems(_ first: [NSMetadataItem], _ second: [NSMetadataItem]) -> Bool {
        Set(first) == Set(second)
    }

    /// Keeps the current version and discards the conflicts.
    static func resolveConflicts(at url: URL) throws {
        for version in NSFileVersion.unresolvedConflictVersionsOfItem(at: url) ?? [] {
            version.isResolved = true
        }
        try NSFileVersion.removeOtherVersionsOfItem(at: url)
    }

    /// Moves a local document into the container's Documents folder.
    static func moveToCloud(_ local: URL) throws -> URL? {
        guard FileManager.default.ubiquityIdentityToken != nil,
              let container = FileManager.default.url(forUbiquityContainerIdentifier: nil) else { return nil }
        let destination = container.appendingPathComponent("Documents").appendingPathComponent(local.lastPathComponent)
        try FileManager.default.setUbiquitous(true, itemAt: local, destinationURL: destination)
        return destination
    }

    /// Asks for an item's download.
    static func download(_ url: URL) throws {
        if FileManager.default.isUbiquitousItem(at: url) {
            try FileManager.default.startDownloadingUbiquitousItem(at: url)
        }
    }

    /// A link to email: anyone can download a copy of the file until it expires.
    static func shareLink(_ url: URL) throws -> (URL, Date?) {
        var expiration: NSDate?
        let link = try FileManager.default.url(forPublishingUbiquitousItemAt: url, expiration: &expiration)
        _ = try FileManager.default.url(forPublishingUbiquitousItemAt: url, expiration: nil)
        return (link, expiration as Date?)
    }

    /// Counts launches in the key-value store and hears of other devices' changes.
    static func countLaunch() -> NSObjectProtocol {
        let store = NSUbiquitousKeyValueStore.default
        let launches = (store.object(forKey: "launches") as? Int) ?? 0
        store.set(launches + 1, forKey: "launches")
        store.synchronize()
        return NotificationCenter.default.addObserver(forName: NSUbiquitousKeyValueStore.didChangeExternallyNotification, object: store, queue: .main) { note in
            let reason = note.userInfo?[NSUbiquitousKeyValueStoreChangeReasonKey] as? Int
            let keys = note.userInfo?[NSUbiquitousKeyValueStoreChangedKeysKey] as? [String] ?? []
            _ = (reason == NSUbiquitousKeyValueStoreServerChange, keys)
        }
    }
}

/// Lists the container's notes with a metadata query (notifications come on the main queue).
@MainActor
final class NoteList: NSObject {
    let query = NSMetadataQuery()
    private(set) var names: [String] = []
    private var observer: NSObjectProtocol?

    func start() {
        query.searchScopes = [NSMetadataQueryUbiquitousDocumentsScope]
        query.predicate = NSPredicate(format: "%K LIKE '*.note'", NSMetadataItemFSNameKey)
        query.sortDescriptors = [NSSortDescriptor(key: NSMetadataItemFSNameKey, ascending: true)]
        observer = NotificationCenter.default.addObserver(forName: .NSMetadataQueryDidFinishGathering, object: query, queue: .main) { [weak self] _ in
            MainActor.assumeIsolated { self?.collect() }
        }
        query.start()
    }

    func collect() {
        query.disableUpdates()
        names = query.results.compactMap { ($0 as? NSMetadataItem)?.value(forAttribute: NSMetadataItemFSNameKey) as? String }
        let sizes = query.results.compactMap { ($0 as? NSMetadataItem)?.value(forAttribute: NSMetadataItemFSSizeKey) as? Int }
        let downloaded = query.results.compactMap { ($0 as? NSMetadataItem)?.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String }
        _ = (sizes, downloaded)
        query.enableUpdates()
    }

    func stop() {
        query.stop()
        if let observer { NotificationCenter.default.removeObserver(observer) }
    }
}

/// A file from a document picker, read as the samples read one.
enum PickedFile {
    static func contents(of url: URL) -> Data? {
        guard url.startAccessingSecurityScopedResource() else { return nil }
        defer { url.stopAccessingSecurityScopedResource() }
        return try? Data(contentsOf: url)
    }

    /// Settings the app shares with its widget, in the app group's folder.
    static func sharedSettingsURL() -> URL? {
        FileManager.default.containerURL(forSecurityApplicationGroupIdentifier: "group.com.example.notes")?.appendingPathComponent("Settings.plist")
    }
}

/// A model that takes its ubiquity calls through `UbiquityFileManaging`, so its tests can mock
/// them (on Apple's platforms, a `FileManager` subclass would; see docs/Compatibility.md).
final class CloudLibrary {
    let files: any UbiquityFileManaging

    init(files: any UbiquityFileManaging = FileManager.default) { self.files = files }

    var documentsURL: URL? { files.url(forUbiquityContainerIdentifier: nil)?.appendingPathComponent("Documents") }

    var isSignedIn: Bool { files.ubiquityIdentityToken != nil }
}

/// The mock an app's tests write.
final class MockUbiquityFiles: UbiquityFileManaging {
    var container: URL?
    var ubiquityIdentityToken: (any NSCoding & NSCopying & NSObjectProtocol)? { container == nil ? nil : "token" as NSString }
    func url(forUbiquityContainerIdentifier containerIdentifier: String?) -> URL? { container }
    func setUbiquitous(_ flag: Bool, itemAt url: URL, destinationURL: URL) throws {}
    func isUbiquitousItem(at url: URL) -> Bool { container.map { url.path.hasPrefix($0.path) } ?? false }
    func startDownloadingUbiquitousItem(at url: URL) throws {}
    func evictUbiquitousItem(at url: URL) throws {}
    func url(forPublishingUbiquitousItemAt url: URL, expiration outDate: AutoreleasingUnsafeMutablePointer<NSDate?>?) throws -> URL { url }
    func containerURL(forSecurityApplicationGroupIdentifier groupIdentifier: String) -> URL? { nil }
}
