import Foundation
import Synchronization
import Testing
import UbiquityCoordination
import UbiquityFiles
@testable import UbiquityDocument
import UbiquityTestSupport

/// A subclass written as on Apple's platforms: its own stored state set up in an override of
/// UIDocument's designated initializer (the reference book's `ThingsDocument` does this).
final class ThingsDocument: UIDocument {
    var things: [String]

    override init(fileURL url: URL) {
        things = []
        super.init(fileURL: url)
    }

    override func contents(forType typeName: String) throws -> Any {
        Data(things.joined(separator: "\n").utf8)
    }

    override func load(fromContents contents: Any, ofType typeName: String?) throws {
        guard let data = contents as? Data else { return }
        things = String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
    }
}

@MainActor
@Suite struct AppleInitializerTests {
    @Test func aSubclassOverridesInitFileURLAndWorks() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let url = directory.file("list.txt")
        let document = ThingsDocument(fileURL: url)
        #expect(document.things.isEmpty && document.fileURL == url.standardizedFileURL)
        document.things = ["milk", "bread"]
        #expect(await document.save(to: url, for: .forCreating))
        #expect(await document.close())
        let again = ThingsDocument(fileURL: url)
        #expect(await again.open())
        #expect(again.things == ["milk", "bread"])
        #expect(await again.close())
    }
}

/// A subclass written with Apple's override signatures: completion handlers typed
/// `(@Sendable (Bool) -> Void)?` and called on the main queue, and the file-presenter methods
/// overridden, calling `super`, as UIKit lets a subclass do.
final class ObservingDocument: UIDocument {
    var text = ""
    /// What the overrides saw (presenter callbacks arrive off the main actor).
    let heard = Transcript()

    override func contents(forType typeName: String) throws -> Any { Data(text.utf8) }

    override func load(fromContents contents: Any, ofType typeName: String?) throws {
        text = String(decoding: contents as? Data ?? Data(), as: UTF8.self)
    }

    override func save(to url: URL, for saveOperation: UIDocument.SaveOperation, completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        heard.append("save")
        super.save(to: url, for: saveOperation, completionHandler: completionHandler)
    }

    override func open(completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        super.open { [heard] success in
            heard.append("opened:\(success):\(Thread.isMainThread || MainQueue.isCurrent)")
            completionHandler?(success)
        }
    }

    override func close(completionHandler: (@Sendable (Bool) -> Void)? = nil) {
        heard.append("close")
        super.close(completionHandler: completionHandler)
    }

    override func presentedItemDidChange() {
        heard.append("didChange")
        super.presentedItemDidChange()
    }

    override var observedPresentedItemUbiquityAttributes: Set<URLResourceKey> { [.ubiquitousItemDownloadingStatusKey] }

    override func presentedItemDidChangeUbiquityAttributes(_ attributes: Set<URLResourceKey>) {
        heard.append("attributes:\(attributes.map(\.rawValue).sorted().joined(separator: ","))")
    }
}

@MainActor
@Suite struct AppleOverrideTests {
    @Test func overridesWithApplesSignaturesAreCalledAndSuperStillWorks() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let url = directory.file("note.txt")
        let document = ObservingDocument(fileURL: url)
        document.text = "first"
        #expect(await document.save(to: url, for: .forCreating), "the async form goes through the override")
        #expect(await document.close())
        let reopened = ObservingDocument(fileURL: url)
        #expect(await reopened.open())
        #expect(reopened.text == "first")
        #expect(reopened.heard.lines.contains("opened:true:true"), "the handler ran on the main queue: \(reopened.heard.lines)")

        // Another writer, coordinated (off the main queue, as Apple asks): the override hears
        // it, and super reverts the document.
        await Task.detached {
            NSFileCoordinator().coordinate(writingItemAt: url, options: [], error: nil) { url in
                try? Data("second".utf8).write(to: url)
            }
        }.value
        #expect(await waitUntil { reopened.text == "second" }, "reverted by super")
        #expect(reopened.heard.lines.contains("didChange"))

        // Ubiquity attributes the document observes reach its override; others do not.
        NSFileCoordinator().item(at: url, didChangeUbiquityAttributes: [.ubiquitousItemIsUploadedKey])
        NSFileCoordinator().item(at: url, didChangeUbiquityAttributes: [.ubiquitousItemDownloadingStatusKey, .ubiquitousItemIsUploadedKey])
        #expect(await waitUntil { reopened.heard.lines.contains("attributes:\(URLResourceKey.ubiquitousItemDownloadingStatusKey.rawValue)") })
        #expect(reopened.heard.lines.filter { $0.hasPrefix("attributes:") }.count == 1)
        #expect(await reopened.close())
        #expect(reopened.heard.lines.contains("close"))
    }
}

/// Lines written from any thread.
final class Transcript: Sendable {
    private let storage = Mutex<[String]>([])
    /// Adds a line.
    func append(_ line: String) { storage.withLock { $0.append(line) } }
    /// The lines so far.
    var lines: [String] { storage.withLock { $0 } }
}
