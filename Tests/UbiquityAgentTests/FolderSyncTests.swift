import Foundation
import Testing
import UbiquityClient
import UbiquityCoordination
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityAgent

/// Folders and packages between devices through a real server: nested items, a folder renamed
/// and deleted, a move between folders, a package whose one edited member is all that travels,
/// a package conflict kept whole, placeholders in subfolders on an on-demand device.
extension ContainerSyncTests {
    struct Device {
        let sync: ContainerSync
        let documents: URL
        let client: SyncClient

        func write(_ path: String, _ bytes: Data) throws {
            let url = documents.appendingPathComponent(path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try bytes.write(to: url)
        }

        func read(_ path: String) -> String? {
            (try? Data(contentsOf: documents.appendingPathComponent(path))).map { String(decoding: $0, as: UTF8.self) }
        }

        func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: documents.appendingPathComponent(path).path) }
    }

    func device(_ name: String, base: URL, dir: String, greedy: Bool) async throws -> Device {
        let token = try await SyncClient(server: base).signIn(account: "ada", password: "correct horse", deviceName: name).token
        let root = URL(fileURLWithPath: dir).appendingPathComponent(name)
        let client = SyncClient(server: base, token: token)
        let sync = try ContainerSync(container: notes, root: root, client: client, store: try AgentStore(path: dir + "/\(name).sqlite"),
                                     device: name, greedy: greedy)
        return Device(sync: sync, documents: root.appendingPathComponent("Documents"), client: client)
    }

    @Test func downloadsAKilledAgentLeftUnfinishedAreRemovedOnReopening() async throws {
        let dir = NSTemporaryDirectory() + "staged-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let documents = URL(fileURLWithPath: dir).appendingPathComponent("laptop/Documents")
        try FileManager.default.createDirectory(at: documents.appendingPathComponent("sub/.ubiquity-download-pkg/inner"), withIntermediateDirectories: true)
        try Data("half".utf8).write(to: documents.appendingPathComponent(".ubiquity-download-1a2b3c4d"))
        try Data("kept".utf8).write(to: documents.appendingPathComponent("sub/Notes.txt"))
        _ = try ContainerSync(container: notes, root: documents.deletingLastPathComponent(), client: SyncClient(server: URL(string: "http://127.0.0.1:1")!),
                              store: try AgentStore(path: dir + "/laptop.sqlite"), device: "laptop")
        #expect(!FileManager.default.fileExists(atPath: documents.appendingPathComponent(".ubiquity-download-1a2b3c4d").path))
        #expect(!FileManager.default.fileExists(atPath: documents.appendingPathComponent("sub/.ubiquity-download-pkg").path))
        #expect(FileManager.default.fileExists(atPath: documents.appendingPathComponent("sub/Notes.txt").path), "nothing else is touched")
    }

    @Test func foldersAndPackagesTravel() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            let tablet = try await device("tablet", base: base, dir: dir, greedy: false)
            var picture = Data(count: 1 << 20)
            for index in picture.indices { picture[index] = UInt8(truncatingIfNeeded: index &* 2_654_435_761 >> 7) }

            // A folder tree with a package in it appears as such on the other devices.
            try laptop.write("Projects/Garden/plan.txt", Data("dig, sow, water".utf8))
            try laptop.write("Projects/Sketch.note/Text.txt", Data("first draft".utf8))
            try laptop.write("Projects/Sketch.note/Images/picture.bin", picture)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(phone.read("Projects/Garden/plan.txt") == "dig, sow, water")
            #expect(phone.read("Projects/Sketch.note/Text.txt") == "first draft")
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Projects/Sketch.note/Images/picture.bin")) == picture)
            let phoneItems = await phone.sync.statuses().map { $0.path.replacingOccurrences(of: phone.documents.path + "/", with: "") }
            #expect(phoneItems == ["Projects", "Projects/Garden", "Projects/Garden/plan.txt", "Projects/Sketch.note"], "a package is one item")

            // On an on-demand device: folders at once, placeholders in them, a package downloaded whole when asked.
            try await tablet.sync.syncOnce()
            #expect(tablet.exists("Projects/Garden/.plan.txt.icloud") && !tablet.exists("Projects/Garden/plan.txt"))
            #expect(tablet.exists("Projects/.Sketch.note.icloud") && !tablet.exists("Projects/Sketch.note"))
            try await tablet.sync.requestDownload("Documents/Projects/Sketch.note")
            try await tablet.sync.syncOnce()
            #expect(tablet.read("Projects/Sketch.note/Text.txt") == "first draft" && !tablet.exists("Projects/.Sketch.note.icloud"))

            // A folder renamed on one device: one change, and its items follow on the others.
            try FileManager.default.moveItem(at: phone.documents.appendingPathComponent("Projects"), to: phone.documents.appendingPathComponent("Work"))
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            try await tablet.sync.syncOnce()
            #expect(laptop.read("Work/Garden/plan.txt") == "dig, sow, water" && !laptop.exists("Projects"))
            #expect(laptop.read("Work/Sketch.note/Text.txt") == "first draft")
            #expect(tablet.exists("Work/Garden/.plan.txt.icloud") && tablet.read("Work/Sketch.note/Text.txt") == "first draft" && !tablet.exists("Projects"))

            // A move between folders, and an edit of one member of the package: only that member's chunk travels.
            try FileManager.default.moveItem(at: laptop.documents.appendingPathComponent("Work/Garden/plan.txt"), to: laptop.documents.appendingPathComponent("plan.txt"))
            try laptop.write("Work/Sketch.note/Text.txt", Data("second draft".utf8))
            let laptopBefore = laptop.client.traffic.snapshot
            try await laptop.sync.syncOnce()
            let phoneBefore = phone.client.traffic.snapshot
            try await phone.sync.syncOnce()
            let sent = laptop.client.traffic.snapshot.sent - laptopBefore.sent, received = phone.client.traffic.snapshot.received - phoneBefore.received
            #expect(phone.read("plan.txt") == "dig, sow, water" && !phone.exists("Work/Garden/plan.txt"))
            #expect(phone.read("Work/Sketch.note/Text.txt") == "second draft")
            #expect(sent < 16_384 && received < 16_384, "a 1 MiB member unchanged does not travel: sent \(sent), received \(received)")

            // An empty folder the app made in its package is part of it (found by the chaos
            // harness: it stayed on its device), and goes when the app removes it.
            try FileManager.default.createDirectory(at: laptop.documents.appendingPathComponent("Work/Sketch.note/Audio/Takes"), withIntermediateDirectories: true)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            var isFolder: ObjCBool = false
            #expect(FileManager.default.fileExists(atPath: phone.documents.appendingPathComponent("Work/Sketch.note/Audio/Takes").path, isDirectory: &isFolder) && isFolder.boolValue)
            #expect(phone.read("Work/Sketch.note/Text.txt") == "second draft")
            try FileManager.default.removeItem(at: phone.documents.appendingPathComponent("Work/Sketch.note/Audio"))
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            #expect(!laptop.exists("Work/Sketch.note/Audio") && laptop.read("Work/Sketch.note/Text.txt") == "second draft")

            // Offline edits of the package on both: one current everywhere, the other a whole-package conflict version.
            try laptop.write("Work/Sketch.note/Text.txt", Data("laptop draft".utf8))
            try await Task.sleep(for: .milliseconds(20))
            try phone.write("Work/Sketch.note/Text.txt", Data("phone draft".utf8))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            #expect(laptop.read("Work/Sketch.note/Text.txt") == "phone draft" && phone.read("Work/Sketch.note/Text.txt") == "phone draft")
            let versions = NSFileVersion.unresolvedConflictVersionsOfItem(at: laptop.documents.appendingPathComponent("Work/Sketch.note")) ?? []
            #expect(versions.count == 1)
            if let version = versions.first {
                #expect((try? String(contentsOf: version.url.appendingPathComponent("Text.txt"), encoding: .utf8)) == "laptop draft")
                #expect((try? Data(contentsOf: version.url.appendingPathComponent("Images/picture.bin"))) == picture)
            }

            // A folder deleted on one device goes from the others, with everything in it.
            try FileManager.default.removeItem(at: phone.documents.appendingPathComponent("Work"))
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            try await tablet.sync.syncOnce()
            #expect(!laptop.exists("Work") && !tablet.exists("Work"))
            #expect(laptop.read("plan.txt") == "dig, sow, water")
            let laptopIdle = await laptop.sync.isIdle, phoneIdle = await phone.sync.isIdle, tabletIdle = await tablet.sync.isIdle
            #expect(laptopIdle && phoneIdle && tabletIdle)
        }
    }

    @Test func aFolderDeletedElsewhereKeepsWhatWasAddedHere() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            try laptop.write("Trips/Rome.txt", Data("Colosseum".utf8))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()

            // The laptop deletes the folder while the phone, offline, adds a file to it.
            try FileManager.default.removeItem(at: laptop.documents.appendingPathComponent("Trips"))
            try await laptop.sync.syncOnce()
            try phone.write("Trips/Oslo.txt", Data("fjords".utf8))
            try await phone.sync.syncOnce()
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()

            // Nothing added is lost, and both devices agree on where it is.
            let phoneHas = phone.exists("Trips/Oslo.txt") ? "Trips/Oslo.txt" : "Oslo.txt"
            #expect(phone.read(phoneHas) == "fjords")
            #expect(laptop.read(phoneHas) == "fjords", "the laptop shows it where the phone does")
            #expect(!phone.exists("Trips/Rome.txt") && !laptop.exists("Trips/Rome.txt"))
        }
    }

    @Test func aSmallEditOfALargeFileMovesLittle() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            var bytes = Data(count: 16 << 20)
            var seed: UInt64 = 0x9e37_79b9_7f4a_7c15
            for index in bytes.indices {
                seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                bytes[index] = UInt8(truncatingIfNeeded: seed >> 33)
            }
            try laptop.write("Film.raw", bytes)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Film.raw")) == bytes)

            // One byte changed in 16 MiB (about 1,000 chunks), then one inserted: the chunk lists
            // travel as differences, both ways, and the changed chunks as patches of the old
            // ones (about a 16 KiB chunk each way without them).
            for edit in ["changed", "inserted"] {
                if edit == "changed" { bytes[bytes.count / 2] ^= 0xff } else { bytes.insert(0x2a, at: bytes.count / 3) }
                try laptop.write("Film.raw", bytes)
                let laptopBefore = laptop.client.traffic.snapshot, phoneBefore = phone.client.traffic.snapshot
                try await laptop.sync.syncOnce()
                try await phone.sync.syncOnce()
                let laptopMoved = laptop.client.traffic.snapshot.total - laptopBefore.total
                let phoneMoved = phone.client.traffic.snapshot.total - phoneBefore.total
                #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Film.raw")) == bytes)
                #expect(laptopMoved < 8_192 && phoneMoved < 8_192, "1 byte \(edit): laptop \(laptopMoved) bytes, phone \(phoneMoved) bytes")
                print("1 byte \(edit) in 16 MiB: laptop \(laptopMoved) bytes, phone \(phoneMoved) bytes")
            }
        }
    }
}
