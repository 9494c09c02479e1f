// recipes: a shoebox app on a database in iCloud (UbiquitousDatabase), from the command line.
//   recipes DIR                                   list the recipes (after importing what other devices did)
//   recipes DIR add TITLE [MINUTES] [INGREDIENT…] add a recipe
//   recipes DIR rate ID STARS                     rate a recipe (1–5)
//   recipes DIR time ID MINUTES                   change its cooking time
//   recipes DIR remove ID                         remove it
// DIR is a ubiquity container's folder (`ubiquity status` shows it; or any folder, to try it alone).
import Foundation
import UbiquityExamples

func run() throws -> Int32 {
    let arguments = Array(CommandLine.arguments.dropFirst())
    guard let directory = arguments.first else {
        print("usage: recipes DIR [add TITLE [MINUTES] [INGREDIENT…] | rate ID STARS | time ID MINUTES | remove ID]")
        return 64
    }
    // A short-lived process: it imports and publishes when asked, not by itself.
    let book = try RecipeBook(container: URL(fileURLWithPath: directory), automaticallySynchronizes: false)
    defer { try? book.database.close() }
    let imported = try book.database.synchronize()
    if !imported.changes.isEmpty {
        print("from other devices: \(imported.changes.inserted.count) new, \(imported.changes.updated.count) changed, \(imported.changes.deleted.count) removed")
    }
    let command = Array(arguments.dropFirst())
    switch command.first {
    case "add" where command.count >= 2:
        let id = try book.add(title: command[1], minutes: command.count > 2 ? Int(command[2]) : nil, ingredients: Array(command.dropFirst(3)))
        print("added \(id)")
    case "rate" where command.count == 3:
        guard let stars = Int(command[2]) else { print("recipes: STARS is a number"); return 64 }
        try book.rate(command[1], stars: stars)
    case "time" where command.count == 3:
        guard let minutes = Int(command[2]) else { print("recipes: MINUTES is a number"); return 64 }
        try book.setMinutes(command[1], minutes)
    case "remove" where command.count == 2:
        try book.remove(command[1])
    case nil: break
    default:
        print("recipes: unknown command")
        return 64
    }
    try book.database.synchronize()
    for recipe in try book.recipes() {
        let time = recipe.minutes.map { " — \($0) min" } ?? ""
        let stars = recipe.rating.map { " " + String(repeating: "★", count: $0) } ?? ""
        print("\(recipe.id.prefix(8))  \(recipe.title)\(time)\(stars)")
        for ingredient in recipe.ingredients { print("          · \(ingredient)") }
    }
    return 0
}

do {
    exit(try run())
} catch {
    FileHandle.standardError.write(Data("recipes: \(error)\n".utf8))
    exit(1)
}
