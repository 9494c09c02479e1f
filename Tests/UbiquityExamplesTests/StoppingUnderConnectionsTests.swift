import Foundation
import Logging
import Testing
import UbiquityServer
import UbiquityTestSupport

/// Servers stopped while connections keep arriving — devices retrying as a test, or a program
/// embedding the server, ends. Cancelling a Hummingbird server's task while a connection is
/// being accepted traps in NIO ("Deinited NIOAsyncWriter without calling finish()",
/// swift-nio#3481: seen in CI, the whole test process lost); these stop the servers the tests
/// and programs use, many times, under a stream of connections, and the process goes on.
@Suite struct StoppingUnderConnectionsTests {
    @Test func aRelayStoppedWhileDevicesConnectTrapsNothing() async throws {
        for round in 0..<10 {
            let relay = try await HostileRelay.start(to: URL(string: "http://127.0.0.1:1")!)
            let hammer = ConnectionHammer(port: try #require(relay.base.port))
            try await Task.sleep(for: .milliseconds(10 + round % 5 * 7))
            relay.stop()
            try await Task.sleep(for: .milliseconds(30))
            await hammer.stop()
        }
    }

    @Test func aServerWhoseTaskIsCancelledWhileDevicesConnectTrapsNothing() async throws {
        let dir = NSTemporaryDirectory() + "stop-under-load-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        for round in 0..<8 {
            let server = try await EmbeddedServer.start(dataDirectory: dir + "/\(round)", account: "ada", password: "correct horse", logger: quiet)
            let hammer = ConnectionHammer(port: try #require(server.url.port))
            try await Task.sleep(for: .milliseconds(10 + round % 4 * 9))
            await server.stop() // cancels the serving task
            await hammer.stop()
        }
    }
}
