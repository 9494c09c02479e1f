import UbiquityAgentProtocol

/// A request the agent cannot carry out for a container's item, saying why.
package struct ContainerSyncError: Error, CustomStringConvertible, Equatable {
    /// Why.
    package var reason: String
    /// What an app asking for it is told it was (``AgentError/Code``).
    package var code: AgentError.Code

    /// An error saying `reason`, of `code` for an app that asked.
    package init(_ reason: String, code: AgentError.Code = .failed) {
        self.reason = reason
        self.code = code
    }

    /// The reason.
    package var description: String { reason }
}
