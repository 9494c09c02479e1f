import Foundation
import Testing
import UbiquityClient
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

    @Test(.timeLimit(.minutes(4))) func aSharedFolderSyncsBetweenTwoAccountsAndLeavesWhenAccessEnds() async throws {
        let notes = notes
        let dir = NSTemporaryDirectory() + "shared-folder-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let running = try await RunningAgents.start(["ada-laptop", "ada-phone", "bob-laptop", "bob-phone"], containers: [notes], in: dir, greedy: true,
                                                    accounts: ["bob-laptop": "bob", "bob-phone": "bob"], rescanSeconds: 1)
        defer { running.stop() }
        let documents = try await running.connectedDevices(containers: [notes]).documents
        let (adaLaptop, adaPhone, bobLaptop, bobPhone) = (documents[0], documents[1], documents[2], documents[3])
        let ada = try Self.client(of: running.paths[0]), bob = try Self.client(of: running.paths[2])

        // Ada's folder, and a file of hers beside it; Bob's own file, and a folder of his own named as hers.
        try Self.write("dig, sow, water", to: adaLaptop.appendingPathComponent("Trip/plan.txt"))
        try Self.write("mine alone", to: adaLaptop.appendingPathComponent("Private.txt"))
        try Self.write("bob's own", to: bobLaptop.appendingPathComponent("Mine.txt"))
        #expect(await arrives { Self.read(adaPhone.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water" })
        #expect(await arrives { Self.read(bobPhone.appendingPathComponent("Mine.txt")) == "bob's own" })

        // Ada shares Trip with Bob, who accepts.
        let trip = try #require(try await ada.changes(container: notes, since: 0).items.first { $0.name == "Trip" && $0.parent == nil })
        let share = try await ada.makeShare(container: notes, item: trip.id)
        _ = try await ada.invite("bob", to: share.id, role: .readWrite)
        let invitation = try #require(try await bob.shares().invitations.first)
        #expect(invitation.id == share.id && invitation.name == "Trip" && invitation.owner == "ada")
        try await bob.answer(invitation: try #require(invitation.invitation), accept: true)

        // The folder appears on both of Bob's devices; nothing else of Ada's does.
        for device in [bobLaptop, bobPhone] {
            #expect(await arrives { Self.read(device.appendingPathComponent("Trip/plan.txt")) == "dig, sow, water" }, "\(device.path)")
            #expect(!FileManager.default.fileExists(atPath: device.appendingPathComponent("Private.txt").path))
            #expect(Self.read(device.appendingPathComponent("Mine.txt")) == "bob's own")
        }

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
        // What Bob made in the share is Ada's (kept in her container); nothing of the share is
        // in Bob's own container (the agents look at every file every second), and Bob's own
        // file is not in Ada's.
        try await Task.sleep(for: .seconds(2.5))
        let adas = try await ada.changes(container: notes, since: 0).items.filter { !$0.deleted }.map(\.name)
        let bobs = try await bob.changes(container: notes, since: 0).items.filter { !$0.deleted }.map(\.name)
        #expect(adas.contains("packing.txt") && !adas.contains("Mine.txt"), "\(adas)")
        #expect(bobs.sorted() == ["Mine.txt"], "\(bobs)")

        // Ada removes Bob: the folder leaves his devices (everything was sent), his own file stays.
        let participant = try #require(try await ada.shares().owned.first?.participants?.first { $0.name == "bob" })
        try await ada.remove(participant.id, from: share.id)
        for device in [bobLaptop, bobPhone] {
            #expect(await arrives { !FileManager.default.fileExists(atPath: device.appendingPathComponent("Trip").path) }, "\(device.path)")
            #expect(Self.read(device.appendingPathComponent("Mine.txt")) == "bob's own")
        }
        #expect(Self.read(adaLaptop.appendingPathComponent("Trip/packing.txt")) == "tent, stove, map", "nothing of the owner's goes")
        // Bob's own container never took the folder as his.
        try await Task.sleep(for: .seconds(2.5))
        #expect(try await bob.changes(container: notes, since: 0).items.filter { !$0.deleted }.map(\.name) == ["Mine.txt"])
    }
}
