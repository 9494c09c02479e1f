import Foundation

/// A notification observer's token, kept by test recorders (NotificationCenter's tokens are
/// safe to hand to removeObserver from any thread).
struct ObserverToken: @unchecked Sendable {
    let token: any NSObjectProtocol
    init(_ token: any NSObjectProtocol) { self.token = token }
}
