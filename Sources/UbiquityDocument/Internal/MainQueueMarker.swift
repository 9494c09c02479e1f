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

/// Runs `body` on the main actor: at once when called there (where Ubiquity calls a document's
/// completion handlers, as UIKit does), else on the main queue's next turn (an app's override
/// that calls a handler from elsewhere).
func onMainQueue(_ body: @escaping @MainActor @Sendable () -> Void) {
    if MainQueueMarker.isCurrent {
        MainActor.assumeIsolated(body)
    } else {
        DispatchQueue.main.async { MainActor.assumeIsolated(body) }
    }
}
