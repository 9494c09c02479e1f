import Foundation
import Testing
import UbiquityTestSupport
@testable import UbiquityAgent

/// Pages of changes pushed along with their events, between two running agents and a real
/// server: a folder of small files arrives through one push message larger than WebSocket's
/// default frame, and the push connection stays up.
@Suite struct PushedPageTests {
    let notes = "ABCDE12345.com.example.notes"

    @Test(.timeLimit(.minutes(3))) func aFolderOfSmallFilesArrivesInOnePushedPage() async throws {
        let notes = notes
        let dir = NSTemporaryDirectory() + "pushed-page-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let notices = LogCapture(level: .notice)
        let running = try await RunningAgents.start(["laptop", "phone"], containers: [notes], in: dir, greedy: true, agentLogger: notices.logger(label: "agent"))
        defer { running.stop() }
        let documents = try await running.connectedDevices(containers: [notes]).documents
        let laptop = documents[0], phone = documents[1]

        // Twelve files of 4 KiB that are not text (base64 in the page: about 64 KiB before
        // compression, far above a 16 KiB frame), put in place at once as one folder.
        var generator = SystemRandomNumberGenerator()
        let files = (0..<12).map { index in ("photo \(index).bin", Data((0..<4_096).map { _ in UInt8.random(in: 0...255, using: &generator) })) }
        let outside = URL(fileURLWithPath: dir).appendingPathComponent("Album")
        try FileManager.default.createDirectory(at: outside, withIntermediateDirectories: true)
        for (name, bytes) in files { try bytes.write(to: outside.appendingPathComponent(name)) }
        try FileManager.default.moveItem(at: outside, to: laptop.appendingPathComponent("Album"))

        let arrived = await eventually(60) { // (the whole suite's busiest minute runs dozens of processes)
            files.allSatisfy { name, bytes in (try? Data(contentsOf: phone.appendingPathComponent("Album").appendingPathComponent(name))) == bytes }
        }
        #expect(arrived)
        let logged = notices.lines.withLock { $0 }.map(\.message)
        #expect(!logged.contains { $0.contains("push") }, "the push connection stayed up and every message was read: \(logged)")
    }
}
