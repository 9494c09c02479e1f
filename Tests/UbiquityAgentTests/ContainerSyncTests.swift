import Foundation
import HummingbirdTesting
import Testing
import UbiquityProtocol
import UbiquityServer
import UbiquityClient
import UbiquityCoordination
import UbiquitySync
import UbiquityTestSupport
@testable import UbiquityAgent

/// Two devices keeping one container in step through a real server (over loopback): create,
/// edit, rename, offline edits on both sides (a conflict both agree on), delete.
@Suite struct ContainerSyncTests {
    let notes = "ABCDE12345.com.example.notes"

    /// Runs `body` with a live server (account "ada", password "correct horse") in a fresh
    /// directory: its base URL and the directory, for the devices' folders and stores.
    /// Runs `body` with a live server's URL and a folder for the devices: on SQLite, or with
    /// `storage` "postgres" on a fresh schema of the test cluster.
    func withServer(accountLimits: AccountLimits = AccountLimits(), storage: String = "sqlite", _ body: @Sendable (URL, String) async throws -> Void) async throws {
        let dir = NSTemporaryDirectory() + "container-sync-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var configuration = SyncServer.Configuration(dataDirectory: dir + "/server", port: 0, bcryptCost: 4)
        configuration.accountLimits = accountLimits
        if storage == "postgres" { configuration.database = try TestPostgres.freshURL(prefix: "agent") }
        let server = try await SyncServer(configuration: configuration)
        let admin = try await ServerAdministration(dataDirectory: dir + "/server", database: configuration.database, bcryptCost: 4)
        _ = try await admin.createAccount(name: "ada", password: "correct horse")
        try await server.makeApplication().test(.live) { client in
            try await body(URL(string: "http://127.0.0.1:\(try #require(client.port))")!, dir)
        }
        await server.close()
        await admin.close()
    }

    @Test func twoDevicesKeepAContainerInStep() async throws {
        try await withServer { base, dir in
            let laptopDevice = try await device("laptop", base: base, dir: dir, greedy: true)
            let phoneDevice = try await device("phone", base: base, dir: dir, greedy: true)
            let (laptop, laptopDocuments) = (laptopDevice.sync, laptopDevice.documents)
            let (phone, phoneDocuments) = (phoneDevice.sync, phoneDevice.documents)
            func read(_ folder: URL, _ name: String) -> String? {
                (try? Data(contentsOf: folder.appendingPathComponent(name))).map { String(decoding: $0, as: UTF8.self) }
            }
            func write(_ folder: URL, _ name: String, _ text: String) throws {
                try Data(text.utf8).write(to: folder.appendingPathComponent(name))
            }

            // Created on one device, it appears on the other.
            try write(laptopDocuments, "Trip.txt", "pack the tent")
            try await laptop.syncOnce()
            try await phone.syncOnce()
            #expect(read(phoneDocuments, "Trip.txt") == "pack the tent")

            // Edited on the other, it comes back.
            try write(phoneDocuments, "Trip.txt", "pack the tent and the stove")
            try await phone.syncOnce()
            try await laptop.syncOnce()
            #expect(read(laptopDocuments, "Trip.txt") == "pack the tent and the stove")

            // Renamed: the same item, under its new name everywhere.
            try FileManager.default.moveItem(at: laptopDocuments.appendingPathComponent("Trip.txt"), to: laptopDocuments.appendingPathComponent("Trip 2027.txt"))
            try await laptop.syncOnce()
            try await phone.syncOnce()
            #expect(read(phoneDocuments, "Trip 2027.txt") == "pack the tent and the stove" && read(phoneDocuments, "Trip.txt") == nil)

            // Offline edits on both: both kept; the later one is current on both devices, the
            // other a conflict version both know of.
            try write(laptopDocuments, "Trip 2027.txt", "from the laptop")
            try await Task.sleep(for: .milliseconds(20)) // a later modification date
            try write(phoneDocuments, "Trip 2027.txt", "from the phone")
            try await laptop.syncOnce()
            try await phone.syncOnce()
            try await laptop.syncOnce()
            #expect(read(laptopDocuments, "Trip 2027.txt") == "from the phone" && read(phoneDocuments, "Trip 2027.txt") == "from the phone")
            #expect(await laptop.conflicts(of: "Documents/Trip 2027.txt").count == 1)
            let laptopConflicts = await laptop.conflicts(of: "Documents/Trip 2027.txt")
            #expect(await phone.conflicts(of: "Documents/Trip 2027.txt") == laptopConflicts)

            // Deleted on one, gone from the other.
            try FileManager.default.removeItem(at: phoneDocuments.appendingPathComponent("Trip 2027.txt"))
            try await phone.syncOnce()
            try await laptop.syncOnce()
            #expect(read(laptopDocuments, "Trip 2027.txt") == nil)
            let laptopIdle = await laptop.isIdle, phoneIdle = await phone.isIdle
            #expect(laptopIdle && phoneIdle)
        }
    }

    /// A restarted agent resumes: a change it had not sent when it stopped is sent, once.
    @Test func aRestartedAgentSendsWhatItHadNotSent() async throws {
        let container = notes
        try await withServer { base, dir in
            let token = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: "laptop").token
            let root = URL(fileURLWithPath: dir).appendingPathComponent("laptop")
            let unreachable = SyncClient(server: URL(string: "http://127.0.0.1:1")!, token: token)
            do {
                let offline = try ContainerSync(container: container, root: root, client: unreachable, store: try AgentStore(path: dir + "/laptop.sqlite"), device: "laptop")
                try Data("written offline".utf8).write(to: root.appendingPathComponent("Documents/Offline.txt"))
                try await offline.syncOnce()
                #expect(await !offline.isIdle, "the server could not be reached: the change waits")
                let errors = await offline.errors
                #expect(errors[ContainerSync.fetchErrorKey]?.contains("unreachable") == true && errors.count == 2, "\(errors)")
                // `ubiquity status` says what waits, and why.
                let status = await offline.containerStatus(root: root)
                let pending = try #require(status.pending)
                #expect(status.pendingCount == 1 && pending.map(\.path) == ["Documents/Offline.txt"], "\(pending)")
                #expect(pending.first?.reason == .failed && pending.first?.detail?.contains("unreachable") == true)
            }
            let online = try ContainerSync(container: container, root: root, client: SyncClient(server: base, token: token),
                                           store: try AgentStore(path: dir + "/laptop.sqlite"), device: "laptop")
            try await online.syncOnce()
            #expect(await online.isIdle)
            let changes = try await SyncClient(server: base, token: token).changes(container: container, since: 0)
            #expect(changes.items.map(\.name) == ["Offline.txt"] && changes.items.first?.uploaded == true && changes.items.first?.conflicts == [])
        }
    }

    /// An iOS-like device (not greedy): items from elsewhere are listed first (placeholders) and
    /// downloaded on demand; evicting frees an uploaded copy and refuses an unsent one; conflict
    /// versions land in the version store on both devices and a resolution on one clears both.
    @Test func onDemandDownloadsEvictionAndConflictVersions() async throws {
        try await withServer { base, dir in
            let laptopDevice = try await device("laptop", base: base, dir: dir, greedy: false)
            let phoneDevice = try await device("phone", base: base, dir: dir, greedy: false)
            let (laptop, laptopDocuments) = (laptopDevice.sync, laptopDevice.documents)
            let (phone, phoneDocuments) = (phoneDevice.sync, phoneDevice.documents)
            func read(_ folder: URL, _ name: String) -> String? {
                (try? Data(contentsOf: folder.appendingPathComponent(name))).map { String(decoding: $0, as: UTF8.self) }
            }
            func write(_ folder: URL, _ name: String, _ text: String) throws {
                try Data(text.utf8).write(to: folder.appendingPathComponent(name))
            }
            let plan = phoneDocuments.appendingPathComponent("Plan.txt")

            // Metadata first: the phone lists the item, with its size, but has no copy.
            try write(laptopDocuments, "Plan.txt", "climb the ridge")
            try await laptop.syncOnce()
            try await phone.syncOnce()
            #expect(read(phoneDocuments, "Plan.txt") == nil)
            #expect(UbiquityPlaceholder.read(for: plan)?.size == 15)
            var listed = try #require(await phone.status(ofName: "Documents/Plan.txt"))
            #expect(!listed.downloaded && !listed.downloadRequested && listed.uploaded && listed.size == 15)
            #expect(try LocalScanner(root: phoneDocuments).scan().isEmpty, "a placeholder is not an item of its own")

            // Asked for, it comes down and stays current; the placeholder goes.
            try await phone.requestDownload("Documents/Plan.txt")
            #expect(await phone.status(ofName: "Documents/Plan.txt")?.downloadRequested == true)
            try await phone.syncOnce()
            #expect(read(phoneDocuments, "Plan.txt") == "climb the ridge" && UbiquityPlaceholder.read(for: plan) == nil)
            listed = try #require(await phone.status(ofName: "Documents/Plan.txt"))
            #expect(listed.downloaded && listed.current && listed.percentDownloaded == 100)
            try write(laptopDocuments, "Plan.txt", "climb the ridge at dawn")
            try await laptop.syncOnce()
            try await phone.syncOnce()
            #expect(read(phoneDocuments, "Plan.txt") == "climb the ridge at dawn", "a downloaded item is kept current")

            // Eviction refuses a change not uploaded, then frees the copy and keeps the listing.
            try write(laptopDocuments, "Plan.txt", "climb the ridge at dawn, with water")
            await #expect(throws: ContainerSyncError.self) { try await laptop.evict("Documents/Plan.txt") }
            #expect(read(laptopDocuments, "Plan.txt") == "climb the ridge at dawn, with water", "nothing lost")
            try await laptop.syncOnce()
            try await laptop.evict("Documents/Plan.txt")
            #expect(read(laptopDocuments, "Plan.txt") == nil)
            #expect(UbiquityPlaceholder.read(for: laptopDocuments.appendingPathComponent("Plan.txt"))?.size == 35)
            try await laptop.syncOnce()
            let evicted = await laptop.status(ofName: "Documents/Plan.txt")
            #expect(read(laptopDocuments, "Plan.txt") == nil && evicted?.downloaded == false,
                    "an evicted item is not downloaded again by itself, nor taken for a deletion")
            try await phone.syncOnce()
            #expect(read(phoneDocuments, "Plan.txt") == "climb the ridge at dawn, with water")

            // Offline edits on both: the loser becomes an NSFileVersion conflict version on both devices.
            try await laptop.requestDownload("Documents/Plan.txt")
            try await laptop.syncOnce()
            try write(laptopDocuments, "Plan.txt", "from the laptop")
            try await Task.sleep(for: .milliseconds(20))
            try write(phoneDocuments, "Plan.txt", "from the phone")
            try await laptop.syncOnce()
            try await phone.syncOnce()
            try await laptop.syncOnce()
            for folder in [laptopDocuments, phoneDocuments] {
                let url = folder.appendingPathComponent("Plan.txt")
                #expect(read(folder, "Plan.txt") == "from the phone")
                let versions = NSFileVersion.unresolvedConflictVersionsOfItem(at: url) ?? []
                #expect(versions.count == 1)
                #expect(versions.first.map { String(decoding: (try? Data(contentsOf: $0.url)) ?? Data(), as: UTF8.self) } == "from the laptop")
                #expect(versions.first?.localizedNameOfSavingComputer == "laptop")
            }
            #expect(await phone.status(ofName: "Documents/Plan.txt")?.conflicts == 1)

            // Resolved on the phone (the guide's way: remove the other versions), cleared on the laptop too.
            try NSFileVersion.removeOtherVersionsOfItem(at: plan)
            try await phone.syncOnce()
            try await laptop.syncOnce()
            let left = (await laptop.conflicts(of: "Documents/Plan.txt"), await phone.conflicts(of: "Documents/Plan.txt"))
            #expect(left.0.isEmpty && left.1.isEmpty)
            #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: laptopDocuments.appendingPathComponent("Plan.txt"))?.isEmpty ?? true)

            // Deleting a placeholder deletes the item it stands for.
            try write(phoneDocuments, "Later.txt", "someday")
            try await phone.syncOnce()
            try await laptop.syncOnce()
            let placeholder = UbiquityPlaceholder.url(for: laptopDocuments.appendingPathComponent("Later.txt"))
            #expect(FileManager.default.fileExists(atPath: placeholder.path))
            try FileManager.default.removeItem(at: placeholder)
            try await laptop.syncOnce()
            try await phone.syncOnce()
            let gone = await phone.status(ofName: "Documents/Later.txt")
            #expect(read(phoneDocuments, "Later.txt") == nil && gone == nil)
        }
    }

    /// A rename is remembered as a rename: after a restart the old name is not taken for a deletion.
    @Test func aRenameSurvivesARestart() async throws {
        let container = notes
        try await withServer { base, dir in
            let token = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: "laptop").token
            let root = URL(fileURLWithPath: dir).appendingPathComponent("laptop")
            let documents = root.appendingPathComponent("Documents")
            func agent() throws -> ContainerSync {
                try ContainerSync(container: container, root: root, client: SyncClient(server: base, token: token),
                                  store: try AgentStore(path: dir + "/laptop.sqlite"), device: "laptop")
            }
            do {
                let first = try agent()
                try Data("draft".utf8).write(to: documents.appendingPathComponent("Draft.txt"))
                try await first.syncOnce()
                try FileManager.default.moveItem(at: documents.appendingPathComponent("Draft.txt"), to: documents.appendingPathComponent("Final.txt"))
                try await first.syncOnce()
            }
            let restarted = try agent()
            try await restarted.syncOnce()
            #expect(FileManager.default.fileExists(atPath: documents.appendingPathComponent("Final.txt").path))
            let items = try await SyncClient(server: base, token: token).changes(container: container, since: 0).items
            #expect(items.map(\.name) == ["Final.txt"] && items.allSatisfy { !$0.deleted })
        }
    }
}
