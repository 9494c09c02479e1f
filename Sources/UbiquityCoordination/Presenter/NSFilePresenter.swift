import Foundation

/// An object that presents a file or directory to the user and wants to know when others
/// read, change, move or delete it — Apple's `NSFilePresenter`.
///
/// Register with ``NSFileCoordinator/addFilePresenter(_:)``. Every requirement except
/// ``presentedItemURL`` and ``presentedItemOperationQueue`` has a default that does nothing
/// (or, for the relinquish and accommodate methods, lets the other access proceed at once).
/// Callbacks arrive on ``presentedItemOperationQueue``.
public protocol NSFilePresenter: AnyObject {
    /// The item presented, or nil.
    var presentedItemURL: URL? { get }
    /// The queue on which this presenter's methods are called.
    var presentedItemOperationQueue: OperationQueue { get }
    /// For a presenter of a secondary item (e.g. a sidecar file), the primary item's URL.
    var primaryPresentedItemURL: URL? { get }

    /// Someone is about to read the item: call `reader` (with a block to run when that read is
    /// over, if you need one) once you have stopped writing it.
    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void)
    /// Someone is about to write the item: call `writer` (with a block to run when that write
    /// is over) once you have stopped reading and writing it.
    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void)
    /// Save unsaved changes now, then call `completionHandler` (with an error if you could not).
    func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void)
    /// The item is about to be deleted: let go of it, then call `completionHandler`.
    func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void)
    /// The item moved or was renamed.
    func presentedItemDidMove(to newURL: URL)
    /// The item's contents or attributes changed.
    func presentedItemDidChange()

    /// An item inside the presented directory is about to be deleted.
    func accommodatePresentedSubitemDeletion(at url: URL, completionHandler: @escaping @Sendable ((any Error)?) -> Void)
    /// An item appeared inside the presented directory.
    func presentedSubitemDidAppear(at url: URL)
    /// An item inside the presented directory moved.
    func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL)
    /// An item inside the presented directory changed.
    func presentedSubitemDidChange(at url: URL)

    /// The item gained a version (a conflict version from another device, or one kept on purpose).
    func presentedItemDidGain(_ version: NSFileVersion)
    /// One of the item's versions was removed.
    func presentedItemDidLose(_ version: NSFileVersion)
    /// Someone else resolved one of the item's conflict versions.
    func presentedItemDidResolveConflict(_ version: NSFileVersion)
    /// An item inside the presented directory gained a version.
    func presentedSubitem(at url: URL, didGain version: NSFileVersion)
    /// An item inside the presented directory lost a version.
    func presentedSubitem(at url: URL, didLose version: NSFileVersion)
    /// Someone resolved a conflict version of an item inside the presented directory.
    func presentedSubitem(at url: URL, didResolve version: NSFileVersion)

    /// The ubiquity attributes (`URLResourceKey.ubiquitousItem…`) whose changes the presenter
    /// wants to hear of (``presentedItemDidChangeUbiquityAttributes(_:)``). Default: none.
    var observedPresentedItemUbiquityAttributes: Set<URLResourceKey> { get }
    /// Some of ``observedPresentedItemUbiquityAttributes`` changed for the item (downloaded,
    /// uploaded, a conflict appeared…): those that did.
    func presentedItemDidChangeUbiquityAttributes(_ attributes: Set<URLResourceKey>)
    /// The item's local copy is about to be evicted (replaced by its metadata): let go of it
    /// (remove the presenter), then call `completionHandler` — or pass it an error to prevent
    /// the eviction. Default: prevents it, as Apple's does when a presenter does not implement it.
    func accommodatePresentedItemEviction(completionHandler: @escaping @Sendable ((any Error)?) -> Void)
}

extension NSFilePresenter {
    /// No ubiquity attributes observed.
    public var observedPresentedItemUbiquityAttributes: Set<URLResourceKey> { [] }
    /// Does nothing.
    public func presentedItemDidChangeUbiquityAttributes(_ attributes: Set<URLResourceKey>) {}
    /// Prevents the eviction (Apple: "If this method is not implemented, eviction will fail").
    public func accommodatePresentedItemEviction(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        completionHandler(CocoaError(.featureUnsupported, userInfo: [NSLocalizedDescriptionKey: "the file presenter does not accommodate eviction"]))
    }
    /// No primary item.
    public var primaryPresentedItemURL: URL? { nil }
    /// Lets the reader proceed at once.
    public func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) { reader(nil) }
    /// Lets the writer proceed at once.
    public func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) { writer(nil) }
    /// Nothing to save.
    public func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void) { completionHandler(nil) }
    /// Nothing to let go of.
    public func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void) { completionHandler(nil) }
    /// Ignored.
    public func presentedItemDidMove(to newURL: URL) {}
    /// Ignored.
    public func presentedItemDidChange() {}
    /// Nothing to let go of.
    public func accommodatePresentedSubitemDeletion(at url: URL, completionHandler: @escaping @Sendable ((any Error)?) -> Void) { completionHandler(nil) }
    /// Ignored.
    public func presentedSubitemDidAppear(at url: URL) {}
    /// Ignored.
    public func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) {}
    /// Ignored.
    public func presentedSubitemDidChange(at url: URL) {}
    /// Ignored.
    public func presentedItemDidGain(_ version: NSFileVersion) {}
    /// Ignored.
    public func presentedItemDidLose(_ version: NSFileVersion) {}
    /// Ignored.
    public func presentedItemDidResolveConflict(_ version: NSFileVersion) {}
    /// Ignored.
    public func presentedSubitem(at url: URL, didGain version: NSFileVersion) {}
    /// Ignored.
    public func presentedSubitem(at url: URL, didLose version: NSFileVersion) {}
    /// Ignored.
    public func presentedSubitem(at url: URL, didResolve version: NSFileVersion) {}
}
