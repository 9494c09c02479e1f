import Foundation
import Testing
import Ubiquity
import UbiquityTestSupport

/// Another party (a background coordinator, as another process would be) reads, writes, moves
/// and deletes an open document's file under coordination.
@MainActor
@Suite struct DocumentPresenterTests {
    func openDocument(_ text: String, in dir: TemporaryDirectory) async throws -> ProbeDocument {
        let url = dir.file("shared.txt")
        try Data(text.utf8).write(to: url)
        let document = ProbeDocument(fileURL: url)
        #expect(await document.open())
        return document
    }

    @Test func aCoordinatedReaderGetsTheDocumentsUnsavedChanges() async throws {
        let dir = try TemporaryDirectory("presenter"); defer { dir.remove() }
        let document = try await openDocument("on disk", in: dir)
        defer { Task { await document.close() } }
        document.edit("unsaved edit")
        let seen = try await NSFileCoordinator().read(itemAt: document.fileURL) { try String(contentsOf: $0, encoding: .utf8) }
        #expect(seen == "unsaved edit")
        #expect(!document.hasUnsavedChanges)
    }

    @Test func aCoordinatedWriterDisablesEditingThenTheDocumentReverts() async throws {
        let dir = try TemporaryDirectory("presenter"); defer { dir.remove() }
        let document = try await openDocument("before", in: dir)
        defer { Task { await document.close() } }
        let states = document.stateUpdates
        try await NSFileCoordinator().write(itemAt: document.fileURL, options: .forReplacing) { url in
            try SafeSave.write(Data("written by another process".utf8), to: url)
        }
        #expect(await waitUntil { document.text == "written by another process" && document.documentState == .normal })
        var seen: [Document.State] = []
        for await state in states {
            seen.append(state)
            if state == .normal && seen.count > 1 { break }
        }
        #expect(seen.first == .normal && seen.contains(.editingDisabled) && seen.last == .normal)
    }

    @Test func aCoordinatedMoveIsFollowed() async throws {
        let dir = try TemporaryDirectory("presenter"); defer { dir.remove() }
        let document = try await openDocument("movable", in: dir)
        defer { Task { await document.close() } }
        let old = document.fileURL
        let new = dir.file("renamed.txt")
        try await Task.detached {
            let coordinator = NSFileCoordinator()
            try coordinator.coordinate(reading: [], writing: [(old, .forMoving), (new, .forReplacing)]) { _, urls in
                coordinator.item(at: urls[0], willMoveTo: urls[1])
                try FileManager.default.moveItem(at: urls[0], to: urls[1])
                coordinator.item(at: urls[0], didMoveTo: urls[1])
            }
        }.value
        #expect(await waitUntil { document.fileURL == new.standardizedFileURL })
        document.edit("saved at the new place")
        #expect(await document.close())
        #expect(try String(contentsOf: new, encoding: .utf8) == "saved at the new place")
        #expect(!FileManager.default.fileExists(atPath: old.path))
    }

    @Test func aCoordinatedDeletionClosesTheDocument() async throws {
        let dir = try TemporaryDirectory("presenter"); defer { dir.remove() }
        let document = try await openDocument("doomed", in: dir)
        try await NSFileCoordinator().write(itemAt: document.fileURL, options: .forDeleting) { try FileManager.default.removeItem(at: $0) }
        #expect(await waitUntil { document.documentState == .closed })
        #expect(!NSFileCoordinator.filePresenters.contains { $0 === document })
    }

    @Test func aChangeByAProgramThatDoesNotCoordinateReachesTheDocument() async throws {
        let dir = try TemporaryDirectory("presenter"); defer { dir.remove() }
        let document = try await openDocument("opened", in: dir)
        defer { Task { await document.close() } }
        document.edit("saved by the document")
        #expect(await document.save(to: document.fileURL, for: .forOverwriting))
        // The document's own save does not make it revert (the watcher sees it within
        // milliseconds: half a second is plenty).
        try await Task.sleep(for: .milliseconds(500))
        #expect(document.reads.withLock { $0 } == 1, "opened once; its own save did not make it revert")

        let shell = ChildProcess()
        shell.executableURL = URL(fileURLWithPath: "/bin/sh")
        shell.arguments = ["-c", "printf 'written by a shell' > \"$0\"", document.fileURL.path]
        try shell.run()
        try await onOwnThread { shell.waitUntilExit() }
        #expect(await waitUntil { document.text == "written by a shell" && document.documentState == .normal })
        // (The shell truncates, then writes: a loaded machine may see the two apart and revert twice.)
        #expect((2...3).contains(document.reads.withLock { $0 }), "reverted for the shell's write")

        // Deleted by a program that does not coordinate: the document stays open with its content.
        try FileManager.default.removeItem(at: document.fileURL)
        document.edit("kept")
        #expect(await document.close())
        #expect(try String(contentsOf: document.fileURL, encoding: .utf8) == "kept")
    }

    @Test func anOpenDocumentIsARegisteredPresenterUntilClosed() async throws {
        let dir = try TemporaryDirectory("presenter"); defer { dir.remove() }
        let document = try await openDocument("x", in: dir)
        #expect(NSFileCoordinator.filePresenters.contains { $0 === document })
        #expect(document.presentedItemURL == document.fileURL)
        #expect(await document.close())
        #expect(!NSFileCoordinator.filePresenters.contains { $0 === document })
    }
}
