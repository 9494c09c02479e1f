import Foundation
import Testing
import Ubiquity

/// The Apple-style model (AppleStyleModel.swift) compiles; its document also works.
@MainActor
@Suite struct AppleStyleModelTests {
    @Test func theAppleStylePackageDocumentSavesUndoesAndReopens() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("apple-style-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let url = folder.appendingPathComponent("Groceries.note")
        let document = NoteDocument(fileURL: url)
        // Two edits in two turns of the main queue: two undo groups (groupsByEvent).
        document.setText("milk")
        try await Task.sleep(for: .milliseconds(1))
        document.setText("milk, bread")
        try await Task.sleep(for: .milliseconds(1))
        document.undoManager.undo()
        #expect(document.text == "milk" && document.hasUnsavedChanges)
        document.imageData = Data([1, 2, 3])
        #expect(await document.save(to: url, for: .forCreating))
        #expect(await document.close())
        let reopened = NoteDocument(fileURL: url)
        #expect(await reopened.open())
        #expect(reopened.text == "milk" && reopened.imageData == Data([1, 2, 3]))
        #expect(await reopened.close())
    }

    @Test func aDocumentIsMadeOpenedAndSavedOffTheMainActorAndReadsIntoItsOwnProperties() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("apple-style-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let url = folder.appendingPathComponent("app.log")
        try Data("started".utf8).write(to: url)
        // Off the main actor (a detached task): made, opened, edited, closed (saved).
        let appended = await Task.detached { await appendToLog(at: url, line: "synced") }.value
        #expect(appended)
        #expect(String(decoding: try Data(contentsOf: url), as: UTF8.self) == "started\nsynced")
        // On the main actor, kept by a view controller; read(from:) filled the subclass's properties.
        let controller = LogViewController()
        await controller.show(url)
        #expect(controller.shown == ["started", "synced"])
        #expect(controller.document?.bytesRead == 14)
        #expect(controller.document?.documentState == .normal)
        _ = await controller.document?.close()
    }

    @Test func pickedFilesAreReadAndUbiquityCallsAreMockedThroughTheProtocol() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("picked-\(UUID().uuidString.prefix(8)).txt")
        try Data("from the picker".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        #expect(PickedFile.contents(of: file) == Data("from the picker".utf8))
        let mock = MockUbiquityFiles()
        let library = CloudLibrary(files: mock)
        #expect(!library.isSignedIn && library.documentsURL == nil)
        mock.container = URL(fileURLWithPath: "/tmp/cloud")
        #expect(library.isSignedIn && library.documentsURL?.path == "/tmp/cloud/Documents")
        #expect(CloudLibrary().files === FileManager.default)
    }
}
