import Foundation
import Synchronization
import UbiquityClient
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// Where a query finds items: a local folder, or (part of) a ubiquity container.
protocol MetadataSource: Sendable {
    /// The folder watched and walked.
    var base: String { get }
    /// Every item under `folder` (``base`` or a folder in it), as records.
    func scan(under folder: String) -> [MetadataRecord]
    /// The record of the item at `path` now (after an event there); nil if it is gone.
    func record(at path: String) -> MetadataRecord?
    /// The item path an event at `path` concerns (a placeholder's item), or nil to ignore it.
    func itemPath(forEvent path: String) -> String?
}

/// One entry of a folder being walked.
struct WalkEntry {
    /// The folder it is in (shared by the records of its entries).
    let folder: MetadataFolder
    /// The open folder, for system calls relative to it (no path walk per entry).
    let descriptor: Int32
    /// Its name in the folder.
    let name: String
    /// Whether it is a folder (or package).
    let isDirectory: Bool
}

extension MetadataSource {
    /// What a walk calls for each entry: its record, or nil when it is not an item.
    typealias Visit = (WalkEntry, inout MetadataRecord.TypeCache) -> MetadataRecord?

    /// Walks `folder`: every item the source shows, each folder's items before what is in
    /// its folders; packages are not entered. Folders are listed a level at a time, the folders
    /// of a level in parallel (one per core at a time), so a tree that is deep before it is
    /// wide is walked in parallel too; the records come in the same order every time.
    static func walk(_ folder: String, skipping skip: (String) -> Bool, visit: Visit) -> [MetadataRecord] {
        var listings: [[MetadataRecord]] = [[]] // by folder number; the walk's folder is 0
        var children: [[Int]] = [[]]
        var level = [MetadataFolder(folder)], numbers = [0]
        withoutActuallyEscaping(skip) { skip in
            withoutActuallyEscaping(visit) { visit in
                let work = UncheckedSendable((skip, visit))
                while !level.isEmpty {
                    let current = level
                    let found = Mutex([(records: [MetadataRecord], folders: [MetadataFolder])](repeating: ([], []), count: current.count))
                    let listOne: @Sendable (Int) -> Void = { index in
                        var records: [MetadataRecord] = [], types = MetadataRecord.TypeCache()
                        let folders = list(current[index], skipping: work.value.0, visit: work.value.1, types: &types, into: &records)
                        found.withLock { $0[index] = (records, folders) }
                    }
                    if current.count == 1 { listOne(0) } else { DispatchQueue.concurrentPerform(iterations: current.count, execute: listOne) }
                    var next: [MetadataFolder] = [], nextNumbers: [Int] = []
                    for (index, listing) in found.withLock({ $0 }).enumerated() {
                        let number = numbers[index]
                        listings[number] = listing.records
                        for subfolder in listing.folders {
                            children[number].append(listings.count)
                            nextNumbers.append(listings.count)
                            listings.append([])
                            children.append([])
                            next.append(subfolder)
                        }
                    }
                    level = next
                    numbers = nextNumbers
                }
            }
        }
        var records: [MetadataRecord] = []
        records.reserveCapacity(listings.reduce(0) { $0 + $1.count })
        var stack = [0]
        while let number = stack.popLast() {
            records += listings[number]
            stack += children[number].reversed()
        }
        return records
    }

    /// The items in one folder (appended to `records`); returns the folders in it to enter.
    /// A folder that cannot be opened (gone meanwhile, or not readable) has no items.
    static func list(_ folder: MetadataFolder, skipping skip: (String) -> Bool, visit: Visit, types: inout MetadataRecord.TypeCache,
                     into records: inout [MetadataRecord]) -> [MetadataFolder] {
        let descriptor = open(folder.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return [] }
        guard let directory = fdopendir(descriptor) else {
            close(descriptor)
            return []
        }
        defer { closedir(directory) }
        var folders: [MetadataFolder] = []
        while let entry = readdir(directory) {
            let name = POSIX.entryName(entry)
            guard name != ".", name != "..", !skip(name) else { continue }
            var isDirectory = entry.pointee.d_type == UInt8(DT_DIR)
            if entry.pointee.d_type == UInt8(DT_UNKNOWN) {
                var info = stat()
                isDirectory = fstatat(descriptor, name, &info, AT_SYMLINK_NOFOLLOW) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
            }
            guard let record = visit(WalkEntry(folder: folder, descriptor: descriptor, name: name, isDirectory: isDirectory), &types) else { continue }
            records.append(record)
            if isDirectory && record.isDirectory && !types.isPackage(record.typeIndex) { folders.append(MetadataFolder(folder.path(of: name))) }
        }
        return folders
    }

    /// Hidden names (the safe save's temporaries among them) and what is excluded from sync
    /// are not items.
    static func isHidden(_ name: String) -> Bool {
        name.utf8.first == UInt8(ascii: ".") || name.utf8.reversed().starts(with: ".nosync".utf8.reversed())
    }
}

/// A local folder (a URL search scope): its files, folders and packages.
struct FolderSource: MetadataSource {
    let base: String

    func scan(under folder: String) -> [MetadataRecord] {
        Self.walk(folder, skipping: Self.isHidden) { entry, types in
            MetadataRecord.read(entry.name, in: entry.folder, descriptor: entry.descriptor, relative: entry.name, types: &types)
        }
    }

    func record(at path: String) -> MetadataRecord? {
        MetadataRecord.read(path)
    }

    func itemPath(forEvent path: String) -> String? {
        guard path.hasPrefix(base + "/") else { return nil }
        let relative = path.dropFirst(base.count + 1)
        return relative.split(separator: "/").contains(where: { Self.isHidden(String($0)) }) ? nil : path
    }
}

/// A ubiquity container as the disk (and the agent, when it runs) shows it: downloaded items
/// are files, items known only by their metadata are placeholders (`.NAME.icloud`), listed at
/// the item's own path.
struct ContainerSource: MetadataSource {
    /// Which part of the container.
    enum Part: Sendable {
        /// `Documents` and what is in it.
        case documents
        /// The rest of the container.
        case data
        /// All of it.
        case everything
    }

    let identifier: String
    let root: URL
    let part: Part
    /// The agent's statuses for the container, by absolute path (empty when it does not run).
    var statuses: [String: UbiquityItemStatus] = [:]
    /// Why the agent could not be asked (its absence is every item's uploading error).
    var agentProblem: String?
    /// The agent's status changes for the container (its ``statuses`` follow them), while the
    /// agent runs.
    var statusStream: AgentStatusStream?

    init(identifier: String, root: URL, part: Part, statuses: [String: UbiquityItemStatus] = [:], agentProblem: String? = nil) {
        self.identifier = identifier
        self.root = root
        self.part = part
        self.statuses = statuses
        self.agentProblem = agentProblem
    }

    var base: String {
        let root = root.standardizedFileURL.path
        return part == .documents ? root + "/Documents" : root
    }

    func scan(under folder: String) -> [MetadataRecord] {
        let rootPath = root.standardizedFileURL.path
        let documents = rootPath + "/Documents"
        if part == .data && (folder == documents || folder.hasPrefix(documents + "/")) { return [] }
        let container = MetadataRecord.containers.index(of: identifier)
        return Self.walk(folder, skipping: { Self.isHidden($0) && UbiquityPlaceholder.itemName(ofPlaceholder: $0) == nil }) { entry, types in
            if part == .data && entry.name == "Documents" && entry.folder.path == rootPath { return nil }
            if let item = UbiquityPlaceholder.itemName(ofPlaceholder: entry.name) {
                // A file of that name wins (the agent is about to remove the placeholder).
                var info = stat()
                guard fstatat(entry.descriptor, item, &info, AT_SYMLINK_NOFOLLOW) != 0 else { return nil }
                return placeholderRecord(item, in: entry.folder, descriptor: entry.descriptor, placeholder: entry.name, container: container, types: &types)
            }
            return fileRecord(entry.name, in: entry.folder, descriptor: entry.descriptor, relative: entry.name, container: container, types: &types)
        }
    }

    func record(at path: String) -> MetadataRecord? {
        let (folderPath, name) = MetadataFolder.split(path)
        let folder = MetadataFolder(folderPath)
        let container = MetadataRecord.containers.index(of: identifier)
        var types = MetadataRecord.TypeCache()
        return fileRecord(name, in: folder, descriptor: AT_FDCWD, relative: path, container: container, types: &types)
            ?? placeholderRecord(name, in: folder, descriptor: AT_FDCWD, placeholder: folder.path(of: UbiquityPlaceholder.fileName(for: name)),
                                 container: container, types: &types)
    }

    func itemPath(forEvent path: String) -> String? {
        let base = base
        guard path.hasPrefix(base + "/") else { return nil }
        let name = String(path.split(separator: "/").last ?? "")
        var itemPath = path
        if let item = UbiquityPlaceholder.itemName(ofPlaceholder: name) {
            itemPath = String(path.dropLast(name.count)) + item
        } else if Self.isHidden(name) {
            return nil
        }
        let documents = root.standardizedFileURL.path + "/Documents"
        if part == .data && (itemPath == documents || itemPath.hasPrefix(documents + "/")) { return nil }
        let relative = itemPath.dropFirst(base.count + 1)
        return relative.split(separator: "/").dropLast().contains(where: { Self.isHidden(String($0)) }) ? nil : itemPath
    }

    /// A downloaded item: the file's attributes, the agent's status.
    func fileRecord(_ name: String, in folder: MetadataFolder, descriptor: Int32, relative: String, container: UInt16,
                    types: inout MetadataRecord.TypeCache) -> MetadataRecord? {
        guard var record = MetadataRecord.read(name, in: folder, descriptor: descriptor, relative: relative, types: &types) else { return nil }
        record.containerIndex = container
        record.status = status(of: name, in: folder, downloaded: true)
        return record
    }

    /// An item known by its metadata only: its placeholder's contents (the placeholder found at
    /// `placeholder` from the open folder `descriptor`).
    func placeholderRecord(_ name: String, in folder: MetadataFolder, descriptor: Int32, placeholder: String, container: UInt16,
                           types: inout MetadataRecord.TypeCache) -> MetadataRecord? {
        guard let contents = UbiquityPlaceholder.quickRead(descriptor: descriptor, relative: placeholder) else { return nil }
        let date = contents.modificationDate ?? 0
        return MetadataRecord(folder: folder, name: name, isDirectory: false, size: contents.size ?? 0, creationDate: date, modificationDate: date,
                              typeIndex: types.index(name: contents.name, isDirectory: false), containerIndex: container,
                              status: status(of: name, in: folder, downloaded: false))
    }

    /// The status of the item `name` of `folder`: the agent's, or what the disk says.
    func status(of name: String, in folder: MetadataFolder, downloaded: Bool) -> MetadataRecord.UbiquitousStatus {
        guard !statuses.isEmpty, let known = statuses[folder.path(of: name)] else {
            // A local copy is the newest this device knows of: current, not "downloaded"
            // (which says a newer version is known and on its way).
            var status = MetadataRecord.UbiquitousStatus(downloading: downloaded ? .current : .notDownloaded)
            status.isUploaded = !downloaded // what only the server has is uploaded
            status.uploadingError = downloaded ? agentProblem : nil
            return status
        }
        var status = MetadataRecord.UbiquitousStatus(downloading: known.downloaded ? (known.current ? .current : .downloaded) : .notDownloaded)
        status.isDownloading = known.downloading
        status.isUploaded = known.uploaded
        status.isUploading = known.uploading
        status.hasConflicts = known.conflicts > 0
        status.downloadRequested = known.downloadRequested
        status.percentDownloaded = known.percentDownloaded
        status.percentUploaded = known.percentUploaded
        status.downloadingError = known.downloadingError
        status.uploadingError = known.uploadingError
        status.sharing = known.sharing
        return status
    }
}

/// A value the caller vouches is used safely across threads (here: closures that only read).
struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
