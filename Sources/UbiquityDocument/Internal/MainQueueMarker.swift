import Dispatch

/// Tells whether code runs on the main dispatch queue, whichever thread drains it.
enum MainQueueMarker {
    static let key: DispatchSpecificKey<Bool> = {
        let key = DispatchSpecificKey<Bool>()
        DispatchQueue.main.setSpecific(key: key, value: true)
        return key
    }()

    /// Whether the current code runs on the main queue.
    static var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == true }
}

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
    /// theirs): at once when called there, else at the main queue's next turn.
    nonisolated package func onMain(_ body: @escaping () -> Void) {
        if MainQueueMarker.isCurrent { return body() }
        let handoff = Handoff(value: body)
        DispatchQueue.main.async { handoff.value() }
    }

    /// Runs `body` on the main queue and waits for it (from the file-access queue: a document's
    /// `load(fromContents:ofType:)` runs on the main queue, as UIKit's does).
    nonisolated func onMainAndWait<T>(_ body: () throws -> T) throws -> T {
        if MainQueueMarker.isCurrent { return try body() }
        return try withoutActuallyEscaping(body) { body in
            let handoff = Handoff(value: body)
            let result = DispatchQueue.main.sync { Handoff(value: Result { try handoff.value() }) }
            return try result.value.get()
        }
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
