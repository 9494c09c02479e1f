// An app whose entry point is async, as Swift programs are written today: every notification
// Ubiquity posts must reach its observers, whichever queue they ask for.
//   UbiquityAppleAsyncApp QUEUE FOLDER      (QUEUE: main, operationQueueMain, none, privateQueue)
import Foundation
import UbiquityAppleAppScenarios

@main
struct App {
    @MainActor static func main() async {
        let arguments = CommandLine.arguments
        guard arguments.count == 3, let kind = ObserverQueueKind(rawValue: arguments[1]) else {
            FileHandle.standardError.write(Data("usage: UbiquityAppleAsyncApp QUEUE FOLDER\n".utf8))
            exit(64)
        }
        let app = AppleApp(kind: kind, folder: URL(fileURLWithPath: arguments[2]), entry: "async")
        exit(await app.run())
    }
}
