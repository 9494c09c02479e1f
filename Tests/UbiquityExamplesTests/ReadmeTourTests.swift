import Foundation
import Testing
import Ubiquity
import UbiquityTestSupport

// The README's tour, verbatim, so it keeps compiling and working.
final class MyDocument: UIDocument {            // UIDocument is a typealias of Document
    var documentText = ""

    override func contents(forType typeName: String) throws -> Any {
        Data(documentText.utf8)                  // Data for a flat file, FileWrapper for a package
    }

    override func load(fromContents contents: Any, ofType typeName: String?) throws {
        guard let data = contents as? Data, let text = String(data: data, encoding: .utf8) else {
            throw CocoaError(.fileReadCorruptFile)
        }
        documentText = text
    }
}

@MainActor func edit(_ url: URL) async {
    let document = MyDocument(fileURL: url)
    let exists = FileManager.default.fileExists(atPath: url.path)
    guard await (exists ? document.open() : document.save(to: url, for: .forCreating)) else { return }
    document.documentText += "Hello from Linux\n"
    document.updateChangeCount(.done)            // or register with document.undoManager
    await document.close()                       // saves: temporary, fsync, rename, fsync directory
}

@MainActor
@Test func readmeTourWorks() async throws {
    let dir = try TemporaryDirectory("readme"); defer { dir.remove() }
    let url = dir.file("hello.txt")
    await edit(url)
    await edit(url)
    #expect(try String(contentsOf: url, encoding: .utf8) == "Hello from Linux\nHello from Linux\n")
}

// The tour's Handoff lines, verbatim, so they keep compiling (not run: they would offer an
// activity to whatever account the machine running the tests is signed in to).
func handoffTour() -> [NSUserActivity] {
    let activity = NSUserActivity(activityType: "com.example.notes.editing"); activity.becomeCurrent()      // laptop
    let offered = UbiquityHandoff.shared.activities(ofTypes: ["com.example.notes.editing"])                 // phone
    activity.invalidate()
    return offered
}
