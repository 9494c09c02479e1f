// things: the book's MyStuff document from the command line.
//   things DIR                       list the things in DIR/Things I Own.mystuff
//   things DIR add NAME [LOCATION]   add a thing
//   things DIR image INDEX FILE      set a thing's image
//   things DIR remove INDEX          remove a thing (and its image)
//   things --managed CONTAINER [add NAME [LOCATION] | move INDEX LOCATION | remove INDEX]
//                                    the same on the managed (database) version, in
//                                    CONTAINER/Documents/Things I Own.mystuffdb, syncing through
//                                    change logs in CONTAINER/TransactionLogs
import Foundation
import UbiquityExamples

@MainActor
func run() async -> Int32 {
    var arguments = Array(CommandLine.arguments.dropFirst())
    if arguments.first == "--managed" {
        arguments.removeFirst()
        return await runManaged(arguments)
    }
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

/// `things --managed`: MyStuff as a managed document in a container (its edits sync through
/// change logs; each run imports what other devices did first).
@MainActor
func runManaged(_ arguments: [String]) async -> Int32 {
    guard let container = arguments.first else {
        print("usage: things --managed CONTAINER [add NAME [LOCATION] | move INDEX LOCATION | remove INDEX]")
        return 64
    }
    let url = URL(fileURLWithPath: container).appendingPathComponent("Documents").appendingPathComponent(managedThingsDocumentName)
    try? FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true) // the save says why if it cannot
    let document = ManagedThingsDocument(fileURL: url, inICloud: true)
    guard await document.openOrCreate(program: "things") else { return 1 }
    do {
        try await document.database?.synchronize()
        let things = try document.things()
        let command = Array(arguments.dropFirst())
        func thing(_ index: String) -> ManagedThingsDocument.Thing? { Int(index).flatMap { things.indices.contains($0) ? things[$0] : nil } }
        switch command.first {
        case "add" where command.count >= 2:
            try document.add(name: command[1], location: command.count > 2 ? command[2] : "")
        case "move" where command.count == 3:
            guard let chosen = thing(command[1]) else { print("things: bad index"); return 1 }
            try document.move(chosen.id, to: command[2])
        case "remove" where command.count == 2:
            guard let chosen = thing(command[1]) else { print("things: bad index"); return 1 }
            try document.remove(chosen.id)
        case nil: break
        default:
            print("things: unknown command")
            return 64
        }
        for (index, thing) in try document.things().enumerated() { print("\(index): \(thing.name) @ \(thing.location)") }
    } catch {
        print("things: \(error)")
        return 1
    }
    return await document.close() ? 0 : 1
}

exit(await run())
