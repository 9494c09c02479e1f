import Foundation
import Synchronization
import Testing
import Ubiquity
import UbiquityTestSupport

/// Process A (a helper) keeps a document open; this test process, as B, reads, writes, moves
/// and deletes its file under coordination.
final class DocumentHost: @unchecked Sendable {
    let process = ChildProcess()
    let input = Pipe()
    let output = Pipe()
    private var lines: OutputLines!

    init(_ url: URL) throws {
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("UbiquityDocumentHost")
        process.arguments = [url.path]
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        lines = OutputLines(output)
    }

    var transcript: [String] { lines.all }

    /// Waits (at most `timeout`) for a line satisfying `match`, counting from line `after`.
    @discardableResult
    func waitFor(after: Int = 0, timeout: Double = 10, _ match: @escaping @Sendable (String) -> Bool) async -> String? {
        await lines.waitFor(after: after, timeout: timeout, match)
    }

    func send(_ command: String) {
        input.fileHandleForWriting.write(Data((command + "\n").utf8))
    }

    func quit() {
        send("quit")
        process.waitUntilExit()
    }
}

@Suite(.serialized) struct CrossProcessDocumentTests {
    func host(_ text: String) async throws -> (DocumentHost, URL, TemporaryDirectory) {
        let dir = try TemporaryDirectory("xproc")
        let url = dir.file("shared.txt")
        try Data(text.utf8).write(to: url)
        let host = try DocumentHost(url)
        #expect(await host.waitFor { $0 == "opened" } != nil, "the host did not open the document: \(host.transcript)")
        return (host, url, dir)
    }

    @Test func aReaderInAnotherProcessGetsTheOpenDocumentsUnsavedEdits() async throws {
        await TestTurns.presenterProcesses.take(); defer { TestTurns.presenterProcesses.give() }
        let (host, url, dir) = try await host("on disk")
        defer { host.quit(); dir.remove() }
        host.send("edit unsaved in A")
        #expect(await host.waitFor { $0 == "edited" } != nil)
        // (The other process saves for this reader: under the full suite's load on two cores its
        // answer can take longer than the default 5 s, after which a reader reads what is there.)
        let seen = try await onOwnThread {
            let reader = NSFileCoordinator()
            reader.presenterTimeout = .seconds(30)
            return try reader.coordinate(readingItemAt: url) { try String(contentsOf: $0, encoding: .utf8) }
        }
        #expect(seen == "unsaved in A", "\(host.transcript)")
    }

    @Test func aWriterInAnotherProcessDisablesEditingThenTheDocumentReverts() async throws {
        await TestTurns.presenterProcesses.take(); defer { TestTurns.presenterProcesses.give() }
        let (host, url, dir) = try await host("before")
        defer { host.quit(); dir.remove() }
        let mark = host.transcript.count
        try await onOwnThread {
            try NSFileCoordinator().coordinate(writingItemAt: url, options: .forReplacing) { url in
                try SafeSave.write(Data("written by B".utf8), to: url)
            }
        }
        #expect(await host.waitFor(after: mark) { $0 == "text written by B" } != nil, "\(host.transcript)")
        #expect(await host.waitFor(after: mark) { $0 == "state editingDisabled" } != nil)
        let disabled = host.transcript.dropFirst(mark).firstIndex(of: "state editingDisabled")
        let reloaded = host.transcript.dropFirst(mark).firstIndex(of: "text written by B")
        #expect(disabled != nil && reloaded != nil && disabled! < reloaded!, "editing is disabled before the reload: \(host.transcript)")
        #expect(await host.waitFor(after: mark) { $0 == "state normal" } != nil)
    }

    @Test func aMoveInAnotherProcessIsFollowed() async throws {
        await TestTurns.presenterProcesses.take(); defer { TestTurns.presenterProcesses.give() }
        let (host, url, dir) = try await host("movable")
        defer { host.quit(); dir.remove() }
        let destination = dir.file("moved.txt")
        try await onOwnThread {
            let coordinator = NSFileCoordinator()
            try coordinator.coordinate(reading: [], writing: [(url, .forMoving), (destination, .forReplacing)]) { _, urls in
                coordinator.item(at: urls[0], willMoveTo: urls[1])
                try FileManager.default.moveItem(at: urls[0], to: urls[1])
                coordinator.item(at: urls[0], didMoveTo: urls[1])
            }
        }
        var followed = false
        for _ in 0..<200 where !followed {
            let mark = host.transcript.count
            host.send("url?")
            followed = await host.waitFor(after: mark) { $0.hasPrefix("url ") } == "url \(destination.path)"
        }
        #expect(followed, "\(host.transcript)")
    }

    @Test func aDeletionInAnotherProcessClosesTheDocument() async throws {
        await TestTurns.presenterProcesses.take(); defer { TestTurns.presenterProcesses.give() }
        let (host, url, dir) = try await host("doomed")
        defer { host.quit(); dir.remove() }
        try await onOwnThread { try NSFileCoordinator().coordinate(writingItemAt: url, options: .forDeleting) { try FileManager.default.removeItem(at: $0) } }
        #expect(await host.waitFor { $0 == "state closed" } != nil, "\(host.transcript)")
    }

    @Test func aStoppedProcessCannotBlockOthersForever() async throws {
        await TestTurns.presenterProcesses.take(); defer { TestTurns.presenterProcesses.give() }
        let (host, url, dir) = try await host("frozen")
        defer { kill(host.process.processIdentifier, SIGCONT); host.quit(); dir.remove() }
        kill(host.process.processIdentifier, SIGSTOP)
        let waited = try await onOwnThread {
            let coordinator = NSFileCoordinator(filePresenter: nil, locks: .shared, presenterTimeout: .milliseconds(300))
            let start = ContinuousClock.now
            try coordinator.coordinate(writingItemAt: url, options: .forReplacing) { try SafeSave.write(Data("anyway".utf8), to: $0) }
            return ContinuousClock.now - start
        }
        #expect(waited >= .milliseconds(300) && waited < .seconds(5), "waited \(waited)")
        #expect(try String(contentsOf: url, encoding: .utf8) == "anyway")
    }
}
