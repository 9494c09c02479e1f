import Foundation
import Testing
@testable import UbiquityCoordination

/// A presenter written as Apple's documentation writes one: a plain `NSObject` subclass with a
/// `var presentedItemURL` and its own queue — not `Sendable`, no annotations.
final class PlainPresenter: NSObject, NSFilePresenter {
    var presentedItemURL: URL?
    let presentedItemOperationQueue = OperationQueue()
    private let lock = NSLock()
    private var changeCount = 0
    var changes: Int { lock.withLock { changeCount } }

    init(url: URL) {
        presentedItemURL = url
        presentedItemOperationQueue.maxConcurrentOperationCount = 1
    }

    func presentedItemDidChange() {
        lock.withLock { changeCount += 1 }
    }
}

@Suite struct PlainPresenterTests {
    @Test func aPlainPresenterClassIsToldOfACoordinatedWrite() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("plain.txt")
        try Data("one".utf8).write(to: item)
        let presenter = PlainPresenter(url: item)
        NSFileCoordinator.addFilePresenter(presenter)
        defer { NSFileCoordinator.removeFilePresenter(presenter) }
        try NSFileCoordinator().coordinate(writingItemAt: item) { try Data("two".utf8).write(to: $0) }
        #expect(eventually { presenter.changes >= 1 })
    }
}
