import CUbiquitySystem
import Foundation
import Synchronization
import UbiquityClient
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// The folder a query's records share: one object per folder walked, so a record holds its
/// folder and its own name, never its whole path, and costs the same however deep it is.
final class MetadataFolder: Sendable {
    /// The folder's absolute path.
    let path: String

    init(_ path: String) {
        self.path = path
    }

    /// The path of the entry `name` in this folder.
    func path(of name: String) -> String {
        path == "/" ? "/" + name : path + "/" + name
    }

    /// The folder and name of the item at an absolute `path` (`/a/b` → `/a` and `b`).
    static func split(_ path: String) -> (folder: String, name: String) {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return (".", path) }
        let folder = slash == path.utf8.startIndex ? "/" : String(path[..<slash])
        return (folder, String(path[path.utf8.index(after: slash)...]))
    }
}

/// Everything a query knows of one item — 80 bytes, its name inline when it is short: a query
/// may hold 100,000 of them, so the folder is shared and the type and container are indexes
/// into shared tables.
struct MetadataRecord: Sendable, Equatable {
    /// The folder the item is in (shared with its siblings).
    var folder: MetadataFolder
    /// The item's name in its folder.
    var name: String
    var size: Int64
    var creationDate: Double
    var modificationDate: Double
    /// The type's index in ``types``.
    var typeIndex: UInt16
    /// The container's index in ``containers``; 0: a local item.
    var containerIndex: UInt16
    var isDirectory: Bool
    /// Meaningful for items in a container.
    private var ubiquity: UbiquitousStatus

    init(folder: MetadataFolder, name: String, isDirectory: Bool, size: Int64, creationDate: Double, modificationDate: Double,
         contentType: String, container: String?, status: UbiquitousStatus?) {
        self.init(folder: folder, name: name, isDirectory: isDirectory, size: size, creationDate: creationDate, modificationDate: modificationDate,
                  typeIndex: Self.types.index(of: contentType), containerIndex: container.map(Self.containers.index) ?? 0, status: status)
    }

    /// A record whose type and container are already indexes into the shared tables (what a
    /// walk over thousands of items passes, to look each string up once).
    init(folder: MetadataFolder, name: String, isDirectory: Bool, size: Int64, creationDate: Double, modificationDate: Double,
         typeIndex: UInt16, containerIndex: UInt16, status: UbiquitousStatus?) {
        self.folder = folder
        self.name = name
        self.isDirectory = isDirectory
        self.size = size
        self.creationDate = creationDate
        self.modificationDate = modificationDate
        self.typeIndex = typeIndex
        self.containerIndex = containerIndex
        ubiquity = status ?? UbiquitousStatus(downloading: .notDownloaded)
    }

    /// The item's absolute path (made when asked: records do not keep it).
    var path: String { folder.path(of: name) }

    static func == (a: MetadataRecord, b: MetadataRecord) -> Bool {
        (a.folder === b.folder || a.folder.path == b.folder.path) && a.name == b.name && a.size == b.size && a.creationDate == b.creationDate
            && a.modificationDate == b.modificationDate && a.typeIndex == b.typeIndex && a.containerIndex == b.containerIndex
            && a.isDirectory == b.isDirectory && a.ubiquity == b.ubiquity
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
        /// How the item is shared, when it is (rare: one reference).
        private var shared: Shared?

        final class Shared: Sendable, Equatable {
            let sharing: ItemSharing
            init(_ sharing: ItemSharing) { self.sharing = sharing }
            static func == (a: Shared, b: Shared) -> Bool { a.sharing == b.sharing }
        }

        /// How the item is shared with other accounts, if it is.
        var sharing: ItemSharing? {
            get { shared?.sharing }
            set { shared = newValue.map(Shared.init) }
        }

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
                && a.percentDownloaded == b.percentDownloaded && a.percentUploaded == b.percentUploaded && a.errors == b.errors && a.shared == b.shared
        }
    }

    static let allAttributes = [
        NSMetadataItemFSNameKey, NSMetadataItemDisplayNameKey, NSMetadataItemURLKey, NSMetadataItemPathKey, NSMetadataItemFSSizeKey,
        NSMetadataItemFSCreationDateKey, NSMetadataItemFSContentChangeDateKey, NSMetadataItemContentTypeKey, NSMetadataItemContentTypeTreeKey,
        NSMetadataItemIsUbiquitousKey, NSMetadataUbiquitousItemHasUnresolvedConflictsKey, NSMetadataUbiquitousItemIsDownloadingKey,
        NSMetadataUbiquitousItemIsUploadedKey, NSMetadataUbiquitousItemIsUploadingKey, NSMetadataUbiquitousItemPercentDownloadedKey,
        NSMetadataUbiquitousItemPercentUploadedKey, NSMetadataUbiquitousItemDownloadingStatusKey, NSMetadataUbiquitousItemDownloadingErrorKey,
        NSMetadataUbiquitousItemUploadingErrorKey, NSMetadataUbiquitousItemDownloadRequestedKey, NSMetadataUbiquitousItemContainerDisplayNameKey,
        NSMetadataUbiquitousItemIsDownloadedKey, NSMetadataUbiquitousItemURLInLocalContainerKey, NSMetadataUbiquitousItemIsExternalDocumentKey,
        NSMetadataUbiquitousItemIsSharedKey, NSMetadataUbiquitousSharedItemCurrentUserRoleKey, NSMetadataUbiquitousSharedItemCurrentUserPermissionsKey,
        NSMetadataUbiquitousSharedItemOwnerNameComponentsKey, NSMetadataUbiquitousSharedItemMostRecentEditorNameComponentsKey,
    ]

    /// The containers this process's queries found through the external documents scope
    /// (containers of the account that are not the app's own), by index in ``containers``.
    static let externalContainers = Mutex<Set<UInt16>>([])

    /// Notes that `container` is another app's container of the account.
    static func markExternal(_ container: String) {
        let index = containers.index(of: container)
        externalContainers.withLock { _ = $0.insert(index) }
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
        case NSMetadataUbiquitousItemContainerDisplayNameKey: return UbiquityContainers.displayName(ofContainer: container)
        case NSMetadataUbiquitousItemIsDownloadedKey: return status.downloading != .notDownloaded
        case NSMetadataUbiquitousItemURLInLocalContainerKey: return URL(fileURLWithPath: path, isDirectory: isDirectory)
        case NSMetadataUbiquitousItemIsExternalDocumentKey: return Self.externalContainers.withLock { $0.contains(containerIndex) }
        case NSMetadataUbiquitousItemIsSharedKey: return status.sharing != nil
        case NSMetadataUbiquitousSharedItemCurrentUserRoleKey:
            return status.sharing.map { $0.owned ? NSMetadataUbiquitousSharedItemRoleOwner : NSMetadataUbiquitousSharedItemRoleParticipant }
        case NSMetadataUbiquitousSharedItemCurrentUserPermissionsKey:
            return status.sharing.map { $0.readOnly ? NSMetadataUbiquitousSharedItemPermissionsReadOnly : NSMetadataUbiquitousSharedItemPermissionsReadWrite }
        case NSMetadataUbiquitousSharedItemOwnerNameComponentsKey: return status.sharing?.owner.map(UbiquityContainers.nameComponents)
        case NSMetadataUbiquitousSharedItemMostRecentEditorNameComponentsKey: return status.sharing?.lastEditor.map(UbiquityContainers.nameComponents)
        default: return nil
        }
    }

    /// `iCloud.com.example.Notes` → `Notes`.
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
        let (folder, name) = MetadataFolder.split(path)
        return read(name, in: MetadataFolder(folder), descriptor: AT_FDCWD, relative: path)
    }

    /// What the disk says of the entry `name` of `folder`, found at `relative` from the open
    /// folder `descriptor` (its name there, or an absolute path with `AT_FDCWD`): one statx —
    /// type, size, modification and birth times (the birth time where the file system keeps
    /// one; else the earlier of the last status change and modification).
    static func read(_ name: String, in folder: MetadataFolder, descriptor: Int32, relative: String,
                     types: inout TypeCache) -> MetadataRecord? {
        var info = ubq_item_info()
        guard ubq_item_info_in(descriptor, relative, &info) == 0 else { return nil }
        let isDirectory = info.is_directory != 0
        let type = types.index(name: name, isDirectory: isDirectory)
        var size = info.size
        if isDirectory {
            size = types.isPackage(type) ? directorySize(folder.path(of: name)) : 0
        }
        return MetadataRecord(folder: folder, name: name, isDirectory: isDirectory, size: size, creationDate: info.birth, modificationDate: info.modified,
                              typeIndex: type, containerIndex: 0, status: nil)
    }

    /// ``read(_:in:descriptor:relative:types:)`` with a cache of its own.
    static func read(_ name: String, in folder: MetadataFolder, descriptor: Int32, relative: String) -> MetadataRecord? {
        var types = TypeCache()
        return read(name, in: folder, descriptor: descriptor, relative: relative, types: &types)
    }

    /// Types by name extension and which are packages, kept by one walker while it lists
    /// thousands of entries (no lock per entry; the shared tables are asked once per extension).
    struct TypeCache {
        private var byExtension: [Substring: UInt16] = [:]
        private var folders: [Substring: UInt16] = [:]
        private var packages: [UInt16: Bool] = [:]
        /// The last file's extension and type: files side by side mostly share one.
        private var last: (ext: Substring, index: UInt16)?

        /// The index of the type of an entry named `name`.
        mutating func index(name: String, isDirectory: Bool) -> UInt16 {
            let ext: Substring
            if let dot = name.utf8.lastIndex(of: UInt8(ascii: ".")), dot != name.utf8.startIndex {
                ext = name[name.utf8.index(after: dot)...]
            } else {
                ext = ""
            }
            if !isDirectory, let last, last.ext.utf8.elementsEqual(ext.utf8) { return last.index }
            let index: UInt16
            if let known = isDirectory ? folders[ext] : byExtension[ext] {
                index = known
            } else {
                index = MetadataRecord.types.index(of: MetadataRecord.contentType(name: name, isDirectory: isDirectory))
                if isDirectory { folders[ext] = index } else { byExtension[ext] = index }
            }
            if !isDirectory { last = (ext, index) }
            return index
        }

        /// Whether the type at `index` is a package's.
        mutating func isPackage(_ index: UInt16) -> Bool {
            if let known = packages[index] { return known }
            let package = DocumentTypeRegistry.shared.isPackage(MetadataRecord.types.name(at: index))
            packages[index] = package
            return package
        }
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
