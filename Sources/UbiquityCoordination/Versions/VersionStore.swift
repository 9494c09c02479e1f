import Foundation
import Logging
import Synchronization
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// What is kept about one version, beside its contents.
struct VersionRecord: Codable, Sendable, Equatable {
    enum Kind: String, Codable, Sendable {
        /// Made on another device at the same time as the current version; someone must resolve it.
        case conflict
        /// An earlier state kept on purpose (`addOfItem`, local history).
        case other
    }

    var id: String
    var kind: Kind
    var isResolved: Bool
    var isDiscardable: Bool
    /// The item's name when the version was made.
    var localizedName: String
    var savingComputer: String?
    var modificationDate: Date
    var addedDate: Date
    /// Bytes of its contents.
    var size: Int64
    /// The account of the person who saved it, when that is another person (a shared item):
    /// ``NSFileVersion/originatorNameComponents``.
    var originator: String? = nil
}

/// One item's versions, kept beside it in `DIR/.ubiquity-versions/NAME/`.
///
/// ```
/// DIR/.ubiquity-versions/NAME/ID/record.json  the VersionRecord
/// DIR/.ubiquity-versions/NAME/ID/NAME         the contents (a file or a package), named like the item
/// DIR/.ubiquity-versions/NAME/generation      rewritten on every change, so watchers notice
/// DIR/.ubiquity-versions/NAME/.adding-ID      a version being added; renamed to ID when complete
/// DIR/.ubiquity-versions/.staging/UUID        temporaryDirectoryURLForNewVersionOfItem
/// ```
/// Every change is a coordinated write of `DIR/.ubiquity-versions/NAME` (every listing a
/// coordinated read), so processes never see a half-made change; a version appears by one
/// `rename` and disappears by one `rename` before its files are removed, so a crash leaves a
/// version either complete or absent.
struct VersionStore: Sendable {
    static let directoryName = ".ubiquity-versions"
    static let recordName = "record.json"
    static let generationName = "generation"

    /// The item's canonical path, its directory and its name.
    let itemPath: String
    let directory: String
    let name: String

    var root: String { directory + "/" + Self.directoryName }
    var folder: String { root + "/" + name }

    init(item url: URL) throws {
        let path = FileCoordinationLocks.canonicalPath(url)
        guard path != "/", !path.split(separator: "/").contains(Substring(Self.directoryName)) else {
            throw FileAccessError(.invalidName, "no versions are kept for this item", path: path)
        }
        itemPath = path
        directory = (path as NSString).deletingLastPathComponent
        name = (path as NSString).lastPathComponent
    }

    /// Whether a path lies inside some version store.
    static func isInsideStore(_ path: String) -> Bool {
        path.contains("/" + directoryName + "/") || path.hasSuffix("/" + directoryName)
    }

    func contentsPath(of id: String) -> String { folder + "/" + id + "/" + name }

    // MARK: Coordination

    private func reading<T>(_ body: () throws -> T) throws -> T {
        try NSFileCoordinator().coordinate(readingItemAt: URL(fileURLWithPath: folder), options: .withoutChanges) { _ in try body() }
    }

    private func writing<T>(_ body: () throws -> T) throws -> T {
        try NSFileCoordinator().coordinate(writingItemAt: URL(fileURLWithPath: folder), options: .forReplacing) { _ in try body() }
    }

    // MARK: Reading

    /// Every complete version, oldest first. A version whose record cannot be read is skipped
    /// (and logged), never deleted.
    func list() throws -> [VersionRecord] {
        try reading { try listUnlocked() }
    }

    /// Every complete version, read without coordination (for the watcher, which must not take
    /// part in coordination from its own thread).
    func listUncoordinated() throws -> [VersionRecord] { try listUnlocked() }

    private func listUnlocked() throws -> [VersionRecord] {
        guard try POSIX.status(folder)?.kind == .directory else { return [] }
        var records: [VersionRecord] = []
        for entry in try POSIX.directoryEntries(folder) where !entry.hasPrefix(".") && entry != Self.generationName {
            let path = folder + "/" + entry + "/" + Self.recordName
            do {
                let record = try JSONDecoder().decode(VersionRecord.self, from: POSIX.readFile(path))
                guard record.id == entry else { throw FileAccessError(.corrupt, "the record names another version", path: path) }
                records.append(record)
            } catch {
                VersionStore.logger.warning("skipping a version whose record cannot be read", metadata: ["path": "\(path)", "error": "\(error)"])
            }
        }
        return records.sorted { ($0.modificationDate, $0.addedDate) < ($1.modificationDate, $1.addedDate) }
    }

    /// One version's record, or nil if there is no such (complete) version.
    func record(_ id: String) throws -> VersionRecord? {
        guard Self.isValidIdentifier(id) else { return nil }
        return try reading { try recordUnlocked(id) }
    }

    private func recordUnlocked(_ id: String) throws -> VersionRecord? {
        let path = folder + "/" + id + "/" + Self.recordName
        guard try POSIX.status(path) != nil else { return nil }
        do {
            return try JSONDecoder().decode(VersionRecord.self, from: POSIX.readFile(path))
        } catch let error as DecodingError {
            throw FileAccessError(.corrupt, "the version's record cannot be read", path: path, underlying: error)
        }
    }

    static func encode(_ record: VersionRecord) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(record)
    }

    static func isValidIdentifier(_ id: String) -> Bool {
        !id.isEmpty && id.count <= 64 && id.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
    }

    // MARK: Changing

    /// Adds a version whose contents are at `source` (moved there with `byMoving`, else copied —
    /// shared by hard link only when `allowLink`). On failure nothing is added and `source` is
    /// where and as it was.
    func add(contentsOf source: String, byMoving: Bool, allowLink: Bool, identifier: String? = nil, _ make: (String, Int64) -> VersionRecord) throws -> VersionRecord {
        guard try POSIX.status(source) != nil else {
            throw FileAccessError(.notFound, "the version's contents do not exist", path: source, errno: ENOENT)
        }
        return try writing {
            try makeFolders()
            removeLeftovers()
            let id = identifier ?? UUID().uuidString
            if identifier != nil, try POSIX.status(folder + "/" + id) != nil {
                throw FileAccessError(.alreadyExists, "the item already has a version \(id)", path: folder + "/" + id, errno: EEXIST)
            }
            let adding = folder + "/.adding-" + id
            try POSIX.makeDirectory(adding, permissions: 0o755)
            let contents = adding + "/" + name
            var moved = false
            do {
                if byMoving {
                    do {
                        try POSIX.rename(source, contents)
                        moved = true
                    } catch let error as FileAccessError where error.errno == EXDEV {
                        try POSIX.copyTree(source, to: contents, allowLink: false)
                    }
                } else {
                    try POSIX.copyTree(source, to: contents, allowLink: allowLink)
                }
                let record = make(id, try POSIX.treeUsage(contents).bytes)
                try POSIX.createFile(adding + "/" + Self.recordName, contents: try Self.encode(record), permissions: 0o644)
                try POSIX.sync(adding, directory: true)
                try POSIX.rename(adding, folder + "/" + id)
                try POSIX.sync(folder, directory: true)
                if byMoving && !moved { try? POSIX.removeTree(source) } // the version is kept; a copy left at the source loses nothing
                bumpGeneration()
                return record
            } catch {
                // The caller needs the first error; a `.adding-` folder left is removed by the next writer.
                if moved { try? POSIX.rename(contents, source) }
                try? POSIX.removeTree(adding)
                throw error
            }
        }
    }

    /// Changes one version's record. Throws `.notFound` if the version is gone.
    func update(_ id: String, _ change: (inout VersionRecord) -> Void) throws {
        try writing {
            guard Self.isValidIdentifier(id), var record = try recordUnlocked(id) else {
                throw FileAccessError(.notFound, "the version no longer exists", path: folder + "/" + id, errno: ENOENT)
            }
            change(&record)
            try SafeSave.write(try Self.encode(record), to: URL(fileURLWithPath: folder + "/" + id + "/" + Self.recordName))
            bumpGeneration()
        }
    }

    /// Removes one version. Throws `.notFound` if it is gone already.
    func remove(_ id: String) throws {
        try writing {
            guard Self.isValidIdentifier(id), try POSIX.status(folder + "/" + id) != nil else {
                throw FileAccessError(.notFound, "the version no longer exists", path: folder + "/" + id, errno: ENOENT)
            }
            try removeUnlocked(id)
            bumpGeneration()
        }
    }

    private func removeUnlocked(_ id: String) throws {
        let removing = folder + "/.removing-" + id
        try POSIX.rename(folder + "/" + id, removing)
        try POSIX.removeTree(removing)
    }

    /// Removes every version (keeping those `keep` selects).
    func removeAll(keeping keep: (VersionRecord) -> Bool = { _ in false }) throws {
        try writing {
            let doomed = try listUnlocked().filter { !keep($0) }
            guard !doomed.isEmpty else { return } // nothing to remove (or no store at all): nothing changed
            for record in doomed { try removeUnlocked(record.id) }
            bumpGeneration()
        }
    }

    /// Removes the versions `select` picks from the current list, in one coordinated write.
    func thin(_ select: ([VersionRecord]) -> Set<String>) throws {
        try writing {
            guard try POSIX.status(folder) != nil else { return }
            let doomed = select(try listUnlocked())
            guard !doomed.isEmpty else { return }
            for id in doomed { try removeUnlocked(id) }
            bumpGeneration()
        }
    }

    /// Removes the whole store of the item (it was deleted).
    func deleteStore() throws {
        guard try POSIX.status(folder) != nil else { return }
        try writing {
            guard try POSIX.status(folder) != nil else { return }
            let removing = root + "/.removing-" + UUID().uuidString
            try POSIX.rename(folder, removing)
            try POSIX.removeTree(removing)
            try? POSIX.sync(root, directory: true) // done; a crash before the flush brings back a store of a deleted item, which is harmless
        }
    }

    /// Carries the versions to the item's new place (it was moved or renamed). Versions of an
    /// item that was replaced there are removed with it.
    func move(to destination: VersionStore) throws {
        guard destination.folder != folder, try POSIX.status(folder) != nil else { return }
        let coordinator = NSFileCoordinator()
        try coordinator.coordinate(
            reading: [], writing: [(URL(fileURLWithPath: folder), .forMoving), (URL(fileURLWithPath: destination.folder), .forReplacing)]
        ) { _, _ in
            guard try POSIX.status(folder) != nil else { return }
            try destination.makeRoot()
            if try POSIX.status(destination.folder) != nil {
                let removing = destination.root + "/.removing-" + UUID().uuidString
                try POSIX.rename(destination.folder, removing)
                try POSIX.removeTree(removing)
            }
            do {
                try POSIX.rename(folder, destination.folder)
            } catch let error as FileAccessError where error.errno == EXDEV {
                try POSIX.copyTree(folder, to: destination.folder, allowLink: false)
                try POSIX.removeTree(folder)
            }
            // Contents are named like the item: the versions' and the downloaded nonlocal ones'
            // (left under the old name, a nonlocal version was downloaded again and never found:
            // found by `ubiquity-chaos --share`, a shared file renamed by a program that does not
            // coordinate).
            if destination.name != name {
                for entry in try POSIX.directoryEntries(destination.folder) where !entry.hasPrefix(".") && entry != Self.generationName {
                    let old = destination.folder + "/" + entry + "/" + name
                    if try POSIX.status(old) != nil { try POSIX.rename(old, destination.folder + "/" + entry + "/" + destination.name) }
                }
                for entry in (try? POSIX.directoryEntries(destination.nonlocalFolder)) ?? [] where !entry.hasPrefix(".") {
                    let old = destination.nonlocalFolder + "/" + entry + "/" + name
                    if try POSIX.status(old) != nil { try POSIX.rename(old, destination.nonlocalFolder + "/" + entry + "/" + destination.name) }
                }
            }
            try? POSIX.sync(destination.root, directory: true) // moved; only its durability across a crash is in doubt
            destination.bumpGeneration()
        }
    }

    /// How many versions there are and the bytes their contents hold.
    func usage() throws -> (versions: Int, bytes: Int64, sharedBytes: Int64) {
        try reading {
            guard try POSIX.status(folder) != nil else { return (0, 0, 0) }
            let records = try listUnlocked()
            let usage = try contentUsage(records)
            return (records.count, usage.bytes, usage.sharedBytes)
        }
    }

    /// Removes the oldest versions that may go (discardable ones, resolved conflicts) until the
    /// store holds at most `limit` bytes. Unresolved conflicts and versions not marked
    /// discardable are never removed; if they alone exceed the limit, that is logged.
    func enforce(limit: Int64) throws {
        try writing {
            guard try POSIX.status(folder) != nil else { return }
            var records = try listUnlocked()
            var bytes = try contentUsage(records).bytes
            guard bytes > limit else { return }
            let removable = records.filter { $0.isDiscardable || ($0.kind == .conflict && $0.isResolved) }
            for record in removable where bytes > limit {
                try removeUnlocked(record.id)
                records.removeAll { $0.id == record.id }
                bytes = try contentUsage(records).bytes
            }
            bumpGeneration()
            if bytes > limit {
                VersionStore.logger.warning("versions that must be kept exceed the store's limit", metadata: ["item": "\(itemPath)", "bytes": "\(bytes)", "limit": "\(limit)"])
            }
        }
    }

    /// The bytes the versions' contents hold (a file shared by several versions counted once;
    /// records, a few hundred bytes each, not counted).
    private func contentUsage(_ records: [VersionRecord]) throws -> (bytes: Int64, sharedBytes: Int64) {
        try POSIX.treeUsage(records.map { contentsPath(of: $0.id) })
    }

    /// A new, empty directory in the store for preparing a version's contents.
    func makeStagingDirectory() throws -> String {
        try makeRoot()
        let staging = root + "/.staging"
        if try POSIX.status(staging) == nil {
            do { try POSIX.makeDirectory(staging, permissions: 0o755) } catch let error as FileAccessError where error.errno == EEXIST {}
        }
        removeStaleStaging(staging)
        // Named after the process, so that another can tell when its writer died.
        let path = staging + "/\(getpid())-" + UUID().uuidString
        try POSIX.makeDirectory(path, permissions: 0o755)
        return path
    }

    // MARK: Housekeeping

    private func makeRoot() throws {
        if try POSIX.status(root) == nil {
            do { try POSIX.makeDirectory(root, permissions: 0o755) } catch let error as FileAccessError where error.errno == EEXIST {}
        }
    }

    private func makeFolders() throws {
        try makeRoot()
        if try POSIX.status(folder) == nil { try POSIX.makeDirectory(folder, permissions: 0o755) }
    }

    /// Half-added or half-removed versions a killed process left (the caller holds the write).
    /// Best effort: what cannot go now is tried again by the next writer, and is hidden meanwhile.
    private func removeLeftovers() {
        // Leftovers of killed writers: best effort, the next writer sweeps what is left.
        for entry in (try? POSIX.directoryEntries(root)) ?? [] where entry.hasPrefix(".removing-") {
            try? POSIX.removeTree(root + "/" + entry)
        }
        for entry in (try? POSIX.directoryEntries(folder)) ?? [] where entry.hasPrefix(".adding-") || entry.hasPrefix(".removing-") {
            try? POSIX.removeTree(folder + "/" + entry)
        }
    }

    /// Staged copies whose process is gone (killed while it prepared a version), and any a day
    /// old (their process's number may have been reused). Best effort, like ``removeLeftovers()``.
    private func removeStaleStaging(_ staging: String) {
        let dayAgo = Int64(Date().addingTimeInterval(-86_400).timeIntervalSince1970 * 1e9)
        // Staged copies of gone processes or a day old: best effort, swept again next time.
        for entry in (try? POSIX.directoryEntries(staging)) ?? [] {
            let owner = entry.split(separator: "-", maxSplits: 1).first.flatMap { pid_t($0) }
            let ownerGone = owner.map { $0 > 0 && $0 != getpid() && kill($0, 0) != 0 && errno == ESRCH } ?? false
            if ownerGone {
                try? POSIX.removeTree(staging + "/" + entry)
            } else if let status = try? POSIX.status(staging + "/" + entry), status.modificationNanoseconds < dayAgo {
                try? POSIX.removeTree(staging + "/" + entry)
            }
        }
    }

    /// Removes what processes that died left in the staging directory of `url`'s version store
    /// (an agent that finds a version it was adding when killed already in place calls this).
    static func removeAbandonedStaging(nearItemAt url: URL) {
        guard let store = try? VersionStore(item: url.standardizedFileURL) else { return }
        store.removeStaleStaging(store.root + "/.staging")
    }

    /// See ``NSFileVersion/removeThisProcessStaging(under:)``.
    static func removeThisProcessStaging(under folder: URL) {
        guard let names = FileManager.default.enumerator(atPath: folder.path) else { return }
        let mine = "\(getpid())-"
        while let path = names.nextObject() as? String {
            guard (path as NSString).lastPathComponent == directoryName else { continue }
            names.skipDescendants()
            let staging = folder.path + "/" + path + "/.staging"
            for entry in (try? POSIX.directoryEntries(staging)) ?? [] where entry.hasPrefix(mine) {
                try? POSIX.removeTree(staging + "/" + entry)
            }
        }
    }

    private func bumpGeneration() {
        do {
            try SafeSave.write(Data(UUID().uuidString.utf8), to: URL(fileURLWithPath: folder + "/" + Self.generationName))
        } catch {
            VersionStore.logger.warning("could not mark the version store changed; presenters may hear late", metadata: ["item": "\(itemPath)", "error": "\(error)"])
        }
    }

    static let logger = Logger(label: "ubiquity.versions")
}

// MARK: Versions downloaded from the server (nonlocal)

/// ```
/// DIR/.ubiquity-versions/NAME/.nonlocal/REV/NAME         a nonlocal version's contents, once downloaded
/// DIR/.ubiquity-versions/NAME/.nonlocal/REV/record.json  its record
/// ```
/// Hidden from ``list()`` (a nonlocal version is listed by asking the server), moved and deleted
/// with the store, never synced.
extension VersionStore {
    static let nonlocalFolderName = ".nonlocal"

    /// Whether a server's revision id can name a folder here: letters, digits, `-` and `_`
    /// (no dots, no slashes), at most 128.
    static func isValidRevision(_ revision: String) -> Bool {
        !revision.isEmpty && revision.utf8.count <= 128
            && revision.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "-" || $0 == "_") }
    }

    var nonlocalFolder: String { folder + "/" + Self.nonlocalFolderName }

    /// Where a nonlocal version's contents are once downloaded.
    func nonlocalContentsPath(_ revision: String) -> String { nonlocalFolder + "/" + revision + "/" + name }

    /// A downloaded nonlocal version's record, or nil if it is not here.
    func nonlocalRecord(_ revision: String) throws -> VersionRecord? {
        guard Self.isValidRevision(revision) else { return nil }
        let path = nonlocalFolder + "/" + revision + "/" + Self.recordName
        return try reading {
            guard try POSIX.status(path) != nil, try POSIX.status(nonlocalContentsPath(revision)) != nil else { return nil }
            return try JSONDecoder().decode(VersionRecord.self, from: POSIX.readFile(path))
        }
    }

    /// Keeps a nonlocal version's downloaded contents (moved from `source`, a file or package on
    /// the same file system) with its record: it appears whole, by one rename, or not at all.
    func storeNonlocal(contentsAt source: String, record: VersionRecord) throws {
        guard Self.isValidRevision(record.id) else {
            throw FileAccessError(.invalidName, "the revision id cannot name a folder", path: nonlocalFolder)
        }
        try writing {
            try makeFolders()
            if try POSIX.status(nonlocalFolder) == nil { try POSIX.makeDirectory(nonlocalFolder, permissions: 0o755) }
            for entry in (try? POSIX.directoryEntries(nonlocalFolder)) ?? [] where entry.hasPrefix(".adding-") || entry.hasPrefix(".removing-") {
                try? POSIX.removeTree(nonlocalFolder + "/" + entry) // a killed download's leftovers (this writer holds the store)
            }
            let final = nonlocalFolder + "/" + record.id
            if try POSIX.status(final) != nil { return } // downloaded already (by another request)
            let adding = nonlocalFolder + "/.adding-" + UUID().uuidString
            try POSIX.makeDirectory(adding, permissions: 0o755)
            do {
                try POSIX.rename(source, adding + "/" + name)
                try POSIX.createFile(adding + "/" + Self.recordName, contents: try Self.encode(record), permissions: 0o644)
                try POSIX.sync(adding, directory: true)
                try POSIX.rename(adding, final)
                try POSIX.sync(nonlocalFolder, directory: true)
            } catch {
                try? POSIX.removeTree(adding) // the caller gets the first error; the download can be asked again
                throw error
            }
        }
    }

    /// Removes a nonlocal version's downloaded contents (the server keeps the revision).
    func removeNonlocal(_ revision: String) throws {
        guard Self.isValidRevision(revision) else { return }
        try writing {
            let path = nonlocalFolder + "/" + revision
            guard try POSIX.status(path) != nil else { return }
            let removing = nonlocalFolder + "/.removing-" + UUID().uuidString
            try POSIX.rename(path, removing)
            try POSIX.removeTree(removing)
        }
    }
}
