import Foundation
import Synchronization

/// The methods an activity calls on its delegate (Apple's optional methods have defaults here).
public protocol NSUserActivityDelegate: AnyObject {
    /// The activity is about to be sent to the account's other devices: bring its state up to date.
    /// - Parameter userActivity: The activity.
    func userActivityWillSave(_ userActivity: NSUserActivity)
    /// The activity was continued on another device.
    /// - Parameter userActivity: The activity.
    func userActivityWasContinued(_ userActivity: NSUserActivity)
}

extension NSUserActivityDelegate {
    /// Does nothing.
    public func userActivityWillSave(_ userActivity: NSUserActivity) {}
    /// Does nothing.
    public func userActivityWasContinued(_ userActivity: NSUserActivity) {}
}

/// A user activity that Handoff carries to the account's other devices, as Apple's
/// `NSUserActivity`: an app describes what the person is doing (`activityType`, `title`,
/// `userInfo`, `webpageURL`), makes it current (``becomeCurrent()``), and an app on another
/// device of the same account finds it (``UbiquityHandoff/activities(ofTypes:)``, or
/// `ubiquity activities`) and continues it.
///
/// Activities travel through the sync agent and the server in the account's own Handoff store
/// and never leave the account. Each is bounded (``UbiquityHandoff/maximumEncodedSize``), the
/// account keeps at most ``UbiquityHandoff/maximumCount``, and each expires
/// (``expirationDate``, at most ``UbiquityHandoff/maximumLifetime`` after it was last sent).
open class NSUserActivity: NSObject, @unchecked Sendable {
    /// Guards the mutable state below (an activity may be used from any thread).
    let lock = NSLock()
    private var storedTitle: String?
    private var storedUserInfo: [AnyHashable: Any]?
    private var storedWebpageURL: URL?
    private var storedExpirationDate: Date?
    private var storedKeywords: Set<String> = []
    private var storedRequiredKeys: Set<String>?
    private var storedNeedsSave = false
    private weak var storedDelegate: (any NSUserActivityDelegate)?

    /// The kind of activity (reverse-DNS, declared by the apps that handle it).
    public let activityType: String
    /// Where the activity is carried.
    public let handoff: UbiquityHandoff
    /// The activity's identity across devices.
    public let identifier: UUID
    /// The device it was made on, for one that came from another device (nil for this device's).
    public let originatingDeviceName: String?
    /// When it was last sent, for one that came from another device.
    public let lastUpdated: Date?
    /// Whether the activity is current (made so by ``becomeCurrent()``, until resigned or invalidated).
    public internal(set) var isCurrent: Bool {
        get { lock.withLock { current } }
        set { lock.withLock { current = newValue } }
    }
    private var current = false
    private var invalidated = false

    /// An activity of `activityType` (carried by the shared ``UbiquityHandoff``).
    /// - Parameter activityType: The activity's type, e.g. `com.example.notes.editing`.
    public convenience init(activityType: String) {
        self.init(activityType: activityType, handoff: .shared)
    }

    /// An activity carried by `handoff` (tests, tools, several accounts in one process).
    /// - Parameters:
    ///   - activityType: The activity's type.
    ///   - handoff: Where it is carried.
    public init(activityType: String, handoff: UbiquityHandoff) {
        self.activityType = activityType
        self.handoff = handoff
        identifier = UUID()
        originatingDeviceName = nil
        lastUpdated = nil
        super.init()
    }

    /// An activity that came from another device.
    init(received record: HandoffRecord, identifier: UUID, userInfo: [AnyHashable: Any], handoff: UbiquityHandoff) {
        activityType = record.type
        self.handoff = handoff
        self.identifier = identifier
        originatingDeviceName = record.deviceName
        lastUpdated = record.updated
        super.init()
        storedTitle = record.title
        storedUserInfo = userInfo
        storedWebpageURL = record.webpageURL.flatMap(URL.init(string:))
        storedExpirationDate = record.expires
        storedKeywords = Set(record.keywords)
    }

    /// The title people see.
    open var title: String? {
        get { lock.withLock { storedTitle } }
        set { lock.withLock { storedTitle = newValue; storedNeedsSave = true } }
    }

    /// What another device needs to continue (property-list values, `URL`s and `UUID`s; a file
    /// URL in a ubiquity container is carried as the same item's URL on the other device).
    open var userInfo: [AnyHashable: Any]? {
        get { lock.withLock { storedUserInfo } }
        set { lock.withLock { storedUserInfo = newValue; storedNeedsSave = true } }
    }

    /// Adds `otherDictionary`'s entries to ``userInfo``.
    /// - Parameter otherDictionary: The entries.
    open func addUserInfoEntries(from otherDictionary: [AnyHashable: Any]) {
        lock.withLock {
            storedUserInfo = (storedUserInfo ?? [:]).merging(otherDictionary) { $1 }
            storedNeedsSave = true
        }
    }

    /// The keys of ``userInfo`` another device needs (nil: all of them).
    open var requiredUserInfoKeys: Set<String>? {
        get { lock.withLock { storedRequiredKeys } }
        set { lock.withLock { storedRequiredKeys = newValue } }
    }

    /// A web page that continues the activity where the app is not installed.
    open var webpageURL: URL? {
        get { lock.withLock { storedWebpageURL } }
        set { lock.withLock { storedWebpageURL = newValue; storedNeedsSave = true } }
    }

    /// When the activity stops being offered (nil: ``UbiquityHandoff/maximumLifetime`` after
    /// it was last sent, which is also the latest).
    open var expirationDate: Date? {
        get { lock.withLock { storedExpirationDate } }
        set { lock.withLock { storedExpirationDate = newValue; storedNeedsSave = true } }
    }

    /// Words that describe the activity.
    open var keywords: Set<String> {
        get { lock.withLock { storedKeywords } }
        set { lock.withLock { storedKeywords = newValue; storedNeedsSave = true } }
    }

    /// Whether the activity is offered to the account's other devices (default true).
    open var isEligibleForHandoff: Bool {
        get { lock.withLock { eligible } }
        set { lock.withLock { eligible = newValue } }
    }
    private var eligible = true

    /// Whether the activity's state must be brought up to date (through the delegate's
    /// ``NSUserActivityDelegate/userActivityWillSave(_:)``) before it is sent again. Setting it
    /// on a current activity sends it again.
    open var needsSave: Bool {
        get { lock.withLock { storedNeedsSave } }
        set {
            lock.withLock { storedNeedsSave = newValue }
            if newValue && isCurrent { handoff.publish(self) }
        }
    }

    /// Told when the activity is about to be sent and when it was continued elsewhere.
    open var delegate: (any NSUserActivityDelegate)? {
        get { lock.withLock { storedDelegate } }
        set { lock.withLock { storedDelegate = newValue } }
    }

    /// Makes this the app's current activity and offers it to the account's other devices
    /// (the one current before it, if any, is resigned).
    open func becomeCurrent() {
        guard !lock.withLock({ invalidated }) else { return }
        isCurrent = true
        handoff.becomeCurrent(self)
    }

    /// Stops offering the activity (it may become current again).
    open func resignCurrent() {
        guard isCurrent else { return }
        isCurrent = false
        handoff.withdraw(self)
    }

    /// Ends the activity for good: it is withdrawn and cannot become current again.
    open func invalidate() {
        lock.withLock { invalidated = true }
        isCurrent = false
        handoff.withdraw(self)
    }

    /// The state to send, after asking the delegate to bring it up to date.
    func stateToSend() -> (title: String?, userInfo: [AnyHashable: Any], webpageURL: URL?, expires: Date?, keywords: Set<String>) {
        if needsSave { delegate?.userActivityWillSave(self) }
        return lock.withLock {
            storedNeedsSave = false
            var info = storedUserInfo ?? [:]
            if let required = storedRequiredKeys { info = info.filter { ($0.key as? String).map(required.contains) ?? false } }
            return (storedTitle, info, storedWebpageURL, storedExpirationDate, storedKeywords)
        }
    }
}
