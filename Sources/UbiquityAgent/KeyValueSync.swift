import Foundation
import Logging
import UbiquityClient
import UbiquityKeys
import UbiquityProtocol

/// Keeps the account's key-value stores on this device (`ACCOUNT/kv/STORE.json`, written by
/// apps through ``UbiquityClient/NSUbiquitousKeyValueStore``) in step with the server: sends
/// the values set here, brings other devices' changes, and records in the file what changed
/// and why, so apps announce it. A store syncs when an app writes it, when the server pushes
/// a change, when the push connection (re)connects, and at each periodic rescan.
///
/// When the device holds the account's keys, what goes up is sealed (each key's name a keyed
/// tag, each value and removal sealed to its store, name and version) and what comes down is
/// opened and checked before the file changes: a change that does not open, or is older than
/// one this device already took for that key (a replay), is refused and logged, and the file
/// keeps what it had. Plaintext values left by older builds are taken under Standard and sealed
/// again in their place; under Advanced they are refused.
actor KeyValueSync {
    let client: SyncClient
    let folder: URL
    let logger: Logger
    /// The account's keys (nil: values go as they are, as for an account that has none).
    let keys: SessionKeys?
    /// Per store, the highest version taken of each key (by its tag), so that an older change
    /// served again is refused: `ACCOUNT/kv-seen/STORE.json`.
    let seenFolder: URL
    private var due: Set<String> = []
    private var all = false
    private let signal: AsyncStream<Void>
    private let poke: AsyncStream<Void>.Continuation
    /// The last failure per store, for `ubiquity status`.
    private(set) var errors: [String: String] = [:]
    /// Per store, the changes the server sent that were refused, since the agent started (kept:
    /// a lie told once is worth seeing later).
    private(set) var refused: [String: (count: Int, last: Date, reason: String)] = [:]

    /// What `ubiquity status` shows per store: its failure, and the changes refused.
    var problems: [String: String] {
        var shown = errors
        for (store, refusal) in refused {
            let said = "refused \(refusal.count) change\(refusal.count == 1 ? "" : "s") the server sent (the last at \(refusal.last.formatted(.iso8601))): \(refusal.reason)"
            shown[store] = shown[store].map { $0 + "; " + said } ?? said
        }
        return shown
    }

    init(client: SyncClient, folder: URL, keys: SessionKeys?, logger: Logger) {
        self.client = client
        self.folder = folder
        self.keys = keys
        seenFolder = folder.deletingLastPathComponent().appendingPathComponent("kv-seen")
        self.logger = logger
        (signal, poke) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// The stores kept on this device.
    func stores() -> [String] {
        // No folder yet: no store used on this device.
        ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).filter { $0.hasSuffix(".json") }.map { String($0.dropLast(5)) }.sorted()
    }

    /// Asks for a sync of `store` (nil: every store here).
    func trigger(_ store: String?) {
        if let store { due.insert(store) } else { all = true }
        poke.yield()
    }

    /// Syncs what was asked for, until cancelled.
    func run() async {
        for await _ in signal {
            let stores = all ? Set(stores()) : due
            due = []
            all = false
            for store in stores.sorted() where FileManager.default.fileExists(atPath: KeyValueStoreFile.url(store, in: folder).path) {
                do {
                    let refusals = try await sync(store)
                    errors[store] = nil
                    if let first = refusals.first {
                        refused[store] = ((refused[store]?.count ?? 0) + refusals.count, Date(), "\(first)")
                    }
                } catch {
                    errors[store] = "\(error)"
                    logger.warning("key-value store sync failed", metadata: ["store": "\(store)", "error": "\(error)"])
                    Task { [weak self] in
                        try? await quietSleep(for: .seconds(5)) // throws only when cancelled
                        await self?.trigger(store)
                    }
                }
            }
        }
    }

    func stop() {
        poke.finish()
    }

    /// One store: its pending values up, the server's changes down.
    /// - Returns: The server's changes refused (each already logged).
    @discardableResult
    func sync(_ store: String) async throws -> [EncryptionError] {
        do {
            return try await sync(store, codec: KeyValueCodec(state: keys?.current() ?? .plain, store: store, seen: seenFolder, logger: logger))
        } catch is KeyValueCodec.EpochNotHeld {
            // A change of an epoch this device does not hold yet: the roster is read again, and
            // what still does not open is refused.
            var codec = try await KeyValueCodec(state: keys?.current(refresh: true) ?? .plain, store: store, seen: seenFolder, logger: logger)
            codec.refusesUnheldEpochs = true
            return try await sync(store, codec: codec)
        }
    }

    private func sync(_ store: String, codec: KeyValueCodec) async throws -> [EncryptionError] {
        var codec = codec
        let local = KeyValueStoreFile.read(store, in: folder)
        let pending = local.entries.filter(\.value.pending)
        if !pending.isEmpty {
            let changes = try pending.map { try codec.change(key: $0.key, value: $0.value.value, timestamp: $0.value.timestamp) }.sorted { $0.key < $1.key }
            do {
                // The server cannot read sealed values: Apple's limits are checked here.
                if codec.sealing, let reason = KeyValueLimits.exceeded(by: local.entries.compactMapValues(\.value)) {
                    throw SyncClientError(status: 413, code: "keyValueQuotaViolation", message: reason)
                }
                let answer = try await client.applyKeyValues(store: store, changes: changes)
                try record(store, codec.open(answer.entries), sent: pending, reason: NSUbiquitousKeyValueStoreServerChange)
            } catch let error as SyncClientError where error.code == "keyValueQuotaViolation" {
                // Refused: the store takes the server's values for those keys back.
                logger.warning("key-value changes past the limits were refused", metadata: ["store": "\(store)", "error": "\(error.message)"])
                let server = try await client.keyValues(store: store, since: 0)
                try refuse(store, sent: pending, server: codec.open(server.entries))
            }
        }
        let cursor = KeyValueStoreFile.read(store, in: folder).cursor
        let answer = try await client.keyValues(store: store, since: cursor)
        try record(store, codec.open(answer.entries), sent: [:], reason: NSUbiquitousKeyValueStoreServerChange, sequence: answer.sequence)
        // Plaintext values an older build left: sealed again in their place, their plaintext removed.
        let upgrade = try codec.upgrades()
        if !upgrade.isEmpty {
            let answer = try await client.applyKeyValues(store: store, changes: upgrade)
            try record(store, codec.open(answer.entries), sent: [:], reason: NSUbiquitousKeyValueStoreServerChange)
            logger.info("sealed the plaintext values an older build left", metadata: ["store": "\(store)", "values": "\(upgrade.count / 2)"])
        }
        try codec.saveSeen()
        return codec.refusals
    }

    /// Takes the server's entries into the file: a key set here later than the server's value
    /// stays pending (it goes up next); what changed is recorded with `reason` (the first pull
    /// on this device: an initial sync).
    private func record(_ store: String, _ entries: [KeyValueEntry], sent: [String: KeyValueStoreFile.Entry], reason: Int, sequence: Int64? = nil) throws {
        try KeyValueStoreFile.update(store, in: folder) { file in
            var changed: [String] = []
            for entry in entries {
                let mine = file.entries[entry.key]
                if let mine, mine.pending {
                    if let sentEntry = sent[entry.key], sentEntry == mine, sentEntry.timestamp <= entry.timestamp {
                        // Acknowledged (or beaten by a newer change from elsewhere).
                        if entry.value != mine.value { changed.append(entry.key) }
                        file.entries[entry.key] = entry.value == nil ? nil : .init(value: entry.value, timestamp: entry.timestamp, pending: false)
                    } else if mine.timestamp > entry.timestamp {
                        continue // set here since: it goes up next
                    } else {
                        if entry.value != mine.value { changed.append(entry.key) }
                        file.entries[entry.key] = entry.value == nil ? nil : .init(value: entry.value, timestamp: entry.timestamp, pending: false)
                    }
                } else {
                    if mine?.value != entry.value { changed.append(entry.key) }
                    file.entries[entry.key] = entry.value == nil ? nil : .init(value: entry.value, timestamp: entry.timestamp, pending: false)
                }
            }
            var why = reason
            if let sequence {
                file.cursor = max(file.cursor, sequence)
                if !file.synced {
                    file.synced = true
                    why = NSUbiquitousKeyValueStoreInitialSyncChange
                }
            }
            if !changed.isEmpty {
                file.change = .init(serial: (file.change?.serial ?? 0) + 1, reason: why, keys: Array(Set(changed)).sorted())
            }
        }
    }

    /// Changes the server refused: those keys take the server's values back (or go), announced
    /// as a quota violation — unless the app changed a key again meanwhile (that change goes up
    /// next, and is judged on its own).
    func refuse(_ store: String, sent: [String: KeyValueStoreFile.Entry], server: [KeyValueEntry]) throws {
        let known = Dictionary(server.map { ($0.key, $0) }, uniquingKeysWith: { $1 })
        try KeyValueStoreFile.update(store, in: folder) { file in
            var refused: [String] = []
            for (key, entry) in sent where file.entries[key] == entry {
                refused.append(key)
                if let entry = known[key], entry.value != nil {
                    file.entries[key] = .init(value: entry.value, timestamp: entry.timestamp, pending: false)
                } else {
                    file.entries[key] = nil
                }
            }
            guard !refused.isEmpty else { return }
            file.change = .init(serial: (file.change?.serial ?? 0) + 1, reason: NSUbiquitousKeyValueStoreQuotaViolationChange, keys: refused.sorted())
        }
    }
}
