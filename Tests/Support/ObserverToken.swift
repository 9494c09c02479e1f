import Foundation

/// A notification observer's token, kept by test recorders (NotificationCenter's tokens are
/// safe to hand to removeObserver from any thread).
public struct ObserverToken: @unchecked Sendable {
    /// The token `addObserver(forName:object:queue:using:)` returned.
    public let token: any NSObjectProtocol
    /// Keeps `token`.
    public init(_ token: any NSObjectProtocol) { self.token = token }
}
