import Foundation
import UbiquityCoordination

/// Whether an item's local copy is there and current: Apple's
/// `URLUbiquitousItemDownloadingStatus`.
public struct URLUbiquitousItemDownloadingStatus: RawRepresentable, Hashable, Sendable {
    /// The status's name.
    public let rawValue: String

    /// A status by name.
    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// Only the item's metadata is here.
    public static let notDownloaded = URLUbiquitousItemDownloadingStatus(rawValue: "NSURLUbiquitousItemDownloadingStatusNotDownloaded")
    /// A local copy is here, possibly not the newest version.
    public static let downloaded = URLUbiquitousItemDownloadingStatus(rawValue: "NSURLUbiquitousItemDownloadingStatusDownloaded")
    /// The local copy is the newest version.
    public static let current = URLUbiquitousItemDownloadingStatus(rawValue: "NSURLUbiquitousItemDownloadingStatusCurrent")
}

/// The current user's role in a shared item: Apple's `URLUbiquitousSharedItemRole`.
public struct URLUbiquitousSharedItemRole: RawRepresentable, Hashable, Sendable {
    /// The role's name.
    public let rawValue: String

    /// A role by name.
    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// The current user owns the shared item.
    public static let owner = URLUbiquitousSharedItemRole(rawValue: "NSURLUbiquitousSharedItemRoleOwner")
    /// The current user takes part in another user's share.
    public static let participant = URLUbiquitousSharedItemRole(rawValue: "NSURLUbiquitousSharedItemRoleParticipant")
}

/// What the current user may do with a shared item: Apple's `URLUbiquitousSharedItemPermissions`.
public struct URLUbiquitousSharedItemPermissions: RawRepresentable, Hashable, Sendable {
    /// The permissions' name.
    public let rawValue: String

    /// Permissions by name.
    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// The current user may only read the item.
    public static let readOnly = URLUbiquitousSharedItemPermissions(rawValue: "NSURLUbiquitousSharedItemPermissionsReadOnly")
    /// The current user may read and write the item.
    public static let readWrite = URLUbiquitousSharedItemPermissions(rawValue: "NSURLUbiquitousSharedItemPermissionsReadWrite")
}

extension URLResourceKey {
    /// The current user's role in a shared item (Apple's key; Foundation on Linux lacks it).
    public static let ubiquitousSharedItemCurrentUserRoleKey = URLResourceKey(rawValue: "NSURLUbiquitousSharedItemCurrentUserRoleKey")
    /// What the current user may do with a shared item (Apple's key).
    public static let ubiquitousSharedItemCurrentUserPermissionsKey = URLResourceKey(rawValue: "NSURLUbiquitousSharedItemCurrentUserPermissionsKey")
    /// The name components of a shared item's owner (Apple's key).
    public static let ubiquitousSharedItemOwnerNameComponentsKey = URLResourceKey(rawValue: "NSURLUbiquitousSharedItemOwnerNameComponentsKey")
    /// The name components of a shared item's most recent editor (Apple's key).
    public static let ubiquitousSharedItemMostRecentEditorNameComponentsKey = URLResourceKey(rawValue: "NSURLUbiquitousSharedItemMostRecentEditorNameComponentsKey")

    /// Whether the item is excluded from sync (a `.nosync` name); read with
    /// ``Foundation/URL/ubiquityResourceValues(forKeys:)``.
    public static let ubiquitousItemIsExcludedFromSyncKey = URLResourceKey(rawValue: "NSURLUbiquitousItemIsExcludedFromSyncKey")
    /// Whether the item is shared with other accounts (Apple's key; Foundation on Linux lacks
    /// it); read with ``Foundation/URL/ubiquityResourceValues(forKeys:)``.
    public static let ubiquitousItemIsSharedKey = URLResourceKey(rawValue: "NSURLUbiquitousItemIsSharedKey")
    /// Percent of the item downloaded (0…100); an addition to Apple's keys.
    public static let ubiquitousItemPercentDownloadedKey = URLResourceKey(rawValue: "UbiquityURLUbiquitousItemPercentDownloadedKey")
    /// Percent of the item uploaded (0…100); an addition to Apple's keys.
    public static let ubiquitousItemPercentUploadedKey = URLResourceKey(rawValue: "UbiquityURLUbiquitousItemPercentUploadedKey")
}

/// An item's ubiquity resource values, under Apple's property names (Foundation on Linux has
/// the keys but not the values: read them with ``Foundation/URL/ubiquityResourceValues(forKeys:)``).
/// A value not asked for is nil.
public struct UbiquityResourceValues: Sendable {
    /// `isUbiquitousItemKey`.
    public var isUbiquitousItem: Bool?
    /// `ubiquitousItemDownloadingStatusKey`.
    public var ubiquitousItemDownloadingStatus: URLUbiquitousItemDownloadingStatus?
    /// `ubiquitousItemIsDownloadingKey`.
    public var ubiquitousItemIsDownloading: Bool?
    /// `ubiquitousItemDownloadRequestedKey`.
    public var ubiquitousItemDownloadRequested: Bool?
    /// `ubiquitousItemIsUploadedKey`.
    public var ubiquitousItemIsUploaded: Bool?
    /// `ubiquitousItemIsUploadingKey`.
    public var ubiquitousItemIsUploading: Bool?
    /// `ubiquitousItemHasUnresolvedConflictsKey`.
    public var ubiquitousItemHasUnresolvedConflicts: Bool?
    /// `ubiquitousItemDownloadingErrorKey`.
    public var ubiquitousItemDownloadingError: CocoaError?
    /// `ubiquitousItemUploadingErrorKey`.
    public var ubiquitousItemUploadingError: CocoaError?
    /// `ubiquitousItemContainerDisplayNameKey`: the name of the item's container.
    public var ubiquitousItemContainerDisplayName: String?
    /// `ubiquitousItemIsSharedKey`: whether the item is shared with other accounts (a share's
    /// top item, or in one; docs/Sharing.md).
    public var ubiquitousItemIsShared: Bool?
    /// `ubiquitousSharedItemCurrentUserRoleKey`: the current user's role in the shared item
    /// (nil: not shared).
    public var ubiquitousSharedItemCurrentUserRole: URLUbiquitousSharedItemRole?
    /// `ubiquitousSharedItemCurrentUserPermissionsKey`: what the current user may do with the
    /// shared item (nil: not shared).
    public var ubiquitousSharedItemCurrentUserPermissions: URLUbiquitousSharedItemPermissions?
    /// `ubiquitousSharedItemOwnerNameComponentsKey`: the shared item's owner (their account name
    /// as the given name; nil when not shared, or when the current user owns it).
    public var ubiquitousSharedItemOwnerNameComponents: PersonNameComponents?
    /// `ubiquitousSharedItemMostRecentEditorNameComponentsKey`: who made the shared item's
    /// current version (their account name as the given name; nil when not shared, or when it
    /// was the current user).
    public var ubiquitousSharedItemMostRecentEditorNameComponents: PersonNameComponents?
    /// `ubiquitousItemIsExcludedFromSyncKey`.
    public var ubiquitousItemIsExcludedFromSync: Bool?
    /// `ubiquitousItemPercentDownloadedKey`.
    public var ubiquitousItemPercentDownloaded: Double?
    /// `ubiquitousItemPercentUploadedKey`.
    public var ubiquitousItemPercentUploaded: Double?

    /// No values.
    public init() {}
}

extension UbiquityContainers {
    /// The item's ubiquity resource values for `keys`: from the agent when it runs; when it
    /// does not, what the disk tells (ubiquitous, downloaded, excluded) with the agent's absence
    /// as the uploading error.
    public func resourceValues(of url: URL, forKeys keys: Set<URLResourceKey>) -> UbiquityResourceValues {
        var all = UbiquityResourceValues()
        let location = location(of: url)
        let excluded = location.map { Self.isExcludedFromSync($0.relativePath) } ?? false
        all.isUbiquitousItem = isUbiquitousItem(at: url)
        all.ubiquitousItemIsExcludedFromSync = excluded
        if all.isUbiquitousItem == true, let location {
            all.ubiquitousItemContainerDisplayName = Self.displayName(ofContainer: location.container)
            all.ubiquitousItemIsShared = false
        }
        if all.isUbiquitousItem == true {
            do {
                guard let status = try agent.send(AgentRequest(.item, path: url.standardizedFileURL.path), timeout: .seconds(5)).items?.first else {
                    throw AgentError(.unknownItem, "the agent does not know \(url.path) yet")
                }
                all.ubiquitousItemDownloadingStatus = status.downloaded ? (status.current ? .current : .downloaded) : .notDownloaded
                all.ubiquitousItemIsDownloading = status.downloading
                all.ubiquitousItemDownloadRequested = status.downloadRequested
                all.ubiquitousItemIsUploaded = status.uploaded
                all.ubiquitousItemIsUploading = status.uploading
                all.ubiquitousItemHasUnresolvedConflicts = status.conflicts > 0
                all.ubiquitousItemDownloadingError = status.downloadingError.map { CocoaError(.ubiquitousFileUnavailable, userInfo: [NSLocalizedDescriptionKey: $0]) }
                all.ubiquitousItemUploadingError = status.uploadingError.map {
                    CocoaError($0.contains("quota") ? .ubiquitousFileNotUploadedDueToQuota : .ubiquitousFileUbiquityServerNotAvailable,
                               userInfo: [NSLocalizedDescriptionKey: $0])
                }
                all.ubiquitousItemIsShared = status.sharing != nil
                if let sharing = status.sharing {
                    all.ubiquitousSharedItemCurrentUserRole = sharing.owned ? .owner : .participant
                    all.ubiquitousSharedItemCurrentUserPermissions = sharing.readOnly ? .readOnly : .readWrite
                    all.ubiquitousSharedItemOwnerNameComponents = sharing.owner.map(Self.nameComponents)
                    all.ubiquitousSharedItemMostRecentEditorNameComponents = sharing.lastEditor.map(Self.nameComponents)
                }
                all.ubiquitousItemPercentDownloaded = status.percentDownloaded
                all.ubiquitousItemPercentUploaded = status.percentUploaded
            } catch {
                // The local copy is the newest this device knows of: current (Apple's
                // "downloaded" means a newer version is known and on its way).
                let downloaded = FileManager.default.fileExists(atPath: url.path)
                all.ubiquitousItemDownloadingStatus = downloaded ? .current : .notDownloaded
                all.ubiquitousItemIsDownloading = false
                all.ubiquitousItemIsUploading = false
                all.ubiquitousItemUploadingError = CocoaError(.ubiquitousFileUbiquityServerNotAvailable, userInfo: [NSLocalizedDescriptionKey: "\(error)"])
            }
        }
        var values = UbiquityResourceValues()
        func take<T>(_ key: URLResourceKey, _ path: WritableKeyPath<UbiquityResourceValues, T?>) {
            if keys.contains(key) { values[keyPath: path] = all[keyPath: path] }
        }
        take(.isUbiquitousItemKey, \.isUbiquitousItem)
        take(.ubiquitousItemDownloadingStatusKey, \.ubiquitousItemDownloadingStatus)
        take(.ubiquitousItemIsDownloadingKey, \.ubiquitousItemIsDownloading)
        take(.ubiquitousItemDownloadRequestedKey, \.ubiquitousItemDownloadRequested)
        take(.ubiquitousItemIsUploadedKey, \.ubiquitousItemIsUploaded)
        take(.ubiquitousItemIsUploadingKey, \.ubiquitousItemIsUploading)
        take(.ubiquitousItemHasUnresolvedConflictsKey, \.ubiquitousItemHasUnresolvedConflicts)
        take(.ubiquitousItemDownloadingErrorKey, \.ubiquitousItemDownloadingError)
        take(.ubiquitousItemUploadingErrorKey, \.ubiquitousItemUploadingError)
        take(.ubiquitousItemIsExcludedFromSyncKey, \.ubiquitousItemIsExcludedFromSync)
        take(.ubiquitousItemContainerDisplayNameKey, \.ubiquitousItemContainerDisplayName)
        take(.ubiquitousItemIsSharedKey, \.ubiquitousItemIsShared)
        take(.ubiquitousSharedItemCurrentUserRoleKey, \.ubiquitousSharedItemCurrentUserRole)
        take(.ubiquitousSharedItemCurrentUserPermissionsKey, \.ubiquitousSharedItemCurrentUserPermissions)
        take(.ubiquitousSharedItemOwnerNameComponentsKey, \.ubiquitousSharedItemOwnerNameComponents)
        take(.ubiquitousSharedItemMostRecentEditorNameComponentsKey, \.ubiquitousSharedItemMostRecentEditorNameComponents)
        take(.ubiquitousItemPercentDownloadedKey, \.ubiquitousItemPercentDownloaded)
        take(.ubiquitousItemPercentUploadedKey, \.ubiquitousItemPercentUploaded)
        return values
    }
}

extension UbiquityContainers {
    /// An account's name as Apple's person-name components: its given name (an account has no
    /// other name on a Ubiquity server).
    public static func nameComponents(_ account: String) -> PersonNameComponents {
        NSFileVersion.nameComponents(account)
    }
}

extension URL {
    /// The item's ubiquity resource values (Apple reads these with `resourceValues(forKeys:)`;
    /// Foundation on Linux does not fill them, so they have their own call).
    public func ubiquityResourceValues(forKeys keys: Set<URLResourceKey>) -> UbiquityResourceValues {
        UbiquityContainers.shared.resourceValues(of: self, forKeys: keys)
    }
}
