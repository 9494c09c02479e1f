import Foundation
import Testing
import Ubiquity
import UbiquityTestSupport

/// Sharing between three accounts, two devices each, with real processes: `ubiquity serve` on
/// SQLite and on PostgreSQL, six `ubiquity agent`s, driven with `ubiquity share` and `ubiquity
/// shares` as people would (docs/Sharing.md). Ada shares a folder with Bob (read-write), Cy
/// (read-only) and a name nobody has; edits go both ways to every device; a conflict across
/// accounts is kept as a version on every device with the same winner; Cy's edit is kept and
/// undone; Bob removed while he edits keeps what he typed; Cy leaves; Ada stops sharing; and
/// nothing outside the folder is reached by ids or chunks.
@Suite(.serialized) struct SharingEndToEndTests {
    static let container = "ABCDE12345.com.example.notes"

    /// A device of `account`, signed in, its agent running (every device keeps every file).
    static func device(_ name: String, of account: String, server: RunningServer, in dir: TemporaryDirectory) async throws -> TestDevice {
        // (Items in plaintext: sharing sealed items needs the share keys still to come.)
        let device = try TestDevice(name, in: dir, container: container, settings: #""greedy": true, "sealedContents": false"#)
        try await onOwnThread { try device.login(server, account: account) }
        try await device.startAgent()
        return device
    }

    static func text(_ url: URL) -> String? {
        (try? Data(contentsOf: url)).map { String(decoding: $0, as: UTF8.self) }
    }

    static func write(_ text: String, to url: URL) throws {
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forReplacing) { url in
            try Data(text.utf8).write(to: url, options: .atomic)
        }
    }

    /// The share id `ubiquity shares list` shows for an invitation from `owner`.
    static func invitation(on device: TestDevice, from owner: String) async throws -> String? {
        let listed = try await device.running(["shares", "list"])
        #expect(listed.status == 0, "\(listed.output)")
        return listed.output.split(separator: "\n").first { $0.contains(" invited ") && $0.contains("from \(owner)") }.map { String($0.prefix { $0 != " " }) }
    }

    @Test(.timeLimit(.minutes(8)), arguments: ServeCommandTests.storages)
    func threeAccountsShareAFolder(storage: String) async throws {
        let dir = try TemporaryDirectory()
        let server = try await RunningServer.start(storage: storage == "sqlite" ? ["--data", dir.file("data").path] : ["--database", try ServeCommandTests.postgresURL()])
        defer { server.stop() }
        let storageArguments = storage == "sqlite" ? ["--data", dir.file("data").path] : []
        if storage == "sqlite" {
            try await onOwnThread { for name in ["bob", "cy"] { try RunningServer.createAccount(storage: storageArguments, name: name) } }
        }
        // (PostgreSQL: the accounts are made through the same server's database below.)
        if storage != "sqlite" { try await Self.makeAccounts(["bob", "cy"], server: server) }
        var devices: [String: TestDevice] = [:]
        for (name, account) in [("ada-laptop", "ada"), ("ada-phone", "ada"), ("bob-laptop", "bob"), ("bob-phone", "bob"), ("cy-laptop", "cy"), ("cy-phone", "cy")] {
            devices[name] = try await Self.device(name, of: account, server: server, in: dir)
        }
        let adaLaptop = try #require(devices["ada-laptop"]), adaPhone = try #require(devices["ada-phone"])
        let bobLaptop = try #require(devices["bob-laptop"]), bobPhone = try #require(devices["bob-phone"])
        let cyLaptop = try #require(devices["cy-laptop"]), cyPhone = try #require(devices["cy-phone"])
        let everyone = [adaLaptop, adaPhone, bobLaptop, bobPhone, cyLaptop, cyPhone]
        let minute = Duration.seconds(60)

        // Ada's folder, and a file of hers beside it.
        try Self.write("dig, sow, water", to: adaLaptop.documents.appendingPathComponent("Trip/plan.txt"))
        try Self.write("mine alone", to: adaLaptop.documents.appendingPathComponent("Private.txt"))
        try await eventually("Ada's phone has the folder", timeout: minute) { Self.text(adaPhone.documents.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water" }

        // Shared with Bob, with Cy read-only, and with a name nobody has: answered alike.
        let trip = adaLaptop.documents.appendingPathComponent("Trip").path
        let toBob = try await adaLaptop.running(["share", trip, "--with", "bob"])
        let toCy = try await adaLaptop.running(["share", trip, "--with", "cy", "--read-only"])
        let toNobody = try await adaLaptop.running(["share", trip, "--with", "nobody"])
        #expect(toBob.status == 0 && toCy.status == 0 && toNobody.status == 0, "\(toBob.output)\(toCy.output)\(toNobody.output)")
        #expect(toNobody.output.replacingOccurrences(of: "nobody", with: "bob") == toBob.output, "an absent name is answered as a present one")

        // Bob and Cy accept on their laptops; the folder appears on all four of their devices.
        for device in [bobLaptop, cyLaptop] {
            let id = try await Self.poll("\(device.name) sees the invitation") { try await Self.invitation(on: device, from: "ada") }
            let accepted = try await device.running(["shares", "accept", id])
            #expect(accepted.status == 0, "\(accepted.output)")
        }
        for device in [bobLaptop, bobPhone, cyLaptop, cyPhone] {
            try await eventually("\(device.name) has the shared folder", timeout: minute) { Self.text(device.documents.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water" }
            #expect(!FileManager.default.fileExists(atPath: device.documents.appendingPathComponent("Private.txt").path))
        }

        // Nothing outside the folder is reached from Bob's account: not Ada's other item by its
        // id (through the share, or as if in his own container), not its chunk, not by moving
        // an item of the share out of it.
        try await Self.containmentHolds(server: server, owner: adaLaptop, participant: bobLaptop)

        // Edits both ways, to every device of every account.
        try Self.write("dig, sow, water, pick", to: bobPhone.documents.appendingPathComponent("Trip/plan.txt"))
        for device in everyone {
            try await eventually("\(device.name) has Bob's edit", timeout: minute) { Self.text(device.documents.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water, pick" }
        }
        try Self.write("tent, stove", to: adaPhone.documents.appendingPathComponent("Trip/packing.txt"))
        for device in everyone {
            try await eventually("\(device.name) has Ada's new file", timeout: minute) { Self.text(device.documents.appendingPathComponent("Trip/packing.txt")) == "tent, stove" }
        }

        // A conflict across accounts: Ada's laptop and Bob's laptop edit the same file apart.
        #expect(adaLaptop.stopAgent() == 0 && bobLaptop.stopAgent() == 0)
        try Self.write("tent, stove, map (Ada)", to: adaLaptop.documents.appendingPathComponent("Trip/packing.txt"))
        try Self.write("tent, stove, rope (Bob)", to: bobLaptop.documents.appendingPathComponent("Trip/packing.txt"))
        try await adaLaptop.startAgent()
        try await bobLaptop.startAgent()
        let both: Set<String> = ["tent, stove, map (Ada)", "tent, stove, rope (Bob)"]
        var winners: Set<String> = []
        for device in everyone {
            let packing = device.documents.appendingPathComponent("Trip/packing.txt")
            try await eventually("\(device.name) keeps both edits", timeout: minute) {
                let current = Self.text(packing), versions = (NSFileVersion.unresolvedConflictVersionsOfItem(at: packing) ?? []).compactMap { Self.text($0.url) }
                return current.map { Set([$0] + versions) == both } ?? false
            }
            winners.insert(Self.text(packing) ?? "")
            // Each version names the person who made it, unless that is this device's account.
            let me = String(device.name.prefix { $0 != "-" })
            let versions = [NSFileVersion.currentVersionOfItem(at: packing)].compactMap { $0 } + (NSFileVersion.unresolvedConflictVersionsOfItem(at: packing) ?? [])
            for version in versions {
                let maker = (Self.text(version.url) ?? "").hasSuffix("(Ada)") ? "ada" : "bob"
                #expect(version.originatorNameComponents?.givenName == (maker == me ? nil : maker), "\(device.name): \(version)")
            }
        }
        #expect(winners.count == 1, "the same winner everywhere: \(winners)")

        // Cy (read-only) edits: kept as a conflict version on Cy's laptop, the shared file put back, status says why.
        let cysPlan = cyLaptop.documents.appendingPathComponent("Trip/plan.txt")
        try Self.write("dig, sow, water — Cy's notes", to: cysPlan)
        try await eventually("Cy's edit is kept and undone", timeout: minute) {
            Self.text(cysPlan) == "dig, sow, water, pick"
                && (NSFileVersion.unresolvedConflictVersionsOfItem(at: cysPlan) ?? []).contains { Self.text($0.url) == "dig, sow, water — Cy's notes" }
        }
        let cysStatus = try await cyLaptop.running(["status"])
        #expect(cysStatus.output.contains("read-only"), "\(cysStatus.output)")
        try await Task.sleep(for: .seconds(1))
        #expect(Self.text(adaLaptop.documents.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water, pick", "nothing of Cy's reached the share")

        // Bob removed while he edits, his agent stopped: what he typed is kept as his own.
        #expect(bobLaptop.stopAgent() == 0)
        try Self.write("Bob's draft, never sent", to: bobLaptop.documents.appendingPathComponent("Trip/draft.txt"))
        let removed = try await adaLaptop.running(["shares", "remove", trip, "bob"])
        #expect(removed.status == 0, "\(removed.output)")
        try await bobLaptop.startAgent()
        for device in [bobLaptop, bobPhone] {
            try await eventually("the share left \(device.name)", timeout: minute) { !FileManager.default.fileExists(atPath: device.documents.appendingPathComponent("Trip").path) }
        }
        try await eventually("Bob's draft is his own, on both his devices", timeout: minute) {
            [bobLaptop, bobPhone].allSatisfy { device in
                Self.text(device.documents.appendingPathComponent("Trip (not shared)/draft.txt")) == "Bob's draft, never sent"
            }
        }
        #expect(!FileManager.default.fileExists(atPath: adaLaptop.documents.appendingPathComponent("Trip/draft.txt").path))

        // Cy leaves (from the phone): the share leaves both of Cy's devices.
        let left = try await cyPhone.running(["shares", "leave", cyPhone.documents.appendingPathComponent("Trip").path])
        #expect(left.status == 0, "\(left.output)")
        for device in [cyLaptop, cyPhone] {
            try await eventually("the share left \(device.name)", timeout: minute) { !FileManager.default.fileExists(atPath: device.documents.appendingPathComponent("Trip").path) }
        }

        // Shared with Bob again, then Ada stops sharing: it leaves Bob's devices, nothing of Ada's goes.
        _ = try await adaLaptop.running(["share", trip, "--with", "bob"])
        let again = try await Self.poll("Bob is invited again") { try await Self.invitation(on: bobPhone, from: "ada") }
        #expect(try await bobPhone.running(["shares", "accept", again]).status == 0)
        try await eventually("the share is back on Bob's laptop", timeout: minute) { Self.text(bobLaptop.documents.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water, pick" }
        #expect(try await adaLaptop.running(["shares", "stop", trip]).status == 0)
        for device in [bobLaptop, bobPhone] {
            try await eventually("the share left \(device.name) again", timeout: minute) { !FileManager.default.fileExists(atPath: device.documents.appendingPathComponent("Trip").path) }
        }
        #expect(Self.text(adaPhone.documents.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water, pick")
        let listed = try await adaLaptop.running(["shares", "list"])
        #expect(listed.output.contains("no shares") || !listed.output.contains("yours"), "\(listed.output)")
    }

    /// Every way Bob's account could reach what Ada did not share is refused, and answered as for
    /// what does not exist (docs/Sharing.md, "Where it lives").
    static func containmentHolds(server: RunningServer, owner: TestDevice, participant: TestDevice) async throws {
        let ada = try #require(try UbiquityCredentials.load(from: owner.paths)).token
        let bob = try #require(try UbiquityCredentials.load(from: participant.paths)).token
        let (_, changes) = try await server.request("v1/containers/\(container)/changes?since=0", token: ada)
        let items = try JSONDecoder().decode(ChangesPage.self, from: Data(changes.utf8)).items
        let secret = try #require(items.first { $0.name == "Private.txt" }), plan = try #require(items.first { $0.name == "plan.txt" })
        let (_, listed) = try await server.request("v1/shares", token: bob)
        let share = try #require(try JSONDecoder().decode(SharesPage.self, from: Data(listed.utf8)).joined.first).id
        #expect(try await server.request("v1/shares/\(share)/items/\(secret.id)", token: bob).0 == 404)
        #expect(try await server.request("v1/shares/\(share)/items/\(secret.id)/revisions", token: bob).0 == 404)
        #expect(try await server.request("v1/containers/\(container)/items/\(secret.id)", token: bob).0 == 404)
        let fetched = try await server.request("v1/shares/\(share)/fetch", method: "POST", json: #"{"ids":["\#(secret.id)"]}"#, token: bob)
        #expect(fetched.0 == 200 && fetched.1.contains(#""items":[]"#), "\(fetched)")
        do {
            let hash = try #require(secret.manifest?.chunks?.first?.hash)
            let asked = try await server.request("v1/shares/\(share)/chunks/missing", method: "POST", json: #"{"hashes":["\#(hash)"]}"#, token: bob)
            #expect(asked.1.contains(hash), "the owner's chunk outside the share is answered as missing: \(asked)")
            #expect(try await server.request("v1/shares/\(share)/chunks/fetch", method: "POST", json: #"{"hashes":["\#(hash)"]}"#, token: bob).0 == 404)
        }
        do {
            let out = #"{"commits":[{"item":"\#(plan.id)","update":{"baseRevision":"\#(plan.revision)","name":"plan.txt","kind":"file","modificationDate":1,"manifest":{}}}]}"#
            let moved = try await server.request("v1/shares/\(share)/commits", method: "POST", json: out, token: bob)
            #expect(moved.1.contains("outsideShare"), "a move out of the share is refused: \(moved)")
        }
    }

    /// The parts of a page of changes this test reads.
    struct ChangesPage: Decodable {
        struct Item: Decodable {
            struct Manifest: Decodable {
                struct Chunk: Decodable { var hash: String }
                var chunks: [Chunk]?
            }
            var id: String
            var name: String
            var revision: String
            var manifest: Manifest?
        }
        var items: [Item]
    }

    /// The parts of `GET /v1/shares` this test reads.
    struct SharesPage: Decodable {
        struct Share: Decodable { var id: String }
        var joined: [Share]
    }

    /// Asks `attempt` until it answers (at most a minute).
    static func poll<T>(_ what: String, timeout: Duration = .seconds(60), _ attempt: () async throws -> T?) async throws -> T {
        let start = ContinuousClock.now
        while true {
            if let answer = try await attempt() { return answer }
            if ContinuousClock.now - start > timeout {
                Issue.record("timed out waiting until \(what)")
                throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "timed out waiting until \(what)"])
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// Makes accounts through the server's own command on the same database (PostgreSQL: the
    /// URL the server was started with is in its arguments).
    static func makeAccounts(_ names: [String], server: RunningServer) async throws {
        let arguments = server.process.arguments
        guard let index = arguments.firstIndex(of: "--database"), index + 1 < arguments.count else { return }
        let storage = ["--database", arguments[index + 1]]
        try await onOwnThread { for name in names { try RunningServer.createAccount(storage: storage, name: name) } }
    }
}
