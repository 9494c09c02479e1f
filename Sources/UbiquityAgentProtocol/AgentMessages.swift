import Foundation

// What apps and the `ubiquity` command ask the agent over its local socket, and what it answers:
// one JSON object per line each way (docs/Agent.md).

/// A request to the agent.
public struct AgentRequest: Codable, Sendable, Equatable {
    /// What is asked.
    public enum Operation: String, Codable, Sendable {
        /// The account, the containers and their queues and errors.
        case status
        /// The items of a container (``container``), with their transfer state.
        case list
        /// One item's state (``path``).
        case item
        /// Download an item (``path``); with ``wait``, answer once it is downloaded.
        case download
        /// Remove an item's local copy, keeping its metadata (``path``).
        case evict
        /// Sync now: a container (``container``), or every container.
        case sync
        /// Start keeping a container (``container``) in step (an app asked for its URL).
        case register
        /// Follow a container's item statuses (``container``): the connection stays open; the
        /// agent's first answer lists every item's status (as ``list``), and each later one
        /// (``AgentResponse/items``) the items whose status changed since, each time some did
        /// (a metadata query's live updates).
        case watch
        /// The server's earlier revisions of an item (``path``): its versions that are not on
        /// this device, newest first (``AgentResponse/versions``).
        case versions
        /// Download one of them (``path``, ``revision``) into the item's version store; the
        /// answer comes once it is there.
        case downloadVersion
        /// Publish an uploaded flat file (``path``): a link anyone can download its current
        /// revision from until it expires (``AgentResponse/link``).
        case publish
        /// Share an item (``path``) with the account named ``participant`` (read-only with
        /// ``readOnly``): the share made (or the one the item is the top of) in ``AgentResponse/shares``.
        case share
        /// The account's shares, those it joined and its invitations (``AgentResponse/shares``).
        case shares
        /// Accept (``accept`` true) or decline an invitation (``share``: the share's or the
        /// invitation's id).
        case answerInvitation
        /// Leave the share whose folder is ``path`` (a participant's).
        case leaveShare
        /// Remove ``participant`` from the share whose top item is ``path`` (its owner's).
        case removeParticipant
        /// Stop sharing the item at ``path`` (its owner's): every participant's access ends.
        case stopSharing
        /// The safety code of this account and ``participant`` (an account it shares with), to
        /// compare with that person's; with ``accept``, the person says they compared it and it
        /// matched: that account's sharing key is pinned as confirmed, a changed one accepted
        /// (``AgentResponse/sharingCode``).
        case verifySharing
    }

    /// What is asked.
    public var operation: Operation
    /// The container, for `list`, `sync` and `register`.
    public var container: String?
    /// An item's absolute path, for `item`, `download` and `evict`.
    public var path: String?
    /// For `download`: answer only when the item is downloaded (or cannot be).
    public var wait: Bool?
    /// For `downloadVersion`: the revision (a ``RemoteVersion/revision``).
    public var revision: String?
    /// For `share`, `removeParticipant` and `verifySharing`: the other account's name.
    public var participant: String?
    /// For `share`: whether the participant may only read.
    public var readOnly: Bool?
    /// For `answerInvitation`: the share's (or the invitation's) id.
    public var share: String?
    /// For `answerInvitation`: accept (true) or decline; for `verifySharing`: the code was compared and matched.
    public var accept: Bool?

    /// Creates a request.
    public init(_ operation: Operation, container: String? = nil, path: String? = nil, wait: Bool? = nil, revision: String? = nil,
                participant: String? = nil, readOnly: Bool? = nil, share: String? = nil, accept: Bool? = nil) {
        self.operation = operation
        self.container = container
        self.path = path
        self.wait = wait
        self.revision = revision
        self.participant = participant
        self.readOnly = readOnly
        self.share = share
        self.accept = accept
    }
}

/// The agent's answer.
public struct AgentResponse: Codable, Sendable, Equatable {
    /// Why the request failed, or nil.
    public var error: AgentError?
    /// For `status`.
    public var status: AgentStatus?
    /// For `list` and `item`.
    public var items: [UbiquityItemStatus]?
    /// For `versions`.
    public var versions: [RemoteVersion]?
    /// For `publish`.
    public var link: PublishedItemLink?
    /// For `share` and `shares`.
    public var shares: [ShareSummary]?
    /// For `verifySharing`.
    public var sharingCode: SharingCodeSummary?

    /// Creates an answer.
    public init(error: AgentError? = nil, status: AgentStatus? = nil, items: [UbiquityItemStatus]? = nil, versions: [RemoteVersion]? = nil,
                link: PublishedItemLink? = nil, shares: [ShareSummary]? = nil, sharingCode: SharingCodeSummary? = nil) {
        self.sharingCode = sharingCode
        self.error = error
        self.status = status
        self.items = items
        self.versions = versions
        self.link = link
        self.shares = shares
    }
}

/// A share as `ubiquity shares list` shows it: one the account owns, joined, or is invited to.
public struct ShareSummary: Codable, Sendable, Equatable {
    /// How the account stands in it.
    public enum Standing: String, Codable, Sendable {
        /// The account owns it.
        case owned
        /// The account joined it.
        case joined
        /// The account is invited to it and has not answered.
        case invited
    }

    /// The share's id.
    public var id: String
    /// How the account stands in it.
    public var standing: Standing
    /// Its owner's account name.
    public var owner: String
    /// Its container.
    public var container: String
    /// Its top item's name (nil when sealed: only devices can tell).
    public var name: String?
    /// Where it is on this device, when it is here.
    public var path: String?
    /// Whether the account may only read it (a participant's).
    public var readOnly: Bool?
    /// When an unanswered invitation expires (seconds since 1970).
    public var expires: Double?
    /// For its owner: who it is shared with.
    public var participants: [ShareParticipantSummary]?
    /// Where the share's key stands on this device (an account that seals; nil otherwise).
    public var key: ShareKeyStanding?

    /// Creates a value.
    public init(id: String, standing: Standing, owner: String, container: String, name: String? = nil, path: String? = nil, readOnly: Bool? = nil,
                expires: Double? = nil, participants: [ShareParticipantSummary]? = nil, key: ShareKeyStanding? = nil) {
        self.key = key
        self.id = id
        self.standing = standing
        self.owner = owner
        self.container = container
        self.name = name
        self.path = path
        self.readOnly = readOnly
        self.expires = expires
        self.participants = participants
    }
}

/// Where a share's key stands on one device (docs/Sharing.md, "Keys").
public struct ShareKeyStanding: Codable, Sendable, Equatable {
    /// The share's current epoch.
    public var epoch: Int64
    /// The epochs whose key this device opened.
    public var held: [Int64]
    /// For its owner: the participants who accepted and have no key of the current epoch yet.
    public var waiting: [String]?
    /// Why a key is not held or not given, when one is not (a sharing key that changed, an
    /// account with no sharing key yet).
    public var problem: String?

    /// Creates a value.
    public init(epoch: Int64, held: [Int64], waiting: [String]? = nil, problem: String? = nil) {
        self.epoch = epoch
        self.held = held
        self.waiting = waiting
        self.problem = problem
    }
}

/// The safety code of this account and another (`ubiquity shares verify NAME`).
public struct SharingCodeSummary: Codable, Sendable, Equatable {
    /// What this device knows of the other account's sharing key.
    public enum Standing: String, Codable, Sendable {
        /// Seen for the first time now: pinned, not compared yet.
        case new
        /// The key pinned before, not compared yet.
        case pinned
        /// The key pinned and compared: the people said the codes matched.
        case confirmed
        /// Not the key pinned before: refused until the people compare the code again.
        case changed
    }

    /// The other account's name.
    public var account: String
    /// Twelve digits in three groups, the same on both people's devices when nobody put a key
    /// in between.
    public var code: String
    /// What this device knew of the other account's key when asked (before a confirmation).
    public var standing: Standing
    /// Whether the key is pinned as confirmed now.
    public var confirmed: Bool

    /// Creates a value.
    public init(account: String, code: String, standing: Standing, confirmed: Bool) {
        self.account = account
        self.code = code
        self.standing = standing
        self.confirmed = confirmed
    }
}

/// One person a share is with, as its owner sees them.
public struct ShareParticipantSummary: Codable, Sendable, Equatable {
    /// The account name invited.
    public var name: String
    /// Whether they may only read.
    public var readOnly: Bool
    /// `invited`, `accepted`, `declined`, `left`, `removed` or `expired`.
    public var state: String

    /// Creates a value.
    public init(name: String, readOnly: Bool, state: String) {
        self.name = name
        self.readOnly = readOnly
        self.state = state
    }
}

/// A published item's link: its full address and when it expires.
public struct PublishedItemLink: Codable, Sendable, Equatable {
    /// The address anyone can download the item from.
    public var url: String
    /// When the link stops working (seconds since 1970).
    public var expires: Double

    /// Creates a value.
    public init(url: String, expires: Double) {
        self.url = url
        self.expires = expires
    }
}

/// A version of an item that the server keeps and this device does not have (an earlier
/// revision): what `NSFileVersion.getNonlocalVersionsOfItem(at:completionHandler:)` lists.
public struct RemoteVersion: Codable, Sendable, Equatable {
    /// The revision's id.
    public var revision: String
    /// The item's name in that revision.
    public var name: String
    /// The device that saved it.
    public var deviceName: String
    /// Bytes of contents.
    public var size: Int64
    /// When it was modified (seconds since 1970).
    public var modificationDate: Double
    /// The account of the person who made it, when that is another person (a shared item's
    /// owner or participant): `NSFileVersion.originatorNameComponents`.
    public var originator: String?

    /// Creates a value.
    public init(revision: String, name: String, deviceName: String, size: Int64, modificationDate: Double, originator: String? = nil) {
        self.originator = originator
        self.revision = revision
        self.name = name
        self.deviceName = deviceName
        self.size = size
        self.modificationDate = modificationDate
    }
}

/// What the agent is doing.
public struct AgentStatus: Codable, Sendable, Equatable {
    /// The signed-in account, or nil.
    public var account: String?
    /// Its server.
    public var server: String?
    /// Whether the push connection to the server is up.
    public var connected: Bool
    /// Whether every container downloads everything (the Mac's behaviour).
    public var greedy: Bool
    /// The containers kept in step.
    public var containers: [ContainerStatus]
    /// Problems with key-value stores, by store (nil from an agent older than this field).
    public var keyValueErrors: [String: String]?

    /// Creates a status.
    public init(account: String?, server: String?, connected: Bool, greedy: Bool, containers: [ContainerStatus], keyValueErrors: [String: String]? = nil) {
        self.account = account
        self.server = server
        self.connected = connected
        self.greedy = greedy
        self.containers = containers
        self.keyValueErrors = keyValueErrors
    }
}

/// One container's state in the agent.
public struct ContainerStatus: Codable, Sendable, Equatable {
    /// Its identifier.
    public var identifier: String
    /// Its local folder.
    public var path: String
    /// Items known (downloaded or not).
    public var items: Int
    /// Local changes waiting for the server.
    public var queued: Int
    /// Whether everything is in step.
    public var idle: Bool
    /// Problems, by item path (or `(changes)` for fetching).
    public var errors: [String: String]
    /// When the last round finished (seconds since 1970).
    public var lastSync: Double?
    /// What is not in step yet and why, by path: at most ``pendingShown`` of them (nil from an
    /// agent older than this field).
    public var pending: [PendingItem]?
    /// How many items are not in step in all (``pending`` may show fewer).
    public var pendingCount: Int?
    /// For a share another account shared with this one: the share's id and the name of its
    /// folder at the top of the container's `Documents` (nil: the container's own items).
    public var share: SharedFolderStatus?

    /// How many pending items a status lists at most.
    public static let pendingShown = 50

    /// Creates a status.
    public init(identifier: String, path: String, items: Int, queued: Int, idle: Bool, errors: [String: String], lastSync: Double?,
                pending: [PendingItem]? = nil, pendingCount: Int? = nil, share: SharedFolderStatus? = nil) {
        self.identifier = identifier
        self.path = path
        self.items = items
        self.queued = queued
        self.idle = idle
        self.errors = errors
        self.lastSync = lastSync
        self.pending = pending
        self.pendingCount = pendingCount
        self.share = share
    }
}

/// A share kept in step on this device, as ``ContainerStatus/share`` names it.
public struct SharedFolderStatus: Codable, Sendable, Equatable {
    /// The share's id.
    public var id: String
    /// Its folder's (or file's) name at the top of the container's `Documents`.
    public var name: String

    /// Creates a value.
    public init(id: String, name: String) {
        self.id = id
        self.name = name
    }
}

/// An item that is not in step yet, and why.
public struct PendingItem: Codable, Sendable, Equatable {
    /// Why an item waits.
    public enum Reason: String, Codable, Sendable {
        /// Its change is on its way to the server.
        case sending
        /// Its change waits for an earlier one of the same item to be answered.
        case waitingToSend
        /// Its contents are going up.
        case uploading
        /// Its contents are coming down.
        case downloading
        /// An app asked for it; the download has not started.
        case downloadRequested
        /// The last attempt failed (``PendingItem/detail`` says why); it is tried again.
        case failed
    }

    /// Its path in the container.
    public var path: String
    /// Why it waits.
    public var reason: Reason
    /// More: a transfer's percentage, or the failure.
    public var detail: String?

    /// Creates an entry.
    public init(path: String, reason: Reason, detail: String? = nil) {
        self.path = path
        self.reason = reason
        self.detail = detail
    }
}

/// One item's sync state: what an app reads as resource values
/// (``Foundation/URL/ubiquityResourceValues(forKeys:)``) and `ubiquity ls` prints.
public struct UbiquityItemStatus: Codable, Sendable, Equatable {
    /// The container.
    public var container: String
    /// The item's absolute path.
    public var path: String
    /// Its size in bytes, when known.
    public var size: Int64?
    /// Whether a local copy exists.
    public var downloaded: Bool
    /// Whether the local copy is the server's current version.
    public var current: Bool
    /// Whether it is being downloaded.
    public var downloading: Bool
    /// Whether an app asked for it to be downloaded and it is not yet.
    public var downloadRequested: Bool
    /// Whether the server has all of it.
    public var uploaded: Bool
    /// Whether it is being uploaded (or waits to be).
    public var uploading: Bool
    /// Percent of its contents downloaded (0…100), while downloading or when done.
    public var percentDownloaded: Double?
    /// Percent of its contents uploaded (0…100).
    public var percentUploaded: Double?
    /// Unresolved conflict versions.
    public var conflicts: Int
    /// Why the last download failed, or nil.
    public var downloadingError: String?
    /// Why the last upload failed, or nil.
    public var uploadingError: String?
    /// Whether the item is shared with other accounts (it is a share's top item, or in one),
    /// and how: nil when it is not.
    public var sharing: ItemSharing?

    /// Creates an item's state.
    public init(container: String, path: String, size: Int64?, downloaded: Bool, current: Bool, downloading: Bool, downloadRequested: Bool,
                uploaded: Bool, uploading: Bool, percentDownloaded: Double?, percentUploaded: Double?, conflicts: Int,
                downloadingError: String?, uploadingError: String?, sharing: ItemSharing? = nil) {
        self.container = container
        self.path = path
        self.size = size
        self.downloaded = downloaded
        self.current = current
        self.downloading = downloading
        self.downloadRequested = downloadRequested
        self.uploaded = uploaded
        self.uploading = uploading
        self.percentDownloaded = percentDownloaded
        self.percentUploaded = percentUploaded
        self.conflicts = conflicts
        self.downloadingError = downloadingError
        self.uploadingError = uploadingError
        self.sharing = sharing
    }
}

/// How an item is shared with other accounts (docs/Sharing.md): what Apple's
/// `ubiquitousSharedItem…` resource values and `NSMetadataUbiquitousSharedItem…` attributes say.
public struct ItemSharing: Codable, Sendable, Equatable {
    /// Whether this account owns it (else it takes part in another account's share).
    public var owned: Bool
    /// Whether this account may only read it.
    public var readOnly: Bool
    /// The owner's account name, when it is not this account.
    public var owner: String?
    /// The account name of whoever made its current revision, when it is not this account.
    public var lastEditor: String?

    /// Creates a value.
    public init(owned: Bool, readOnly: Bool, owner: String? = nil, lastEditor: String? = nil) {
        self.owned = owned
        self.readOnly = readOnly
        self.owner = owner
        self.lastEditor = lastEditor
    }
}
