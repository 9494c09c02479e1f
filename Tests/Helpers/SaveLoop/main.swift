// Opens (or creates) a CrashTestDocument and saves a new generation in a loop, printing
// "saved N" after each save completes, until killed. The crash test kills it with SIGKILL.
import Foundation
import Ubiquity
import UbiquityTestSupport

/// Writes a line to standard output at once (unbuffered, so a kill loses no reported save).
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

@MainActor
func run() async -> Int32 {
    let arguments = CommandLine.arguments
    guard arguments.count == 2 else {
        FileHandle.standardError.write(Data("usage: UbiquitySaveLoop PATH.crashflat|PATH.crashpkg\n".utf8))
        return 64
    }
    CrashTestDocument.registerTypes()
    let url = URL(fileURLWithPath: arguments[1])
    let document = CrashTestDocument(fileURL: url)
    if FileManager.default.fileExists(atPath: url.path) {
        guard await document.open() else { return 65 }
    } else {
        guard await document.save(to: url, for: .forCreating) else { return 66 }
    }
    say("ready \(document.generation)")
    while true {
        document.setGeneration(document.generation + 1)
        guard await document.save(to: url, for: .forOverwriting) else { return 67 }
        say("saved \(document.generation)")
    }
}

exit(await run())
