import Foundation
import Testing
import UbiquityAgentProtocol
import UbiquityClient
import UbiquityCoordination
import UbiquityProtocol
import UbiquityTestSupport
@testable import UbiquityAgent

/// A folder shared between two accounts, each with two devices, through a real server and
/// running agents (docs/Sharing.md): it appears on the participant's devices at the top of the
/// same container's `Documents`, edits travel both ways and to every device of both accounts,
/// nothing of the owner's outside it shows, nothing of the participant's own goes into it, and
/// it leaves the participant's devices when the owner removes them.
@Suite struct SharedFolderSyncTests {
    let notes = "ABCDE12345.com.example.notes"

    /// The client of the account a device signed in as.
    static func client(of paths: UbiquityPaths) throws -> SyncClient {
        let credentials = try #require(try UbiquityCredentials.load(from: paths))
        return SyncClient(server: credentials.server, token: credentials.token)
    }

    /// Has each device's agent look at every file of the container now and sync (`ubiquity sync`).
    static func lookEverywhere(_ devices: UbiquityContainers..., container: String) async throws {
        for device in devices {
            _ = try await onOwnThread { try device.agent.send(AgentRequest(.sync, container: container), timeout: .seconds(120)) }
        }
    }

    /// Waits up to a minute for `condition` (what the whole suite's busiest minute needs), and
    /// says how long it took.
    func arrives(line: Int = #line, _ condition: () -> Bool) async -> Bool {
        let start = ContinuousClock.now
        let held = await eventually(60, condition)
        print("SharedFolderSyncTests line \(line): \(held ? "held" : "did not hold") after \(ContinuousClock.now - start)")
        return held
    }

    static func read(_ url: URL) -> String? {
        (try? Data(contentsOf: url)).map { String(decoding: $0, as: UTF8.self) }
    }

    static func write(_ text: String, to url: URL) throws {
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(text.utf8).write(to: url, options: .atomic)
    }

    /// Expects the most recent editor of each file (a path in `documents`) that `device` names —
    /// its resource value and its current version's originator — to be the account given (nil:
    /// this account made it), waiting up to a minute for the agent to hear.
    static func expectEditors(on device: UbiquityContainers, at documents: URL, _ expected: [String: String?]) async throws {
        for (path, person) in expected {
            let url = documents.appendingPathComponent(path)
            var seen: (editor: String?, originator: String?) = (nil, nil)
            for _ in 0..<600 {
                let values = try await onOwnThread { device.resourceValues(of: url, forKeys: [.ubiquitousSharedItemMostRecentEditorNameComponentsKey]) }
                seen = (values.ubiquitousSharedItemMostRecentEditorNameComponents?.givenName, NSFileVersion.currentVersionOfItem(at: url)?.originatorNameComponents?.givenName)
                if seen.editor == person && seen.originator == person { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(seen.editor == person && seen.originator == person, "\(path): \(seen), expected \(person ?? "none")")
        }
    }

    @Test(.timeLimit(.minutes(4))) func aSharedFolderSyncsBetweenTwoAccountsAndLeavesWhenAccessEnds() async throws {
        let notes = notes
        let dir = NSTemporaryDirectory() + "shared-folder-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let running = try await RunningAgents.start(["ada-laptop", "ada-phone", "bob-laptop", "bob-phone"], containers: [notes], in: dir, greedy: true,
                                                    accounts: ["bob-laptop": "bob", "bob-phone": "bob"])
        defer { running.stop() }
        let (devices, documents) = try await running.connectedDevices(containers: [notes])
        let (adaLaptop, adaPhone, bobLaptop, bobPhone) = (documents[0], documents[1], documents[2], documents[3])
        let ada = try Self.client(of: running.paths[0]), bob = try Self.client(of: running.paths[2])

        // Ada's folder, and a file of hers beside it; Bob's own file, and a folder of his own named as hers.
        try Self.write("dig, sow, water", to: adaLaptop.appendingPathComponent("Trip/plan.txt"))
        try Self.write("mine alone", to: adaLaptop.appendingPathComponent("Private.txt"))
        try Self.write("bob's own", to: bobLaptop.appendingPathComponent("Mine.txt"))
        #expect(await arrives { Self.read(adaPhone.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water" })
        #expect(await arrives { Self.read(bobPhone.appendingPathComponent("Mine.txt")) == "bob's own" })

        // Ada shares Trip with Bob (asking her agent, as `ubiquity share` does), who accepts.
        let trip = adaLaptop.appendingPathComponent("Trip").path
        let shared = try await onOwnThread { try devices[0].agent.send(AgentRequest(.share, path: trip, participant: "bob"), timeout: .seconds(30)) }
        let share = try #require(shared.shares?.first)
        #expect(share.standing == .owned && share.name == "Trip" && share.participants?.map(\.name) == ["bob"], "\(shared)")
        let invited = try await onOwnThread { try devices[2].agent.send(AgentRequest(.shares), timeout: .seconds(30)).shares ?? [] }
        let invitation = try #require(invited.first)
        #expect(invitation.id == share.id && invitation.standing == .invited && invitation.name == "Trip" && invitation.owner == "ada", "\(invited)")
        _ = try await onOwnThread { try devices[2].agent.send(AgentRequest(.answerInvitation, share: invitation.id, accept: true), timeout: .seconds(30)) }

        // The folder appears on both of Bob's devices; nothing else of Ada's does.
        for device in [bobLaptop, bobPhone] {
            #expect(await arrives { Self.read(device.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water" }, "\(device.path)")
            #expect(!FileManager.default.fileExists(atPath: device.appendingPathComponent("Private.txt").path))
            #expect(Self.read(device.appendingPathComponent("Mine.txt")) == "bob's own")
        }

        // Apple's shared-item values: Bob takes part in Ada's share (read-write); Ada owns it,
        // and her file outside it is not shared.
        let keys: Set<URLResourceKey> = [.ubiquitousItemIsSharedKey, .ubiquitousSharedItemCurrentUserRoleKey, .ubiquitousSharedItemCurrentUserPermissionsKey,
                                         .ubiquitousSharedItemOwnerNameComponentsKey]
        let bobs = try await onOwnThread { devices[2].resourceValues(of: bobLaptop.appendingPathComponent("Trip/plan.txt"), forKeys: keys) }
        #expect(bobs.ubiquitousItemIsShared == true && bobs.ubiquitousSharedItemCurrentUserRole == .participant
                && bobs.ubiquitousSharedItemCurrentUserPermissions == .readWrite && bobs.ubiquitousSharedItemOwnerNameComponents?.givenName == "ada")
        var owned = false // (Ada's agent reads her shares on a push: a moment after the invitation)
        for _ in 0..<300 where !owned {
            let adas = try await onOwnThread { devices[0].resourceValues(of: adaLaptop.appendingPathComponent("Trip/plan.txt"), forKeys: keys) }
            owned = adas.ubiquitousItemIsShared == true && adas.ubiquitousSharedItemCurrentUserRole == .owner && adas.ubiquitousSharedItemOwnerNameComponents == nil
            if !owned { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(owned)
        let outside = try await onOwnThread { devices[0].resourceValues(of: adaLaptop.appendingPathComponent("Private.txt"), forKeys: keys) }
        #expect(outside.ubiquitousItemIsShared == false && outside.ubiquitousSharedItemCurrentUserRole == nil)

        // Bob edits, and adds a file: on both of Ada's devices (and Bob's other one).
        try Self.write("dig, sow, water, pick", to: bobLaptop.appendingPathComponent("Trip/plan.txt"))
        try Self.write("tent, stove", to: bobLaptop.appendingPathComponent("Trip/packing.txt"))
        for device in [adaLaptop, adaPhone, bobPhone] {
            #expect(await arrives {
                Self.read(device.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water, pick" && Self.read(device.appendingPathComponent("Trip/packing.txt")) == "tent, stove"
            }, "\(device.path)")
        }
        // Ada's phone edits: on Bob's devices.
        try Self.write("tent, stove, map", to: adaPhone.appendingPathComponent("Trip/packing.txt"))
        for device in [bobLaptop, bobPhone, adaLaptop] {
            #expect(await arrives { Self.read(device.appendingPathComponent("Trip/packing.txt")) == "tent, stove, map" }, "\(device.path)")
        }
        // Who made what, as Apple's values say it: the other person, never oneself.
        try await Self.expectEditors(on: devices[0], at: adaLaptop, ["Trip/plan.txt": "bob", "Trip/packing.txt": nil])
        try await Self.expectEditors(on: devices[2], at: bobLaptop, ["Trip/plan.txt": nil, "Trip/packing.txt": "ada"])
        // The earlier revision of packing.txt (Bob made it): named on Ada's device, not on Bob's.
        for (device, folder, expected) in [(devices[0], adaLaptop, "bob" as String?), (devices[2], bobLaptop, nil)] {
            let path = folder.appendingPathComponent("Trip/packing.txt").path
            let versions = try await onOwnThread { try device.agent.send(AgentRequest(.versions, path: path), timeout: .seconds(30)).versions ?? [] }
            #expect(!versions.isEmpty && versions.allSatisfy { $0.originator == expected }, "\(versions)")
        }
        // What Bob made in the share is Ada's (kept in her container); nothing of the share is
        // in Bob's own container (Bob's agents looked at every file of it: `ubiquity sync`), and
        // Bob's own file is not in Ada's.
        try await Self.lookEverywhere(devices[2], devices[3], container: notes)
        let adasItems = try await ada.changes(container: notes, since: 0).items.filter { !$0.deleted }.map(\.name)
        let bobsItems = try await bob.changes(container: notes, since: 0).items.filter { !$0.deleted }.map(\.name)
        #expect(adasItems.contains("packing.txt") && !adasItems.contains("Mine.txt"), "\(adasItems)")
        #expect(bobsItems.sorted() == ["Mine.txt"], "\(bobsItems)")

        // Ada removes Bob: the folder leaves his devices (everything was sent), his own file stays.
        let participant = try #require(try await ada.shares().owned.first?.participants?.first { $0.name == "bob" })
        try await ada.remove(participant.id, from: share.id)
        for device in [bobLaptop, bobPhone] {
            #expect(await arrives { !FileManager.default.fileExists(atPath: device.appendingPathComponent("Trip").path) }, "\(device.path)")
            #expect(Self.read(device.appendingPathComponent("Mine.txt")) == "bob's own")
        }
        #expect(Self.read(adaLaptop.appendingPathComponent("Trip/packing.txt")) == "tent, stove, map", "nothing of the owner's goes")
        // Bob's own container never took the folder as his.
        try await Self.lookEverywhere(devices[2], devices[3], container: notes)
        #expect(try await bob.changes(container: notes, since: 0).items.filter { !$0.deleted }.map(\.name) == ["Mine.txt"])
    }

    /// A read-only participant's changes: the server would refuse them, so the agent keeps the
    /// person's bytes (an edit as a conflict version of the file, a new file moved out to the
    /// person's own Documents), puts the shared files back, and says why; once the owner makes
    /// the share read-write, the participant's edits go through.
    @Test(.timeLimit(.minutes(4))) func aReadOnlyParticipantsChangesAreKeptAndUndone() async throws {
        let notes = notes
        let dir = NSTemporaryDirectory() + "read-only-share-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let running = try await RunningAgents.start(["ada-laptop", "cy-laptop"], containers: [notes], in: dir, greedy: true, accounts: ["cy-laptop": "cy"])
        defer { running.stop() }
        let (devices, documents) = try await running.connectedDevices(containers: [notes])
        let (adaLaptop, cyLaptop) = (documents[0], documents[1])
        let ada = try Self.client(of: running.paths[0]), cy = try Self.client(of: running.paths[1])
        try Self.write("dig, sow, water", to: adaLaptop.appendingPathComponent("Trip/plan.txt"))
        try Self.write("tent", to: adaLaptop.appendingPathComponent("Trip/packing.txt"))
        #expect(await arrives { (try? Data(contentsOf: adaLaptop.appendingPathComponent("Trip/packing.txt"))) != nil })
        var trip: ItemState?
        for _ in 0..<200 where trip == nil {
            trip = try await ada.changes(container: notes, since: 0).items.first { $0.name == "Trip" && $0.parent == nil }
            if trip == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        let share = try await ada.makeShare(container: notes, item: try #require(trip).id)
        let invitation = try await ada.invite("cy", to: share.id, role: .readOnly)
        try await cy.answer(invitation: invitation.id, accept: true)
        #expect(await arrives { Self.read(cyLaptop.appendingPathComponent("Trip/packing.txt")) == "tent" })

        // Cy edits a file, makes one, and deletes one.
        try Self.write("dig, sow, water — and my notes", to: cyLaptop.appendingPathComponent("Trip/plan.txt"))
        try Self.write("my list", to: cyLaptop.appendingPathComponent("Trip/mine.txt"))
        try FileManager.default.removeItem(at: cyLaptop.appendingPathComponent("Trip/packing.txt"))
        // The shared files come back; the edit is a conflict version; the new file is Cy's own.
        let plan = cyLaptop.appendingPathComponent("Trip/plan.txt")
        #expect(await arrives {
            Self.read(plan) == "dig, sow, water" && Self.read(cyLaptop.appendingPathComponent("Trip/packing.txt")) == "tent"
                && Self.read(cyLaptop.appendingPathComponent("mine (not shared).txt")) == "my list"
                && !FileManager.default.fileExists(atPath: cyLaptop.appendingPathComponent("Trip/mine.txt").path)
        })
        let permissions = try await onOwnThread { devices[1].resourceValues(of: plan, forKeys: [.ubiquitousSharedItemCurrentUserPermissionsKey]) }
        #expect(permissions.ubiquitousSharedItemCurrentUserPermissions == .readOnly)
        let kept = NSFileVersion.unresolvedConflictVersionsOfItem(at: plan) ?? []
        #expect(kept.count == 1 && kept.first.flatMap { Self.read($0.url) } == "dig, sow, water — and my notes", "nothing Cy typed is lost")
        #expect(await arrives { Self.read(adaLaptop.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water" })
        #expect(FileManager.default.fileExists(atPath: adaLaptop.appendingPathComponent("Trip/packing.txt").path)
                && !FileManager.default.fileExists(atPath: adaLaptop.appendingPathComponent("Trip/mine.txt").path))
        var cysOwn: [String] = []
        for _ in 0..<400 where !cysOwn.contains("mine (not shared).txt") {
            cysOwn = try await cy.changes(container: notes, since: 0).items.filter { !$0.deleted }.map(\.name)
            if !cysOwn.contains("mine (not shared).txt") { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(cysOwn == ["mine (not shared).txt"], "\(cysOwn)")
        // `ubiquity status` says why.
        let status = try await onOwnThread { try devices[1].agent.send(AgentRequest(.status), timeout: .seconds(5)).status }
        let said = status?.containers.first { $0.share?.id == share.id }?.errors ?? [:]
        #expect(said["plan.txt"]?.contains("read-only") == true && said["mine.txt"]?.contains("mine (not shared).txt") == true, "\(said)")

        // Made read-write: Cy's edit goes through.
        let participant = try #require(try await ada.shares().owned.first?.participants?.first)
        try await ada.setRole(.readWrite, of: participant.id, in: share.id)
        var writable = false // (Cy's agent learns it by a push: an edit before then would be kept and undone)
        for _ in 0..<600 where !writable {
            writable = try await onOwnThread { devices[1].resourceValues(of: plan, forKeys: [.ubiquitousSharedItemCurrentUserPermissionsKey]) }
                .ubiquitousSharedItemCurrentUserPermissions == .readWrite
            if !writable { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(writable)
        try Self.write("dig, sow, water, and Cy's part", to: plan)
        #expect(await arrives { Self.read(adaLaptop.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water, and Cy's part" })
    }

    /// Sharing from the web page in a real browser (Tests/Browser/sharing_flow.py): Ada shares
    /// her folder from its row (with Bob, and with a name nobody has — answered alike), Bob
    /// accepts under Shared with Others, opens it and downloads a file; the folder then reaches
    /// Bob's device; Ada's item outside it is not reached from Bob's session. Its screenshots go
    /// to docs/screenshots/.
    @Test(.enabled(if: RealBrowser.available, "no browser here: install Debian's chromium and chromium-driver and Selenium from PyPI (.ci/run does)"),
          .timeLimit(.minutes(5)))
    func aFolderIsSharedAndAcceptedFromTheWebPage() async throws {
        let notes = notes
        let dir = NSTemporaryDirectory() + "shared-web-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let running = try await RunningAgents.start(["ada-laptop", "bob-laptop"], containers: [notes], in: dir, greedy: true, accounts: ["bob-laptop": "bob"])
        defer { running.stop() }
        let documents = try await running.connectedDevices(containers: [notes]).documents
        let ada = try Self.client(of: running.paths[0])
        try Self.write("dig, sow, water", to: documents[0].appendingPathComponent("Trip/plan.txt"))
        try Self.write("mine alone", to: documents[0].appendingPathComponent("Private.txt"))
        var secret: String?
        for _ in 0..<400 where secret == nil {
            let items = try await ada.changes(container: notes, since: 0).items
            if items.contains(where: { $0.name == "plan.txt" && $0.uploaded }) { secret = items.first { $0.name == "Private.txt" }?.id }
            if secret == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let arguments: [String: Any] = [
            "url": running.server.url.absoluteString, "container": notes, "folder": "Trip", "file": "plan.txt", "text": "dig, sow, water",
            "secret": try #require(secret), "work": dir + "/browser", "screenshots": repository.appendingPathComponent("docs/screenshots").path,
        ]
        let json = String(decoding: try JSONSerialization.data(withJSONObject: arguments), as: UTF8.self)
        let (status, output) = try await RealBrowser.run(["/usr/bin/env", "python3", repository.appendingPathComponent("Tests/Browser/sharing_flow.py").path, json],
                                                         timeout: .seconds(240))
        print(output)
        #expect(status == 0 && output.contains("all steps held"), "\(output)")
        // Accepted in the page: the folder reaches Bob's device.
        #expect(await arrives { Self.read(documents[1].appendingPathComponent("Trip/plan.txt")) == "dig, sow, water" })
    }
}
