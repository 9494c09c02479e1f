// An app's model code as Apple's samples write it — observers added with `queue: .main` (or
// `OperationQueue.main`, no queue, a private queue), documents saved and closed with `await`,
// undo, a metadata query, a file presenter, the key-value store, the identity token and a
// database in iCloud — with only the import changed. The two programs around it run it under
// each way a program drains its main queue; the test suite runs them as child processes.
import Foundation
import GRDB
import Synchronization
import Ubiquity
import UbiquityDatabase

/// Which queue the app's observers ask for.
public enum ObserverQueueKind: String, CaseIterable, Sendable {
    /// `queue: .main`.
    case main
    /// `queue: OperationQueue.main`, written out.
    case operationQueueMain
    /// `queue: nil`: on the poster's thread.
    case none
    /// A private `OperationQueue` of the app's.
    case privateQueue
}

/// A plain text document, as the samples write one.
final class TextDocument: UIDocument {
    var text = ""

    override func contents(forType typeName: String) throws -> Any { Data(text.utf8) }

    override func load(fromContents contents: Any, ofType typeName: String?) throws {
        guard let data = contents as? Data else { throw CocoaError(.fileReadCorruptFile) }
        text = String(decoding: data, as: UTF8.self)
    }

    /// Changes the text, registering the change's inverse (which registers its own: redo).
    @MainActor func setText(_ newText: String) {
        let old = text
        text = newText
        undoManager.registerUndo(withTarget: self) { $0.setText(old) }
    }
}

/// What the observers heard, from whichever thread they ran on.
final class Ear: Sendable {
    private let heard = Mutex<[String: [Bool]]>([:])

    func hear(_ label: String, onExpectedQueue: Bool) {
        heard.withLock { $0[label, default: []].append(onExpectedQueue) }
    }

    func count(_ label: String) -> Int { heard.withLock { $0[label]?.count ?? 0 } }

    func lastOnExpectedQueue(_ label: String) -> Bool { heard.withLock { $0[label]?.last ?? false } }
}

/// A presenter of one file, as apps write one: a plain `NSObject`.
final class FilePresenterObject: NSObject, NSFilePresenter, @unchecked Sendable {
    var presentedItemURL: URL?
    let presentedItemOperationQueue: OperationQueue
    let ear: Ear
    let check: @Sendable () -> Bool

    init(url: URL, queue: OperationQueue, ear: Ear, check: @escaping @Sendable () -> Bool) {
        presentedItemURL = url
        presentedItemOperationQueue = queue
        self.ear = ear
        self.check = check
    }

    func presentedItemDidChange() { ear.hear("presentedItemDidChange", onExpectedQueue: check()) }
}

/// The app: each step does what the samples do and waits (with a deadline) for what its
/// observers must hear, saying on standard output what was heard and where.
@MainActor
public final class AppleApp {
    let kind: ObserverQueueKind
    let folder: URL
    let entry: String
    let privateQueue = OperationQueue()
    let ear = Ear()
    var tokens: [any NSObjectProtocol] = []
    var failures = 0
    nonisolated static let mainKey: DispatchSpecificKey<Bool> = {
        let key = DispatchSpecificKey<Bool>()
        DispatchQueue.main.setSpecific(key: key, value: true)
        return key
    }()

    /// An app whose observers ask for `kind`, working in `folder`, run by `entry`.
    public init(kind: ObserverQueueKind, folder: URL, entry: String) {
        self.kind = kind
        self.folder = folder
        self.entry = entry
        privateQueue.maxConcurrentOperationCount = 1
        _ = Self.mainKey
    }

    /// Prints one line at once (the test reads them as they come).
    nonisolated static func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    var observerQueue: OperationQueue? {
        switch kind {
        case .main: return .main
        case .operationQueueMain: return OperationQueue.main
        case .none: return nil
        case .privateQueue: return privateQueue
        }
    }

    /// Whether an observer's block runs where it asked to.
    nonisolated static func onExpectedQueue(_ kind: ObserverQueueKind, _ privateQueue: OperationQueue) -> Bool {
        switch kind {
        case .main, .operationQueueMain: return DispatchQueue.getSpecific(key: mainKey) == true
        case .none: return true
        case .privateQueue: return OperationQueue.current === privateQueue
        }
    }

    func observe(_ name: Notification.Name, object: Any?, as label: String) {
        let ear = ear, kind = kind, privateQueue = privateQueue
        tokens.append(NotificationCenter.default.addObserver(forName: name, object: object, queue: observerQueue) { _ in
            ear.hear(label, onExpectedQueue: AppleApp.onExpectedQueue(kind, privateQueue))
        })
    }

    /// Waits for `label` to be heard more than `mark` times; says what happened.
    func expect(_ label: String, after mark: Int, within seconds: Double = 30) async {
        let deadline = Date().addingTimeInterval(seconds)
        while ear.count(label) <= mark && Date() < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        if ear.count(label) > mark {
            let right = ear.lastOnExpectedQueue(label)
            Self.say("heard \(label) queue=\(right ? "right" : "WRONG")")
            if !right { failures += 1 }
        } else {
            Self.say("missing \(label)")
            failures += 1
        }
    }

    func check(_ condition: Bool, _ label: String) {
        Self.say("\(condition ? "ok" : "failed") \(label)")
        if !condition { failures += 1 }
    }

    /// Runs every step; returns the exit status (0 when everything was heard where it should).
    public func run() async -> Int32 {
        Self.say("started entry=\(entry) queue=\(kind.rawValue)")
        do { try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true) } catch { check(false, "folder \(error)") }
        compatibilitySteps()
        await documentSteps()
        await undoSteps()
        await querySteps()
        await presenterSteps()
        await databaseSteps()
        await keyValueStoreSteps()
        await identitySteps()
        for token in tokens { NotificationCenter.default.removeObserver(token) }
        // After many turns of the main queue: which thread drains it.
        Self.say("finished mainThread=\(Thread.isMainThread)")
        Self.say(failures == 0 ? "done" : "failures \(failures)")
        return failures == 0 ? 0 : 1
    }
}
