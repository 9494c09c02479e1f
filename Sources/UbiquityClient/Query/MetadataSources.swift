import Foundation
import Synchronization
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

extension MetadataSource {
    /// Walks `folder`: every item the source shows, directories before what is in them;
    /// packages are not entered. `visit` returns the record of an entry (nil: not an item).
    /// The folders in `folder` are walked in parallel, one per core at a time; the records come
    /// in the same order every time.
    static func walk(_ folder: String, skipping skip: (String) -> Bool, visit: (String, String, Bool) -> MetadataRecord?) -> [MetadataRecord] {
        var top: [MetadataRecord] = []
        let subfolders = list(folder, skipping: skip, visit: visit, into: &top)
        guard !subfolders.isEmpty else { return top }
        let parts = Mutex([[MetadataRecord]](repeating: [], count: subfolders.count))
        withoutActuallyEscaping(skip) { skip in
            withoutActuallyEscaping(visit) { visit in
                let work = UncheckedSendable((skip, visit))
                DispatchQueue.concurrentPerform(iterations: subfolders.count) { index in
                    var records: [MetadataRecord] = []
                    var folders = [subfolders[index]]
                    while let current = folders.popLast() {
                        folders += list(current, skipping: work.value.0, visit: work.value.1, into: &records)
                    }
                    parts.withLock { $0[index] = records }
                }
            }
        }
        return top + parts.withLock { $0 }.joined()
    }

    /// The items in one folder (appended to `records`); returns the folders in it to enter.
    static func list(_ folder: String, skipping skip: (String) -> Bool, visit: (String, String, Bool) -> MetadataRecord?,
                     into records: inout [MetadataRecord]) -> [String] {
        guard let directory = opendir(folder) else { return [] }
        defer { closedir(directory) }
        var folders: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name == "." || name == ".." || skip(name) { continue }
            let path = folder + "/" + name
            var isDirectory = entry.pointee.d_type == UInt8(DT_DIR)
            if entry.pointee.d_type == UInt8(DT_UNKNOWN) {
                var info = stat()
                isDirectory = lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
            }
            guard let record = visit(path, name, isDirectory) else { continue }
            records.append(record)
            if isDirectory && !DocumentTypeRegistry.shared.isPackage(record.contentType) { folders.append(path) }
        }
        return folders
    }

    /// Hidden names, the safe save's temporaries and what is excluded from sync are not items.
    static func isHidden(_ name: String) -> Bool {
        name.hasPrefix(".") || name.hasSuffix(".nosync") || SafeSave.isTemporaryName(name)
    }
}

/// A local folder (a URL search scope): its files, folders and packages.
struct FolderSource: MetadataSource {
    let base: String

    func scan(under folder: String) -> [MetadataRecord] {
        Self.walk(folder, skipping: Self.isHidden) { path, _, _ in MetadataRecord.read(path) }
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
        let documents = root.standardizedFileURL.path + "/Documents"
        return Self.walk(folder, skipping: { Self.isHidden($0) && UbiquityPlaceholder.itemName(ofPlaceholder: $0) == nil }) { path, name, _ in
            if part == .data && (path == documents || path.hasPrefix(documents + "/")) { return nil }
            if let item = UbiquityPlaceholder.itemName(ofPlaceholder: name) {
                let folder = String(path.dropLast(name.count + 1))
                // A file of that name wins (the agent is about to remove the placeholder).
                guard !FileManager.default.fileExists(atPath: folder + "/" + item) else { return nil }
                return placeholderRecord(folder + "/" + item)
            }
            return fileRecord(path)
        }
    }

    func record(at path: String) -> MetadataRecord? {
        fileRecord(path) ?? placeholderRecord(path)
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
    func fileRecord(_ path: String) -> MetadataRecord? {
        guard var record = MetadataRecord.read(path) else { return nil }
        record.container = identifier
        record.status = status(for: path, downloaded: true)
        return record
    }

    /// An item known by its metadata only: its placeholder's contents.
    func placeholderRecord(_ itemPath: String) -> MetadataRecord? {
        guard let placeholder = UbiquityPlaceholder.quickRead(for: itemPath) else { return nil }
        let date = placeholder.modificationDate ?? 0
        let isDirectory = false
        return MetadataRecord(path: itemPath, isDirectory: isDirectory, size: placeholder.size ?? 0, creationDate: date, modificationDate: date,
                              contentType: MetadataRecord.contentType(name: placeholder.name, isDirectory: isDirectory),
                              container: identifier, status: status(for: itemPath, downloaded: false))
    }

    func status(for path: String, downloaded: Bool) -> MetadataRecord.UbiquitousStatus {
        guard let known = statuses[path] else {
            var status = MetadataRecord.UbiquitousStatus(downloading: downloaded ? .downloaded : .notDownloaded)
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
        return status
    }
}

/// A value the caller vouches is used safely across threads (here: closures that only read).
struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

extension UbiquityPlaceholder {
    /// Reads the placeholder for the item at `path` with JSONSerialization (much faster than
    /// JSONDecoder, which matters when a query meets thousands of placeholders).
    static func quickRead(for path: String) -> UbiquityPlaceholder? {
        let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")).map { path.utf8.index(after: $0) } ?? path.startIndex
        let placeholder = String(path[..<slash]) + fileName(for: String(path[slash...]))
        guard let data = FileManager.default.contents(atPath: placeholder),
              let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let name = object["name"] as? String, let item = object["item"] as? String else { return nil }
        return UbiquityPlaceholder(name: name, item: item, size: (object["size"] as? NSNumber)?.int64Value,
                                   modificationDate: (object["modificationDate"] as? NSNumber)?.doubleValue)
    }
}
