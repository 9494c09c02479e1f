import Foundation
import UbiquityClient

// The attribute names, scopes, notification names and keys of Apple's NSMetadata API, with
// Apple's values (so predicates written as "kMDItemFSName LIKE '*.txt'" work too).

// MARK: Item attributes

/// The item's file-system name (`kMDItemFSName`): a `String`.
public let NSMetadataItemFSNameKey = "kMDItemFSName"
/// The item's display name (`kMDItemDisplayName`): its name without a hidden extension, a `String`.
public let NSMetadataItemDisplayNameKey = "kMDItemDisplayName"
/// The item's file URL (`kMDItemURL`): a `URL`.
public let NSMetadataItemURLKey = "kMDItemURL"
/// The item's full path (`kMDItemPath`): a `String`.
public let NSMetadataItemPathKey = "kMDItemPath"
/// The item's size in bytes (`kMDItemFSSize`): an `Int64` (a package's: its members' total).
public let NSMetadataItemFSSizeKey = "kMDItemFSSize"
/// When the item was created (`kMDItemFSCreationDate`): a `Date`.
public let NSMetadataItemFSCreationDateKey = "kMDItemFSCreationDate"
/// When the item's contents last changed (`kMDItemFSContentChangeDate`): a `Date`.
public let NSMetadataItemFSContentChangeDateKey = "kMDItemFSContentChangeDate"
/// The item's uniform type identifier (`kMDItemContentType`): a `String`.
public let NSMetadataItemContentTypeKey = "kMDItemContentType"
/// The item's type and every type it conforms to (`kMDItemContentTypeTree`): `[String]`.
public let NSMetadataItemContentTypeTreeKey = "kMDItemContentTypeTree"
/// Whether the item is in a ubiquity container: a `Bool`.
public let NSMetadataItemIsUbiquitousKey = "NSMetadataItemIsUbiquitousKey"
/// Whether the item has conflict versions not yet resolved: a `Bool`.
public let NSMetadataUbiquitousItemHasUnresolvedConflictsKey = "NSMetadataUbiquitousItemHasUnresolvedConflictsKey"
/// Whether the item is being downloaded: a `Bool`.
public let NSMetadataUbiquitousItemIsDownloadingKey = "NSMetadataUbiquitousItemIsDownloadingKey"
/// Whether the item's contents are on the server: a `Bool`.
public let NSMetadataUbiquitousItemIsUploadedKey = "NSMetadataUbiquitousItemIsUploadedKey"
/// Whether the item is being uploaded: a `Bool`.
public let NSMetadataUbiquitousItemIsUploadingKey = "NSMetadataUbiquitousItemIsUploadingKey"
/// How much of the item has been downloaded, 0 to 100: a `Double`.
public let NSMetadataUbiquitousItemPercentDownloadedKey = "NSMetadataUbiquitousItemPercentDownloadedKey"
/// How much of the item has been uploaded, 0 to 100: a `Double`.
public let NSMetadataUbiquitousItemPercentUploadedKey = "NSMetadataUbiquitousItemPercentUploadedKey"
/// Whether the local copy is not downloaded, downloaded, or current: one of the
/// `NSMetadataUbiquitousItemDownloadingStatus…` strings.
public let NSMetadataUbiquitousItemDownloadingStatusKey = "NSMetadataUbiquitousItemDownloadingStatusKey"
/// Why the last download failed, if it did: an `Error`.
public let NSMetadataUbiquitousItemDownloadingErrorKey = "NSMetadataUbiquitousItemDownloadingErrorKey"
/// Why the last upload failed, if it did: an `Error`.
public let NSMetadataUbiquitousItemUploadingErrorKey = "NSMetadataUbiquitousItemUploadingErrorKey"
/// Whether an app asked for the item to be downloaded: a `Bool`.
public let NSMetadataUbiquitousItemDownloadRequestedKey = "NSMetadataUbiquitousItemDownloadRequestedKey"
/// The name of the item's container, as shown to people: a `String`.
public let NSMetadataUbiquitousItemContainerDisplayNameKey = "NSMetadataUbiquitousItemContainerDisplayNameKey"
/// Whether a copy of the item is here (downloaded or current): a `Bool`. (Deprecated on
/// Apple's platforms in favour of ``NSMetadataUbiquitousItemDownloadingStatusKey``; apps still use it.)
public let NSMetadataUbiquitousItemIsDownloadedKey = "NSMetadataUbiquitousItemIsDownloadedKey"
/// Where the item is in the local container: a `URL`.
public let NSMetadataUbiquitousItemURLInLocalContainerKey = "NSMetadataUbiquitousItemURLInLocalContainerKey"
/// Whether the item is a document of another container of the account, found through
/// ``NSMetadataQueryAccessibleUbiquitousExternalDocumentsScope``: a `Bool`.
public let NSMetadataUbiquitousItemIsExternalDocumentKey = "NSMetadataUbiquitousItemIsExternalDocumentKey"

/// Whether the item is shared with other accounts (a share's top item, or in one): a `Bool`.
public let NSMetadataUbiquitousItemIsSharedKey = "NSMetadataUbiquitousItemIsSharedKey"
/// The current user's role in a shared item, or nil if it is not shared: one of
/// ``NSMetadataUbiquitousSharedItemRoleOwner`` and ``NSMetadataUbiquitousSharedItemRoleParticipant``.
public let NSMetadataUbiquitousSharedItemCurrentUserRoleKey = "NSMetadataUbiquitousSharedItemCurrentUserRoleKey"
/// What the current user may do with a shared item, or nil if it is not shared: one of
/// ``NSMetadataUbiquitousSharedItemPermissionsReadOnly`` and ``NSMetadataUbiquitousSharedItemPermissionsReadWrite``.
public let NSMetadataUbiquitousSharedItemCurrentUserPermissionsKey = "NSMetadataUbiquitousSharedItemCurrentUserPermissionsKey"
/// The name components of a shared item's owner, or nil if the current user owns it: a `PersonNameComponents`.
public let NSMetadataUbiquitousSharedItemOwnerNameComponentsKey = "NSMetadataUbiquitousSharedItemOwnerNameComponentsKey"
/// The name components of a shared item's most recent editor, or nil if it is the current
/// user: a `PersonNameComponents`.
public let NSMetadataUbiquitousSharedItemMostRecentEditorNameComponentsKey = "NSMetadataUbiquitousSharedItemMostRecentEditorNameComponentsKey"
/// The current user owns the shared item.
public let NSMetadataUbiquitousSharedItemRoleOwner = "NSMetadataUbiquitousSharedItemRoleOwner"
/// The current user takes part in another user's share.
public let NSMetadataUbiquitousSharedItemRoleParticipant = "NSMetadataUbiquitousSharedItemRoleParticipant"
/// The current user may only read the shared item.
public let NSMetadataUbiquitousSharedItemPermissionsReadOnly = "NSMetadataUbiquitousSharedItemPermissionsReadOnly"
/// The current user may read and write the shared item.
public let NSMetadataUbiquitousSharedItemPermissionsReadWrite = "NSMetadataUbiquitousSharedItemPermissionsReadWrite"

/// The item is not downloaded: only its metadata is here.
public let NSMetadataUbiquitousItemDownloadingStatusNotDownloaded = "NSMetadataUbiquitousItemDownloadingStatusNotDownloaded"
/// A copy is here, but a newer version is on the server.
public let NSMetadataUbiquitousItemDownloadingStatusDownloaded = "NSMetadataUbiquitousItemDownloadingStatusDownloaded"
/// The copy here is the current version.
public let NSMetadataUbiquitousItemDownloadingStatusCurrent = "NSMetadataUbiquitousItemDownloadingStatusCurrent"

// MARK: Scopes

/// The `Documents` folders of the app's ubiquity containers.
public let NSMetadataQueryUbiquitousDocumentsScope = "NSMetadataQueryUbiquitousDocumentsScope"
/// The app's ubiquity containers outside their `Documents` folders.
public let NSMetadataQueryUbiquitousDataScope = "NSMetadataQueryUbiquitousDataScope"
/// Documents of the signed-in account's other containers (those of other apps) that are on
/// this device.
public let NSMetadataQueryAccessibleUbiquitousExternalDocumentsScope = "NSMetadataQueryAccessibleUbiquitousExternalDocumentsScope"

// MARK: Notifications

extension Notification.Name {
    /// The query started gathering its first results.
    public static let NSMetadataQueryDidStartGathering = Notification.Name("NSMetadataQueryDidStartGatheringNotification")
    /// The query gathered more of its first results (during a long first gathering).
    public static let NSMetadataQueryGatheringProgress = Notification.Name("NSMetadataQueryGatheringProgressNotification")
    /// The query has its first results.
    public static let NSMetadataQueryDidFinishGathering = Notification.Name("NSMetadataQueryDidFinishGatheringNotification")
    /// The results changed: `userInfo` lists the items added, changed and removed.
    public static let NSMetadataQueryDidUpdate = Notification.Name("NSMetadataQueryDidUpdateNotification")
}

/// In an update's `userInfo`: the `[NSMetadataItem]` that became results.
public let NSMetadataQueryUpdateAddedItemsKey = "kMDQueryUpdateAddedItems"
/// In an update's `userInfo`: the `[NSMetadataItem]` results whose attributes changed.
public let NSMetadataQueryUpdateChangedItemsKey = "kMDQueryUpdateChangedItems"
/// In an update's `userInfo`: the `[NSMetadataItem]` that are no longer results.
public let NSMetadataQueryUpdateRemovedItemsKey = "kMDQueryUpdateRemovedItems"
