import Foundation
import Logging
import Synchronization
import Testing
import UbiquityClient
import UbiquityProtocol
@testable import UbiquityAgent

/// Key-value stores kept in step between two devices through a real server.
@Suite struct KeyValueSyncTests {
    let game = "ABCDE12345.com.example.game"

    /// One device of a player: its app's store, the agent's store sync, and the app's own
    /// record of the highest level reached here (the guide's game, Figure 2-3).
    final class Device: Sendable {
        let kv: NSUbiquitousKeyValueStore
        let sync: KeyValueSync
        let folder: URL
        let best = Mutex<Int64>(0)
        let heard = Mutex<[(reason: Int, keys: [String])]>([])
        let observer = Mutex<ObserverToken?>(nil)
        /// The account's keys as this device's sync reads them (nil: it holds none).
        let keys: SessionKeys?

        init(kv: NSUbiquitousKeyValueStore, sync: KeyValueSync, folder: URL, keys: SessionKeys? = nil) {
            self.kv = kv
            self.sync = sync
            self.folder = folder
            self.keys = keys
            // The app-side resolution the guide describes: the highest level must never go
            // backwards, whatever another device last wrote.
            let token = NotificationCenter.default.addObserver(forName: NSUbiquitousKeyValueStore.didChangeExternallyNotification, object: kv, queue: nil) { [weak self] notification in
                guard let self else { return }
                let reason = notification.userInfo?[NSUbiquitousKeyValueStoreChangeReasonKey] as? Int ?? -1
                let keys = notification.userInfo?[NSUbiquitousKeyValueStoreChangedKeysKey] as? [String] ?? []
                self.heard.withLock { $0.append((reason, keys)) }
                guard keys.contains("highestLevel") else { return }
                let incoming = self.kv.longLong(forKey: "highestLevel")
                let mine = self.best.withLock { best in
                    best = max(best, incoming)
                    return best
                }
                if incoming < mine { self.kv.set(mine, forKey: "highestLevel") }
            }
            observer.withLock { $0 = ObserverToken(token) }
        }

        func reach(_ level: Int64) {
            best.withLock { $0 = max($0, level) }
            kv.set(best.withLock { $0 }, forKey: "highestLevel")
            #expect(kv.synchronize())
        }

        func remove() {
            if let token = observer.withLock({ $0 }) { NotificationCenter.default.removeObserver(token.token) }
        }

        func file(_ store: String) -> KeyValueStoreFile { KeyValueStoreFile.read(store, in: folder) }
    }

    /// A device signed in to the account; `sealed`: it holds the account's keys (set up or
    /// joined by the escrow on its first sync, as the agent does), else it sends values as an
    /// older build did.
    func device(_ name: String, base: URL, dir: String, sealed: Bool = true) async throws -> Device {
        let root = URL(fileURLWithPath: dir).appendingPathComponent(name)
        let paths = UbiquityPaths(configuration: root.appendingPathComponent("config"), data: root.appendingPathComponent("data"))
        let credentials = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: name, savingTo: paths)
        let containers = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [], keyValueStore: game))
        let folder = paths.account(credentials.identityToken).appendingPathComponent("kv")
        let client = SyncClient(server: base, token: credentials.token)
        let keys = sealed ? SessionKeys(keys: AccountKeys(credentials: credentials, paths: paths, client: client), deviceName: name, logger: Logger(label: "test")) : nil
        return Device(kv: NSUbiquitousKeyValueStore(identifier: game, containers: containers),
                      sync: KeyValueSync(client: client, folder: folder, keys: keys, logger: Logger(label: "test")),
                      folder: folder, keys: keys)
    }

    @Test func theHighestLevelNeverGoesBackwards() async throws {
        let game = game
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir)
            let phone = try await device("phone", base: base, dir: dir)
            defer { laptop.remove(); phone.remove() }

            // The laptop reaches level 7, and names the player.
            laptop.reach(7)
            laptop.kv.set("Ada", forKey: "player")
            #expect(laptop.kv.synchronize())
            try await laptop.sync.sync(game)
            #expect(laptop.file(game).entries.values.allSatisfy { !$0.pending }, "acknowledged")
            #expect(laptop.heard.withLock { $0.isEmpty }, "its own values are not news to it")

            // The phone, offline, reaches level 5 — later, so its write is the most recent.
            phone.reach(5)
            try await phone.sync.sync(game)
            // Its first sync brings the player's name: an initial sync.
            #expect(await eventually { phone.heard.withLock { $0.contains { $0.reason == NSUbiquitousKeyValueStoreInitialSyncChange && $0.keys == ["player"] } } })
            #expect(phone.kv.string(forKey: "player") == "Ada")

            // The laptop hears of level 5 from the server; its app puts 7 back.
            try await laptop.sync.sync(game)
            #expect(await eventually { laptop.heard.withLock { $0.contains { $0.reason == NSUbiquitousKeyValueStoreServerChange && $0.keys == ["highestLevel"] } } })
            #expect(await eventually { laptop.file(game).entries["highestLevel"] == .some(.init(value: .integer(7), timestamp: laptop.file(game).entries["highestLevel"]!.timestamp, pending: true)) })
            try await laptop.sync.sync(game)
            try await phone.sync.sync(game)

            // Both end at 7: neither went backwards for long, and both agree.
            #expect(await eventually { phone.kv.longLong(forKey: "highestLevel") == 7 })
            // The app hears of it through the change notification, which comes after the value.
            #expect(await eventually { phone.best.withLock { $0 } == 7 })
            #expect(laptop.kv.longLong(forKey: "highestLevel") == 7)

            // A removal travels too.
            phone.kv.removeObject(forKey: "player")
            #expect(phone.kv.synchronize())
            try await phone.sync.sync(game)
            try await laptop.sync.sync(game)
            #expect(await eventually { laptop.kv.object(forKey: "player") == nil })
            #expect(laptop.file(game).entries["player"] == nil, "no tombstone left once the server has it")
        }
    }

    @Test func theServerRefusingAWriteTakesItsValueBack() async throws {
        let game = game
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir)
            defer { laptop.remove() }
            laptop.kv.set("fine", forKey: "kept")
            #expect(laptop.kv.synchronize())
            try await laptop.sync.sync(game)
            // A value past the limits written straight into the file (an older app, a bug):
            // the server refuses it, and the store goes back to what the server has.
            try KeyValueStoreFile.update(game, in: laptop.folder) { file in
                file.entries["kept"] = .init(value: .data(Data(count: 1_100_000)), timestamp: Date().timeIntervalSince1970, pending: true)
            }
            try await laptop.sync.sync(game)
            #expect(await eventually { laptop.heard.withLock { $0.contains { $0.reason == NSUbiquitousKeyValueStoreQuotaViolationChange && $0.keys == ["kept"] } } })
            #expect(await eventually { laptop.kv.string(forKey: "kept") == "fine" })
            #expect(laptop.file(game).entries["kept"]?.pending == false)

            // Set again while the refused value was on its way: the new value stays, pending,
            // to be judged on its own; nothing is announced for it.
            let refused = KeyValueStoreFile.Entry(value: .data(Data(count: 1_100_000)), timestamp: 1, pending: true)
            let newer = KeyValueStoreFile.Entry(value: .string("newer"), timestamp: 2, pending: true)
            try KeyValueStoreFile.update(game, in: laptop.folder) { $0.entries["kept"] = newer }
            let serial = laptop.file(game).change?.serial
            try await laptop.sync.refuse(game, sent: ["kept": refused], server: [])
            #expect(laptop.file(game).entries["kept"] == newer && laptop.file(game).change?.serial == serial)
        }
    }

    /// The whole path with running agents: an app's write on one device reaches the other
    /// device's app as a server change (the agent sees the file change, sends it; the server
    /// pushes; the other agent pulls and records it; the app reads the record).
    @Test(.timeLimit(.minutes(3))) func runningAgentsCarryAValueAcross() async throws {
        let dir = NSTemporaryDirectory() + "kv-agents-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let running = try await RunningAgents.start(["laptop", "phone"], containers: [], in: dir)
        defer { running.stop() }
        let stores = running.paths.map { paths in
            NSUbiquitousKeyValueStore(identifier: game, containers: UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [], keyValueStore: game)))
        }
        for kv in stores { #expect(kv.synchronize()) } // the store exists on each device from now on
        let recorder = Mutex<[[String]]>([])
        let token = NotificationCenter.default.addObserver(forName: NSUbiquitousKeyValueStore.didChangeExternallyNotification, object: stores[1], queue: nil) { notification in
            recorder.withLock { $0.append(notification.userInfo?[NSUbiquitousKeyValueStoreChangedKeysKey] as? [String] ?? []) }
        }
        defer { NotificationCenter.default.removeObserver(token) }
        try await running.waitUntilConnected()
        let start = ContinuousClock.now
        stores[0].set("dark", forKey: "theme")
        // (A loaded machine — the whole suite at once on two cores — may take long: a minute at most.)
        #expect(await eventually(60) { stores[1].string(forKey: "theme") == "dark" })
        let took = ContinuousClock.now - start
        // (The value is on disk a moment before the notice is posted: wait for the notice too.)
        #expect(await eventually(60) { recorder.withLock { $0.flatMap { $0 } }.contains("theme") })
        print("key-value change across two running agents: \(took)")
    }
}
