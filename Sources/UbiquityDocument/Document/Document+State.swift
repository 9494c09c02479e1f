import Foundation
import UbiquityFiles

// The document's state on the main queue: its changes announced by notification and stream.
extension Document {
    /// A stream of the document's states: the current one first, then every change.
    public var stateUpdates: AsyncStream<State> {
        let (stream, continuation) = AsyncStream.makeStream(of: State.self, bufferingPolicy: .bufferingNewest(64))
        let id = UUID()
        onMain { [self] in
            stateContinuations[id] = continuation
            continuation.yield(documentState)
        }
        let document = WeakHandoff(self)
        continuation.onTermination = { _ in
            MainQueue.async { document.value?.stateContinuations[id] = nil }
        }
        return stream
    }

    func setState(_ state: State) {
        guard state != documentState else { return }
        documentState = state
        MainQueue.post(Notification(name: Self.stateChangedNotification, object: self))
        for continuation in stateContinuations.values { continuation.yield(state) }
    }

    func updateState(inserting inserted: State = [], removing removed: State = []) {
        setState(documentState.union(inserted).subtracting(removed))
    }
}
