import Foundation
import Logging
import Testing
import UbiquityAgentProtocol
import UbiquityClient
import UbiquityProtocol
import UbiquityTestSupport
@testable import UbiquityAgent

/// A participant's access ending while its device cannot write its own records.
@Suite struct ShareAccessEndTests {
    let notes = "ABCDE12345.com.example.notes"

    /// Found by `ubiquity-chaos --sealed-share`, seed 39: Bob was removed from Ada's share while
    /// his device's disk was full. His agent let the share go though it could not forget its
    /// records: the folder stayed (and was taken by his container's own engine), so when he was
    /// invited again and accepted, the share came back as "Trip (from ada)" — and its engine, on
    /// the records of the folder at "Trip", took every file for deleted and deleted them for
    /// everyone. Now a share is let go only once its records are (tried again soon); records of
    /// the share under another name are not taken for the folder's. (Bob's device is a small
    /// filesystem filled to the last byte, which needs root to mount; without it the test says
    /// so and checks nothing.)
    @Test(.timeLimit(.minutes(4))) func aShareWhoseAccessEndsWhileTheDiskIsFullComesBackWhole() async throws {
        let notes = notes
        let dir = NSTemporaryDirectory() + "share-disk-full-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        guard let disk = try SmallDisk(at: URL(fileURLWithPath: dir).appendingPathComponent("bob-laptop"), megabytes: 16) else { return }
        defer { disk.unmount() }
        let log = LogCapture(level: .error)
        let running = try await RunningAgents.start(["ada-laptop", "bob-laptop"], containers: [notes], in: dir, greedy: true,
                                                    agentLogger: log.logger(label: "ubiquity.agent"), accounts: ["bob-laptop": "bob"])
        defer { running.stop() }
        let (devices, documents) = try await running.connectedDevices(containers: [notes])
        let (adaLaptop, bobLaptop) = (documents[0], documents[1])
        let ada = try SharedFolderSyncTests.client(of: running.paths[0]), bob = try SharedFolderSyncTests.client(of: running.paths[1])
        let files = ["plan.txt": "dig, sow, water", "packing.txt": "tent, stove", "route.txt": "north, then west"]
        for (name, text) in files { try SharedFolderSyncTests.write(text, to: adaLaptop.appendingPathComponent("Trip/\(name)")) }
        var trip: ItemState?
        for _ in 0..<600 where trip == nil {
            let items = try await ada.changes(container: notes, since: 0).items
            if items.filter({ $0.kind == .file && !$0.deleted }).count == files.count { trip = items.first { $0.name == "Trip" && $0.parent == nil } }
            if trip == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        let share = try await ada.makeShare(container: notes, item: try #require(trip).id)
        try await bob.answer(invitation: try await ada.invite("bob", to: share.id, role: .readWrite).id, accept: true)
        #expect(await SharedFolderSyncTests().arrives { files.allSatisfy { SharedFolderSyncTests.read(bobLaptop.appendingPathComponent("Trip/\($0.key)")) == $0.value } })

        // Bob's disk fills to the last byte; Ada removes him.
        disk.fill()
        let participant = try #require(try await ada.shares().owned.first?.participants?.first { $0.name == "bob" })
        try await ada.remove(participant.id, from: share.id)
        // (Before the fix the line said the folder could not be removed.)
        let held = await eventually(30) { log.lines.withLock { $0.contains { $0.message.contains("cannot let a share go yet") || $0.message.contains("cannot remove a share's folder") } } }
        print("ShareAccessEndTests: the share's records could not be forgotten on the full disk: \(held)")

        // His disk has room again; he is invited again and accepts.
        try disk.empty()
        try await bob.answer(invitation: try await ada.invite("bob", to: share.id, role: .readWrite).id, accept: true)

        // The folder is his again under its own name, and nothing of Ada's was deleted.
        #expect(await SharedFolderSyncTests().arrives { files.allSatisfy { SharedFolderSyncTests.read(bobLaptop.appendingPathComponent("Trip/\($0.key)")) == $0.value } })
        try await SharedFolderSyncTests.lookEverywhere(devices[1], container: notes)
        try await Task.sleep(for: .seconds(2))
        let left = try await ada.changes(container: notes, since: 0).items.filter { $0.kind == .file && !$0.deleted }.map(\.name).sorted()
        #expect(left == files.keys.sorted(), "Ada's files now: \(left)")
        #expect(!FileManager.default.fileExists(atPath: bobLaptop.appendingPathComponent("Trip (from ada)").path))
        for (name, text) in files { #expect(SharedFolderSyncTests.read(adaLaptop.appendingPathComponent("Trip/\(name)")) == text, "\(name)") }
    }
}
