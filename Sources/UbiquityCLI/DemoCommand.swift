import ArgumentParser
import Foundation
import Ubiquity
import UbiquityExamples

/// `ubiquity demo`: walks a package document through its life and says what happens.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "A tour: a package document's life (create, edit, autosave, reopen, undo, redo), then sync between two devices through an embedded server (metadata first, download on demand, edits both ways, an offline conflict and its resolution)."
    )

    @Option(name: .long, help: "Directory to create the document in (default: a new temporary directory, removed afterwards).")
    var directory: String?

    @Flag(name: .long, help: "Only the document part (no server, no devices).")
    var documentsOnly = false

    func run() async throws {
        let keep = directory != nil
        let folder = directory.map { URL(fileURLWithPath: $0, isDirectory: true) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("ubiquity-demo-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { if !keep { try? FileManager.default.removeItem(at: folder) } }
        try await NotesDemo(folder: folder).run()
        if !documentsOnly {
            try await SyncDemo(folder: folder.appendingPathComponent("sync-\(UUID().uuidString.prefix(8))")).run()
        }
    }
}

/// The demo itself, on the main actor where documents live.
@MainActor
struct NotesDemo {
    let folder: URL

    func say(_ line: String) { print(line) }

    func run() async throws {
        NoteDocument.registerType()
        let url = folder.appendingPathComponent("Shopping.note")
        try? FileManager.default.removeItem(at: url)

        say("1. create   \(url.path)")
        let note = NoteDocument(fileURL: url)
        note.autosaveInterval = .milliseconds(200)
        note.text = "eggs"
        note.image = Data("not really a PNG, but 4 KiB of image bytes".utf8) + Data(repeating: 0xAB, count: 4096)
        guard await note.save(to: url, for: .forCreating) else { throw DemoError("could not create the document") }
        say("   state: \(note.documentState), type: \(note.fileType ?? "?"), members: \(members(url))")
        let imageInode = inode(url.appendingPathComponent(NoteDocument.imageFileName))

        say("2. edit     text → \"eggs, milk\" (the undo manager marks the document changed)")
        note.text = "eggs, milk"
        await endOfEvent(note)
        say("   unsaved changes: \(note.hasUnsavedChanges), undo: \"\(note.undoManager.undoMenuItemTitle)\"")

        say("3. autosave after \(note.autosaveInterval)")
        let deadline = ContinuousClock.now.advanced(by: .seconds(10))
        while note.hasUnsavedChanges && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let reused = inode(url.appendingPathComponent(NoteDocument.imageFileName)) == imageInode
        say("   saved: \(!note.hasUnsavedChanges), on disk: \"\(text(url))\", image member rewritten: \(!reused)")

        say("4. close")
        guard await note.close() else { throw DemoError("could not close the document") }
        say("   state: \(note.documentState)")

        say("5. reopen")
        let reopened = NoteDocument(fileURL: url)
        guard await reopened.open() else { throw DemoError("could not reopen the document") }
        say("   state: \(reopened.documentState), text: \"\(reopened.text)\", image: \(reopened.image?.count ?? 0) bytes (read lazily)")

        say("6. edit     text → \"eggs, milk, bread\"")
        reopened.text = "eggs, milk, bread"
        await endOfEvent(reopened)
        say("7. undo     → text: \"\(undo(reopened))\", unsaved changes: \(reopened.hasUnsavedChanges)")
        reopened.undoManager.redo()
        say("8. redo     → text: \"\(reopened.text)\", unsaved changes: \(reopened.hasUnsavedChanges)")
        guard await reopened.close() else { throw DemoError("could not close the document") }
        say("9. closed   on disk: \"\(text(url))\"")
    }

    func endOfEvent(_ note: NoteDocument) async {
        while note.undoManager.groupingLevel > 0 { await Task.yield() }
    }

    func undo(_ note: NoteDocument) -> String {
        note.undoManager.undo()
        return note.text
    }

    func members(_ url: URL) -> String {
        ((try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []).sorted().joined(separator: ", ")
    }

    func text(_ url: URL) -> String {
        (try? String(contentsOf: url.appendingPathComponent(NoteDocument.textFileName), encoding: .utf8)) ?? "?"
    }

    func inode(_ url: URL) -> UInt64? {
        (try? FileManager.default.attributesOfItem(atPath: url.path)[.systemFileNumber] as? NSNumber)?.uint64Value
    }
}

struct DemoError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
