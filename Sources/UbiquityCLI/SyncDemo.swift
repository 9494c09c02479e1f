import Foundation
import UbiquityFiles
import Logging
import Ubiquity
import UbiquityAgent
import UbiquityDatabase
import UbiquityExamples
import UbiquityServer

/// The second half of `ubiquity demo`: an embedded server and two devices (each a home of its
/// own and an in-process agent) in a temporary folder, narrating the reference's scenarios with
/// timings: a document created on one device appears on the other (metadata, then content),
/// edits flow both ways, an offline edit on each side makes a conflict both see, one side
/// resolves it, the other follows; then a database in iCloud (the recipe book): a row added on
/// one device reaches the other's database, and offline edits of two fields merge.
struct SyncDemo {
    let folder: URL
    let container = "ABCDE12345.com.example.demo"

    func say(_ line: String) { print(line) }

    final class Device: @unchecked Sendable {
        let name: String
        let paths: UbiquityPaths
        let containers: UbiquityContainers
        var task: Task<Void, any Error>?

        init(_ name: String, folder: URL, container: String) {
            self.name = name
            let home = folder.appendingPathComponent(name)
            paths = UbiquityPaths(configuration: home.appendingPathComponent("config"), data: home.appendingPathComponent("data"), runtime: home.appendingPathComponent("run"))
            containers = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [container]))
        }

        func start(_ container: String) {
            var logger = Logger(label: "ubiquity.demo.\(name)")
            logger.logLevel = ProcessInfo.processInfo.environment["UBIQUITY_DEMO_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
            let agent = Agent(paths: paths, configuration: AgentConfiguration(containers: [container], rescanSeconds: 30), logger: logger)
            task = Task { try await agent.run() }
        }

        func stop() async {
            task?.cancel()
            _ = await task?.result
            task = nil
        }

        var documents: URL { containers.url(forContainer: containers.entitlements.containerIdentifiers[0])!.appendingPathComponent("Documents") }

        func read(_ name: String) -> String? {
            (try? Data(contentsOf: documents.appendingPathComponent(name))).map { String(decoding: $0, as: UTF8.self) }
        }

        func save(_ name: String, _ text: String) throws {
            try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: documents.appendingPathComponent(name), options: .forReplacing) { url in
                try Data(text.utf8).write(to: url, options: .atomic)
            }
        }

        func conflicts(_ name: String) -> [NSFileVersion] {
            NSFileVersion.unresolvedConflictVersionsOfItem(at: documents.appendingPathComponent(name)) ?? []
        }

        var isIdle: Bool {
            guard let status = try? containers.agent.send(AgentRequest(.status), timeout: .seconds(2)).status else { return false }
            return status.connected && status.containers.allSatisfy { $0.idle && $0.queued == 0 }
        }
    }

    /// Waits until `condition` holds (at most 20 s); the time it took, for the narration.
    func until(_ what: String, _ condition: () -> Bool) async throws -> String {
        let start = ContinuousClock.now
        while !condition() {
            // Generous: each step takes milliseconds, but a loaded machine (the test suite runs the
            // demo beside a chaos run's dozen processes) can hold one up for many seconds.
            guard ContinuousClock.now - start < .seconds(90) else { throw DemoError("timed out waiting until \(what)") }
            try await Task.sleep(for: .milliseconds(5))
        }
        return Self.milliseconds(ContinuousClock.now - start)
    }

    /// The first non-empty import a stream announces within `timeout`.
    static func first(_ changes: AsyncStream<ImportedChanges>, within timeout: Duration) async -> ImportedChanges? {
        await withTaskGroup(of: ImportedChanges?.self) { group in
            group.addTask { for await change in changes where !change.isEmpty { return change }; return nil }
            group.addTask { try? await Task.sleep(for: timeout); return nil }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
    }

    static func milliseconds(_ elapsed: Duration) -> String {
        String(format: "%.0f ms", elapsed.inMilliseconds)
    }

    func run() async throws {
        var logger = Logger(label: "ubiquity.demo.server")
        logger.logLevel = .critical
        let server = try await EmbeddedServer.start(dataDirectory: folder.appendingPathComponent("server").path, account: "ada", password: "correct horse", logger: logger)
        defer { server.cancel() }
        let base = server.url
        say("10. sync    an embedded server at \(base.absoluteString), account ada; two devices, laptop and phone, each with an agent")

        let laptop = Device("laptop", folder: folder, container: container)
        let phone = Device("phone", folder: folder, container: container)
        for device in [laptop, phone] {
            try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: device.name, savingTo: device.paths)
            device.start(container)
        }
        defer { for device in [laptop, phone] { device.task?.cancel() } }
        _ = try await until("both agents are in step") { laptop.isIdle && phone.isIdle }

        try laptop.save("Trip.txt", "pack the tent")
        let trip = phone.documents.appendingPathComponent("Trip.txt")
        let listed = try await until("the phone lists Trip.txt") { phone.containers.isUbiquitousItem(at: trip) }
        let status = phone.containers.resourceValues(of: trip, forKeys: [.ubiquitousItemDownloadingStatusKey]).ubiquitousItemDownloadingStatus
        say("11. create  laptop saves Trip.txt; the phone lists it after \(listed) (metadata first: \(status == .notDownloaded ? "not downloaded" : "?"))")
        phone.containers.installDownloader()
        let start = ContinuousClock.now
        let text = try NSFileCoordinator(filePresenter: nil).coordinate(readingItemAt: trip) { try String(contentsOf: $0, encoding: .utf8) }
        say("    open    the phone's coordinated read waits for the download: \"\(text)\" in \(Self.milliseconds(ContinuousClock.now - start))")

        try phone.save("Trip.txt", "pack the tent and the stove")
        let back = try await until("the laptop has the edit") { laptop.read("Trip.txt") == "pack the tent and the stove" }
        say("12. edit    the phone adds the stove; the laptop has it after \(back)")
        try laptop.save("Trip.txt", "pack the tent, the stove and water")
        let forth = try await until("the phone has the edit") { phone.read("Trip.txt") == "pack the tent, the stove and water" }
        say("    edit    the laptop adds water; the phone has it after \(forth)")

        _ = try await until("both are in step") { laptop.isIdle && phone.isIdle }
        await laptop.stop()
        await phone.stop()
        try laptop.save("Trip.txt", "from the laptop, offline")
        try await Task.sleep(for: .milliseconds(20))
        try phone.save("Trip.txt", "from the phone, offline")
        say("13. offline both agents stop; each device edits Trip.txt; the agents start again")
        laptop.start(container)
        _ = try await until("the laptop sent its edit") { laptop.isIdle }
        phone.start(container)
        let conflict = try await until("both see the conflict") { laptop.conflicts("Trip.txt").count == 1 && phone.conflicts("Trip.txt").count == 1 && laptop.read("Trip.txt") == phone.read("Trip.txt") }
        for device in [laptop, phone] {
            let loser = device.conflicts("Trip.txt").first
            let loserText = loser.flatMap { try? String(contentsOf: $0.url, encoding: .utf8) } ?? "?"
            say("    \(device.name.padding(toLength: 7, withPad: " ", startingAt: 0)) current \"\(device.read("Trip.txt") ?? "?")\", conflict version \"\(loserText)\" from \(loser?.localizedNameOfSavingComputer ?? "?")")
        }
        say("    both devices agree after \(conflict)")

        let url = laptop.documents.appendingPathComponent("Trip.txt")
        if let version = laptop.conflicts("Trip.txt").first {
            _ = try version.replaceItem(at: url)
            try NSFileVersion.removeOtherVersionsOfItem(at: url)
        }
        let followed = try await until("the phone follows") { phone.read("Trip.txt") == laptop.read("Trip.txt") && phone.conflicts("Trip.txt").isEmpty && laptop.isIdle }
        say("14. resolve the laptop keeps \"\(laptop.read("Trip.txt") ?? "?")\"; the phone follows after \(followed), no conflicts left")

        // A database in iCloud: the shoebox recipe book on both devices.
        let laptopBook = try RecipeBook(container: laptop.documents.deletingLastPathComponent(), containers: laptop.containers)
        let phoneBook = try RecipeBook(container: phone.documents.deletingLastPathComponent(), containers: phone.containers)
        defer { try? laptopBook.database.close(); try? phoneBook.database.close() }
        let imports = phoneBook.database.importedChanges()
        let added = ContinuousClock.now
        let recipe = try laptopBook.add(title: "Sourdough", minutes: 90, ingredients: ["flour", "water", "salt", "starter"])
        let arrived = await Self.first(imports, within: .seconds(20))
        guard let arrived, arrived.inserted.count >= 1 else { throw DemoError("the phone's database did not import the recipe") }
        say("15. database the laptop adds a recipe to its Recipes database; the phone's imports it after \(Self.milliseconds(ContinuousClock.now - added)) (told: \(arrived.inserted.count) rows inserted)")
        _ = try await until("both are in step") { laptop.isIdle && phone.isIdle }
        await laptop.stop()
        await phone.stop()
        try laptopBook.rate(recipe, stars: 5)
        try phoneBook.setMinutes(recipe, 120)
        laptop.start(container)
        phone.start(container)
        func merged(_ book: RecipeBook) -> Bool {
            (try? book.recipes().first { $0.id == recipe }).flatMap { $0.map { $0.rating == 5 && $0.minutes == 120 } } ?? false
        }
        let merge = try await until("both databases merged the offline edits") { merged(laptopBook) && merged(phoneBook) }
        say("16. merge   offline, the laptop rates it ★★★★★ and the phone makes it 120 min; both have both after \(merge)")
        await laptop.stop()
        await phone.stop()
        await server.stop()
    }
}
