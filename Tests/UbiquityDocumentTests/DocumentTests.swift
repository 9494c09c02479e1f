import Foundation
import Synchronization
import Testing
import Ubiquity
import UbiquityTestSupport

/// A flat text document that records what happened to it and can be told to fail.
final class ProbeDocument: Document {
    var text = ""
    var failContents = false
    var errors: [any Error] = []
    var loadedOnMainQueue: Bool?
    nonisolated let readOnMainQueue = Mutex<Bool?>(nil)
    nonisolated let failNextWrite = Mutex(false)

    override func contents(forType typeName: String) throws -> Any {
        if failContents { throw ExampleFailure("contents refused") }
        return Data(text.utf8)
    }

    override func load(fromContents contents: Any, ofType typeName: String?) throws {
        loadedOnMainQueue = onMainQueue()
        let data = try #require(contents as? Data)
        let string = String(decoding: data, as: UTF8.self)
        if string == "corrupt" { throw ExampleFailure("corrupt contents") }
        text = string
    }

    /// How many times the document read its file.
    nonisolated let reads = Mutex(0)

    nonisolated override func read(from url: URL) throws {
        reads.withLock { $0 += 1 }
        readOnMainQueue.withLock { $0 = onMainQueue() }
        try super.read(from: url)
    }

    nonisolated override func writeContents(_ contents: Any, to url: URL, for saveOperation: SaveOperation, originalContentsURL: URL?) throws {
        if failNextWrite.withLock({ flag in defer { flag = false }; return flag }) {
            try Data("half-written".utf8).write(to: url)
            throw FileAccessError(.noSpace, "write failed: No space left on device", path: url.path, errno: ENOSPC)
        }
        try super.writeContents(contents, to: url, for: saveOperation, originalContentsURL: originalContentsURL)
    }

    override func handleError(_ error: any Error, userInteractionPermitted: Bool) {
        errors.append(error)
        super.handleError(error, userInteractionPermitted: userInteractionPermitted)
    }

    @MainActor func setTextUndoably(_ newText: String) {
        let old = text
        text = newText
        undoManager.registerUndo(withTarget: self) { $0.setTextUndoably(old) }
    }

    func edit(_ newText: String) {
        text = newText
        updateChangeCount(.done)
    }
}

/// Whether the caller runs on the main dispatch queue (the main actor's executor).
func onMainQueue() -> Bool { DispatchQueue.getSpecific(key: mainQueueKey) == true }
let mainQueueKey: DispatchSpecificKey<Bool> = {
    let key = DispatchSpecificKey<Bool>()
    DispatchQueue.main.setSpecific(key: key, value: true)
    return key
}()

struct ExampleFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

@MainActor
@Suite struct DocumentTests {
    func fileText(_ url: URL) -> String? { try? String(contentsOf: url, encoding: .utf8) }

    @Test func createEditCloseReopen() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let url = dir.file("note.txt")
        let document = ProbeDocument(fileURL: url)
        #expect(document.documentState == .closed)
        #expect(document.fileType == DocumentType.plainText && document.localizedName == "note")
        document.text = "first"
        #expect(await document.save(to: url, for: .forCreating))
        #expect(document.documentState == .normal && !document.hasUnsavedChanges)
        #expect(fileText(url) == "first")
        #expect(document.fileModificationDate != nil)
        document.edit("second")
        #expect(document.hasUnsavedChanges)
        #expect(await document.close())
        #expect(document.documentState == .closed && fileText(url) == "second")

        let reopened = ProbeDocument(fileURL: url)
        #expect(await reopened.open())
        #expect(reopened.text == "second" && reopened.documentState == .normal)
        #expect(reopened.readOnMainQueue.withLock { $0 } == false, "the file must be read off the main actor")
        #expect(reopened.loadedOnMainQueue == true, "load(fromContents:ofType:) runs on the main actor")
    }

    @Test func completionHandlersRunOnTheMainActor() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let document = ProbeDocument(fileURL: dir.file("a.txt"))
        let onMain: Bool = await withCheckedContinuation { continuation in
            document.save(to: document.fileURL, for: .forCreating) { _ in continuation.resume(returning: onMainQueue()) }
        }
        #expect(onMain, "completion handlers run on the main actor")
    }

    /// `UIDocument` is `nonisolated`: a document made and driven from a background thread
    /// works, its state is changed on the main queue, and its handlers are called there.
    @Test func aDocumentDrivenFromABackgroundThreadWorksOnTheMainQueue() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let url = dir.file("a.txt")
        try Data("from disk".utf8).write(to: url)
        let (result, afterClosing) = await Task.detached { () -> ([Bool], String) in
            let document = ProbeDocument(fileURL: url)
            var seen: [Bool] = []
            seen.append(await withCheckedContinuation { continuation in
                document.open { success in continuation.resume(returning: success && onMainQueue()) }
            })
            seen.append(document.text == "from disk" && document.loadedOnMainQueue == true && document.readOnMainQueue.withLock { $0 } == false)
            document.edit("edited off the main queue")
            seen.append(await withCheckedContinuation { continuation in
                document.close { success in continuation.resume(returning: success && onMainQueue()) }
            })
            seen.append(document.documentState == .closed && !document.hasUnsavedChanges && document.errors.isEmpty)
            return (seen, "state \(document.documentState), unsaved \(document.hasUnsavedChanges), errors \(document.errors)")
        }.value
        #expect(result == [true, true, true, true], "after closing: \(afterClosing)")
        #expect(String(decoding: try Data(contentsOf: url), as: UTF8.self) == "edited off the main queue")
    }

    @Test func stateChangesAreNotifiedAndStreamed() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let url = dir.file("a.txt")
        try Data("x".utf8).write(to: url)
        let document = ProbeDocument(fileURL: url)
        final class Count: @unchecked Sendable { var value = 0 }
        let count = Count()
        let token = NotificationCenter.default.addObserver(forName: Document.stateChangedNotification, object: document, queue: nil) { _ in count.value += 1 }
        defer { NotificationCenter.default.removeObserver(token) }
        let stream = document.stateUpdates
        #expect(await document.open())
        #expect(await document.close())
        var seen: [Document.State] = []
        for await state in stream {
            seen.append(state)
            if seen.count == 4 { break }
        }
        #expect(seen == [.closed, [.closed, .progressAvailable], .normal, .closed])
        #expect(count.value == 3)
    }

    @Test func openingAMissingFileFailsClearly() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let url = dir.file("missing.txt")
        let document = ProbeDocument(fileURL: url)
        #expect(await document.open() == false)
        #expect(document.documentState == .closed)
        let error = try #require(document.errors.first as? DocumentError)
        #expect(error.code == .readFailed && error.description.contains(url.path))
        #expect((error.underlying as? FileAccessError)?.code == .notFound)
        #expect(!FileManager.default.fileExists(atPath: url.path), "a failed open creates nothing")
    }

    @Test func openingACorruptFileOverwritesNothing() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let url = dir.file("bad.txt")
        try Data("corrupt".utf8).write(to: url)
        let document = ProbeDocument(fileURL: url)
        #expect(await document.open() == false)
        #expect(document.documentState == .closed)
        #expect(document.errors.count == 1 && "\(document.errors[0])".contains("corrupt contents"))
        #expect(fileText(url) == "corrupt")
    }

    @Test func failedSavesLeaveTheFileUntouched() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let url = dir.file("a.txt")
        try Data("on disk".utf8).write(to: url)
        let document = ProbeDocument(fileURL: url)
        #expect(await document.open())
        document.edit("new text")

        document.failContents = true
        #expect(await document.save(to: url, for: .forOverwriting) == false)
        #expect(document.documentState.contains(.savingError) && document.hasUnsavedChanges)
        #expect(fileText(url) == "on disk")

        document.failContents = false
        document.failNextWrite.withLock { $0 = true }
        #expect(await document.save(to: url, for: .forOverwriting) == false)
        let error = try #require(document.errors.last as? DocumentError)
        #expect(error.code == .saveFailed && (error.underlying as? FileAccessError)?.code == .noSpace)
        #expect(fileText(url) == "on disk")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.url.path) == ["a.txt"], "no temporary left behind")

        #expect(await document.save(to: url, for: .forOverwriting))
        #expect(!document.documentState.contains(.savingError) && fileText(url) == "new text")
    }

    @Test func savingForCreatingNeverOverwrites() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let url = dir.file("a.txt")
        try Data("precious".utf8).write(to: url)
        let document = ProbeDocument(fileURL: url)
        document.text = "other"
        #expect(await document.save(to: url, for: .forCreating) == false)
        #expect((document.errors.first as? DocumentError)?.code == .fileExists)
        #expect(fileText(url) == "precious")
    }

    @Test func anEditDuringASaveKeepsTheDocumentDirty() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let url = dir.file("a.txt")
        let document = ProbeDocument(fileURL: url)
        #expect(await document.save(to: url, for: .forCreating))
        document.edit("one")
        let saved: Bool = await withCheckedContinuation { continuation in
            document.save(to: url, for: .forOverwriting) { continuation.resume(returning: $0) }
            // Lands while the save of "one" is in flight: on the main queue (where apps edit),
            // after the save took its snapshot, before it completes. (Edited from the test's own
            // thread, the text raced the snapshot: the save could take "one" with the token of
            // "two", and the document came out clean with "one" on disk.)
            nonisolated(unsafe) let editing = document // (handed to the main queue, which alone uses it from then on)
            OperationQueue.main.addOperation { editing.edit("two") }
        }
        // The main queue runs in order: once this runs, the edit has landed (on a loaded machine
        // it may land only after the save completed — dirty then too).
        await withCheckedContinuation { (landed: CheckedContinuation<Void, Never>) in OperationQueue.main.addOperation { landed.resume() } }
        #expect(saved && fileText(url) == "one")
        #expect(document.hasUnsavedChanges)
        #expect(await document.autosave())
        #expect(!document.hasUnsavedChanges && fileText(url) == "two")
    }

    /// A notice that the file changed while it is still the file the document last wrote (an
    /// attribute change, the watcher's look at everything after its event queue overflowed)
    /// does not throw the unsaved edits away; a real change does.
    @Test func aNoticeOfAnUnchangedFileKeepsTheUnsavedEdits() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let url = dir.file("a.txt")
        let document = ProbeDocument(fileURL: url)
        #expect(await document.save(to: url, for: .forCreating))
        document.edit("unsaved")
        document.presentedItemDidChange()
        try await Task.sleep(for: .milliseconds(200)) // (a revert reads on the file-access queue)
        #expect(document.text == "unsaved" && document.hasUnsavedChanges && document.reads.withLock { $0 } == 0)
        try Data("from elsewhere".utf8).write(to: url)
        document.presentedItemDidChange()
        #expect(await waitUntil { document.text == "from elsewhere" && !document.hasUnsavedChanges })
        #expect(await waitUntil { !document.documentState.contains(.editingDisabled) })
    }

    @Test func undoManagerDrivesTheChangeCount() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let url = dir.file("a.txt")
        let document = ProbeDocument(fileURL: url)
        #expect(await document.save(to: url, for: .forCreating))
        document.setTextUndoably("typed")
        #expect(await waitUntil { document.undoManager.groupingLevel == 0 })
        #expect(document.hasUnsavedChanges)
        document.undoManager.undo()
        #expect(!document.hasUnsavedChanges, "undoing back to the saved state is clean")
        document.undoManager.redo()
        #expect(document.hasUnsavedChanges)
    }

    @Test func autosavesOnItsClock() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let url = dir.file("a.txt")
        let clock = ManualClock()
        let document = ProbeDocument(fileURL: url, autosaveClock: clock)
        #expect(document.autosaveInterval == .seconds(20))
        #expect(await document.save(to: url, for: .forCreating))
        document.edit("autosaved")
        #expect(await waitUntil { clock.sleeperCount == 1 })
        clock.advance(by: .seconds(19))
        #expect(document.hasUnsavedChanges && fileText(url) == "")
        clock.advance(by: .seconds(1))
        #expect(await waitUntil { !document.hasUnsavedChanges })
        #expect(fileText(url) == "autosaved")
        #expect(await document.close())
        #expect(clock.sleeperCount == 0)
    }

    @Test func revertReloadsWithEditingDisabledMeanwhile() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let url = dir.file("a.txt")
        try Data("v1".utf8).write(to: url)
        let document = ProbeDocument(fileURL: url)
        #expect(await document.open())
        document.edit("unsaved")
        try SafeSave.write(Data("v2".utf8), to: url)
        let stream = document.stateUpdates
        #expect(await document.revert(toContentsOf: url))
        #expect(document.text == "v2" && !document.hasUnsavedChanges)
        var seen: [Document.State] = []
        for await state in stream {
            seen.append(state)
            if seen.count == 3 { break }
        }
        #expect(seen == [.normal, .editingDisabled, .normal])
    }

    @Test func savingAClosedDocumentForOverwritingIsRefused() async throws {
        let dir = try TemporaryDirectory("doc"); defer { dir.remove() }
        let document = ProbeDocument(fileURL: dir.file("a.txt"))
        #expect(await document.save(to: document.fileURL, for: .forOverwriting) == false)
        #expect((document.errors.first as? DocumentError)?.code == .invalidState)
    }

    @Test func uikitNamesCompile() {
        let state: UIDocument.State = [.inConflict, .editingDisabled]
        let kind: UIDocument.ChangeKind = .done
        let operation: UIDocument.SaveOperation = .forOverwriting
        #expect(state.description == "inConflict+editingDisabled" && kind == .done && operation.rawValue == 1)
        #expect(UIDocument.stateChangedNotification.rawValue == "UIDocumentStateChangedNotification")
    }
}
