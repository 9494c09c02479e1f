import Foundation
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
    static func walk(_ folder: String, skipping skip: (String) -> Bool, visit: (String, String, Bool) -> MetadataRecord?) -> [MetadataRecord] {
        var records: [MetadataRecord] = []
        var folders = [folder]
        while let current = folders.popLast() {
            guard let directory = opendir(current) else { continue }
            defer { closedir(directory) }
            while let entry = readdir(directory) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                if name == "." || name == ".." || skip(name) { continue }
                let path = current + "/" + name
                var isDirectory = entry.pointee.d_type == UInt8(DT_DIR)
                if entry.pointee.d_type == UInt8(DT_UNKNOWN) {
                    var info = stat()
                    isDirectory = lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
                }
                guard let record = visit(path, name, isDirectory) else { continue }
                records.append(record)
                if isDirectory && !DocumentTypeRegistry.shared.isPackage(record.contentType) { folders.append(path) }
            }
        }
        return records
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
        let url = URL(fileURLWithPath: itemPath)
        guard let placeholder = UbiquityPlaceholder.read(for: url) else { return nil }
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
