import Foundation
import Logging
import Synchronization
import UbiquityFiles
import UbiquityProtocol

/// An app's small shared values — preferences, a game's highest level — kept in step across
/// the user's devices: Apple's `NSUbiquitousKeyValueStore`.
///
/// Values are property lists (strings, numbers, Booleans, dates, data, arrays and dictionaries
/// of them) within Apple's limits: at most 1,024 keys of at most 64 bytes of UTF-8, 1 MB per
/// value and 1 MB in all. They persist on this device at once and are always available,
/// offline too; the agent sends them to the server and brings other devices' changes, the most
/// recent change of a key winning. A change that came from elsewhere is announced with
/// ``didChangeExternallyNotification``, its reason (``NSUbiquitousKeyValueStoreServerChange``,
/// ``NSUbiquitousKeyValueStoreInitialSyncChange``, ``NSUbiquitousKeyValueStoreQuotaViolationChange``,
/// ``NSUbiquitousKeyValueStoreAccountChange``) and the keys it changed; the app's own changes
/// are never announced to it, as on Apple platforms. A write past the limits changes nothing
/// and is announced as a quota violation.
///
/// The store's identifier is the app's key-value store entitlement (``UbiquityEntitlements``),
/// or its first container's. Notifications are posted on the store's own serial queue.
public final class NSUbiquitousKeyValueStore: Sendable {
    /// Posted when values changed because of something other than this app: `userInfo` has the
    /// reason (`NSUbiquitousKeyValueStoreChangeReasonKey`) and the keys
    /// (`NSUbiquitousKeyValueStoreChangedKeysKey`).
    public static let didChangeExternallyNotification = Notification.Name("NSUbiquitousKeyValueStoreDidChangeExternallyNotification")

    /// The store of this process's app and user.
    public static let `default` = NSUbiquitousKeyValueStore()

    struct State: Sendable {
        var account: String?
        var folder: URL?
        private(set) var values: [String: PropertyListValue] = [:]
        /// Each key's size as the limits count it, and their total (kept as values change, so
        /// a write checks the 1 MB limit without measuring every value again).
        private var sizes: [String: Int] = [:]
        private(set) var total = 0
        /// Set here, not yet written to the file.
        var dirty: [String: KeyValueStoreFile.Entry] = [:]
        var lastSerial = 0
        var watcher: DirectoryWatcher?
        var saveScheduled = false
        var opened = false

        /// Sets or removes one key's value.
        mutating func put(_ key: String, _ value: PropertyListValue?) {
            total -= sizes.removeValue(forKey: key) ?? 0
            values[key] = value
            guard let value else { return }
            let size = (try? KeyValueLimits.size(key: key, value: value)) ?? 0 // values held were measured when set
            sizes[key] = size
            total += size
        }

        /// Replaces every value.
        mutating func replace(with new: [String: PropertyListValue]) {
            values = [:]
            sizes = [:]
            total = 0
            for (key, value) in new { put(key, value) }
        }
    }

    /// The store's identifier (nil: the app has no key-value store entitlement).
    public let identifier: String?
    let containers: UbiquityContainers
    let identity: UbiquityIdentity
    let state = Mutex(State())
    /// Held while the store's file is written or read in (``save()``, ``reload()``).
    let filing = Mutex(())
    let queue = DispatchQueue(label: "ubiquity.key-value-store")
    let logger = Logger(label: "ubiquity.key-value-store")

    /// The store of this process's app (its entitlements) and user.
    public convenience init() {
        let containers = UbiquityContainers.shared
        self.init(identifier: containers.entitlements.keyValueStoreIdentifier ?? containers.entitlements.containerIdentifiers.first, containers: containers)
    }

    /// Store `identifier` of the user of `containers` (other paths: for tests and tools).
    public init(identifier: String?, containers: UbiquityContainers) {
        self.identifier = identifier
        self.containers = containers
        identity = UbiquityIdentity(paths: containers.paths)
    }

    deinit {
        state.withLock { $0.watcher?.stop() }
    }

    // MARK: Reading

    /// The value for `aKey` as Foundation hands it back on Apple's platforms (String,
    /// NSNumber — so `as? Int`, `as? Double`, `as? Bool` work —, Date, Data, [Any],
    /// [String: Any]), or nil.
    public func object(forKey aKey: String) -> Any? {
        current()
        return state.withLock { $0.values[aKey] }?.foundationObject
    }

    /// The string for `aKey`, or nil if there is none (or the value is not a string).
    public func string(forKey aKey: String) -> String? { object(forKey: aKey) as? String }
    /// The array for `aKey`, or nil.
    public func array(forKey aKey: String) -> [Any]? { object(forKey: aKey) as? [Any] }
    /// The dictionary for `aKey`, or nil.
    public func dictionary(forKey aKey: String) -> [String: Any]? { object(forKey: aKey) as? [String: Any] }
    /// The data for `aKey`, or nil.
    public func data(forKey aKey: String) -> Data? { object(forKey: aKey) as? Data }

    /// The integer for `aKey`; 0 if there is none.
    public func longLong(forKey aKey: String) -> Int64 {
        current()
        switch state.withLock({ $0.values[aKey] }) {
        case .integer(let value): return value
        case .real(let value): return value.isFinite ? Int64(clamping: Int64(exactly: value.rounded(.towardZero)) ?? 0) : 0
        case .bool(let value): return value ? 1 : 0
        case .string(let text): return Int64(text) ?? 0
        default: return 0
        }
    }

    /// The number for `aKey`; 0 if there is none.
    public func double(forKey aKey: String) -> Double {
        current()
        switch state.withLock({ $0.values[aKey] }) {
        case .integer(let value): return Double(value)
        case .real(let value): return value
        case .bool(let value): return value ? 1 : 0
        case .string(let text): return Double(text) ?? 0
        default: return 0
        }
    }

    /// The Boolean for `aKey`; false if there is none.
    public func bool(forKey aKey: String) -> Bool {
        current()
        switch state.withLock({ $0.values[aKey] }) {
        case .bool(let value): return value
        case .integer(let value): return value != 0
        case .real(let value): return value != 0
        case .string(let text): return ["yes", "true", "1"].contains(text.lowercased())
        default: return false
        }
    }

    /// Every key and value.
    public var dictionaryRepresentation: [String: Any] {
        current()
        return state.withLock { $0.values }.mapValues(\.foundationObject)
    }

    // MARK: Writing

    /// Sets `aKey` to a property-list value (nil removes it). Anything else is ignored (and
    /// logged); a key or value past the limits changes nothing and is announced as a quota
    /// violation.
    public func set(_ anObject: Any?, forKey aKey: String) {
        guard let anObject else { return removeObject(forKey: aKey) }
        guard let value = PropertyListValue(propertyList: anObject) else {
            logger.error("not a property-list value: ignored", metadata: ["key": "\(aKey)", "type": "\(type(of: anObject))"])
            return
        }
        change(aKey, to: value)
    }

    /// Sets a string (nil removes the key).
    public func set(_ aString: String?, forKey aKey: String) { set(aString as Any?, forKey: aKey) }
    /// Sets an array of property-list values (nil removes the key).
    public func set(_ anArray: [Any]?, forKey aKey: String) { set(anArray as Any?, forKey: aKey) }
    /// Sets a dictionary of property-list values (nil removes the key).
    public func set(_ aDictionary: [String: Any]?, forKey aKey: String) { set(aDictionary as Any?, forKey: aKey) }
    /// Sets data (nil removes the key).
    public func set(_ aData: Data?, forKey aKey: String) { set(aData as Any?, forKey: aKey) }
    /// Sets an integer.
    public func set(_ value: Int64, forKey aKey: String) { change(aKey, to: .integer(value)) }
    /// Sets a number.
    public func set(_ value: Double, forKey aKey: String) { change(aKey, to: .real(value)) }
    /// Sets a Boolean.
    public func set(_ value: Bool, forKey aKey: String) { change(aKey, to: .bool(value)) }

    /// Removes `aKey`.
    public func removeObject(forKey aKey: String) {
        current()
        state.withLock { state in
            guard state.values[aKey] != nil || state.dirty[aKey]?.value != nil else { return }
            state.put(aKey, nil)
            state.dirty[aKey] = KeyValueStoreFile.Entry(value: nil, timestamp: Date().timeIntervalSince1970, pending: true)
        }
        scheduleSave()
    }

    /// Writes what changed in memory to this device's store now, and takes in what the agent
    /// brought meanwhile. False if the app has no key-value store entitlement or the store
    /// cannot be written.
    @discardableResult
    public func synchronize() -> Bool {
        current()
        guard identifier != nil else { return false }
        let saved = save()
        reload()
        return saved
    }

    // MARK: Inside

    /// Every value as the store keeps it (for Ubiquity's own stores, such as Handoff's).
    package var propertyListValues: [String: PropertyListValue] {
        current()
        return state.withLock { $0.values }
    }

    /// Sets `key` to `value` as kept (see ``propertyListValues``).
    /// - Parameters:
    ///   - value: The value.
    ///   - key: The key.
    package func setPropertyListValue(_ value: PropertyListValue, forKey key: String) {
        change(key, to: value)
    }

    func change(_ key: String, to value: PropertyListValue) {
        current()
        let violation: String? = state.withLock { state in
            guard !key.isEmpty, key.utf8.count <= KeyValueLimits.maximumKeyBytes else {
                return "keys are 1 to \(KeyValueLimits.maximumKeyBytes) bytes of UTF-8"
            }
            // A value that cannot be measured is refused like one too large.
            guard let size = try? KeyValueLimits.size(key: key, value: value), size <= KeyValueLimits.maximumValueBytes else {
                return "a value is at most \(KeyValueLimits.maximumValueBytes) bytes"
            }
            let count = state.values.count + (state.values[key] == nil ? 1 : 0)
            let old = state.values[key].flatMap { try? KeyValueLimits.size(key: key, value: $0) } ?? 0 // measured when it was set
            guard count <= KeyValueLimits.maximumKeys else { return "a store holds at most \(KeyValueLimits.maximumKeys) keys" }
            guard state.total - old + size <= KeyValueLimits.maximumTotalBytes else { return "a store holds at most \(KeyValueLimits.maximumTotalBytes) bytes" }
            state.put(key, value)
            state.dirty[key] = KeyValueStoreFile.Entry(value: value, timestamp: Date().timeIntervalSince1970, pending: true)
            return nil
        }
        if let violation {
            logger.warning("key-value store quota violation: nothing changed", metadata: ["key": "\(key)", "reason": "\(violation)"])
            post(reason: NSUbiquitousKeyValueStoreQuotaViolationChange, keys: [key])
            return
        }
        scheduleSave()
    }

    /// Opens the store on first use, and follows the signed-in account: another account's (or
    /// none's) store replaces this one's values, announced as an account change.
    func current() {
        let token = identity.token
        let switched: [String]? = state.withLock { state in
            guard !state.opened || state.account != token else { return nil }
            let first = !state.opened
            let before = Set(state.values.keys)
            state.watcher?.stop()
            state.watcher = nil
            state.opened = true
            state.account = token
            state.dirty = [:]
            guard let identifier else {
                state.replace(with: [:])
                return nil
            }
            let folder = token.map { containers.paths.account($0).appendingPathComponent("kv") }
                ?? containers.paths.data.appendingPathComponent("kv-signed-out")
            state.folder = folder
            let file = KeyValueStoreFile.read(identifier, in: folder)
            state.replace(with: file.values)
            state.lastSerial = file.change?.serial ?? 0
            do {
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                // The store is used on this device from now on: the agent keeps it in step.
                if token != nil { try KeyValueStoreFile.create(identifier, in: folder) }
            } catch {
                // Values set now are kept in memory, and saved when a write succeeds.
                logger.error("cannot create the key-value store's file: the agent cannot keep it in step yet",
                             metadata: ["folder": "\(folder.path)", "error": "\(error)"])
            }
            let path = KeyValueStoreFile.url(identifier, in: folder).path
            do {
                state.watcher = try DirectoryWatcher(root: folder) { [weak self] event in
                    if case .changed(let changed) = event, changed != path { return }
                    guard let self else { return }
                    self.queue.async { self.reload() }
                }
            } catch {
                logger.error("cannot watch the key-value store: other devices' values arrive only on synchronize() or an account change",
                             metadata: ["folder": "\(folder.path)", "error": "\(error)"])
            }
            return first ? nil : Array(before.union(state.values.keys)).sorted()
        }
        if let switched { post(reason: NSUbiquitousKeyValueStoreAccountChange, keys: switched) }
    }

    func scheduleSave() {
        let schedule = state.withLock { state -> Bool in
            guard !state.saveScheduled else { return false }
            state.saveScheduled = true
            return true
        }
        if schedule { queue.asyncAfter(deadline: .now() + .milliseconds(20)) { [weak self] in _ = self?.save() } }
    }

    /// Writes the changes made here to the store's file (the agent sends them). A change stays
    /// in `dirty` until it is written, and one save or reload runs at a time: `synchronize()`
    /// waits for the save already under way, and nothing reads the file in between and takes a
    /// value set or removed here back.
    func save() -> Bool {
        filing.withLock { _ in
            let (dirty, folder) = state.withLock { state in
                state.saveScheduled = false
                return (state.dirty, state.folder)
            }
            guard let identifier, let folder, !dirty.isEmpty else { return true }
            do {
                try KeyValueStoreFile.update(identifier, in: folder) { file in
                    for (key, entry) in dirty { file.entries[key] = entry }
                }
            } catch {
                logger.error("cannot write the key-value store; keeping the changes in memory", metadata: ["error": "\(error)"])
                return false
            }
            state.withLock { state in
                // Written, unless changed again meanwhile (or another account's store is open now).
                for (key, entry) in dirty where state.dirty[key] == entry { state.dirty[key] = nil }
            }
            return true
        }
    }

    /// Takes in what the agent wrote, announcing it with its reason.
    func reload() {
        guard let identifier else { return }
        let announced: KeyValueStoreFile.ExternalChange? = filing.withLock { _ in
            guard let folder = state.withLock({ $0.folder }) else { return nil }
            let file = KeyValueStoreFile.read(identifier, in: folder)
            return state.withLock { state in
                guard state.folder == folder else { return nil }
                // Keys changed here and not written yet keep their value here.
                for (key, value) in file.values where state.dirty[key] == nil && state.values[key] != value { state.put(key, value) }
                for key in state.values.keys where file.entries[key]?.value == nil && state.dirty[key] == nil { state.put(key, nil) }
                guard let change = file.change, change.serial > state.lastSerial else { return nil }
                state.lastSerial = change.serial
                return change
            }
        }
        if let announced { post(reason: announced.reason, keys: announced.keys) }
    }

    /// Returns once every notification posted so far has been delivered (for tools that report
    /// a refused write before they exit). Not to be called from a notification's observer: it
    /// runs on the queue this waits for.
    package func deliverNotifications() {
        queue.sync {}
    }

    func post(reason: Int, keys: [String]) {
        queue.async {
            NotificationCenter.default.post(name: Self.didChangeExternallyNotification, object: self,
                                            userInfo: [NSUbiquitousKeyValueStoreChangeReasonKey: reason, NSUbiquitousKeyValueStoreChangedKeysKey: keys])
        }
    }
}

/// In ``NSUbiquitousKeyValueStore/didChangeExternallyNotification``'s `userInfo`: why (an `Int`).
public let NSUbiquitousKeyValueStoreChangeReasonKey = "NSUbiquitousKeyValueStoreChangeReasonKey"
/// In ``NSUbiquitousKeyValueStore/didChangeExternallyNotification``'s `userInfo`: the keys that changed (`[String]`).
public let NSUbiquitousKeyValueStoreChangedKeysKey = "NSUbiquitousKeyValueStoreChangedKeysKey"
/// Another device changed values (through the server).
public let NSUbiquitousKeyValueStoreServerChange = 0
/// The first values from the server on this device (they may replace values set here before).
public let NSUbiquitousKeyValueStoreInitialSyncChange = 1
/// A write past the limits was refused (here or by the server); the values are as before it.
public let NSUbiquitousKeyValueStoreQuotaViolationChange = 2
/// The signed-in account changed: the store now shows that account's values.
public let NSUbiquitousKeyValueStoreAccountChange = 3
