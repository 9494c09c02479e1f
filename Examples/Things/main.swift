// things: the book's MyStuff document from the command line.
//   things DIR                       list the things in DIR/Things I Own.mystuff
//   things DIR add NAME [LOCATION]   add a thing
//   things DIR image INDEX FILE      set a thing's image
//   things DIR remove INDEX          remove a thing (and its image)
import Foundation
import UbiquityExamples

@MainActor
func run() async -> Int32 {
    let arguments = Array(CommandLine.arguments.dropFirst())
    guard let directory = arguments.first else {
        print("usage: things DIR [add NAME [LOCATION] | image INDEX FILE | remove INDEX]")
        return 64
    }
    ThingsDocument.registerType()
    let url = URL(fileURLWithPath: directory).appendingPathComponent(thingsDocumentName)
    let document = ThingsDocument(fileURL: url)
    guard await document.openOrCreate(program: "things") else { return 1 }
    let command = Array(arguments.dropFirst())
    switch command.first {
    case "add" where command.count >= 2:
        let index = document.anotherWhatsit().index
        document.update(at: index, name: command[1], location: command.count > 2 ? command[2] : "")
    case "image" where command.count == 3:
        guard let index = Int(command[1]), document.things.indices.contains(index),
              let data = FileManager.default.contents(atPath: command[2]) else {
            print("things: bad index or unreadable image")
            return 1
        }
        document.setImage(data, forWhatsitAt: index)
    case "remove" where command.count == 2:
        guard let index = Int(command[1]), document.things.indices.contains(index) else {
            print("things: bad index")
            return 1
        }
        document.removeWhatsit(at: index)
    case nil: break
    default:
        print("things: unknown command")
        return 64
    }
    for (index, thing) in document.things.enumerated() {
        print("\(index): \(thing.name) @ \(thing.location)\(thing.imageKey.map { " [image \($0)]" } ?? "")")
    }
    return await document.close() ? 0 : 1
}

exit(await run())
