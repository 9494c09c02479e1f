// notes: the guide's text-and-image package document from the command line.
//   notes NOTE.note                     show the note (creating it if missing)
//   notes NOTE.note text TEXT...        replace the text
//   notes NOTE.note image FILE          replace the image with FILE's bytes
import Foundation
import UbiquityExamples

@MainActor
func run() async -> Int32 {
    let arguments = Array(CommandLine.arguments.dropFirst())
    guard let path = arguments.first else {
        print("usage: notes NOTE.note [text TEXT... | image FILE]")
        return 64
    }
    NoteDocument.registerType()
    let url = URL(fileURLWithPath: path)
    let note = NoteDocument(fileURL: url)
    guard await note.openOrCreate(program: "notes") else { return 1 }
    switch arguments.dropFirst().first {
    case "text": note.text = arguments.dropFirst(2).joined(separator: " ")
    case "image":
        guard arguments.count == 3, let data = FileManager.default.contents(atPath: arguments[2]) else {
            print("notes: cannot read the image file")
            return 1
        }
        note.image = data
    case nil: break
    case let other?:
        print("notes: unknown command \(other)")
        return 64
    }
    print("text:  \(note.text)")
    print("image: \(note.image.map { "\($0.count) bytes" } ?? "none")")
    return await note.close() ? 0 : 1
}

exit(await run())
