import Foundation
import Testing
import UbiquityClient
import UbiquityCoordination
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityAgent

/// The whole container syncs (not only `Documents`; never `.nosync`), many changes travel in one
/// request, a watched container looks only where changes were seen, and a file a killed agent
/// had put in place without recording it is recognised as the item it is.
extension ContainerSyncTests {
    @Test func theWholeContainerSyncsButNosync() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            let laptopRoot = laptop.documents.deletingLastPathComponent(), phoneRoot = phone.documents.deletingLastPathComponent()
            func write(_ root: URL, _ path: String, _ text: String) throws {
                let url = root.appendingPathComponent(path)
                try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
                try Data(text.utf8).write(to: url)
            }
            func read(_ root: URL, _ path: String) -> String? {
                (try? Data(contentsOf: root.appendingPathComponent(path))).map { String(decoding: $0, as: UTF8.self) }
            }
            try write(laptopRoot, "Beside.txt", "next to Documents")
            try write(laptopRoot, "Library/Logs/1.log", "a change log")
            try write(laptopRoot, "Cache.nosync/big.bin", "stays here")
            try write(laptopRoot, "Library/Local.nosync", "stays here too")
            try laptop.write("Notes.txt", Data("a document".utf8))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(read(phoneRoot, "Beside.txt") == "next to Documents")
            #expect(read(phoneRoot, "Library/Logs/1.log") == "a change log")
            #expect(read(phoneRoot, "Documents/Notes.txt") == "a document")
            #expect(!FileManager.default.fileExists(atPath: phoneRoot.appendingPathComponent("Cache.nosync").path))
            #expect(!FileManager.default.fileExists(atPath: phoneRoot.appendingPathComponent("Library/Local.nosync").path))
            // Documents stays what it was on the wire: its items have no parent.
            let changes = try await phone.client.changes(container: notes, since: 0)
            #expect(changes.items.first { $0.name == "Notes.txt" }?.parent == nil)
            #expect(changes.items.first { $0.name == "Beside.txt" }?.parent == ContainerLayout.topLevel)
            #expect(!changes.items.contains { $0.name == "Documents" }, "the Documents folder is not an item")

            // Moving a file out of Documents and back is a move of one item.
            try FileManager.default.moveItem(at: phoneRoot.appendingPathComponent("Documents/Notes.txt"), to: phoneRoot.appendingPathComponent("Library/Notes.txt"))
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            #expect(read(laptopRoot, "Library/Notes.txt") == "a document" && !laptop.exists("Notes.txt"))
            let after = try await phone.client.changes(container: notes, since: 0).items.filter { $0.name == "Notes.txt" && !$0.deleted }
            #expect(after.count == 1, "the same item, moved")
        }
    }

    /// Two devices that each make the same folder before hearing of the other (as every device
    /// opening a database in iCloud makes its log folders) get one folder with what both put in
    /// it, not "Shared" and "Shared 2".
    @Test func theSameFolderMadeOnTwoDevicesIsOneFolder() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            try laptop.write("Shared/Deeper/from laptop.txt", Data("L".utf8))
            try phone.write("Shared/Deeper/from phone.txt", Data("P".utf8))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            for device in [laptop, phone] {
                #expect(device.read("Shared/Deeper/from laptop.txt") == "L" && device.read("Shared/Deeper/from phone.txt") == "P")
                #expect(!device.exists("Shared 2") && !device.exists("Shared/Deeper 2"))
            }
            let items = try await phone.client.changes(container: notes, since: 0).items.filter { !$0.deleted }
            #expect(items.filter { $0.name == "Shared" }.count == 1 && items.filter { $0.name == "Deeper" }.count == 1)
            #expect(items.allSatisfy { $0.conflicts.isEmpty }, "no conflict versions of a folder")
        }
    }

    @Test func manyNewFilesGoUpInOneCommitAndComeDownTogether() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            for index in 0..<300 { try laptop.write("Many/file \(index).txt", Data("contents of file \(index)".utf8)) }
            let sent = laptop.client.traffic.snapshot
            try await laptop.sync.syncOnce()
            let sending = laptop.client.traffic.snapshot.requests - sent.requests
            // One commit request, one chunk batch, one fetch of changes (and its follow-up page).
            #expect(sending <= 4, "300 new files took \(sending) requests")
            let received = phone.client.traffic.snapshot
            try await phone.sync.syncOnce()
            let fetching = phone.client.traffic.snapshot.requests - received.requests
            #expect(fetching <= 4, "300 new files took \(fetching) requests to come down")
            for index in [0, 150, 299] { #expect(phone.read("Many/file \(index).txt") == "contents of file \(index)") }
            #expect(await phone.sync.isIdle)
            #expect(await laptop.sync.isIdle)
        }
    }

    @Test func aWatchedContainerLooksOnlyWhereChangesWereSeen() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            try laptop.write("A/one.txt", Data("1".utf8))
            try laptop.write("B/two.txt", Data("2".utf8))
            await laptop.sync.noteChange(at: "Documents/A/one.txt")
            try await laptop.sync.syncOnce() // the first round of a watched container looks everywhere
            try await phone.sync.syncOnce()

            // Told only about A: a change in B waits for a look everywhere.
            try laptop.write("A/three.txt", Data("3".utf8))
            try laptop.write("B/four.txt", Data("4".utf8))
            await laptop.sync.noteChange(at: "Documents/A/three.txt")
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(phone.read("A/three.txt") == "3" && !phone.exists("B/four.txt"))
            await laptop.sync.noteEverythingChanged()
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(phone.read("B/four.txt") == "4")

            // A folder moved from one watched folder into another is one move, its items with it.
            let before = try await phone.client.changes(container: notes, since: 0).items.filter { !$0.deleted }.count
            try FileManager.default.moveItem(at: laptop.documents.appendingPathComponent("B"), to: laptop.documents.appendingPathComponent("A/B"))
            await laptop.sync.noteChange(at: "Documents/B")
            await laptop.sync.noteChange(at: "Documents/A/B")
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(phone.read("A/B/two.txt") == "2" && phone.read("A/B/four.txt") == "4" && !phone.exists("B"))
            let after = try await phone.client.changes(container: notes, since: 0).items.filter { !$0.deleted }.count
            #expect(after == before, "no item was made anew")

            // A folder recorded while still empty, then filled before the watcher watched it
            // (no event for its file): the folder's own event has it walked whole.
            try FileManager.default.createDirectory(at: laptop.documents.appendingPathComponent("C"), withIntermediateDirectories: false)
            await laptop.sync.noteChange(at: "Documents/C")
            try await laptop.sync.syncOnce()
            try laptop.write("C/five.txt", Data("5".utf8))
            await laptop.sync.noteChange(at: "Documents/C")
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(phone.read("C/five.txt") == "5")

            // Inside a package: the package is what changed; inside a .nosync folder: nothing.
            try laptop.write("A/Sketch.note/Text.txt", Data("draft".utf8))
            await laptop.sync.noteChange(at: "Documents/A/Sketch.note")
            try await laptop.sync.syncOnce()
            try laptop.write("A/Sketch.note/Text.txt", Data("second draft".utf8))
            await laptop.sync.noteChange(at: "Documents/A/Sketch.note/Text.txt")
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(phone.read("A/Sketch.note/Text.txt") == "second draft")
            #expect(await laptop.sync.isIdle)
        }
    }

    @Test func theCurrentVersionNamesTheDeviceThatSavedIt() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: true)
            try laptop.write("Note.txt", Data("from the laptop".utf8))      // comes down with others
            try laptop.write("Big.bin", Data(repeating: 7, count: 5 << 20))  // comes down on its own
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            for name in ["Note.txt", "Big.bin"] {
                let version = NSFileVersion.currentVersionOfItem(at: phone.documents.appendingPathComponent(name))
                #expect(version?.localizedNameOfSavingComputer == "laptop", "\(name)")
            }
            let own = NSFileVersion.currentVersionOfItem(at: laptop.documents.appendingPathComponent("Note.txt"))
            #expect(own?.localizedNameOfSavingComputer == NSFileVersion.thisComputer)
            // Saved again on the phone, safely (a new file) or in place: the phone saved it.
            try Data("from the phone".utf8).write(to: phone.documents.appendingPathComponent("Note.txt"), options: .atomic)
            #expect(NSFileVersion.currentVersionOfItem(at: phone.documents.appendingPathComponent("Note.txt"))?.localizedNameOfSavingComputer == NSFileVersion.thisComputer)
            try phone.write("Big.bin", Data(repeating: 8, count: 5 << 20))
            try await phone.sync.syncOnce()
            #expect(NSFileVersion.currentVersionOfItem(at: phone.documents.appendingPathComponent("Big.bin"))?.localizedNameOfSavingComputer == NSFileVersion.thisComputer)
        }
    }

    @Test func aFileAKilledAgentPutInPlaceIsTheItemItIs() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: false)
            try laptop.write("Report.txt", Data("final".utf8))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(phone.exists(".Report.txt.icloud"))
            // The download reached the disk but the agent died before recording it.
            try phone.write("Report.txt", Data("final".utf8))
            try await phone.sync.syncOnce()
            let items = try await phone.client.changes(container: notes, since: 0).items.filter { !$0.deleted }
            #expect(items.count == 1, "no second item: \(items.map(\.name))")
            #expect(await phone.sync.status(ofName: "Documents/Report.txt")?.downloaded == true)
            #expect(!phone.exists(".Report.txt.icloud"))
        }
    }
}
