import Foundation
import UbiquityTestSupport
import Testing
import Logging
import Synchronization
import UbiquityAgentProtocol
@testable import UbiquityAgent

/// The agent's control socket stops cleanly while clients keep connecting: a connection
/// accepted as the server stops is closed, never dropped (NIO stops the process when an
/// accepted connection is dropped unclosed, which once crashed a full test run).
@Suite struct ControlServerStopTests {
    @Test func stoppingDuringABurstOfConnectionsLosesNone() async throws {
        let folder = URL(fileURLWithPath: "/tmp/ubq-stop-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: folder) }
        let socket = folder.appendingPathComponent("s")
        for _ in 0..<25 {
            let answered = Counter()
            let server = Task {
                try await AgentControlServer.run(socket: socket, logger: Logger(label: "test"), answer: { _ in
                    answered.add()
                    return AgentResponse()
                }, watch: { _ in AsyncStream { $0.finish() } })
            }
            // Asked from a thread of its own: a blocking wait on one of the few shared threads
            // would hold up the server it waits for (and every other test's tasks).
            while try await onOwnThread({ (try? AgentConnection(socket: socket).send(AgentRequest(.status), timeout: .seconds(2))) == nil }) {
                try await Task.sleep(for: .milliseconds(5))
            }
            // Clients connect from threads of their own (not the shared pool's: blocking there
            // would starve every other test's tasks) while the server is told to stop.
            let burst = (0..<16).map { _ in
                Thread {
                    for _ in 0..<4 { _ = try? AgentConnection(socket: socket).send(AgentRequest(.status), timeout: .milliseconds(500)) }
                }
            }
            for thread in burst { thread.start() }
            try await Task.sleep(for: .microseconds(Int.random(in: 0...2_000)))
            server.cancel()
            try await server.value
            #expect(answered.value >= 1)
            #expect(!FileManager.default.fileExists(atPath: socket.path)) // the socket goes with the server
            while burst.contains(where: { !$0.isFinished }) { try await Task.sleep(for: .milliseconds(5)) }
        }
    }
}

/// A count shared with the server's connection tasks.
private final class Counter: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
