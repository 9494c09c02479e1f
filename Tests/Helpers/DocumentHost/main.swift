// Hosts an open text document in its own process, for the cross-process coordination tests.
//   UbiquityDocumentHost PATH
// Prints "opened", then "state S" on every state change and "text T" on every load.
// Commands on standard input: "edit TEXT" (an unsaved edit; replies "edited"), "url?"
// (replies "url PATH"), "quit" (closes and exits).
import Foundation
import Ubiquity

final class HostedDocument: Document {
    var text = ""
    override func contents(forType typeName: String) throws -> Any { Data(text.utf8) }
    override func load(fromContents contents: Any, ofType typeName: String?) throws {
        text = String(decoding: contents as? Data ?? Data(), as: UTF8.self)
        say("text \(text)")
    }
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

@MainActor
func run() async -> Int32 {
    guard CommandLine.arguments.count == 2 else {
        FileHandle.standardError.write(Data("usage: UbiquityDocumentHost PATH\n".utf8))
        return 64
    }
    let document = HostedDocument(fileURL: URL(fileURLWithPath: CommandLine.arguments[1]))
    let states = document.stateUpdates
    Task { for await state in states { say("state \(state)") } }
    guard await document.open() else { return 1 }
    say("opened")
    let lines = AsyncStream<String> { continuation in
        Thread.detachNewThread {
            while let line = readLine() { continuation.yield(line) }
            continuation.finish()
        }
    }
    for await line in lines {
        if line.hasPrefix("edit ") {
            document.text = String(line.dropFirst(5))
            document.updateChangeCount(.done)
            say("edited")
        } else if line == "url?" {
            say("url \(document.fileURL.path)")
        } else if line == "quit" {
            break
        }
    }
    _ = await document.close()
    return 0
}

exit(await run())
