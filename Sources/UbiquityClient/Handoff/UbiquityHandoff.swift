import Foundation
import Logging
import Synchronization
import UbiquityFiles
import UbiquityProtocol

/// Handoff for one user's account: the activities its devices make current, carried by the
/// sync agent and the server to the account's other devices, as Apple's Handoff carries
/// `NSUserActivity` — and only there: they live in the account's own Handoff store
/// (``storeIdentifier``, a key-value store no app is entitled to), never leave the account, are
/// bounded in size (``maximumEncodedSize``) and number (``maximumCount``), and expire
/// (``maximumLifetime``).
///
/// An app makes an activity current (`activity.becomeCurrent()`); an app on another device of
/// the same account lists the activities it can continue (``activities(ofTypes:)``), continues
/// one (``continueActivity(_:)``, which tells the first device's delegate), and restores its
/// state (`document.restoreUserActivityState(activity)`). `ubiquity activities` lists them too.
public final class UbiquityHandoff: Sendable {
    /// The account's Handoff store, kept in step by the agent like an app's key-value store.
    public static let storeIdentifier = "com.ubiquity.handoff"
    /// The largest activity the store keeps, as stored (type, title, `userInfo`, URL, keywords).
    public static let maximumEncodedSize = 4_096
    /// The most activities the account keeps; past it, the oldest go.
    public static let maximumCount = 64
    /// How long an activity is offered after it was last sent, at most.
    public static let maximumLifetime: TimeInterval = 3_600
    /// The suffix of the key that says an activity was continued (`ID.continued`).
    static let continuedSuffix = ".continued"

    /// The process's Handoff, for the signed-in account (its containers are
    /// ``UbiquityContainers/shared`` as they are at each use: entitlements declared later count).
    public static let shared = UbiquityHandoff(fixed: nil)

    /// The user's containers (and with them, the signed-in account).
    public var containers: UbiquityContainers { fixedContainers ?? .shared }
    private let fixedContainers: UbiquityContainers?
    private let logger: Logger
    private let state = Mutex<State>(State())

    private struct State {
        var store: NSUbiquitousKeyValueStore?
        var observer: ObserverBox?
        /// This process's activities that were sent, by identifier (to tell their delegates).
        var sent: [UUID: WeakActivity] = [:]
        /// This process's current activity.
        var current: WeakActivity?
    }

    /// Handoff for the account signed in under `containers`.
    /// - Parameters:
    ///   - containers: The user's containers.
    ///   - logger: Where refusals are logged (never an activity's contents).
    public init(containers: UbiquityContainers, logger: Logger = Logger(label: "ubiquity.handoff")) {
        fixedContainers = containers
        self.logger = logger
    }

    private init(fixed: UbiquityContainers?) {
        fixedContainers = fixed
        logger = Logger(label: "ubiquity.handoff")
    }

    deinit {
        if let observer = state.withLock({ $0.observer }) { NotificationCenter.default.removeObserver(observer.token) }
    }

    /// The Handoff store, opened on first use (its file made, so that the agent keeps it in
    /// step on this device from then on).
    var store: NSUbiquitousKeyValueStore {
        // The signed-in account's file (whoever is signed in now), for the agent to keep in step.
        if let token = containers.identityToken {
            let folder = containers.paths.account(token).appendingPathComponent("kv")
            if !FileManager.default.fileExists(atPath: KeyValueStoreFile.url(Self.storeIdentifier, in: folder).path) {
                do {
                    try KeyValueStoreFile.create(Self.storeIdentifier, in: folder)
                } catch {
                    logger.error("cannot create the Handoff store: activities stay on this device", metadata: ["error": "\(error)"])
                }
            }
        }
        if let store = state.withLock({ $0.store }) { return store }
        let store = NSUbiquitousKeyValueStore(identifier: Self.storeIdentifier, containers: containers)
        let observer = NotificationCenter.default.addObserver(forName: NSUbiquitousKeyValueStore.didChangeExternallyNotification, object: store, queue: nil) { [weak self] note in
            self?.heard(keys: note.userInfo?[NSUbiquitousKeyValueStoreChangedKeysKey] as? [String] ?? [])
        }
        return state.withLock { state in
            if let existing = state.store {
                NotificationCenter.default.removeObserver(observer)
                return existing
            }
            state.store = store
            state.observer = ObserverBox(token: observer)
            return store
        }
    }

    // MARK: Offering

    /// Makes `activity` this process's current one, resigning the one before it.
    func becomeCurrent(_ activity: NSUserActivity) {
        let previous = state.withLock { state -> NSUserActivity? in
            defer { state.current = WeakActivity(activity) }
            return state.current?.activity.flatMap { $0 === activity ? nil : $0 }
        }
        previous?.resignCurrent()
        publish(activity)
    }

    /// Sends `activity`'s state to the account's other devices (if it is current and eligible).
    func publish(_ activity: NSUserActivity) {
        guard activity.isCurrent, activity.isEligibleForHandoff else { return }
        guard let credentials = UbiquityCredentials.signedIn(in: containers.paths) else { return }
        let sent = activity.stateToSend()
        guard let userInfo = HandoffUserInfo.encode(sent.userInfo, containers: containers) else {
            logger.warning("an activity was not offered: its userInfo holds a value Handoff cannot carry (property-list values, URLs and UUIDs only)",
                           metadata: ["type": "\(activity.activityType)"])
            return
        }
        let now = Date()
        let latest = now.addingTimeInterval(Self.maximumLifetime)
        let record = HandoffRecord(type: activity.activityType, title: sent.title, userInfo: userInfo, webpageURL: sent.webpageURL?.absoluteString,
                                   keywords: sent.keywords.sorted(), device: credentials.deviceId, deviceName: credentials.deviceName,
                                   updated: now, expires: min(sent.expires ?? latest, latest))
        guard record.encodedSize <= Self.maximumEncodedSize else {
            logger.warning("an activity was not offered: it is larger than Handoff carries",
                           metadata: ["type": "\(activity.activityType)", "bytes": "\(record.encodedSize)", "limit": "\(Self.maximumEncodedSize)"])
            return
        }
        state.withLock { $0.sent[activity.identifier] = WeakActivity(activity) }
        let store = store
        store.setPropertyListValue(record.value, forKey: activity.identifier.uuidString)
        prune(store, now: now)
        store.synchronize()
    }

    /// Stops offering `activity`.
    func withdraw(_ activity: NSUserActivity) {
        state.withLock { state in
            if state.current?.activity === activity { state.current = nil }
        }
        let key = activity.identifier.uuidString
        let store = store
        guard store.propertyListValues[key] != nil else { return }
        store.removeObject(forKey: key)
        store.removeObject(forKey: key + Self.continuedSuffix)
        store.synchronize()
    }

    /// Drops what has expired (any device's: a device that went away cannot), what is not an
    /// activity, and, past ``maximumCount``, the oldest.
    private func prune(_ store: NSUbiquitousKeyValueStore, now: Date) {
        let values = store.propertyListValues
        var live: [(key: String, updated: Date)] = []
        for (key, value) in values where !key.hasSuffix(Self.continuedSuffix) {
            // Only activities live here: anything else (another format, a damaged or hostile
            // value, a key that names no activity) goes.
            if UUID(uuidString: key) != nil, let record = HandoffRecord(value), record.expires > now {
                live.append((key, record.updated))
            } else {
                store.removeObject(forKey: key)
            }
        }
        if live.count > Self.maximumCount {
            for old in live.sorted(by: { $0.updated < $1.updated }).prefix(live.count - Self.maximumCount) { store.removeObject(forKey: old.key) }
        }
        let kept = Set(store.propertyListValues.keys)
        for key in values.keys where key.hasSuffix(Self.continuedSuffix) && !kept.contains(String(key.dropLast(Self.continuedSuffix.count))) {
            store.removeObject(forKey: key)
        }
    }

    // MARK: Continuing

    /// The account's activities current on its other devices that have not expired, newest
    /// first; only those of `types` when given (an app lists the types it declares, as in
    /// `NSUserActivityTypes`).
    /// - Parameter types: The activity types wanted (nil: all).
    /// - Returns: The activities, ready to continue.
    public func activities(ofTypes types: Set<String>? = nil) -> [NSUserActivity] {
        let here = UbiquityCredentials.signedIn(in: containers.paths)?.deviceId
        let now = Date()
        return store.propertyListValues.compactMap { key, value -> NSUserActivity? in
            guard let identifier = UUID(uuidString: key), let record = HandoffRecord(value), record.device != here, record.expires > now,
                  types.map({ $0.contains(record.type) }) ?? true else { return nil }
            let userInfo = HandoffUserInfo.decode(record.userInfo, containers: containers) as? [String: Any] ?? [:]
            return NSUserActivity(received: record, identifier: identifier, userInfo: Dictionary(uniqueKeysWithValues: userInfo.map { (AnyHashable($0.key), $0.value) }), handoff: self)
        }.sorted { ($0.lastUpdated ?? .distantPast) > ($1.lastUpdated ?? .distantPast) }
    }

    /// Continues `activity` here: its device is told (its delegate's
    /// ``NSUserActivityDelegate/userActivityWasContinued(_:)``), as Handoff tells the device an
    /// activity came from.
    /// - Parameter activity: An activity from ``activities(ofTypes:)``.
    public func continueActivity(_ activity: NSUserActivity) {
        let store = store
        store.set(Date(), forKey: activity.identifier.uuidString + Self.continuedSuffix)
        store.synchronize()
    }

    /// Another device changed the store: tells this process's activities that were continued.
    private func heard(keys: [String]) {
        let continued = keys.filter { $0.hasSuffix(Self.continuedSuffix) }
        guard !continued.isEmpty else { return }
        let store = store
        let values = store.propertyListValues
        for key in continued where values[key] != nil {
            guard let identifier = UUID(uuidString: String(key.dropLast(Self.continuedSuffix.count))),
                  let activity = state.withLock({ $0.sent[identifier]?.activity }) else { continue }
            store.removeObject(forKey: key)
            MainQueue.async { activity.delegate?.userActivityWasContinued(activity) }
        }
        store.synchronize()
    }
}

/// A weak reference to an activity, kept under a lock.
private struct WeakActivity: @unchecked Sendable {
    weak var activity: NSUserActivity?
    init(_ activity: NSUserActivity) { self.activity = activity }
}

/// A notification observer's token, kept under a lock.
private struct ObserverBox: @unchecked Sendable {
    let token: any NSObjectProtocol
}
