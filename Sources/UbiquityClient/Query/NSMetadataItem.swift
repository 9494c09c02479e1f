import CUbiquitySystem
import Foundation
import Synchronization
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// A file, folder or package a metadata query found, with its attributes: name, URL, size,
/// dates, type, and — for an item in a ubiquity container — its sync status, even when only
/// its metadata is on this device.
///
/// A query keeps each result's item object for as long as the item is a result and updates its
/// attributes in place, so an item seen in one update is the same object in the next (as on
/// Apple platforms). Reading attributes is thread-safe.
public final class NSMetadataItem: PredicateKeyValueReading, CustomStringConvertible, Sendable {
    let record: Mutex<MetadataRecord>

    init(_ record: MetadataRecord) {
        self.record = Mutex(record)
    }

    /// The item at `url`, read from disk now (its sync status too, if it is in a ubiquity
    /// container); nil if there is nothing there. A placeholder's item (not downloaded) is
    /// found at the item's own URL.
    public convenience init?(url: URL) {
        let path = url.standardizedFileURL.path
        let containers = UbiquityContainers.shared
        if let location = containers.location(of: url) {
            let source = ContainerSource(identifier: location.container, root: location.root, part: .everything)
            guard let record = source.record(at: path) else { return nil }
            self.init(record)
        } else {
            guard let record = MetadataRecord.read(path) else { return nil }
            self.init(record)
        }
    }

    /// The value of one attribute (an `NSMetadataItem…Key`), or nil if the item has none.
    public func value(forAttribute key: String) -> Any? {
        record.withLock { $0.value(forAttribute: key) }
    }

    /// The values of several attributes, by name (those the item has).
    public func values(forAttributes keys: [String]) -> [String: Any]? {
        record.withLock { record in
            var values: [String: Any] = [:]
            for key in keys { if let value = record.value(forAttribute: key) { values[key] = value } }
            return values
        }
    }

    /// The names of the attributes the item has.
    public var attributes: [String] {
        record.withLock { record in MetadataRecord.allAttributes.filter { record.value(forAttribute: $0) != nil } }
    }

    /// The value of an attribute, for predicates.
    public func predicateValue(forKey key: String) -> Any? {
        value(forAttribute: key)
    }

    /// The item's path.
    public var description: String { "<NSMetadataItem \(record.withLock { $0.path })>" }

    var path: String { record.withLock { $0.path } }
}

/// Everything a query knows of one item.
struct MetadataRecord: Sendable, Equatable {
    var path: String
    var isDirectory: Bool
    var size: Int64
    var creationDate: Double
    var modificationDate: Double
    var contentType: String
    /// The ubiquity container it is in, or nil for a local item.
    var container: String?
    var status: UbiquitousStatus?

    /// An item's sync status.
    struct UbiquitousStatus: Sendable, Equatable {
        enum Downloading: UInt8, Sendable { case notDownloaded, downloaded, current }
        var downloading: Downloading
        var isDownloading = false
        var isUploaded = false
        var isUploading = false
        var hasConflicts = false
        var downloadRequested = false
        var percentDownloaded: Double?
        var percentUploaded: Double?
        var downloadingError: String?
        var uploadingError: String?
    }

    static let allAttributes = [
        NSMetadataItemFSNameKey, NSMetadataItemDisplayNameKey, NSMetadataItemURLKey, NSMetadataItemPathKey, NSMetadataItemFSSizeKey,
        NSMetadataItemFSCreationDateKey, NSMetadataItemFSContentChangeDateKey, NSMetadataItemContentTypeKey, NSMetadataItemContentTypeTreeKey,
        NSMetadataItemIsUbiquitousKey, NSMetadataUbiquitousItemHasUnresolvedConflictsKey, NSMetadataUbiquitousItemIsDownloadingKey,
        NSMetadataUbiquitousItemIsUploadedKey, NSMetadataUbiquitousItemIsUploadingKey, NSMetadataUbiquitousItemPercentDownloadedKey,
        NSMetadataUbiquitousItemPercentUploadedKey, NSMetadataUbiquitousItemDownloadingStatusKey, NSMetadataUbiquitousItemDownloadingErrorKey,
        NSMetadataUbiquitousItemUploadingErrorKey, NSMetadataUbiquitousItemDownloadRequestedKey, NSMetadataUbiquitousItemContainerDisplayNameKey,
    ]

    var name: String { path.split(separator: "/").last.map(String.init) ?? path }

    func value(forAttribute key: String) -> Any? {
        switch key {
        case NSMetadataItemFSNameKey, NSMetadataItemDisplayNameKey: return name
        case NSMetadataItemURLKey: return URL(fileURLWithPath: path, isDirectory: isDirectory)
        case NSMetadataItemPathKey: return path
        case NSMetadataItemFSSizeKey: return size
        case NSMetadataItemFSCreationDateKey: return Date(timeIntervalSince1970: creationDate)
        case NSMetadataItemFSContentChangeDateKey: return Date(timeIntervalSince1970: modificationDate)
        case NSMetadataItemContentTypeKey: return contentType
        case NSMetadataItemContentTypeTreeKey: return MetadataRecord.typeTree(contentType)
        case NSMetadataItemIsUbiquitousKey: return container != nil
        default: break
        }
        guard let status, let container else { return nil }
        switch key {
        case NSMetadataUbiquitousItemHasUnresolvedConflictsKey: return status.hasConflicts
        case NSMetadataUbiquitousItemIsDownloadingKey: return status.isDownloading
        case NSMetadataUbiquitousItemIsUploadedKey: return status.isUploaded
        case NSMetadataUbiquitousItemIsUploadingKey: return status.isUploading
        case NSMetadataUbiquitousItemDownloadRequestedKey: return status.downloadRequested
        case NSMetadataUbiquitousItemPercentDownloadedKey: return status.percentDownloaded
        case NSMetadataUbiquitousItemPercentUploadedKey: return status.percentUploaded
        case NSMetadataUbiquitousItemDownloadingStatusKey:
            switch status.downloading {
            case .notDownloaded: return NSMetadataUbiquitousItemDownloadingStatusNotDownloaded
            case .downloaded: return NSMetadataUbiquitousItemDownloadingStatusDownloaded
            case .current: return NSMetadataUbiquitousItemDownloadingStatusCurrent
            }
        case NSMetadataUbiquitousItemDownloadingErrorKey:
            return status.downloadingError.map { CocoaError(.ubiquitousFileUnavailable, userInfo: [NSLocalizedDescriptionKey: $0]) }
        case NSMetadataUbiquitousItemUploadingErrorKey:
            return status.uploadingError.map {
                CocoaError($0.contains("quota") ? .ubiquitousFileNotUploadedDueToQuota : .ubiquitousFileUbiquityServerNotAvailable,
                           userInfo: [NSLocalizedDescriptionKey: $0])
            }
        case NSMetadataUbiquitousItemContainerDisplayNameKey: return MetadataRecord.displayName(ofContainer: container)
        default: return nil
        }
    }

    /// `iCloud.com.example.Notes` → `Notes`.
    static func displayName(ofContainer identifier: String) -> String {
        identifier.split(separator: ".").last.map(String.init) ?? identifier
    }

    /// The item's type from its name: the registry's type for its extension, else a folder,
    /// package or plain data.
    static func contentType(name: String, isDirectory: Bool) -> String {
        let ext = (name as NSString).pathExtension
        if !ext.isEmpty, let type = DocumentTypeRegistry.shared.type(forFilenameExtension: ext) { return interned(type.identifier) }
        return isDirectory ? "public.folder" : "public.data"
    }

    /// One copy of each type string for all items.
    static func interned(_ type: String) -> String {
        typeStrings.withLock { strings in
            if let known = strings[type] { return known }
            strings[type] = type
            return type
        }
    }

    private static let typeStrings = Mutex<[String: String]>([:])

    static func typeTree(_ type: String) -> [String] {
        let tree = DocumentTypeRegistry.shared.supertypes(of: type)
        return tree.isEmpty ? [type] : [type] + tree.dropFirst()
    }

    /// What the disk says of the item at `path` (a local item); nil if nothing is there.
    static func read(_ path: String) -> MetadataRecord? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        let isDirectory = (info.st_mode & S_IFMT) == S_IFDIR
        let name = path.split(separator: "/").last.map(String.init) ?? path
        let type = contentType(name: name, isDirectory: isDirectory)
        var size = Int64(info.st_size)
        if isDirectory {
            size = DocumentTypeRegistry.shared.isPackage(type) ? directorySize(path) : 0
        }
        let modified = Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9
        // The birth time where the file system keeps one; else the earlier of the last
        // status change and the last modification.
        var seconds: Int64 = 0, nanoseconds = 0
        let born = ubq_birth_time(path, &seconds, &nanoseconds) == 0
            ? Double(seconds) + Double(nanoseconds) / 1e9
            : min(modified, Double(info.st_ctim.tv_sec) + Double(info.st_ctim.tv_nsec) / 1e9)
        return MetadataRecord(path: path, isDirectory: isDirectory, size: size, creationDate: born, modificationDate: modified,
                              contentType: type, container: nil, status: nil)
    }

    /// The total size of the files in a package.
    static func directorySize(_ path: String) -> Int64 {
        guard let enumerator = FileManager.default.enumerator(atPath: path) else { return 0 }
        var total: Int64 = 0
        while let relative = enumerator.nextObject() as? String {
            var info = stat()
            if lstat(path + "/" + relative, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG { total += Int64(info.st_size) }
        }
        return total
    }
}
