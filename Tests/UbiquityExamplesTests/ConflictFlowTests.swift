import Foundation
import Testing
import Ubiquity
import UbiquityExamples
import UbiquityTestSupport

/// The guide's text editor's conflict flow, end to end: two conflict versions arrive (as the
/// sync agent adds them), the document enters `.inConflict`, the user picks a version, the
/// document shows it, and the state returns to normal with nothing left unresolved.
@MainActor
@Suite struct ConflictFlowTests {
    func openDocument(_ text: String, in dir: TemporaryDirectory) async throws -> TextDocument {
        let url = dir.file("Letter.txt")
        try Data(text.utf8).write(to: url)
        let document = TextDocument(fileURL: url)
        #expect(await document.open())
        return document
    }

    /// Adds a conflict version the way the agent will: from another thread, by moving a file in.
    func arrive(_ text: String, from computer: String, for url: URL, in dir: TemporaryDirectory) async throws {
        let incoming = dir.file(".incoming-\(computer)")
        try Data(text.utf8).write(to: incoming)
        _ = try await Task.detached {
            try NSFileVersion.addConflictVersion(ofItemAt: url, withContentsOf: incoming, savingComputer: computer, modificationDate: Date(), byMoving: true)
        }.value
    }

    @Test func theUserPicksAConflictVersion() async throws {
        let dir = try TemporaryDirectory("conflict"); defer { dir.remove() }
        let document = try await openDocument("mine", in: dir)
        defer { Task { await document.close() } }
        var states: [Document.State] = []
        let observer = NotificationCenter.default.addObserver(forName: Document.stateChangedNotification, object: document, queue: nil) { notification in
            guard let state = (notification.object as? Document)?.documentState else { return }
            MainActor.assumeIsolated { states.append(state) }
        }
        defer { NotificationCenter.default.removeObserver(observer) }
        let resolver = ConflictResolver(document: document)
        #expect(!resolver.isInConflict)

        try await arrive("from the laptop", from: "laptop", for: document.fileURL, in: dir)
        try await arrive("from the phone", from: "phone", for: document.fileURL, in: dir)
        #expect(await waitUntil { resolver.isInConflict }, "the state-changed notification says inConflict")
        #expect(states.contains { $0.contains(.inConflict) })
        #expect(await waitUntil { resolver.choices.count == 3 })
        #expect(resolver.choices.map(\.localizedNameOfSavingComputer) == [NSFileVersion.thisComputer, "laptop", "phone"])

        let phone = resolver.choices[2]
        try await resolver.resolve(keeping: phone)
        #expect(await waitUntil { document.documentText == "from the phone" && document.documentState == .normal })
        #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: document.fileURL)?.isEmpty == true)
        #expect(NSFileVersion.otherVersionsOfItem(at: document.fileURL)?.isEmpty == true)
        #expect(try String(contentsOf: document.fileURL, encoding: .utf8) == "from the phone")
    }

    @Test func keepingTheCurrentVersionClearsTheConflictToo() async throws {
        let dir = try TemporaryDirectory("conflict"); defer { dir.remove() }
        let document = try await openDocument("mine", in: dir)
        defer { Task { await document.close() } }
        try await arrive("theirs", from: "tablet", for: document.fileURL, in: dir)
        let resolver = ConflictResolver(document: document)
        #expect(await waitUntil { resolver.isInConflict })
        try await resolver.resolve(keeping: resolver.choices[0])
        #expect(await waitUntil { document.documentState == .normal })
        #expect(document.documentText == "mine")
    }

    @Test func aDocumentOpenedWithUnresolvedConflictsIsInConflictAtOnce() async throws {
        let dir = try TemporaryDirectory("conflict"); defer { dir.remove() }
        let url = dir.file("Letter.txt")
        try Data("mine".utf8).write(to: url)
        try await arrive("theirs", from: "tablet", for: url, in: dir)
        let document = TextDocument(fileURL: url)
        #expect(await document.open())
        #expect(document.documentState == .inConflict)
        // Another party marks the conflict resolved: the document hears it.
        for version in NSFileVersion.unresolvedConflictVersionsOfItem(at: url) ?? [] { version.isResolved = true }
        #expect(await waitUntil { document.documentState == .normal })
        #expect(await document.close())
    }
}
