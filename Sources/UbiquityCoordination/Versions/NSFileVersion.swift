import CUbiquitySystem
import Foundation
import Logging
import Synchronization
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// A version of a file or package — the current one, a conflict version another device made,
/// or an earlier state kept on purpose — Apple's `NSFileVersion`.
///
/// Versions other than the current one live in a store beside the item
/// (`DIR/.ubiquity-versions/NAME/`, hidden, never synced as a document). The store follows
/// the item through coordinated moves (``NSFileCoordinator/item(at:didMoveTo:)``), is deleted
/// with it by a coordinated `.forDeleting` write, survives restarts, and is bounded
/// (``maximumStorageBytesPerItem``). Presenters of the item hear about versions appearing,
/// disappearing and being resolved — also when another process changes the store — through
/// ``NSFilePresenter/presentedItemDidGain(_:)`` and its siblings.
///
/// As on Apple's platforms, replacing an item with a version is the caller's write: do it in a
/// coordinated write of the item.
public final class NSFileVersion: NSObject, @unchecked Sendable { // unchecked: its stored properties are constants and a Mutex
    /// Options for ``addOfItem(at:withContentsOf:options:)``.
    public struct AddingOptions: OptionSet, Sendable {
        /// The raw bits.
        public let rawValue: UInt
        /// Creates options from raw bits.
        /// - Parameter rawValue: The bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Move the contents into the store instead of copying them.
        public static let byMoving = AddingOptions(rawValue: 1 << 0)
    }

    /// Options for ``replaceItem(at:options:)``.
    public struct ReplacingOptions: OptionSet, Sendable {
        /// The raw bits.
        public let rawValue: UInt
        /// Creates options from raw bits.
        /// - Parameter rawValue: The bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Move the version's contents into place (the version is removed) instead of copying them.
        public static let byMoving = ReplacingOptions(rawValue: 1 << 0)
    }

    /// A version's stable identity as a Swift value (``versionIdentifier``): `Codable`,
    /// `Hashable`, and found again with ``version(itemAt:forPersistentIdentifier:)``.
    public struct PersistentIdentifier: Codable, Hashable, Sendable, CustomStringConvertible {
        /// The identifier's text: a UUID, or `current` for the current version.
        public let rawValue: String
        /// Wraps an identifier's text.
        /// - Parameter rawValue: The text.
        public init(_ rawValue: String) { self.rawValue = rawValue }
        /// The current version of any item.
        public static let current = PersistentIdentifier("current")
        /// The identifier's text.
        public var description: String { rawValue }
    }

    /// How much one item's version store holds.
    public struct StorageUsage: Sendable, Equatable {
        /// Versions kept (other and conflict versions).
        public var versions: Int
        /// Bytes of their contents, each file counted once.
        public var bytes: Int64
        /// Of those, bytes in files shared by hard link with something outside the store (a
        /// package's unchanged members shared with the live item).
        public var sharedBytes: Int64
        /// The limit the store is kept under.
        public var limit: Int64
    }

    // MARK: Properties

    /// Where the version's contents are: the item itself for the current version.
    public let url: URL
    /// The item's name when the version was made.
    public let localizedName: String?
    /// The name of the computer that saved this version.
    public let localizedNameOfSavingComputer: String?
    /// When the version's contents were last modified.
    public let modificationDate: Date?
    /// The version's stable identity as a Swift value (Ubiquity's addition; Apple's is
    /// ``persistentIdentifier``).
    public let versionIdentifier: PersistentIdentifier
    /// The version's stable identity, as Apple's: an object to archive with `NSKeyedArchiver`
    /// (secure coding too — it is an `NSString`), keep across launches, and give back to
    /// ``version(itemAt:forPersistentIdentifier:)``.
    public var persistentIdentifier: any NSCoding { NSString(string: versionIdentifier.rawValue) }
    /// Whether the version has a thumbnail: never (Ubiquity makes none).
    public var hasThumbnail: Bool { false }
    /// The name of the person who made the version, for a shared item another person changed
    /// (a share's owner or participant: their account name as `givenName`); nil when the item
    /// is not shared or this account made it, as Apple's.
    public var originatorNameComponents: PersonNameComponents? { originator.map(Self.nameComponents) }
    /// The account of the person who made the version, when that is another person.
    private let originator: String?
    /// Whether this is a conflict version (made elsewhere at the same time as the current one).
    public let isConflict: Bool
    /// Whether the contents are on this device: false for a nonlocal version
    /// (``getNonlocalVersionsOfItem(at:completionHandler:)``) until a coordinated read of its
    /// ``url`` downloads it.
    public var hasLocalContents: Bool {
        guard nonlocalRevision != nil else { return true }
        return (try? POSIX.status(url.path)) != nil // unreadable counts as not here: reading it downloads again
    }
    /// The item this is a version of.
    public let itemURL: URL
    /// Bytes of the version's contents.
    public let size: Int64

    private let flags: Mutex<(resolved: Bool, discardable: Bool)>
    private let store: VersionStore?
    /// For a nonlocal version: the server's revision it is.
    let nonlocalRevision: String?

    /// Whether a conflict version has been resolved. Setting it persists the change (and tells
    /// the item's presenters); resolved conflicts are no longer "unresolved" and may be removed
    /// to keep the store within its limit. Errors are logged; use ``setResolved(_:)`` to see them.
    public var isResolved: Bool {
        get { flags.withLock { $0.resolved } }
        set {
            do { try setResolved(newValue) } catch {
                VersionStore.logger.error("could not persist a version's resolved state", metadata: ["version": "\(versionIdentifier)", "error": "\(error)"])
            }
        }
    }

    /// Whether the version may be removed to keep the store within its limit. Setting it
    /// persists the change; errors are logged (``setDiscardable(_:)`` throws them).
    public var isDiscardable: Bool {
        get { flags.withLock { $0.discardable } }
        set {
            do { try setDiscardable(newValue) } catch {
                VersionStore.logger.error("could not persist a version's discardable state", metadata: ["version": "\(versionIdentifier)", "error": "\(error)"])
            }
        }
    }

    /// A one-line description.
    override public var description: String {
        let kind = nonlocalRevision != nil ? "nonlocal" : store == nil ? "current" : isConflict ? (isResolved ? "resolved conflict" : "conflict") : "other"
        return "NSFileVersion(\(kind) \(versionIdentifier) of \(itemURL.path), \(localizedNameOfSavingComputer ?? "?"), \(modificationDate.map { "\($0)" } ?? "?"))"
    }

    init(item: URL, record: VersionRecord, store: VersionStore) {
        itemURL = item
        url = URL(fileURLWithPath: store.contentsPath(of: record.id))
        localizedName = record.localizedName
        localizedNameOfSavingComputer = record.savingComputer
        originator = record.originator
        modificationDate = record.modificationDate
        versionIdentifier = PersistentIdentifier(record.id)
        isConflict = record.kind == .conflict
        size = record.size
        flags = Mutex((record.isResolved, record.isDiscardable))
        self.store = store
        nonlocalRevision = nil
        super.init()
    }

    /// A version the server keeps and this device may not have (its contents come down into
    /// the item's version store when read).
    init(item: URL, nonlocal record: VersionRecord, store: VersionStore) {
        itemURL = item
        url = URL(fileURLWithPath: store.nonlocalContentsPath(record.id))
        localizedName = record.localizedName
        localizedNameOfSavingComputer = record.savingComputer
        originator = record.originator
        modificationDate = record.modificationDate
        versionIdentifier = PersistentIdentifier(Self.nonlocalPrefix + record.id)
        isConflict = false
        size = record.size
        flags = Mutex((true, true))
        self.store = nil
        nonlocalRevision = record.id
        super.init()
    }

    private init(current item: URL, status: NodeStatus) {
        itemURL = item
        url = item
        localizedName = item.lastPathComponent
        localizedNameOfSavingComputer = Self.savingComputer(ofItemAt: item.path) ?? Self.thisComputer
        originator = Self.attribute(Self.originatorAttribute, ofItemAt: item.path)
        modificationDate = status.modificationDate
        versionIdentifier = .current
        isConflict = false
        size = status.kind == .directory ? ((try? POSIX.treeUsage(item.path).bytes) ?? 0) : status.size // a size only: unreadable counts 0
        flags = Mutex((true, false))
        store = nil
        nonlocalRevision = nil
        super.init()
    }

    // MARK: Finding versions

    /// The item's current version (the item itself), or nil if there is no item.
    /// - Parameter url: The item.
    public class func currentVersionOfItem(at url: URL) -> NSFileVersion? {
        guard let status = try? POSIX.status(url.standardizedFileURL.path) else { return nil } // Apple's API: nil when it cannot be read
        return NSFileVersion(current: url.standardizedFileURL, status: status)
    }

    /// The item's other versions — conflict versions and versions kept on purpose — oldest
    /// first; nil if there is no item or its store cannot be read.
    /// - Parameter url: The item.
    public class func otherVersionsOfItem(at url: URL) -> [NSFileVersion]? {
        do { return try versions(ofItemAt: url) } catch {
            VersionStore.logger.error("cannot list versions", metadata: ["item": "\(url.path)", "error": "\(error)"])
            return nil
        }
    }

    /// The item's conflict versions nobody has resolved yet, oldest first; nil if there is no
    /// item or its store cannot be read.
    /// - Parameter url: The item.
    public class func unresolvedConflictVersionsOfItem(at url: URL) -> [NSFileVersion]? {
        otherVersionsOfItem(at: url)?.filter { $0.isConflict && !$0.isResolved }
    }

    /// The version with a persistent identifier — what ``persistentIdentifier`` was (also after
    /// an `NSKeyedArchiver` round trip, in another process), a ``PersistentIdentifier``, or
    /// its text — or nil.
    /// - Parameters:
    ///   - url: The item.
    ///   - persistentIdentifier: What ``persistentIdentifier`` was.
    public class func version(itemAt url: URL, forPersistentIdentifier persistentIdentifier: Any) -> NSFileVersion? {
        let id: String
        switch persistentIdentifier {
        case let identifier as PersistentIdentifier: id = identifier.rawValue
        case let text as NSString: id = text as String
        case let text as String: id = text
        default: return nil
        }
        if id == PersistentIdentifier.current.rawValue { return currentVersionOfItem(at: url) }
        if id.hasPrefix(nonlocalPrefix) { return downloadedNonlocalVersion(ofItemAt: url, revision: String(id.dropFirst(nonlocalPrefix.count))) }
        guard let store = try? VersionStore(item: url), let record = try? store.record(id) else { return nil } // Apple's API: nil, not an error
        return NSFileVersion(item: url.standardizedFileURL, record: record, store: store)
    }

    /// All versions in the store, throwing what goes wrong.
    /// - Parameter url: The item.
    /// - Throws: ``FileAccessError`` (`.notFound` if there is no item).
    public class func versions(ofItemAt url: URL) throws -> [NSFileVersion] {
        let item = url.standardizedFileURL
        guard try POSIX.status(item.path) != nil else { throw FileAccessError(.notFound, "no such item", path: item.path, errno: ENOENT) }
        let store = try VersionStore(item: item)
        return try store.list().map { NSFileVersion(item: item, record: $0, store: store) }
    }

    // MARK: Adding and removing

    /// Keeps the contents at `contentsURL` as a new (non-conflict) version of the item.
    /// - Parameters:
    ///   - url: The item.
    ///   - contentsURL: The version's contents (a file or package), copied — or moved, with
    ///     `.byMoving` (use ``temporaryDirectoryURLForNewVersionOfItem(at:)`` to prepare them).
    ///   - options: `.byMoving`, or none.
    /// - Returns: The new version.
    /// - Throws: ``FileAccessError``; nothing is added, and `contentsURL` is untouched.
    public class func addOfItem(at url: URL, withContentsOf contentsURL: URL, options: AddingOptions = []) throws -> NSFileVersion {
        try add(ofItemAt: url, contents: contentsURL, conflict: false, savingComputer: thisComputer, modificationDate: nil, byMoving: options.contains(.byMoving), discardable: false)
    }

    /// Adds a version on behalf of the sync agent or local history.
    package class func add(
        ofItemAt url: URL, contents contentsURL: URL, conflict: Bool, savingComputer: String?,
        modificationDate: Date?, byMoving: Bool, discardable: Bool, allowLink: Bool = false, identifier: String? = nil, originator: String? = nil
    ) throws -> NSFileVersion {
        let item = url.standardizedFileURL
        let store = try VersionStore(item: item)
        let source = contentsURL.standardizedFileURL.path
        let modified = try modificationDate ?? POSIX.status(source)?.modificationDate ?? Date()
        let record = try store.add(contentsOf: source, byMoving: byMoving, allowLink: allowLink, identifier: identifier) { id, size in
            VersionRecord(
                id: id, kind: conflict ? .conflict : .other, isResolved: false, isDiscardable: discardable, localizedName: item.lastPathComponent,
                savingComputer: savingComputer, modificationDate: modified, addedDate: Date(), size: size, originator: originator)
        }
        do { try store.enforce(limit: maximumStorageBytesPerItem) } catch {
            VersionStore.logger.warning("could not bring the version store within its limit", metadata: ["item": "\(item.path)", "error": "\(error)"])
        }
        return NSFileVersion(item: item, record: record, store: store)
    }

    /// Adds a conflict version the sync agent received from another device.
    /// - Parameters:
    ///   - url: The item in conflict.
    ///   - contentsURL: The other device's contents.
    ///   - savingComputer: The other device's name.
    ///   - modificationDate: When the other device saved them.
    ///   - byMoving: Move `contentsURL` into the store instead of copying it.
    ///   - identifier: The version's persistent identifier (letters, digits, `-`; at most 64),
    ///     so the agent finds it again; nil for a new unique one.
    ///   - originator: The account of the person who made it, when that is another person (a
    ///     shared item's owner or participant).
    package class func addConflictVersion(
        ofItemAt url: URL, withContentsOf contentsURL: URL, savingComputer: String, modificationDate: Date, byMoving: Bool = false, identifier: String? = nil,
        originator: String? = nil
    ) throws -> NSFileVersion {
        try add(ofItemAt: url, contents: contentsURL, conflict: true, savingComputer: savingComputer, modificationDate: modificationDate, byMoving: byMoving,
                discardable: false, identifier: identifier, originator: originator)
    }

    /// Removes what processes that died left where versions of `url` are prepared (see
    /// ``temporaryDirectoryURLForNewVersionOfItem(at:)``). The agent calls it when it finds the
    /// version it was adding when killed already in place.
    package class func removeAbandonedStaging(nearItemAt url: URL) {
        VersionStore.removeAbandonedStaging(nearItemAt: url)
    }

    /// Removes what this process was preparing anywhere in `folder`'s version stores: a folder
    /// the agent moved away while it prepared a version inside (its writer then worked on the
    /// old path, and could not clean up after itself — found by `ubiquity-chaos --sealed-share`,
    /// seed 12: a share's folder kept aside when access ended).
    package class func removeThisProcessStaging(under folder: URL) {
        VersionStore.removeThisProcessStaging(under: folder)
    }

    /// A new, empty directory on the item's file system in which to prepare a version's
    /// contents for ``addOfItem(at:withContentsOf:options:)`` with `.byMoving`.
    /// - Parameter url: The item.
    public class func temporaryDirectoryURLForNewVersionOfItem(at url: URL) -> URL {
        do {
            return URL(fileURLWithPath: try VersionStore(item: url.standardizedFileURL).makeStagingDirectory(), isDirectory: true)
        } catch {
            VersionStore.logger.warning("cannot make a staging directory beside the item; using the temporary directory", metadata: ["item": "\(url.path)", "error": "\(error)"])
            let fallback = FileManager.default.temporaryDirectory.appendingPathComponent("ubiquity-version-\(UUID().uuidString)", isDirectory: true)
            try? FileManager.default.createDirectory(at: fallback, withIntermediateDirectories: true) // a failure surfaces when the URL is written
            return fallback
        }
    }

    /// Removes every version of the item except the current one (conflict versions too).
    /// - Parameter url: The item.
    /// - Throws: ``FileAccessError``.
    public class func removeOtherVersionsOfItem(at url: URL) throws {
        try VersionStore(item: url.standardizedFileURL).removeAll()
    }

    /// The bytes the item's versions hold, and the limit.
    /// - Parameter url: The item.
    /// - Throws: ``FileAccessError``.
    public class func storageUsage(ofItemAt url: URL) throws -> StorageUsage {
        let usage = try VersionStore(item: url.standardizedFileURL).usage()
        return StorageUsage(versions: usage.versions, bytes: usage.bytes, sharedBytes: usage.sharedBytes, limit: maximumStorageBytesPerItem)
    }

    private static let limit = Mutex<Int64>(1 << 30)

    /// The most bytes one item's versions may hold (default 1 GiB). Beyond it the oldest
    /// discardable versions and resolved conflicts are removed; unresolved conflicts and
    /// versions not marked discardable never are.
    public static var maximumStorageBytesPerItem: Int64 {
        get { limit.withLock { $0 } }
        set { limit.withLock { $0 = max(0, newValue) } }
    }

    // MARK: Using a version

    /// Puts this version's contents at `url` (normally the item), replacing what is there.
    /// Do it inside a coordinated write of `url`.
    /// - Parameters:
    ///   - url: Where to put the contents.
    ///   - options: `.byMoving` moves the contents out of the store (the version is removed).
    /// - Returns: Where the contents are now (`url`).
    /// - Throws: ``FileAccessError`` (`.notFound` if the version was removed meanwhile); the
    ///   item at `url` is then unchanged.
    @discardableResult
    public func replaceItem(at url: URL, options: ReplacingOptions = []) throws -> URL {
        let target = url.standardizedFileURL
        let source = self.url.path
        if nonlocalRevision != nil, try POSIX.status(source) == nil, let download = NSFileCoordinator.ubiquitousItemDownloader {
            try download(self.url) // not here yet: it comes down first (as a coordinated read of `url` would make it)
        }
        guard try POSIX.status(source) != nil else {
            throw FileAccessError(.notFound, "the version no longer exists", path: source, errno: ENOENT)
        }
        if target.path == source { return target }
        try SafeSave.replaceItem(at: target) { temporary in
            if options.contains(.byMoving), store != nil {
                try POSIX.copyTree(source, to: temporary.path, allowLink: true)
            } else {
                try POSIX.copyTree(source, to: temporary.path, allowLink: false)
            }
        }
        if options.contains(.byMoving), let store {
            try store.remove(versionIdentifier.rawValue)
        }
        return target
    }

    /// Removes this version from the store.
    /// - Throws: ``FileAccessError``: `.notFound` if it was removed already; `.unsupportedItem`
    ///   for the current version, which cannot be removed.
    public func remove() throws {
        if let nonlocalRevision {
            // Its downloaded copy goes; the server keeps the revision for its retention.
            return try VersionStore(item: itemURL).removeNonlocal(nonlocalRevision)
        }
        guard let store else { throw FileAccessError(.unsupportedItem, "the current version cannot be removed", path: itemURL.path) }
        try store.remove(versionIdentifier.rawValue)
    }

    /// Sets and persists ``isResolved``.
    /// - Parameter resolved: The new value.
    /// - Throws: ``FileAccessError``. A version removed meanwhile is resolved in every sense
    ///   that matters: marking it resolved then succeeds.
    public func setResolved(_ resolved: Bool) throws {
        guard let store, isConflict else { return }
        flags.withLock { $0.resolved = resolved }
        do {
            try store.update(versionIdentifier.rawValue) { $0.isResolved = resolved }
        } catch let error as FileAccessError where error.code == .notFound && resolved {
            // Removed already (removeOtherVersionsOfItem first, as the guide does): resolved.
        }
    }

    /// Sets and persists ``isDiscardable``.
    /// - Parameter discardable: The new value.
    /// - Throws: ``FileAccessError`` (`.notFound` if the version was removed meanwhile).
    public func setDiscardable(_ discardable: Bool) throws {
        guard let store else { return }
        flags.withLock { $0.discardable = discardable }
        try store.update(versionIdentifier.rawValue) { $0.isDiscardable = discardable }
    }

    /// The extended attribute naming the device that saved an item's current contents, when
    /// they came from another device (a sync agent sets it on what it downloads; a save here
    /// makes a new file without it, so this computer is the saver again).
    static let savingComputerAttribute = "user.ubiquity.saving-computer"

    /// Records that the item at `path` (a file or a package) holds contents `computer` saved —
    /// for the current version's ``localizedNameOfSavingComputer``. Best effort: a file system
    /// without user extended attributes keeps no name, and this computer's is shown.
    package static func recordSavingComputer(_ computer: String, ofItemAt path: String) {
        let bytes = Array(computer.utf8.prefix(255))
        _ = ubq_set_attribute(path, savingComputerAttribute, bytes, UInt(bytes.count))
    }

    /// Forgets who saved the item at `path` (changed here in place: this computer saved it).
    /// Carries the versions of the item that was at `from` to `to`: it moved without
    /// `item(at:didMoveTo:)` (renamed by a program that does not coordinate, seen afterwards by
    /// the agent). A store of versions at `to` is replaced.
    /// - Throws: ``FileAccessError`` when the store cannot be moved.
    package static func carryVersions(ofItemMovedFrom from: URL, to: URL) throws {
        try VersionStore(item: from.standardizedFileURL).move(to: VersionStore(item: to.standardizedFileURL))
    }

    package static func forgetSavingComputer(ofItemAt path: String) {
        // None recorded (or no extended attributes): nothing to forget. This account saved it.
        _ = ubq_remove_attribute(path, savingComputerAttribute)
        _ = ubq_remove_attribute(path, originatorAttribute)
    }

    /// The extended attribute naming the account of the person who made an item's current
    /// contents, when that is another person (a shared item): the current version's
    /// ``originatorNameComponents``.
    static let originatorAttribute = "user.ubiquity.originator"

    /// Records (or, nil, forgets) that another person's account made the contents of the item at
    /// `path` — a shared item's owner or participant. Best effort, as ``recordSavingComputer(_:ofItemAt:)``.
    package static func recordOriginator(_ account: String?, ofItemAt path: String) {
        guard let account else {
            _ = ubq_remove_attribute(path, originatorAttribute)
            return
        }
        let bytes = Array(account.utf8.prefix(255))
        _ = ubq_set_attribute(path, originatorAttribute, bytes, UInt(bytes.count))
    }

    /// The device that saved the current contents of the item at `path`, if recorded.
    static func savingComputer(ofItemAt path: String) -> String? { attribute(savingComputerAttribute, ofItemAt: path) }

    /// A name recorded in extended attribute `name` of the item at `path`, if any.
    private static func attribute(_ name: String, ofItemAt path: String) -> String? {
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = ubq_get_attribute(path, name, &buffer, UInt(buffer.count))
        guard count > 0 else { return nil }
        return String(decoding: buffer.prefix(count), as: UTF8.self)
    }

    /// An account's name as Apple's person-name values carry it: the name as `givenName`.
    /// - Parameter account: The account's name.
    /// - Returns: Its name components.
    package static func nameComponents(_ account: String) -> PersonNameComponents {
        var components = PersonNameComponents()
        components.givenName = account
        return components
    }

    /// This computer's name, as recorded for versions saved here.
    public static var thisComputer: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
