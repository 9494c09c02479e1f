import Foundation
import Logging
import Synchronization
import Testing
import UbiquityAgentProtocol
import UbiquityClient
@testable import UbiquityAgent

/// Pages of changes pushed along with their events, between two running agents and a real
/// server: a folder of small files arrives through one push message larger than WebSocket's
/// default frame, and the push connection stays up.
@Suite struct PushedPageTests {
    let notes = "ABCDE12345.com.example.notes"

    /// Notices, warnings and errors the agents logged.
    final class Warnings: Sendable {
        let lines = Mutex<[String]>([])
        struct Handler: LogHandler {
            let warnings: Warnings
            var metadata: Logger.Metadata = [:]
            var logLevel: Logger.Level = .notice
            subscript(metadataKey key: String) -> Logger.Metadata.Value? {
                get { metadata[key] }
                set { metadata[key] = newValue }
            }
            func log(event: LogEvent) {
                warnings.lines.withLock { $0.append("\(event.message) \(event.metadata ?? [:])") }
            }
        }
        var logger: Logger { Logger(label: "agent") { _ in Handler(warnings: self) } }
    }

    @Test(.timeLimit(.minutes(3))) func aFolderOfSmallFilesArrivesInOnePushedPage() async throws {
        let notes = notes
        let dir = NSTemporaryDirectory() + "pushed-page-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let warnings = Warnings()
        let running = try await RunningAgents.start(["laptop", "phone"], containers: [notes], in: dir, greedy: true, agentLogger: warnings.logger)
        defer { running.stop() }
        let devices = running.paths.map { UbiquityContainers(paths: $0, entitlements: UbiquityEntitlements(containers: [notes])) }
        let laptopDevice = devices[0], phoneDevice = devices[1]
        let laptop = try #require(try await blocking { laptopDevice.url(forContainer: notes) }).appendingPathComponent("Documents")
        let phone = try #require(try await blocking { phoneDevice.url(forContainer: notes) }).appendingPathComponent("Documents")
        for device in devices {
            var connected = false
            for _ in 0..<100 where !connected {
                connected = try await blocking { (try? device.agent.send(AgentRequest(.status), timeout: .seconds(1)).status?.connected) == true }
                if !connected { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(connected)
        }

        // Twelve files of 4 KiB that are not text (base64 in the page: about 64 KiB before
        // compression, far above a 16 KiB frame), put in place at once as one folder.
        var generator = SystemRandomNumberGenerator()
        let files = (0..<12).map { index in ("photo \(index).bin", Data((0..<4_096).map { _ in UInt8.random(in: 0...255, using: &generator) })) }
        let outside = URL(fileURLWithPath: dir).appendingPathComponent("Album")
        try FileManager.default.createDirectory(at: outside, withIntermediateDirectories: true)
        for (name, bytes) in files { try bytes.write(to: outside.appendingPathComponent(name)) }
        try FileManager.default.moveItem(at: outside, to: laptop.appendingPathComponent("Album"))

        let arrived = await eventually(30) {
            files.allSatisfy { name, bytes in (try? Data(contentsOf: phone.appendingPathComponent("Album").appendingPathComponent(name))) == bytes }
        }
        #expect(arrived)
        let logged = warnings.lines.withLock { $0 }
        #expect(!logged.contains { $0.contains("push") }, "the push connection stayed up and every message was read: \(logged)")
    }
}
