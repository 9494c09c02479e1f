import Foundation
import UbiquityTestSupport
import Logging
import Testing
import UbiquityAgentProtocol
import UbiquityClient
import UbiquityServer
@testable import UbiquityAgent

/// An embedded server (account "ada") and one running agent per device, each device with a
/// home of its own under `dir`: what the tests of whole paths (app → agent → server → agent →
/// app) start from. ``stop()`` cancels the agents and the server.
struct RunningAgents {
    let server: EmbeddedServer
    /// Each device's paths, in the order named.
    let paths: [UbiquityPaths]
    let agents: [Task<Void, any Error>]

    /// - Parameters:
    ///   - greedy: Whether the agents keep every file (and ask for small files' bytes inline).
    ///   - agentLogger: The agents' logger (default: only critical messages, nowhere).
    ///   - sealedContents: Whether the agents seal the containers' chunks (``AgentConfiguration/sealedContents``).
    ///   - rescanSeconds: How often the agents look at every file (and read their shares).
    ///   - accounts: Each device's account, by device name (default: ada; every account named is made).
    static func start(_ names: [String], containers: [String], in dir: String, greedy: Bool = false, sealedContents: Bool = false,
                      agentLogger: Logger? = nil, accounts: [String: String] = [:], rescanSeconds: Double = 60, sealedShares: Bool = true) async throws -> RunningAgents {
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let others = Set(accounts.values).subtracting(["ada"]).sorted()
        let server = try await EmbeddedServer.start(dataDirectory: dir + "/server", account: "ada", others: others, password: "correct horse", sealedShares: sealedShares,
                                                    logger: logger)
        var paths: [UbiquityPaths] = [], agents: [Task<Void, any Error>] = []
        for name in names {
            let root = URL(fileURLWithPath: dir).appendingPathComponent(name)
            let home = UbiquityPaths(configuration: root.appendingPathComponent("config"), data: root.appendingPathComponent("data"), runtime: root.appendingPathComponent("run"))
            try await SyncClient(server: server.url).signIn(account: accounts[name] ?? "ada", password: "correct horse", deviceName: name, savingTo: home)
            var named = agentLogger ?? logger
            named[metadataKey: "device"] = "\(name)" // (whose line it is, in a shared log)
            let agent = Agent(paths: home, configuration: AgentConfiguration(containers: containers, greedy: greedy, rescanSeconds: rescanSeconds, sealedContents: sealedContents), logger: named)
            agents.append(Task { try await agent.run() })
            paths.append(home)
        }
        return RunningAgents(server: server, paths: paths, agents: agents)
    }

    /// Each device's view of `containers` (in the order named) and, for each, the
    /// `Documents` folder of the first container — once every agent says it is connected (an
    /// agent that never does fails the test). Apps' calls to the agent block: they run on
    /// threads of their own, never on the concurrency pool the in-process agents answer on.
    func connectedDevices(containers: [String]) async throws -> (devices: [UbiquityContainers], documents: [URL]) {
        let devices = paths.map { UbiquityContainers(paths: $0, entitlements: UbiquityEntitlements(containers: containers)) }
        var documents: [URL] = []
        for device in devices {
            var connected = false
            for _ in 0..<100 where !connected {
                connected = try await onOwnThread { (try? device.agent.send(AgentRequest(.status), timeout: .seconds(1)).status?.connected) == true }
                if !connected { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(connected)
            let url = try #require(try await onOwnThread { device.url(forContainer: containers[0]) })
            documents.append(url.appendingPathComponent("Documents"))
        }
        return (devices, documents)
    }

    /// Waits until every agent says it is connected (its push connection up): a change made
    /// before then reaches the others only when they next look (up to a minute).
    func waitUntilConnected() async throws {
        for paths in self.paths {
            let device = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: []))
            var connected = false
            for _ in 0..<600 where !connected {
                connected = try await onOwnThread { (try? device.agent.send(AgentRequest(.status), timeout: .seconds(1)).status?.connected) == true }
                if !connected { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(connected)
        }
    }

    func stop() {
        for agent in agents { agent.cancel() }
        server.cancel()
    }
}

/// Waits (up to `seconds`) until `condition` holds.
func eventually(_ seconds: Double = 15, _ condition: () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return condition()
}


/// A notification observer's token, kept by test recorders (NotificationCenter's tokens are
/// safe to hand to removeObserver from any thread).
struct ObserverToken: @unchecked Sendable {
    let token: any NSObjectProtocol
    init(_ token: any NSObjectProtocol) { self.token = token }
}
