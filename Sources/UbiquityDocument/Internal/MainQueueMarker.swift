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
