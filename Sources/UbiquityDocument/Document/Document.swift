import Foundation
import Logging
import Synchronization
import UbiquityClient
import UbiquityCoordination
import UbiquityFiles

/// A document: a model object backed by a file or package, with UIKit's `UIDocument` API.
///
/// Subclass it and override ``contents(forType:)`` (return `Data` for a flat file or a
/// `FileWrapper` for a package) and ``load(fromContents:ofType:)``. The document reads and
/// writes on its own serial file-access queue, never on the main queue; it saves crash-safely
/// (temporary, `fsync`, atomic rename, `fsync` of the directory), rewrites only changed package
/// members, tracks changes through ``updateChangeCount(_:)`` or its ``undoManager``, and
/// autosaves at ``autosaveInterval`` and when closed.
///
/// As Apple's `UIDocument`, the class is `nonisolated`: a document may be created anywhere, and
/// its subclass's stored properties may be set from `read(from:)` on the file-access queue. Its
/// state (``documentState``, the change count, ``fileURL``) lives on the main queue, as UIKit's
/// does: use it from there. An operation started elsewhere (`open`, `save`, `close`, `revert`,
/// `autosave`, `updateChangeCount`) is carried out on the main queue. Completion handlers are
/// `@Sendable`, as Apple's, and are called on the main queue. Each operation also has an `async`
/// form. The `NSFilePresenter` methods are `open` members that a subclass may override, calling
/// `super`.
open class Document: NSObject {
    /// The state of a document: an option set, empty (``normal``) when open and editable.
    public struct State: OptionSet, Sendable, Hashable, CustomStringConvertible {
        /// The raw bits.
        public let rawValue: UInt
        /// Creates a state from raw bits.
        /// - Parameter rawValue: The bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Open, no conflicts, no errors, editable.
        public static let normal: State = []
        /// Not open (never opened, or closed, or an open failed).
        public static let closed = State(rawValue: 1 << 0)
        /// Other versions of the file conflict with this one.
        public static let inConflict = State(rawValue: 1 << 1)
        /// The last save failed.
        public static let savingError = State(rawValue: 1 << 2)
        /// The document is busy (reverting, or another process is writing it): do not edit.
        public static let editingDisabled = State(rawValue: 1 << 3)
        /// A long operation is under way and ``Document/progress`` can be observed.
        public static let progressAvailable = State(rawValue: 1 << 4)

        /// The names of the flags that are set, or "normal".
        public var description: String {
            let names: [(State, String)] = [(.closed, "closed"), (.inConflict, "inConflict"), (.savingError, "savingError"),
                                            (.editingDisabled, "editingDisabled"), (.progressAvailable, "progressAvailable")]
            let set = names.filter { contains($0.0) }.map(\.1)
            return set.isEmpty ? "normal" : set.joined(separator: "+")
        }
    }

    /// What kind of change ``updateChangeCount(_:)`` reports.
    public enum ChangeKind: Int, Sendable {
        /// A change was made.
        case done = 0
        /// A change was undone.
        case undone = 1
        /// An undone change was redone.
        case redone = 2
        /// The document is now clean (for example, it was just saved).
        case cleared = 3
    }

    /// Whether a save creates a new file or overwrites the existing one.
    public enum SaveOperation: Int, Sendable {
        /// Creates the file; fails (without touching anything) if one already exists.
        case forCreating = 0
        /// Replaces the existing file.
        case forOverwriting = 1
    }

    /// Posted on the default notification center, with the document as object, whenever
    /// ``documentState`` changes.
    public nonisolated static let stateChangedNotification = Notification.Name("UIDocumentStateChangedNotification")

    /// The file or package the document reads from and saves to. It follows the file when
    /// another process moves it under coordination.
    public internal(set) var fileURL: URL {
        didSet { presented.withLock { $0 = fileURL } }
    }
    /// The type registry used to derive ``fileType`` and package-ness.
    public nonisolated let typeRegistry: DocumentTypeRegistry
    /// Where the document logs.
    public nonisolated let logger: Logger
    /// The clock autosave waits on (inject a manual clock in tests).
    public let autosaveClock: any Clock<Duration>
    /// How long after the first unsaved change the document saves itself. Default 20 seconds.
    public var autosaveInterval: Duration = .seconds(20)
    /// The modification date of the file when last read or written.
    public var fileModificationDate: Date?

    /// Whether saving keeps the previous contents as a local-history version (macOS Versions,
    /// beyond iOS): override to return true for a document type that wants it. Earlier versions
    /// are then ``NSFileVersion/otherVersionsOfItem(at:)`` (discardable, not conflicts), thinned
    /// by ``versionHistoryPolicy``; unchanged package members are shared, not copied. Default false.
    nonisolated open class var preservesVersions: Bool { false }

    /// How the local history is thinned. Default ``VersionHistoryPolicy/standard``.
    nonisolated open class var versionHistoryPolicy: VersionHistoryPolicy { .standard }
    /// The document's state. Starts as ``State/closed``.
    public internal(set) var documentState: State = .closed
    /// The Handoff activity (``userActivity``), and whether the app set it.
    var storedUserActivity: NSUserActivity?
    var userActivityWasSet = false
    /// Tells the document to bring its activity up to date before it is sent.
    var userActivityBridge: UserActivityBridge?
    /// Where the document's activity is offered (a Ubiquity addition: another account's, in
    /// tests and tools). Default ``UbiquityHandoff/shared``.
    public var handoff: UbiquityHandoff = .shared
    /// Progress of the current long operation (opening or saving), if any.
    public internal(set) var progress: Progress?

    nonisolated let fileAccessQueue = DispatchQueue(label: "Ubiquity.Document.FileAccess")
    /// The presented URL, readable from any thread (``presentedItemURL``).
    nonisolated let presented: Mutex<URL>
    /// Where the document's presenter callbacks arrive (then hop to the main queue).
    nonisolated let presenterQueue: OperationQueue = {
        let queue = OperationQueue()
        queue.name = "Ubiquity.Document.FilePresenter"
        queue.maxConcurrentOperationCount = 1
        return queue
    }()
    /// How many other accesses the document has currently relinquished its file to.
    var relinquishCount = 0
    /// Whether the file changed while relinquished, so the document must revert afterwards.
    var revertWhenReacquired = false
    var changes = ChangeTracker()
    var storedUndoManager: UndoManager?
    var stateContinuations: [UUID: AsyncStream<State>.Continuation] = [:]
    var autosaveTask: Task<Void, Never>?
    var isOpening = false
    var isClosing = false
    /// The file as the document last read or wrote it (a flat file's identity, size and
    /// modification time, taken inside the coordinated access): a notice that the file changed
    /// while it is still that file is not news (``revertToChangedFile()``).
    var fileStatus: NodeStatus?

    /// Creates a document for the file at `url` — Apple's designated initializer, which a
    /// subclass overrides as on Apple's platforms (`override init(fileURL url: URL) { …;
    /// super.init(fileURL: url) }`). Nothing is read until ``open(completionHandler:)``.
    /// - Parameter url: The document's file (it need not exist yet; save it `forCreating`).
    public init(fileURL url: URL) {
        self.fileURL = url.standardizedFileURL
        self.presented = Mutex(url.standardizedFileURL)
        self.typeRegistry = .shared
        self.autosaveClock = ContinuousClock()
        self.logger = Logger(label: "ubiquity.document")
        super.init()
    }

    /// Creates a document for the file at `url`, with its type registry, autosave clock and
    /// logger (Ubiquity's addition, for tests and tools; ``init(fileURL:)`` is Apple's).
    /// - Parameters:
    ///   - url: The document's file (it need not exist yet; save it `forCreating`).
    ///   - typeRegistry: Where ``fileType`` is looked up.
    ///   - autosaveClock: The clock autosave waits on.
    ///   - logger: Where the document logs.
    public init(
        fileURL url: URL,
        typeRegistry: DocumentTypeRegistry = .shared,
        autosaveClock: any Clock<Duration> = ContinuousClock(),
        logger: Logger = Logger(label: "ubiquity.document")
    ) {
        self.fileURL = url.standardizedFileURL
        self.presented = Mutex(url.standardizedFileURL)
        self.typeRegistry = typeRegistry
        self.autosaveClock = autosaveClock
        self.logger = logger
        super.init()
    }

    // MARK: Identity

    /// The type identifier of the document's file, from its extension; nil if unknown.
    open var fileType: String? { typeRegistry.type(of: fileURL)?.identifier }

    /// The type to save as. Defaults to ``fileType``.
    open var savingFileType: String? { fileType }

    /// The document's name for people: the file name without its extension.
    open var localizedName: String { fileURL.deletingPathExtension().lastPathComponent }

    /// The extension for a file of `typeName`: the type's preferred extension, else the current one.
    /// - Parameters:
    ///   - typeName: A type identifier.
    ///   - saveOperation: The save the name is for.
    open func fileNameExtension(forType typeName: String?, saveOperation: SaveOperation) -> String {
        typeName.flatMap { typeRegistry.type(withIdentifier: $0)?.preferredFilenameExtension } ?? fileURL.pathExtension
    }

    // MARK: File access

    /// Runs `block` on the document's serial file-access queue (off the main queue). All of the
    /// document's reads and writes go through here, one at a time.
    /// - Parameter block: The file access to perform.
    nonisolated open func performAsynchronousFileAccess(_ block: @escaping @Sendable () -> Void) {
        fileAccessQueue.async(execute: block)
    }

    /// Runs `body` on the main queue from the file-access queue, waiting for it (a subclass's
    /// override that must touch the document's state while saving or reading). The main queue
    /// may be drained by a thread other than the process's first on Linux, so "already on it" is
    /// asked of the queue.
    /// - Parameter body: The work.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws.
    nonisolated package func performOnMainQueueAndWait<T>(_ body: () throws -> T) throws -> T {
        try onMainAndWait(body)
    }

    // MARK: Override points (implemented by concern in Document+Reading, +Saving, +ChangeTracking)

    /// Opens the document: reads its file off the main queue and hands the contents to
    /// ``load(fromContents:ofType:)``.
    ///
    /// On failure (missing, unreadable or corrupt file, or `load` throwing) the document stays
    /// ``State/closed``, ``handleError(_:userInteractionPermitted:)`` receives a
    /// ``DocumentError`` naming the file and cause, nothing on disk is changed, and the handler
    /// gets `false`.
    /// - Parameter completionHandler: Called on the main queue with whether the document opened.
    open func open(completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        openDocument(completionHandler: completionHandler)
    }

    /// Reads the document's contents from `url` and loads them.
    ///
    /// Runs on the file-access queue. The default reads a directory as a lazy `FileWrapper`
    /// and a file as `Data`, then calls ``load(fromContents:ofType:)`` on the main queue and
    /// waits for it. Override (marked `nonisolated`) to read in your own way.
    /// - Parameter url: The file or package to read.
    /// - Throws: `FileAccessError` for a missing or unreadable file, or what `load` throws.
    nonisolated open func read(from url: URL) throws {
        try readDocument(from: url)
    }

    /// Loads the document's model from `contents`: `Data` for a flat file, `FileWrapper` for a
    /// package. Override it; the default throws.
    /// - Parameters:
    ///   - contents: What was read.
    ///   - typeName: The file's type identifier, if known.
    /// - Throws: Any error to say the contents cannot be loaded; opening then fails.
    open func load(fromContents contents: Any, ofType typeName: String?) throws {
        try loadDefault(fromContents: contents, ofType: typeName)
    }

    /// Discards unsaved changes and reloads the document from `url` (usually ``fileURL``).
    ///
    /// Editing is disabled while the read runs. On success the document is clean and its undo
    /// history is cleared. On failure the model is left as it was.
    /// - Parameters:
    ///   - url: The file to read.
    ///   - completionHandler: Called on the main queue with whether the revert succeeded.
    open func revert(toContentsOf url: URL, completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        revertDocument(toContentsOf: url, completionHandler: completionHandler)
    }

    /// Saves the document to `url` off the main queue.
    ///
    /// The document takes a snapshot with ``contents(forType:)`` on the main queue, then calls
    /// ``writeContents(_:andAttributes:safelyTo:for:)`` on its file-access queue. An edit made
    /// while the save runs keeps the document dirty. Saving to another URL makes it the
    /// document's ``fileURL``.
    ///
    /// On failure — `contents(forType:)` throwing, no space, no permission — the document gains
    /// ``State/savingError``, ``handleError(_:userInteractionPermitted:)`` gets a
    /// ``DocumentError``, the file on disk is byte-for-byte unchanged, and the handler gets `false`.
    /// - Parameters:
    ///   - url: Where to save.
    ///   - saveOperation: `.forCreating` for a new file (never overwrites), `.forOverwriting` otherwise.
    ///   - completionHandler: Called on the main queue with whether the save succeeded.
    open func save(to url: URL, for saveOperation: SaveOperation, completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        saveDocument(to: url, for: saveOperation, completionHandler: completionHandler)
    }

    /// The snapshot of the document to save: `Data` for a flat file, a `FileWrapper` for a
    /// package. Override it; the default throws.
    /// - Parameter typeName: The type to save as.
    /// - Returns: The contents.
    /// - Throws: Any error to abort the save (the file is left untouched).
    open func contents(forType typeName: String) throws -> Any {
        try contentsDefault(forType: typeName)
    }

    /// Extra attributes for the saved file. Supported: `FileAttributeKey.posixPermissions`.
    /// The default returns none (an overwritten file keeps its permissions).
    /// - Parameters:
    ///   - url: Where the document is being saved.
    ///   - saveOperation: The kind of save.
    /// - Throws: Any error to abort the save.
    open func fileAttributesToWrite(to url: URL, for saveOperation: SaveOperation) throws -> [AnyHashable: Any] {
        try fileAttributesDefault(to: url, for: saveOperation)
    }

    /// Writes `contents` to `url` crash-safely. Runs on the file-access queue.
    ///
    /// The default writes into a hidden temporary beside `url` with
    /// ``writeContents(_:to:for:originalContentsURL:)`` (passing the existing file as the
    /// original contents, so unchanged package members are reused), then moves it into place
    /// atomically and `fsync`s the directory. Override (marked `nonisolated`) only to replace
    /// that machinery.
    /// - Parameters:
    ///   - contents: The snapshot from ``contents(forType:)``.
    ///   - additionalFileAttributes: From ``fileAttributesToWrite(to:for:)``.
    ///   - url: The document's file.
    ///   - saveOperation: The kind of save.
    /// - Throws: ``DocumentError`` (`.fileExists` for a create over an existing file) or
    ///   `FileAccessError`; the file at `url` is then unchanged.
    nonisolated open func writeContents(
        _ contents: Any,
        andAttributes additionalFileAttributes: [AnyHashable: Any]? = nil,
        safelyTo url: URL,
        for saveOperation: SaveOperation
    ) throws {
        try writeContentsSafely(contents, andAttributes: additionalFileAttributes, safelyTo: url, for: saveOperation)
    }

    /// Writes `contents` to `url`, which does not exist yet. Runs on the file-access queue.
    ///
    /// `Data` becomes a file (written and `fsync`ed); a `FileWrapper` becomes a package whose
    /// members unchanged since they were read from `originalContentsURL` are hard-linked (or
    /// reflinked, or copied across file systems) rather than rewritten.
    /// - Parameters:
    ///   - contents: `Data` or `FileWrapper`; override for other kinds of contents.
    ///   - url: Where to write.
    ///   - saveOperation: The kind of save.
    ///   - originalContentsURL: The current file, whose unchanged parts may be reused.
    /// - Throws: ``DocumentError`` `.unsupportedContents`, or `FileAccessError`.
    nonisolated open func writeContents(_ contents: Any, to url: URL, for saveOperation: SaveOperation, originalContentsURL: URL?) throws {
        try writeContentsDefault(contents, to: url, for: saveOperation, originalContentsURL: originalContentsURL)
    }

    /// Saves if there are unsaved changes; completes with `true` at once if there are none.
    /// Runs periodically (every ``autosaveInterval`` after a change) and when closing.
    /// - Parameter completionHandler: Called on the main queue with whether the save succeeded.
    open func autosave(completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        autosaveDocument(completionHandler: completionHandler)
    }

    /// Saves unsaved changes and closes the document.
    ///
    /// If that save fails, the document stays open (so nothing is lost) with
    /// ``State/savingError`` and the handler gets `false`.
    /// - Parameter completionHandler: Called on the main queue with whether the document closed cleanly.
    open func close(completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        closeDocument(completionHandler: completionHandler)
    }

    /// Whether the document has changes not yet saved.
    open var hasUnsavedChanges: Bool { hasUnsavedChangesDefault }

    /// Records a change: `.done`, `.undone` and `.redone` move the content state (undoing back
    /// to the saved state makes the document clean); `.cleared` marks the current state saved.
    /// A dirty document autosaves after ``autosaveInterval``.
    /// - Parameter change: The kind of change.
    open func updateChangeCount(_ change: ChangeKind) {
        recordChange(change)
    }

    /// A token for the current content state, taken when a save starts.
    /// - Parameter saveOperation: The save it is for.
    /// - Returns: A ``DocumentChangeToken``.
    open func changeCountToken(for saveOperation: SaveOperation) -> Any {
        currentChangeToken(for: saveOperation)
    }

    /// Marks the state that `token` captured as saved: the document becomes clean only if it
    /// has not changed since the token was taken.
    /// - Parameters:
    ///   - changeCountToken: A token from ``changeCountToken(for:)``.
    ///   - saveOperation: The save that completed.
    open func updateChangeCount(withToken changeCountToken: Any, for saveOperation: SaveOperation) {
        markSaved(withToken: changeCountToken, for: saveOperation)
    }

    /// The document's undo manager, created on first use. Registering, undoing and redoing
    /// through it mark the document changed (`.done`, `.undone`, `.redone`).
    open var undoManager: UndoManager! {
        get { undoManagerDefault }
        set { undoManagerDefault = newValue }
    }

    // MARK: Editing

    /// Called when the document must not be edited (while reverting, or while another process
    /// writes its file). Override to disable your UI; ``documentState`` already includes
    /// ``State/editingDisabled``.
    open func disableEditing() {}

    // MARK: Handoff

    /// The activity the document offers Handoff while it is open. For a document in a
    /// ubiquity container whose type declares `NSUbiquitousDocumentUserActivityType` (in
    /// `CFBundleDocumentTypes`), it is made automatically, of that type, with the document's URL
    /// in its `userInfo` (``userActivityURLKey``), as UIKit does; set your own (or nil) to change that.
    open var userActivity: NSUserActivity? {
        get { storedUserActivity }
        set {
            storedUserActivity = newValue
            userActivityWasSet = true
        }
    }

    /// Brings `userActivity`'s state up to date before it is sent: puts the document's URL in
    /// its `userInfo` under ``userActivityURLKey`` (on the other device, the same item's URL
    /// there). Override to add more, and call `super`.
    /// - Parameter userActivity: The activity.
    open func updateUserActivityState(_ userActivity: NSUserActivity) {
        userActivity.addUserInfoEntries(from: [Self.userActivityURLKey: fileURL])
    }

    /// Restores the state needed to continue `userActivity` (one from another device). Does
    /// nothing by default; override to read its `userInfo`.
    /// - Parameter userActivity: The activity to continue.
    open func restoreUserActivityState(_ userActivity: NSUserActivity) {}

    /// Called when editing may resume.
    open func enableEditing() {}

    func setEditingDisabled(_ disabled: Bool) {
        if disabled {
            updateState(inserting: .editingDisabled)
            disableEditing()
        } else {
            updateState(removing: .editingDisabled)
            enableEditing()
        }
    }

    // MARK: Errors

    /// Called with every error from opening, saving and reverting. The default logs it and
    /// calls ``finishedHandlingError(_:recovered:)`` with `recovered: false`.
    /// - Parameters:
    ///   - error: The error, usually a ``DocumentError`` naming the file and cause.
    ///   - userInteractionPermitted: Whether you may ask the user about it.
    open func handleError(_ error: any Error, userInteractionPermitted: Bool) {
        logger.error("document error", metadata: ["document": "\(fileURL.path)", "error": "\(error)"])
        finishedHandlingError(error, recovered: false)
    }

    /// Tells the document that error handling is over.
    /// - Parameters:
    ///   - error: The error that was handled.
    ///   - recovered: Whether the problem was fixed.
    open func finishedHandlingError(_ error: any Error, recovered: Bool) {}

    /// Tells the document that it may no longer interact with the user about `error`.
    /// The default calls ``finishedHandlingError(_:recovered:)`` with `recovered: false`.
    /// - Parameter error: The error being handled.
    open func userInteractionNoLongerPermitted(forError error: any Error) {
        finishedHandlingError(error, recovered: false)
    }

    // MARK: NSFilePresenter (Apple lets a subclass override these, calling super)

    /// The document's file, as a presenter sees it.
    nonisolated open var presentedItemURL: URL? { presented.withLock { $0 } }

    /// A private serial queue; the document handles each callback on the main queue.
    nonisolated open var presentedItemOperationQueue: OperationQueue { presenterQueue }

    /// Saves unsaved changes before another process reads the file.
    /// - Parameter completionHandler: Called with nil, or the error if the save failed.
    nonisolated open func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        onMain { [self] in
            guard hasUnsavedChanges, !documentState.contains(.closed) else { return completionHandler(nil) }
            autosave { [fileURL] success in
                completionHandler(success ? nil : DocumentError(.saveFailed, "could not save before another access", url: fileURL))
            }
        }
    }

    /// Lets another process read; nothing to do while it reads.
    /// - Parameter reader: Called at once.
    nonisolated open func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        reader(nil)
    }

    /// Disables editing while another process writes the file; reverts afterwards if it changed.
    /// - Parameter writer: Called once editing is disabled, with the block that re-enables it.
    nonisolated open func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        onMain { [self] in
            relinquishCount += 1
            if relinquishCount == 1 { setEditingDisabled(true) }
            writer(mainQueueBlock { $0.reacquire() })
        }
    }

    /// Notes that the file changed (a coordinated write, or a change seen without coordination):
    /// reverts now, or when the current writer is done — unless the file (a flat file) is still
    /// the one the document last read or wrote, same size and modification time.
    nonisolated open func presentedItemDidChange() {
        onMain { [self] in
            if relinquishCount > 0 { revertWhenReacquired = true } else { revertToChangedFile() }
        }
    }

    /// A package document's member changed: the document reverts, as for any change.
    /// - Parameter url: The member.
    nonisolated open func presentedSubitemDidChange(at url: URL) { presentedItemDidChange() }

    /// A package document gained a member: the document reverts, as for any change.
    /// - Parameter url: The new member.
    nonisolated open func presentedSubitemDidAppear(at url: URL) { presentedItemDidChange() }

    /// A package document's member was renamed: the document reverts, as for any change.
    /// - Parameters:
    ///   - oldURL: Where the member was.
    ///   - newURL: Where it is now.
    nonisolated open func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) { presentedItemDidChange() }

    /// Follows the file to its new place.
    /// - Parameter newURL: Where the file is now.
    nonisolated open func presentedItemDidMove(to newURL: URL) {
        onMain { [self] in
            fileURL = newURL.standardizedFileURL
            refreshConflictState()
            userActivityURLChanged()
        }
    }

    /// Closes the document (without saving) because its file is being deleted.
    /// - Parameter completionHandler: Called with nil once the document is closed.
    nonisolated open func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        onMain { [self] in
            logger.notice("the document's file is being deleted; closing it", metadata: ["document": "\(fileURL.path)"])
            autosaveTask?.cancel()
            autosaveTask = nil
            stopPresenting()
            setState(.closed)
            completionHandler(nil)
        }
    }

    /// A conflict version (or any version) of the file appeared: the document re-checks
    /// whether it is in conflict.
    /// - Parameter version: The new version.
    nonisolated open func presentedItemDidGain(_ version: NSFileVersion) { refreshConflictState() }

    /// A version of the file was removed: the document re-checks whether it is in conflict.
    /// - Parameter version: The removed version.
    nonisolated open func presentedItemDidLose(_ version: NSFileVersion) { refreshConflictState() }

    /// Someone resolved a conflict version: the document re-checks whether it is in conflict.
    /// - Parameter version: The resolved version.
    nonisolated open func presentedItemDidResolveConflict(_ version: NSFileVersion) { refreshConflictState() }

    /// None: a document presents one file or package.
    nonisolated open var primaryPresentedItemURL: URL? { nil }

    /// Lets a member of a package document go (the document reverts when told it changed).
    /// - Parameters:
    ///   - url: The member being deleted.
    ///   - completionHandler: Called with nil at once.
    nonisolated open func accommodatePresentedSubitemDeletion(at url: URL, completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        completionHandler(nil)
    }

    /// Ignored: a document tracks versions of its whole file.
    /// - Parameters:
    ///   - url: The member.
    ///   - version: The version.
    nonisolated open func presentedSubitem(at url: URL, didGain version: NSFileVersion) {}

    /// Ignored: a document tracks versions of its whole file.
    /// - Parameters:
    ///   - url: The member.
    ///   - version: The version.
    nonisolated open func presentedSubitem(at url: URL, didLose version: NSFileVersion) {}

    /// Ignored: a document tracks versions of its whole file.
    /// - Parameters:
    ///   - url: The member.
    ///   - version: The version.
    nonisolated open func presentedSubitem(at url: URL, didResolve version: NSFileVersion) {}

    /// The ubiquity attributes whose changes the document hears of: none (override to observe
    /// some, such as `.ubiquitousItemDownloadingStatusKey`).
    nonisolated open var observedPresentedItemUbiquityAttributes: Set<URLResourceKey> { [] }

    /// Ignored unless a subclass observes attributes and overrides this.
    /// - Parameter attributes: The observed attributes that changed.
    nonisolated open func presentedItemDidChangeUbiquityAttributes(_ attributes: Set<URLResourceKey>) {}

    /// Refuses: an open document keeps its file's local copy (a subclass may close itself and
    /// agree). As Apple's presenters that do not implement it.
    /// - Parameter completionHandler: Called with an error at once.
    nonisolated open func accommodatePresentedItemEviction(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        completionHandler(CocoaError(.featureUnsupported, userInfo: [NSLocalizedDescriptionKey: "an open document keeps its file's local copy"]))
    }
}

/// UIKit's name for ``Document``, so code written for iOS compiles unchanged.
public typealias UIDocument = Document
