import Foundation
import Testing
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
