// text-editor: the guide's plain-text document from the command line.
//   text-editor FILE.txt              print the document (creating it if missing)
//   text-editor FILE.txt TEXT...      append a line and save
import Foundation
import UbiquityExamples

@MainActor
func run() async -> Int32 {
    let arguments = Array(CommandLine.arguments.dropFirst())
    guard let path = arguments.first else {
        print("usage: text-editor FILE.txt [TEXT...]")
        return 64
    }
    let url = URL(fileURLWithPath: path)
    let document = TextDocument(fileURL: url)
    guard await document.openOrCreate(program: "text-editor") else { return 1 }
    if arguments.count > 1 {
        let line = arguments.dropFirst().joined(separator: " ")
        document.setText(document.documentText.isEmpty ? line : document.documentText + "\n" + line)
    }
    print(document.documentText)
    return await document.close() ? 0 : 1
}

exit(await run())
