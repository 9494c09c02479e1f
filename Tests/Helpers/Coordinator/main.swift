// A second process for the coordination tests.
//   UbiquityCoordinatorHelper read|write PATH
// Takes coordinated access to PATH, prints "acquired", then holds it until a line arrives on
// standard input (or the process is killed), prints "released" and exits.
import Foundation
import UbiquityCoordination

let arguments = CommandLine.arguments
guard arguments.count == 3, ["read", "write"].contains(arguments[1]) else {
    FileHandle.standardError.write(Data("usage: UbiquityCoordinatorHelper read|write PATH\n".utf8))
    exit(64)
}
let url = URL(fileURLWithPath: arguments[2])
let coordinator = NSFileCoordinator()
func hold(_ url: URL) {
    FileHandle.standardOutput.write(Data("acquired\n".utf8))
    _ = readLine()
}
do {
    if arguments[1] == "read" {
        try coordinator.coordinate(readingItemAt: url) { hold($0) }
    } else {
        try coordinator.coordinate(writingItemAt: url) { hold($0) }
    }
    FileHandle.standardOutput.write(Data("released\n".utf8))
} catch {
    FileHandle.standardError.write(Data("UbiquityCoordinatorHelper: \(error)\n".utf8))
    exit(1)
}
