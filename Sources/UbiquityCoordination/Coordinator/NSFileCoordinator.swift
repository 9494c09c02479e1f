import Foundation
import Logging
import Synchronization

/// A pointer through which an Objective-C-style method returns an error, as in Apple's API:
/// `var error: NSError?; coordinator.coordinate(readingItemAt: url, error: &error) { … }`.
public typealias NSErrorPointer = UnsafeMutablePointer<NSError?>?

/// Coordinates reads and writes of files and directories between threads and processes,
/// with Apple's `NSFileCoordinator` API.
///
/// A coordinated write excludes every other coordinated read and write of the same item — and
/// of items inside it, when it is a directory — in this process and in every other process of
/// the user (see ``FileCoordinationLocks``); coordinated reads share. Before the access, the
/// item's ``NSFilePresenter``s are asked to save and to relinquish it; afterwards they are told
/// what changed. A presenter that does not answer within ``presenterTimeout`` is skipped and
/// the event logged, so no presenter can block others forever.
///
/// Coordinating again from inside an accessor on the same thread is allowed: locks the
/// thread already holds are not taken twice.
public final class NSFileCoordinator: Sendable {
    /// Options for coordinated reading.
    public struct ReadingOptions: OptionSet, Sendable {
        /// The raw bits.
        public let rawValue: UInt
        /// Creates options.
        /// - Parameter rawValue: The bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Do not ask presenters to save first: read what is on disk.
        public static let withoutChanges = ReadingOptions(rawValue: 1 << 0)
        /// If the item is a symbolic link, coordinate (and read) its destination.
        public static let resolvesSymbolicLink = ReadingOptions(rawValue: 1 << 1)
        /// Only metadata is read: presenters are not asked to save.
        public static let immediatelyAvailableMetadataOnly = ReadingOptions(rawValue: 1 << 2)
        /// The reader gets a private snapshot copy of the item, removed after the accessor returns.
        public static let forUploading = ReadingOptions(rawValue: 1 << 3)
    }

    /// Options for coordinated writing.
    public struct WritingOptions: OptionSet, Sendable {
        /// The raw bits.
        public let rawValue: UInt
        /// Creates options.
        /// - Parameter rawValue: The bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// The item will be deleted: presenters accommodate the deletion instead of saving.
        public static let forDeleting = WritingOptions(rawValue: 1 << 0)
        /// The item will be moved; call ``NSFileCoordinator/item(at:didMoveTo:)`` from the accessor.
        public static let forMoving = WritingOptions(rawValue: 1 << 1)
        /// The contents will be merged with what presenters hold: they save first.
        public static let forMerging = WritingOptions(rawValue: 1 << 2)
        /// The contents will be replaced wholesale: presenters are not asked to save.
        public static let forReplacing = WritingOptions(rawValue: 1 << 3)
        /// Only metadata that does not affect contents changes: presenters are not disturbed.
        public static let contentIndependentMetadataOnly = WritingOptions(rawValue: 1 << 4)
        /// The item's local copy will be evicted (Ubiquity's, for the sync agent; Apple's
        /// eviction does this inside `evictUbiquitousItem(at:)`): its presenters are asked to
        /// accommodate the eviction (``NSFilePresenter/accommodatePresentedItemEviction(completionHandler:)``),
        /// and the access fails, running nothing, if one of them refuses.
        package static let forEvicting = WritingOptions(rawValue: 1 << 16)
    }

    struct State {
        var purposeIdentifier = UUID().uuidString
        var cancelled = false
        var presenterTimeout: Duration
        /// Moves announced by ``NSFileCoordinator/item(at:didMoveTo:)`` during the current
        /// access, as (old canonical path, old path, new path): presenters in other processes
        /// hear of them when the access finishes, and moved items get no change notice.
        var moves: [[String]] = []
    }

    let state: Mutex<State>
    /// The presenter on whose behalf this coordinator acts; it is not asked to relinquish to itself.
    /// (Presenters are not `Sendable`, as Apple's are not: this one is only compared and asked on its own queue.)
    nonisolated(unsafe) public let filePresenter: (any NSFilePresenter)?
    /// The locks this coordinator takes.
    public let locks: FileCoordinationLocks
    /// Where presenter time-outs and other events are logged.
    public let logger: Logger

    /// Creates a coordinator.
    /// - Parameter filePresenter: The presenter whose own accesses these are, or nil.
    public convenience init(filePresenter: (any NSFilePresenter)? = nil) {
        self.init(filePresenter: filePresenter, locks: .shared)
    }

    /// Creates a coordinator with explicit locks, logger and presenter time-out.
    /// - Parameters:
    ///   - filePresenter: The presenter whose own accesses these are, or nil.
    ///   - locks: The lock directory to use.
    ///   - logger: Where to log.
    ///   - presenterTimeout: How long to wait for a presenter's answer.
    public init(
        filePresenter: (any NSFilePresenter)?,
        locks: FileCoordinationLocks,
        logger: Logger = Logger(label: "ubiquity.coordination"),
        presenterTimeout: Duration = .seconds(5)
    ) {
        self.filePresenter = filePresenter
        self.locks = locks
        self.logger = logger
        self.state = Mutex(State(presenterTimeout: presenterTimeout))
    }

    /// Identifies the operation this coordinator performs; coordinators with the same purpose
    /// do not block one another's presenters. Defaults to a unique string.
    public var purposeIdentifier: String {
        get { state.withLock { $0.purposeIdentifier } }
        set { state.withLock { $0.purposeIdentifier = newValue } }
    }

    /// How long to wait for a presenter to save, relinquish or accommodate. Default 5 seconds.
    public var presenterTimeout: Duration {
        get { state.withLock { $0.presenterTimeout } }
        set { state.withLock { $0.presenterTimeout = newValue } }
    }

    // MARK: Presenters

    /// Registers a presenter with the process, so coordinated accesses tell it about its item.
    /// - Parameter filePresenter: The presenter (held weakly).
    public static func addFilePresenter(_ filePresenter: any NSFilePresenter) {
        PresenterRegistry.shared.add(filePresenter)
    }

    /// Unregisters a presenter.
    /// - Parameter filePresenter: The presenter.
    public static func removeFilePresenter(_ filePresenter: any NSFilePresenter) {
        PresenterRegistry.shared.remove(filePresenter)
    }

    /// The presenters registered in this process.
    public static var filePresenters: [any NSFilePresenter] { PresenterRegistry.shared.all }

    // MARK: Cancelling

    /// Cancels access this coordinator is waiting for: the pending call fails with
    /// ``FileCoordinationError/Code/cancelled`` and its accessor is not run.
    public func cancel() {
        state.withLock { $0.cancelled = true }
    }

    var isCancelled: Bool { state.withLock { $0.cancelled } }
}
