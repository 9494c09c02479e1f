// A second process for the coordination tests.
//   UbiquityCoordinatorHelper read|write PATH [TEXT]
// Takes coordinated access to PATH (a writer writes TEXT, if given, to it), prints "acquired",
// then holds it until a line arrives on standard input (or the process is killed), prints
// "released" and exits.
import Foundation
import UbiquityCoordination

let arguments = CommandLine.arguments

// Version commands (for the version tests): change an item's versions from another process.
//   add-conflict ITEM CONTENTS COMPUTER | resolve-all ITEM | remove-all ITEM
//   find-archived ITEM BASE64: prints the saving computer of the version whose persistent
//   identifier, archived with NSKeyedArchiver, is BASE64 (as an app does after a relaunch)
if arguments.count >= 3, ["add-conflict", "resolve-all", "remove-all", "find-archived"].contains(arguments[1]) {
    let item = URL(fileURLWithPath: arguments[2])
    do {
        switch arguments[1] {
        case "find-archived" where arguments.count == 4:
            guard let data = Data(base64Encoded: arguments[3]),
                  let identifier = try NSKeyedUnarchiver.unarchivedObject(ofClass: NSString.self, from: data),
                  let version = NSFileVersion.version(itemAt: item, forPersistentIdentifier: identifier) else { exit(2) }
            print(version.localizedNameOfSavingComputer ?? "?")
        case "add-conflict" where arguments.count == 5:
            _ = try NSFileVersion.addConflictVersion(ofItemAt: item, withContentsOf: URL(fileURLWithPath: arguments[3]), savingComputer: arguments[4], modificationDate: Date())
        case "resolve-all":
            for version in NSFileVersion.unresolvedConflictVersionsOfItem(at: item) ?? [] { try version.setResolved(true) }
        case "remove-all":
            try NSFileVersion.removeOtherVersionsOfItem(at: item)
        default:
            exit(64)
        }
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("UbiquityCoordinatorHelper: \(error)\n".utf8))
        exit(1)
    }
}
// evict PATH: a coordinated eviction of PATH; prints "evicted", or "refused" when a presenter (of
// any process) did not agree.
if arguments.count == 3, arguments[1] == "evict" {
    do {
        try NSFileCoordinator().coordinate(writingItemAt: URL(fileURLWithPath: arguments[2]), options: .forEvicting) { _ in }
        print("evicted")
    } catch let error as FileCoordinationError where error.code == .refusedByPresenter {
        print("refused")
    } catch {
        print("failed: \(error)")
    }
    exit(0)
}

// observe PATH KEY: presents PATH observing the ubiquity attribute KEY, prints "ready", then
// prints the attributes it hears of (sorted, comma-separated) and exits; "none" after 60 s (it
// exits as soon as it hears: the wait is long for a loaded machine).
final class ObservingPresenter: NSObject, NSFilePresenter {
    var presentedItemURL: URL?
    let presentedItemOperationQueue = OperationQueue()
    let observedPresentedItemUbiquityAttributes: Set<URLResourceKey>
    let heard = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var attributes: [String] = []
    var heardAttributes: [String] { lock.withLock { attributes } }

    init(url: URL, key: URLResourceKey) {
        presentedItemURL = url
        observedPresentedItemUbiquityAttributes = [key]
    }

    func presentedItemDidChangeUbiquityAttributes(_ attributes: Set<URLResourceKey>) {
        lock.withLock { self.attributes = attributes.map(\.rawValue).sorted() }
        heard.signal()
    }
}
if arguments.count == 4, arguments[1] == "observe" {
    let presenter = ObservingPresenter(url: URL(fileURLWithPath: arguments[2]), key: URLResourceKey(rawValue: arguments[3]))
    NSFileCoordinator.addFilePresenter(presenter)
    FileHandle.standardOutput.write(Data("ready\n".utf8))
    let answered = presenter.heard.wait(timeout: .now() + 60) == .success
    FileHandle.standardOutput.write(Data(((answered ? presenter.heardAttributes.joined(separator: ",") : "none") + "\n").utf8))
    NSFileCoordinator.removeFilePresenter(presenter)
    exit(0)
}
guard (3...4).contains(arguments.count), ["read", "write"].contains(arguments[1]) else {
    FileHandle.standardError.write(Data("usage: UbiquityCoordinatorHelper read|write PATH [TEXT]\n".utf8))
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
        try coordinator.coordinate(writingItemAt: url) { url in
            if arguments.count == 4 { try Data(arguments[3].utf8).write(to: url) }
            hold(url)
        }
    }
    FileHandle.standardOutput.write(Data("released\n".utf8))
} catch {
    FileHandle.standardError.write(Data("UbiquityCoordinatorHelper: \(error)\n".utf8))
    exit(1)
}
