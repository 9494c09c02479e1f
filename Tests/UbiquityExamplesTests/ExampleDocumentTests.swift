import Foundation
import Testing
import Ubiquity
import UbiquityExamples
import UbiquityTestSupport

@MainActor
@Suite struct ExampleDocumentTests {
    func inode(_ url: URL) -> UInt64? {
        (try? FileManager.default.attributesOfItem(atPath: url.path)[.systemFileNumber] as? NSNumber)?.uint64Value
    }

    @Test func textDocumentRoundTripsAndUndoes() async throws {
        let dir = try TemporaryDirectory("text"); defer { dir.remove() }
        let url = dir.file("letter.txt")
        let document = TextDocument(fileURL: url)
        #expect(await document.save(to: url, for: .forCreating))
        document.setText("Dear Linux,")
        while document.undoManager.groupingLevel > 0 { await Task.yield() }
        #expect(document.hasUnsavedChanges && document.undoManager.undoMenuItemTitle == "Undo Typing")
        #expect(await document.close())
        #expect(try String(contentsOf: url, encoding: .utf8) == "Dear Linux,")
        let reopened = TextDocument(fileURL: url)
        var updates = 0
        reopened.contentsUpdated = { _ in updates += 1 }
        #expect(await reopened.open())
        #expect(reopened.documentText == "Dear Linux," && updates == 1)
        try Data([0xFF, 0xFE, 0x00]).write(to: dir.file("binary.txt"))
        #expect(await TextDocument(fileURL: dir.file("binary.txt")).open() == false)
    }

    @Test func noteDocumentIsAPackageReadLazily() async throws {
        NoteDocument.registerType()
        let dir = try TemporaryDirectory("note"); defer { dir.remove() }
        let url = dir.file("Trip.note")
        let note = NoteDocument(fileURL: url)
        #expect(note.fileType == NoteDocument.typeIdentifier)
        note.text = "pack the tent"
        note.image = Data(repeating: 7, count: 10_000)
        #expect(await note.save(to: url, for: .forCreating))
        #expect(try FileManager.default.contentsOfDirectory(atPath: url.path).sorted() == ["Image.png", "Text.txt"])
        let imageInode = inode(url.appendingPathComponent("Image.png"))

        note.text = "pack the tent and stove"
        #expect(await note.save(to: url, for: .forOverwriting))
        #expect(inode(url.appendingPathComponent("Image.png")) == imageInode, "the unchanged image is not rewritten")
        #expect(await note.close())

        let reopened = NoteDocument(fileURL: url)
        #expect(await reopened.open())
        try FileManager.default.removeItem(at: url.appendingPathComponent("Image.png"))
        #expect(reopened.image == nil, "the image is read only when asked for")
        #expect(reopened.text == "pack the tent and stove")
    }

    @Test func thingsDocumentRewritesOnlyWhatChanged() async throws {
        ThingsDocument.registerType()
        let dir = try TemporaryDirectory("things"); defer { dir.remove() }
        let url = dir.file(thingsDocumentName)
        let document = ThingsDocument(fileURL: url)
        #expect(await document.save(to: url, for: .forCreating))
        for i in 0..<3 {
            let index = document.anotherWhatsit().index
            document.update(at: index, name: "Thing \(i)", location: "Shelf \(i)")
            document.setImage(Data(repeating: UInt8(i), count: 50_000), forWhatsitAt: index)
        }
        #expect(await document.save(to: url, for: .forOverwriting))
        let keys = document.things.compactMap(\.imageKey)
        #expect(Set(keys).count == 3, "image members get unique keys")
        let inodes = keys.map { inode(url.appendingPathComponent($0)) }

        // Deleting one item's image rewrites nothing else: the other images keep their files.
        document.setImage(nil, forWhatsitAt: 1)
        #expect(await document.save(to: url, for: .forOverwriting))
        #expect(!FileManager.default.fileExists(atPath: url.appendingPathComponent(keys[1]).path))
        #expect(inode(url.appendingPathComponent(keys[0])) == inodes[0])
        #expect(inode(url.appendingPathComponent(keys[2])) == inodes[2])
        #expect(await document.close())

        let reopened = ThingsDocument(fileURL: url)
        var got = false
        reopened.gotThings = { _ in got = true }
        #expect(await reopened.open())
        #expect(got && reopened.things.map(\.name) == ["Thing 0", "Thing 1", "Thing 2"])
        #expect(reopened.image(forWhatsitAt: 2) == Data(repeating: 2, count: 50_000))
        #expect(reopened.image(forWhatsitAt: 1) == nil)
        reopened.removeWhatsit(at: 0)
        #expect(await reopened.close())
        #expect(!FileManager.default.fileExists(atPath: url.appendingPathComponent(keys[0]).path))
    }

    @Test func damagedThingsDocumentFailsToOpenAndIsLeftAlone() async throws {
        ThingsDocument.registerType()
        let dir = try TemporaryDirectory("things"); defer { dir.remove() }
        let url = dir.file(thingsDocumentName)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        try Data("not a plist".utf8).write(to: url.appendingPathComponent(ThingsDocument.thingsPreferredName))
        let document = ThingsDocument(fileURL: url)
        #expect(await document.open() == false)
        #expect(document.documentState == .closed)
        #expect(try String(contentsOf: url.appendingPathComponent(ThingsDocument.thingsPreferredName), encoding: .utf8) == "not a plist")
    }
}

/// Runs the example executables as a user would.
@Suite struct ExampleProgramTests {
    func run(_ program: String, _ arguments: [String]) async throws -> (Int32, String) {
        let binary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent(program)
        return try await runProcess(binary.path, arguments)
    }

    @Test func programsEditTheirDocuments() async throws {
        let dir = try TemporaryDirectory("programs"); defer { dir.remove() }
        let text = dir.file("todo.txt").path
        #expect(try await run("text-editor", [text, "buy", "milk"]) == (0, "buy milk\n"))
        #expect(try await run("text-editor", [text, "call", "home"]) == (0, "buy milk\ncall home\n"))

        let note = dir.file("n.note").path
        #expect(try await run("notes", [note, "text", "hello"]).1.contains("text:  hello"))
        #expect(try await run("notes", [note]).1.contains("image: none"))

        #expect(try await run("things", [dir.url.path, "add", "Lamp", "Desk"]) == (0, "0: Lamp @ Desk\n"))
        #expect(try await run("things", [dir.url.path, "remove", "5"]).0 == 1)

        // The shoebox app: two "devices" (containers) whose logs folders are the same folder.
        let laptop = dir.file("laptop"), phone = dir.file("phone")
        let (added, listing) = try await run("recipes", [laptop.path, "add", "Bread", "90", "flour", "water"])
        #expect(added == 0 && listing.contains("Bread — 90 min") && listing.contains("· flour") && listing.contains("· water"), "\(listing)")
        let id = String(listing.split(separator: " ")[1].prefix(36))
        try FileManager.default.createDirectory(at: phone.appendingPathComponent("Databases/Recipes"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: phone.appendingPathComponent("Databases/Recipes/logs"), withDestinationURL: laptop.appendingPathComponent("Databases/Recipes/logs"))
        let (_, onPhone) = try await run("recipes", [phone.path])
        #expect(onPhone.contains("from other devices: 3 new") && onPhone.contains("Bread — 90 min"), "\(onPhone)")
        #expect(try await run("recipes", [phone.path, "rate", id, "4"]).0 == 0)
        #expect(try await run("recipes", [laptop.path]).1.contains("Bread — 90 min ★★★★"))
        #expect(try await run("recipes", [laptop.path, "frobnicate"]).0 == 64)

        // MyStuff as a managed document: the package's metadata travels (as the agent carries
        // it), the store is built from the change logs on the other device.
        let home = dir.file("home"), office = dir.file("office")
        #expect(try await run("things", ["--managed", home.path, "add", "Lamp", "Desk"]) == (0, "0: Lamp @ Desk\n"))
        #expect(try await run("things", ["--managed", home.path, "add", "Tent", "Garage"]).1 == "0: Lamp @ Desk\n1: Tent @ Garage\n")
        let package = "Documents/\(managedThingsDocumentName)"
        try FileManager.default.createDirectory(at: office.appendingPathComponent(package), withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: home.appendingPathComponent("\(package)/DocumentMetadata.plist"), to: office.appendingPathComponent("\(package)/DocumentMetadata.plist"))
        try FileManager.default.createSymbolicLink(at: office.appendingPathComponent("TransactionLogs"), withDestinationURL: home.appendingPathComponent("TransactionLogs"))
        #expect(try await run("things", ["--managed", office.path, "move", "0", "Attic"]) == (0, "0: Lamp @ Attic\n1: Tent @ Garage\n"))
        #expect(try await run("things", ["--managed", home.path]) == (0, "0: Lamp @ Attic\n1: Tent @ Garage\n"))
        #expect(FileManager.default.fileExists(atPath: home.appendingPathComponent("\(package)/StoreContent.nosync/persistentStore").path))
    }
}

/// README's main command, run as a user would.
@Suite struct DemoCommandTests {
    @Test func demoWalksThroughEveryStep() async throws {
        let dir = try TemporaryDirectory("demo"); defer { dir.remove() }
        let binary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("ubiquity")
        let (status, output) = try await runProcess(binary.path, ["demo", "--directory", dir.url.path], includingErrors: true) // errors say why, if it fails
        #expect(status == 0, "\(output)")
        for step in ["1. create", "3. autosave", "saved: true", "image member rewritten: false", "5. reopen",
                     "7. undo     → text: \"eggs, milk\", unsaved changes: false", "8. redo", "9. closed   on disk: \"eggs, milk, bread\"",
                     // The sync tour: an embedded server and two devices.
                     "11. create  laptop saves Trip.txt; the phone lists it after", "(metadata first: not downloaded)",
                     "waits for the download: \"pack the tent\"", "the laptop has it after", "the phone has it after",
                     "laptop  current \"from the phone, offline\", conflict version \"from the laptop, offline\" from laptop",
                     "phone   current \"from the phone, offline\", conflict version \"from the laptop, offline\" from laptop",
                     "14. resolve the laptop keeps \"from the laptop, offline\"; the phone follows after", "no conflicts left",
                     // A database in iCloud: the recipe book.
                     "15. database the laptop adds a recipe to its Recipes database; the phone's imports it after", "(told: 5 rows inserted)",
                     "16. merge   offline, the laptop rates it ★★★★★ and the phone makes it 120 min; both have both after"] {
            #expect(output.contains(step), "missing \(step) in:\n\(output)")
        }
        #expect(try await ExampleProgramTests().run("ubiquity", ["--version"]) == (0, "0.1.0\n"))
    }
}

/// Runs a program to completion: its exit status and standard output (standard error dropped
/// unless `includingErrors`). It is waited for on a thread of its own, not on one of the few
/// threads the tests' tasks share.
func runProcess(_ path: String, _ arguments: [String], includingErrors: Bool = false) async throws -> (Int32, String) {
    try await onOwnThread {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = includingErrors ? pipe : FileHandle.nullDevice
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output)
    }
}
