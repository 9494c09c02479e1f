import Foundation
import GRDB
import Testing
import UbiquityKeys
import UbiquityTestSupport

/// Joining an Advanced account by a code, with real processes: the new device's `ubiquity login`
/// asks and waits; the laptop's running agent answers at once (a push); the new device shows a
/// code and the laptop's name; `ubiquity devices approve CODE` on the laptop lets it in. A key the
/// server puts in between is refused; without an agent, `devices approve` with no code answers.
@Suite(.serialized) struct JoinByCodeTests {
    typealias Device = DataProtectionCommandTests.Device

    /// `ubiquity login` started in the background on `device` (it waits for the approval).
    func startLogin(_ device: Device, _ server: RunningServer) throws -> (ChildProcess, OutputLines) {
        let process = ChildProcess()
        process.executableURL = RunningServer.binary
        process.arguments = ["login", "--server", server.base.absoluteString, "--account", "ada", "--device-name", device.name, "--password-stdin"]
        process.environment = ProcessInfo.processInfo.environment.merging(device.home) { $1 }
        let output = Pipe(), input = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = input
        try process.run()
        input.fileHandleForWriting.write(Data("correct horse\n".utf8))
        try input.fileHandleForWriting.close()
        return (process, OutputLines(output))
    }

    /// The code in the line `On NAME, run:  ubiquity devices approve 1234 5678`.
    func code(in line: String) -> String { String(line.split(separator: "approve ").last ?? "") }

    @Test func aNewDeviceJoinsAnAdvancedAccountByTheCodeItShows() async throws {
        let dir = try TemporaryDirectory("join-code"); defer { dir.remove() }
        let server = try await RunningServer.start(data: dir.file("data").path)
        defer { server.stop() }
        let laptop = Device("laptop", in: dir), desktop = Device("desktop", in: dir), intruded = Device("intruded", in: dir)
        #expect(try await laptop.loggingIn(server.base).status == 0)
        #expect(try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"]).status == 0)

        // No agent on the laptop: the new device waits; `devices approve` with no code answers it.
        let (waiting, lines) = try startLogin(intruded, server)
        defer { waiting.terminate() }
        #expect(await lines.waitFor(timeout: 20) { $0.contains("asking its devices") } != nil, "\(lines.all)")
        var answered = try await laptop.running(["devices", "approve"])
        for _ in 0..<20 where !answered.output.contains("answered intruded") {
            try await Task.sleep(for: .milliseconds(200)) // the request may not be made yet
            answered = try await laptop.running(["devices", "approve"])
        }
        #expect(answered.status == 0 && answered.output.contains("answered intruded"), "\(answered.output)")
        let shown = try #require(await lines.waitFor(timeout: 20) { $0.contains("devices approve") }, "\(lines.all)")
        #expect(shown.hasPrefix("On laptop, run:") && code(in: shown).filter(\.isNumber).count == 8, "\(shown)")

        // The server puts its own key in the request: the code typed no longer matches anything.
        let database = try DatabaseQueue(path: dir.file("data/ubiquity.sqlite").path)
        let intruder = DeviceKeys().publicKeys
        try await database.write { try $0.execute(sql: "UPDATE keyRequest SET signing = ?, agreement = ?", arguments: [Data(intruder.signing), Data(intruder.agreement)]) }
        let refused = try await laptop.running(["devices", "approve", code(in: shown)])
        #expect(refused.status == 2 && refused.output.contains("no device waiting to join shows the code"), "\(refused.output)")
        #expect(!(try await laptop.running(["devices", "list"]).output.contains("intruded")))
        waiting.terminate()
        try await database.write { try $0.execute(sql: "DELETE FROM keyRequest") }
        try database.close()

        // With the laptop's agent running, the request is answered at once.
        let agent = ChildProcess()
        agent.executableURL = RunningServer.binary
        agent.arguments = ["agent"]
        agent.environment = ProcessInfo.processInfo.environment.merging(laptop.home) { $1 }
        agent.standardOutput = FileHandle.nullDevice
        agent.standardError = FileHandle.nullDevice
        try agent.run()
        defer { agent.terminate() }
        try await Task.sleep(for: .seconds(2)) // its push connection open
        let (joining, output) = try startLogin(desktop, server)
        defer { joining.terminate() }
        let line = try #require(await output.waitFor(timeout: 30) { $0.contains("devices approve") }, "the agent answered: \(output.all)")
        let approved = try await laptop.running(["devices", "approve", code(in: line)])
        #expect(approved.status == 0 && approved.output.contains("approved desktop"), "\(approved.output)")
        let done = try #require(await output.waitFor(timeout: 30) { $0.contains("this device holds the account's keys") }, "\(output.all)")
        #expect(done.contains("Advanced Data Protection") && done.contains("2 devices"), "\(done)")
        try await onOwnThread { joining.waitUntilExit() }
        #expect(joining.terminationStatus == 0)
        #expect(try await desktop.running(["protection", "status"]).output.contains("holds the current key"))
    }
}
