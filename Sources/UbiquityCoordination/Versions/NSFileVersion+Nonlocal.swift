import Foundation
import Synchronization
import UbiquityFiles

/// One version of an item that the server keeps (an earlier revision), as the sync client
/// reports it to ``NSFileVersion/getNonlocalVersionsOfItem(at:completionHandler:)``.
package struct NonlocalVersionRecord: Sendable, Equatable {
    /// The server's revision id.
    package var revision: String
    /// The item's name in that revision.
    package var name: String
    /// The device that saved it.
    package var savingComputer: String
    /// When it was modified.
    package var modificationDate: Date
    /// Bytes of contents.
    package var size: Int64
    /// The account of the person who made it, when that is another person (a shared item).
    package var originator: String?

    /// Creates a record.
    package init(revision: String, name: String, savingComputer: String, modificationDate: Date, size: Int64, originator: String? = nil) {
        self.originator = originator
        self.revision = revision
        self.name = name
        self.savingComputer = savingComputer
        self.modificationDate = modificationDate
        self.size = size
    }
}

extension NonlocalVersionRecord {
    /// The record a nonlocal version keeps in the item's store (the server's revision as its id).
    var versionRecord: VersionRecord {
        VersionRecord(id: revision, kind: .other, isResolved: true, isDiscardable: true, localizedName: name,
                      savingComputer: savingComputer, modificationDate: modificationDate, addedDate: Date(), size: size, originator: originator)
    }
}

extension NSFileVersion {
    /// The prefix of a nonlocal version's ``versionIdentifier`` (the rest is the server's revision).
    static let nonlocalPrefix = "nonlocal-"

    /// Where listings run: a serial queue of its own (asking the agent blocks; never on the
    /// threads Swift's concurrency runs on).
    private static let nonlocalQueue = DispatchQueue(label: "Ubiquity.NSFileVersion.Nonlocal")

    private static let lister = Mutex<(@Sendable (URL) throws -> [NonlocalVersionRecord]?)?>(nil)

    /// What lists an item's nonlocal versions: the ubiquity client installs a function that asks
    /// the sync agent (which asks the server) and returns nil for an item not in a ubiquity
    /// container. Nil (the default): no item has nonlocal versions.
    package static var nonlocalVersionLister: (@Sendable (URL) throws -> [NonlocalVersionRecord]?)? {
        get { lister.withLock { $0 } }
        set { lister.withLock { $0 = newValue } }
    }

    /// Lists, in the background, the versions of a ubiquitous item that the server keeps and
    /// this device may not have — its earlier revisions, newest first, for the server's
    /// retention (30 days by default) — as Apple's.
    ///
    /// The versions' ``hasLocalContents`` is false until their contents are downloaded: perform
    /// a coordinated read of a version's ``url`` (`NSFileCoordinator`), which downloads it (only
    /// the chunks the device lacks), then read it or ``replaceItem(at:options:)`` with it. An
    /// item outside the ubiquity containers has none (an empty array).
    /// - Parameters:
    ///   - url: The item.
    ///   - completionHandler: Called on a background queue with the versions, or nil and the
    ///     error (no such item; the agent or the server cannot be asked).
    public class func getNonlocalVersionsOfItem(at url: URL, completionHandler: @escaping @Sendable ([NSFileVersion]?, (any Error)?) -> Void) {
        nonlocalQueue.async {
            do { completionHandler(try nonlocalVersions(ofItemAt: url), nil) } catch { completionHandler(nil, error) }
        }
    }

    /// The versions of a ubiquitous item that the server keeps; see
    /// ``getNonlocalVersionsOfItem(at:completionHandler:)``.
    /// - Parameter url: The item.
    /// - Returns: The versions, newest first.
    /// - Throws: `CocoaError(.fileReadNoSuchFile)` for no such item, or why the server could not be asked.
    public class func nonlocalVersionsOfItem(at url: URL) async throws -> [NSFileVersion] {
        try await withCheckedThrowingContinuation { continuation in
            getNonlocalVersionsOfItem(at: url) { versions, error in
                if let versions { continuation.resume(returning: versions) } else { continuation.resume(throwing: error ?? CocoaError(.fileReadUnknown)) }
            }
        }
    }

    /// The nonlocal versions, synchronously (the work of ``getNonlocalVersionsOfItem(at:completionHandler:)``).
    static func nonlocalVersions(ofItemAt url: URL) throws -> [NSFileVersion] {
        let item = url.standardizedFileURL
        // An item evicted from this device (not on disk) still has versions on the server: the
        // lister knows it; an item it does not know must be on disk.
        guard let records = try nonlocalVersionLister?(item) else {
            guard try POSIX.status(item.path) != nil else { throw CocoaError(.fileReadNoSuchFile, userInfo: [NSFilePathErrorKey: item.path]) }
            return []
        }
        let store = try VersionStore(item: item)
        return records.compactMap { record in
            guard VersionStore.isValidRevision(record.revision) else {
                VersionStore.logger.warning("skipping a nonlocal version whose revision id cannot name a folder", metadata: ["item": "\(item.path)", "revision": "\(record.revision)"])
                return nil
            }
            return NSFileVersion(item: item, nonlocal: record.versionRecord, store: store)
        }
    }

    /// The item and revision a nonlocal version's ``url`` stands for, or nil if `url` is not one
    /// (what the ubiquity client's downloader asks, to download it on a coordinated read).
    /// - Parameter url: A URL.
    package static func nonlocalVersionAddress(of url: URL) -> (item: URL, revision: String)? {
        let parts = url.standardizedFileURL.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        // …/DIR/.ubiquity-versions/NAME/.nonlocal/REV/NAME
        guard parts.count >= 5 else { return nil }
        let n = parts.count
        guard parts[n - 3] == VersionStore.nonlocalFolderName, parts[n - 5] == VersionStore.directoryName, parts[n - 4] == parts[n - 1],
              VersionStore.isValidRevision(parts[n - 2]) else { return nil }
        let directory = "/" + parts[..<(n - 5)].joined(separator: "/")
        return (URL(fileURLWithPath: directory).appendingPathComponent(parts[n - 1]), parts[n - 2])
    }

    /// Where a nonlocal version's contents go when downloaded.
    /// - Parameters:
    ///   - url: The item.
    ///   - revision: The server's revision.
    /// - Throws: ``FileAccessError`` for an item that keeps no versions, or a revision id that
    ///   cannot name a folder (letters, digits, `-`, `_`; at most 128).
    package static func nonlocalContentsURL(ofItemAt url: URL, revision: String) throws -> URL {
        guard VersionStore.isValidRevision(revision) else { throw FileAccessError(.invalidName, "not a revision id: \(revision)", path: url.path) }
        return URL(fileURLWithPath: try VersionStore(item: url.standardizedFileURL).nonlocalContentsPath(revision))
    }

    /// Keeps a downloaded nonlocal version (the sync agent's part): its contents, prepared at
    /// `contentsURL` on the item's file system, are moved into the item's version store.
    /// - Parameters:
    ///   - url: The item.
    ///   - contentsURL: The downloaded contents (moved).
    ///   - record: What the server said of the version.
    /// - Throws: ``FileAccessError``; nothing is kept then.
    package static func storeNonlocalVersion(ofItemAt url: URL, contentsAt contentsURL: URL, record: NonlocalVersionRecord) throws {
        let store = try VersionStore(item: url.standardizedFileURL)
        try store.storeNonlocal(contentsAt: contentsURL.standardizedFileURL.path, record: record.versionRecord)
    }

    /// A nonlocal version whose contents were downloaded (found again by its persistent identifier).
    static func downloadedNonlocalVersion(ofItemAt url: URL, revision: String) -> NSFileVersion? {
        guard let store = try? VersionStore(item: url.standardizedFileURL), let record = try? store.nonlocalRecord(revision) else { return nil } // Apple's API: nil
        return NSFileVersion(item: url.standardizedFileURL, nonlocal: record, store: store)
    }
}
