import Dispatch
import UbiquityFiles

/// A weak reference that may cross to another queue: the document a timer or an observer
/// calls back into on the main queue, where alone it is used.
package struct WeakHandoff<Object: AnyObject>: @unchecked Sendable {
    /// The object, while it lives.
    package weak var value: Object?
    /// Holds `value` weakly.
    /// - Parameter value: The object.
    package init(_ value: Object) { self.value = value }
}

extension Document {
    /// Runs `body` on the main queue, where a document's state lives (as UIKit's documents keep
    /// theirs): at once when called there, else at the main queue's next turn (as an operation
    /// of `OperationQueue.main`, so that what it posts reaches `queue: .main` observers).
    nonisolated package func onMain(_ body: @escaping () -> Void) {
        if MainQueue.isCurrent { return body() }
        MainQueue.async(body)
    }

    /// Runs `body` on the main queue and waits for it (from the file-access queue: a document's
    /// `load(fromContents:ofType:)` runs on the main queue, as UIKit's does).
    nonisolated func onMainAndWait<T>(_ body: () throws -> T) throws -> T {
        try MainQueue.sync(body)
    }

    /// Runs `body` on the document's file-access queue through ``performAsynchronousFileAccess(_:)``
    /// (which a subclass may override).
    nonisolated func onFileAccessQueue(_ body: @escaping () -> Void) {
        let handoff = Handoff(value: body)
        performAsynchronousFileAccess { handoff.value() }
    }

    /// A block that may be called on any thread and runs `body` on the main queue.
    nonisolated func mainQueueBlock(_ body: @escaping (Document) -> Void) -> @Sendable () -> Void {
        let handoff = Handoff(value: (self, body))
        return { handoff.value.0.onMain { handoff.value.1(handoff.value.0) } }
    }

    /// A completion handler that may be called on any thread (as an app's override may) and runs
    /// `body` with this document on the main queue.
    nonisolated package func mainQueueHandler(_ body: @escaping (Document, Bool) -> Void) -> @Sendable (Bool) -> Void {
        let handoff = Handoff(value: (self, body))
        return { success in handoff.value.0.onMain { handoff.value.1(handoff.value.0, success) } }
    }
}
