import Foundation
import Logging
import UbiquityClient
import UbiquityProtocol

/// Keeps the account's key-value stores on this device (`ACCOUNT/kv/STORE.json`, written by
/// apps through ``UbiquityClient/NSUbiquitousKeyValueStore``) in step with the server: sends
/// the values set here, brings other devices' changes, and records in the file what changed
/// and why, so apps announce it. A store syncs when an app writes it, when the server pushes
/// a change, when the push connection (re)connects, and at each periodic rescan.
actor KeyValueSync {
    let client: SyncClient
    let folder: URL
    let logger: Logger
    private var due: Set<String> = []
    private var all = false
    private let signal: AsyncStream<Void>
    private let poke: AsyncStream<Void>.Continuation
    /// The last failure per store, for `ubiquity status`.
    private(set) var errors: [String: String] = [:]

    init(client: SyncClient, folder: URL, logger: Logger) {
        self.client = client
        self.folder = folder
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
                    try await sync(store)
                    errors[store] = nil
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
    func sync(_ store: String) async throws {
        let local = KeyValueStoreFile.read(store, in: folder)
        let pending = local.entries.filter(\.value.pending)
        if !pending.isEmpty {
            let changes = pending.map { KeyValueChange(key: $0.key, value: $0.value.value, timestamp: $0.value.timestamp) }.sorted { $0.key < $1.key }
            do {
                let answer = try await client.applyKeyValues(store: store, changes: changes)
                try record(store, answer.entries, sent: pending, reason: NSUbiquitousKeyValueStoreServerChange)
            } catch let error as SyncClientError where error.code == "keyValueQuotaViolation" {
                // Refused: the store takes the server's values for those keys back.
                logger.warning("the server refused key-value changes past the limits", metadata: ["store": "\(store)", "error": "\(error.message)"])
                let server = try await client.keyValues(store: store, since: 0)
                try refuse(store, sent: pending, server: server.entries)
            }
        }
        let cursor = KeyValueStoreFile.read(store, in: folder).cursor
        let answer = try await client.keyValues(store: store, since: cursor)
        try record(store, answer.entries, sent: [:], reason: NSUbiquitousKeyValueStoreServerChange, sequence: answer.sequence)
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
