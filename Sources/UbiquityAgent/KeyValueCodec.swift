import Foundation
import Logging
import UbiquityKeys
import UbiquityProtocol

/// One store's key-value changes between this device's plaintext and what the server keeps:
/// sealed when the device holds the account's keys, as they are otherwise. Opening checks every
/// change the server sends and refuses (logging why) what does not open, what is older than a
/// change already taken for its key, and plaintext under Advanced Data Protection or once the
/// account's devices require everything sealed (``Roster/sealedOnlyFormat``).
struct KeyValueCodec {
    /// A change of an epoch whose key this device does not hold (yet).
    struct EpochNotHeld: Error {}

    private let keys: KeyValueKeys?
    private let custody: Custody?
    /// The account's devices require every value sealed: a plaintext one is a downgrade.
    private let sealedOnly: Bool
    private let store: String
    private let seenURL: URL
    private let logger: Logger
    /// The highest version taken per key tag.
    private var seen: [String: UInt64]
    private var seenChanged = false
    /// Plaintext values an older build left, taken: sealed again by ``upgrades()``.
    private var legacy: [KeyValueEntry] = []
    /// Changes refused so far.
    private(set) var refusals: [EncryptionError] = []
    /// Whether a change of an epoch not held is refused (after the roster was read again)
    /// rather than thrown as ``EpochNotHeld``.
    var refusesUnheldEpochs = false

    /// The codec of `store` for the keys in `state`.
    /// - Throws: ``KeySetupError`` while this device waits for the account's keys.
    init(state: KeyState, store: String, seen folder: URL, logger: Logger) throws {
        switch state {
        case .plain:
            keys = nil
            custody = nil
            sealedOnly = false
        case .holding(let rootKeys, let custody, _, let sealedOnly):
            keys = try KeyValueKeys(store: store, rootKeys: rootKeys)
            self.custody = custody
            self.sealedOnly = sealedOnly
        case .waiting(let why):
            throw KeySetupError(reason: .needsApproval, description: why)
        }
        self.store = store
        self.logger = logger
        seenURL = folder.appendingPathComponent(store + ".json")
        seen = (try? JSONDecoder().decode([String: UInt64].self, from: Data(contentsOf: seenURL))) ?? [:] // none yet: nothing taken
    }

    /// Whether changes go up sealed.
    var sealing: Bool { keys != nil }

    /// The version a change of `timestamp` carries: its bits, which order as the timestamps do.
    static func version(of timestamp: Double) -> UInt64 { max(0, timestamp).bitPattern }

    /// The change to send for `key` set to `value` (nil: removed) at `timestamp`.
    func change(key: String, value: PropertyListValue?, timestamp: Double) throws -> KeyValueChange {
        guard let keys else { return KeyValueChange(key: key, value: value, timestamp: timestamp) }
        let (name, sealed) = try keys.seal(key: key, value: try value.map { try JSONEncoder().encode($0) }, version: Self.version(of: timestamp))
        return KeyValueChange(key: name, sealed: sealed, removed: value == nil, timestamp: timestamp)
    }

    /// The server's entries as this device takes them: sealed ones opened and checked, refused
    /// ones left out (and logged).
    /// - Throws: ``EpochNotHeld`` for a change of an epoch not held, unless ``refusesUnheldEpochs``.
    mutating func open(_ entries: [KeyValueEntry]) throws -> [KeyValueEntry] {
        try entries.compactMap { entry in
            guard let sealed = entry.sealed else {
                guard keys != nil else { return entry }
                // Plaintext beside sealed values: what an older build left, or a forgery.
                guard entry.value != nil else { return nil } // a plaintext removal: an older build's, or the cleanup of an upgrade; the sealed changes decide
                guard custody == .standard else {
                    refuse(EncryptionError(.unsupportedFormat, "a plaintext value came for an account under Advanced Data Protection"), entry: entry)
                    return nil
                }
                guard !sealedOnly else {
                    refuse(EncryptionError(.unsupportedFormat, "a plaintext value came for an account whose devices require every value sealed (a downgrade)"), entry: entry)
                    return nil
                }
                legacy.append(entry)
                return entry
            }
            guard let keys else {
                refuse(EncryptionError(.unsupportedFormat, "a sealed value came, and this device holds no key of the account"), entry: entry)
                return nil
            }
            if let epoch = KeyValueKeys.epoch(of: sealed), !keys.holds(epoch: epoch), !refusesUnheldEpochs { throw EpochNotHeld() }
            do {
                let opened = try keys.open(sealed, storedName: entry.key)
                let timestamp = Double(bitPattern: opened.version)
                guard timestamp == entry.timestamp else {
                    throw EncryptionError(.authenticationFailed, "a key-value change's timestamp is not the one its device sealed")
                }
                if let last = seen[entry.key], opened.version < last {
                    throw EncryptionError(.replayed, "a key-value change of version \(opened.version) came after version \(last) of the same key: an old change served again")
                }
                if opened.version > seen[entry.key] ?? 0 {
                    seen[entry.key] = opened.version
                    seenChanged = true
                }
                return KeyValueEntry(key: opened.key, value: try opened.value.map { try JSONDecoder().decode(PropertyListValue.self, from: $0) },
                                     timestamp: timestamp, deviceName: entry.deviceName, sequence: entry.sequence)
            } catch let error as EncryptionError {
                refuse(error, entry: entry)
                return nil
            } catch {
                refuse(EncryptionError(.malformed, "a key-value change's value is not a property list"), entry: entry)
                return nil
            }
        }
    }

    private mutating func refuse(_ error: EncryptionError, entry: KeyValueEntry) {
        refusals.append(error)
        logger.error("refused a key-value change the server sent", metadata: ["store": "\(store)", "sequence": "\(entry.sequence)", "error": "\(error)"])
    }

    /// The plaintext values taken from an older build, each sealed again under its tag, and its
    /// plaintext removed (a removal just after it, so that it wins over the plaintext value).
    func upgrades() throws -> [KeyValueChange] {
        guard keys != nil else { return [] }
        return try legacy.flatMap { entry in
            [try change(key: entry.key, value: entry.value, timestamp: entry.timestamp), KeyValueChange(key: entry.key, value: nil, timestamp: entry.timestamp.nextUp)]
        }
    }

    /// Keeps the versions taken (when they changed).
    func saveSeen() throws {
        guard seenChanged else { return }
        try FileManager.default.createDirectory(at: seenURL.deletingLastPathComponent(), withIntermediateDirectories: true)
        try JSONEncoder().encode(seen).write(to: seenURL, options: .atomic)
    }
}

extension KeyValueLimits {
    /// Why a store holding `values` is past Apple's limits, or nil when it is within them.
    static func exceeded(by values: [String: PropertyListValue]) -> String? {
        guard values.count <= maximumKeys else { return "a store holds at most \(maximumKeys) keys" }
        var total = 0
        for (key, value) in values {
            guard !key.isEmpty, key.utf8.count <= maximumKeyBytes else { return "keys are 1 to \(maximumKeyBytes) bytes of UTF-8" }
            guard let size = try? size(key: key, value: value), size <= maximumValueBytes else { return "a value is at most \(maximumValueBytes) bytes" }
            total += size
        }
        return total <= maximumTotalBytes ? nil : "a store holds at most \(maximumTotalBytes) bytes"
    }
}
