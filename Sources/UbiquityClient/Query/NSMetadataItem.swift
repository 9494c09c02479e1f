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

/// Everything a query knows of one item — 72 bytes besides its path: a query may hold
/// 100,000 of them, so the type and container are indexes into shared tables.
struct MetadataRecord: Sendable, Equatable {
    var path: String
    var size: Int64
    var creationDate: Double
    var modificationDate: Double
    private var typeIndex: UInt16
    /// 0: a local item.
    private var containerIndex: UInt16
    var isDirectory: Bool
    /// Meaningful for items in a container.
    private var ubiquity: UbiquitousStatus

    init(path: String, isDirectory: Bool, size: Int64, creationDate: Double, modificationDate: Double, contentType: String,
         container: String?, status: UbiquitousStatus?) {
        self.path = path
        self.isDirectory = isDirectory
        self.size = size
        self.creationDate = creationDate
        self.modificationDate = modificationDate
        typeIndex = Self.types.index(of: contentType)
        containerIndex = container.map(Self.containers.index) ?? 0
        ubiquity = status ?? UbiquitousStatus(downloading: .notDownloaded)
    }

    /// The item's uniform type identifier.
    var contentType: String {
        get { Self.types.name(at: typeIndex) }
        set { typeIndex = Self.types.index(of: newValue) }
    }

    /// The ubiquity container it is in, or nil for a local item.
    var container: String? {
        get { containerIndex == 0 ? nil : Self.containers.name(at: containerIndex) }
        set { containerIndex = newValue.map(Self.containers.index) ?? 0 }
    }

    /// Its sync status (nil for a local item).
    var status: UbiquitousStatus? {
        get { containerIndex == 0 ? nil : ubiquity }
        set { ubiquity = newValue ?? UbiquitousStatus(downloading: .notDownloaded) }
    }

    static let types = StringTable(first: "public.data")
    static let containers = StringTable(first: "")

    /// Strings many records share, each stored once and named by a small number.
    final class StringTable: Sendable {
        private let table: Mutex<(names: [String], indexes: [String: UInt16])>

        init(first: String) {
            table = Mutex(([first], [first: 0]))
        }

        func index(of name: String) -> UInt16 {
            table.withLock { table in
                if let index = table.indexes[name] { return index }
                guard table.names.count < Int(UInt16.max) else { return 0 }
                let index = UInt16(table.names.count)
                table.names.append(name)
                table.indexes[name] = index
                return index
            }
        }

        func name(at index: UInt16) -> String {
            table.withLock { $0.names[Int(index)] }
        }
    }

    /// An item's sync status (compact: a query may hold 100,000 of them).
    struct UbiquitousStatus: Sendable, Equatable {
        enum Downloading: UInt8, Sendable { case notDownloaded, downloaded, current }
        var downloading: Downloading
        var isDownloading = false
        var isUploaded = false
        var isUploading = false
        var hasConflicts = false
        var downloadRequested = false
        private var downloadedPercent: Float = .nan
        private var uploadedPercent: Float = .nan
        /// The transfer errors, when there are any (rare: one reference for both).
        private var errors: Errors?

        final class Errors: Sendable, Equatable {
            let downloading: String?
            let uploading: String?
            init(downloading: String?, uploading: String?) {
                self.downloading = downloading
                self.uploading = uploading
            }
            static func == (a: Errors, b: Errors) -> Bool { a.downloading == b.downloading && a.uploading == b.uploading }
        }

        init(downloading: Downloading) {
            self.downloading = downloading
        }

        var percentDownloaded: Double? {
            get { downloadedPercent.isNaN ? nil : Double(downloadedPercent) }
            set { downloadedPercent = newValue.map(Float.init) ?? .nan }
        }
        var percentUploaded: Double? {
            get { uploadedPercent.isNaN ? nil : Double(uploadedPercent) }
            set { uploadedPercent = newValue.map(Float.init) ?? .nan }
        }
        var downloadingError: String? {
            get { errors?.downloading }
            set { errors = newValue == nil && uploadingError == nil ? nil : Errors(downloading: newValue, uploading: uploadingError) }
        }
        var uploadingError: String? {
            get { errors?.uploading }
            set { errors = newValue == nil && downloadingError == nil ? nil : Errors(downloading: downloadingError, uploading: newValue) }
        }

        static func == (a: UbiquitousStatus, b: UbiquitousStatus) -> Bool {
            a.downloading == b.downloading && a.isDownloading == b.isDownloading && a.isUploaded == b.isUploaded && a.isUploading == b.isUploading
                && a.hasConflicts == b.hasConflicts && a.downloadRequested == b.downloadRequested
                && a.percentDownloaded == b.percentDownloaded && a.percentUploaded == b.percentUploaded && a.errors == b.errors
        }
    }

    static let allAttributes = [
        NSMetadataItemFSNameKey, NSMetadataItemDisplayNameKey, NSMetadataItemURLKey, NSMetadataItemPathKey, NSMetadataItemFSSizeKey,
        NSMetadataItemFSCreationDateKey, NSMetadataItemFSContentChangeDateKey, NSMetadataItemContentTypeKey, NSMetadataItemContentTypeTreeKey,
        NSMetadataItemIsUbiquitousKey, NSMetadataUbiquitousItemHasUnresolvedConflictsKey, NSMetadataUbiquitousItemIsDownloadingKey,
        NSMetadataUbiquitousItemIsUploadedKey, NSMetadataUbiquitousItemIsUploadingKey, NSMetadataUbiquitousItemPercentDownloadedKey,
        NSMetadataUbiquitousItemPercentUploadedKey, NSMetadataUbiquitousItemDownloadingStatusKey, NSMetadataUbiquitousItemDownloadingErrorKey,
        NSMetadataUbiquitousItemUploadingErrorKey, NSMetadataUbiquitousItemDownloadRequestedKey, NSMetadataUbiquitousItemContainerDisplayNameKey,
    ]

    var name: String {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return path }
        return String(path[path.utf8.index(after: slash)...])
    }

    /// The values predicates compare most, without going through `Any`.
    func predicateValueDirect(forKey key: String) -> PredicateValue? {
        switch key {
        case NSMetadataItemFSNameKey, NSMetadataItemDisplayNameKey: return .string(name)
        case NSMetadataItemPathKey: return .string(path)
        case NSMetadataItemFSSizeKey: return .number(Double(size))
        case NSMetadataItemFSContentChangeDateKey: return .date(Date(timeIntervalSince1970: modificationDate))
        case NSMetadataItemFSCreationDateKey: return .date(Date(timeIntervalSince1970: creationDate))
        case NSMetadataItemContentTypeKey: return .string(contentType)
        case NSMetadataItemIsUbiquitousKey: return .bool(container != nil)
        default: return nil
        }
    }

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
        guard let dot = name.utf8.lastIndex(of: UInt8(ascii: ".")), dot != name.utf8.startIndex else {
            return isDirectory ? "public.folder" : "public.data"
        }
        let ext = String(name[name.utf8.index(after: dot)...])
        let known = typeByExtension.withLock { $0[ext] }
        let type: String?
        if let known {
            type = known
        } else {
            type = DocumentTypeRegistry.shared.type(forFilenameExtension: ext).map(\.identifier)
            typeByExtension.withLock { $0[ext] = .some(type) }
        }
        return type ?? (isDirectory ? "public.folder" : "public.data")
    }

    /// Types by file-name extension, as found (nil: no type claims it).
    private static let typeByExtension = Mutex<[String: String?]>([:])

    static func typeTree(_ type: String) -> [String] {
        let tree = DocumentTypeRegistry.shared.supertypes(of: type)
        return tree.isEmpty ? [type] : [type] + tree.dropFirst()
    }

    /// What the disk says of the item at `path` (a local item); nil if nothing is there.
    static func read(_ path: String) -> MetadataRecord? {
        // One statx: type, size, modification and birth times (the birth time where the file
        // system keeps one; else the earlier of the last status change and modification).
        var info = ubq_item_info()
        guard ubq_item_info_at(path, &info) == 0 else { return nil }
        let isDirectory = info.is_directory != 0
        let slash = path.utf8.lastIndex(of: UInt8(ascii: "/"))
        let name = slash.map { String(path[path.utf8.index(after: $0)...]) } ?? path
        let type = contentType(name: name, isDirectory: isDirectory)
        var size = info.size
        if isDirectory {
            size = DocumentTypeRegistry.shared.isPackage(type) ? directorySize(path) : 0
        }
        return MetadataRecord(path: path, isDirectory: isDirectory, size: size, creationDate: info.birth, modificationDate: info.modified,
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
