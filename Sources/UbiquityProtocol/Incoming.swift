/// A revision a device is uploading now, announced before its chunks so that other devices
/// fetch them as they land (docs/SyncProtocol.md, "Incoming revisions"): `PUT
/// /v1/containers/C/incoming/ITEM` with the ``ItemUpdate`` it will commit. It is nobody's
/// revision until committed; the announcement goes when its device withdraws it (`DELETE`,
/// after committing or giving up) or when ``IncomingRevision/lifetime`` passes without a word
/// from it (`POST …/incoming/ITEM/landed` says more chunks landed and keeps it).
public struct IncomingRevision: Codable, Sendable {
    /// The item.
    public var item: String
    /// The uploading device's name.
    public var deviceName: String
    /// What it will commit: the item's update, with its whole chunk list.
    public var update: ItemUpdate
    /// When its device last said something of it (seconds since 1970).
    public var touched: Double
    /// When it goes unless its device says more (seconds since 1970).
    public var expires: Double

    /// How long an announcement lasts after its device last spoke of it.
    public static let lifetime: Double = 120
    /// The most announcements one device keeps at once (a new one drops its oldest).
    public static let maximumPerDevice = 8

    /// Creates a value.
    public init(item: String, deviceName: String, update: ItemUpdate, touched: Double, expires: Double) {
        self.item = item
        self.deviceName = deviceName
        self.update = update
        self.touched = touched
        self.expires = expires
    }
}

/// `GET /v1/containers/C/incoming`: the revisions other devices are uploading into the
/// container now.
public struct IncomingResponse: Codable, Sendable {
    /// The announcements, oldest first (never the asking device's own).
    public var incoming: [IncomingRevision]

    /// Creates a value.
    public init(incoming: [IncomingRevision]) {
        self.incoming = incoming
    }
}
