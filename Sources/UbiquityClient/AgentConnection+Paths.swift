@_exported import UbiquityAgentProtocol

extension AgentConnection {
    /// A connection to the agent of `paths` (its socket, ``UbiquityPaths/agentSocket``).
    public init(paths: UbiquityPaths = UbiquityPaths()) {
        self.init(socket: paths.agentSocket)
    }
}
