// An app whose synchronous entry point hands the main thread to the main queue: through the run
// loop (`RunLoop.main.run()`, as AppKit-style programs do) or to libdispatch (`dispatchMain()`).
//   UbiquityAppleMainQueueApp runLoop|dispatchMain QUEUE FOLDER
import Foundation
import UbiquityAppleAppScenarios

@main
struct App {
    static func main() {
        let arguments = CommandLine.arguments
        guard arguments.count == 4, ["runLoop", "dispatchMain"].contains(arguments[1]), let kind = ObserverQueueKind(rawValue: arguments[2]) else {
            FileHandle.standardError.write(Data("usage: UbiquityAppleMainQueueApp runLoop|dispatchMain QUEUE FOLDER\n".utf8))
            exit(64)
        }
        let entry = arguments[1], folder = URL(fileURLWithPath: arguments[3])
        Task { @MainActor in
            exit(await AppleApp(kind: kind, folder: folder, entry: entry).run())
        }
        if entry == "runLoop" {
            RunLoop.main.run()
        } else {
            dispatchMain()
        }
    }
}
