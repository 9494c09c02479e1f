import Foundation
import Testing
import UbiquityTestSupport

/// A device removed from the account's keys reads nothing written after, under either custody:
/// the laptop removes the tablet (a new epoch, whose key the tablet never gets); a value set
/// afterwards reaches the phone, never the tablet — whose agent does not let itself back in
/// (under Standard the escrow would), and says why — while what it had stays readable to it.
@Suite(.serialized) struct RemovedDeviceTests {
    typealias Device = DataProtectionCommandTests.Device
    typealias Agent = HostileKeyValueServerTests.Agent

    @Test(arguments: ["standard", "advanced"]) func aRemovedDeviceReadsNothingWrittenAfter(custody: String) async throws {
        let dir = try TemporaryDirectory("removed-device"); defer { dir.remove() }
        let server = try await RunningServer.start(data: dir.file("data").path)
        defer { server.stop() }
        let laptop = Device("laptop", in: dir), phone = Device("phone", in: dir), tablet = Device("tablet", in: dir)
        for device in [laptop, phone, tablet] { #expect(try await device.loggingIn(server.base).status == 0) }
        if custody == "advanced" {
            #expect(try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"]).status == 0)
        }
        let agents = try [laptop, phone, tablet].map { try Agent($0, in: dir) }
        defer { for agent in agents { agent.stop() } }
        let store = HostileKeyValueServerTests.store
        for device in [phone, tablet] { #expect(try await device.running(["kv", "set", store, "opened", device.name]).status == 0) }
        #expect(try await laptop.running(["kv", "set", store, "before", "written before"]).status == 0)
        for (device, agent) in [(phone, agents[1]), (tablet, agents[2])] {
            #expect(try await HostileKeyValueServerTests.until(device, ["kv", "get", store, "before"]) { $0.contains("written before") },
                    "\(device.name): \(agent.logged.suffix(3000))")
        }

        let removed = try await laptop.running(["devices", "remove", try await tablet.identifying()])
        #expect(removed.status == 0, "\(removed.output)")
        #expect(try await laptop.running(["kv", "set", store, "after", "written after"]).status == 0)
        #expect(try await HostileKeyValueServerTests.until(phone, ["kv", "get", store, "after"]) { $0.contains("written after") }, "\(agents[1].logged.suffix(3000))")
        // The tablet is told (a push), reads the roster, finds itself removed: it waits, and says so.
        #expect(try await HostileKeyValueServerTests.until(agents[2], logs: "removed from the account's keys"), "\(agents[2].logged.suffix(3000))")
        #expect(try await HostileKeyValueServerTests.until(tablet, ["status"]) { $0.contains("removed from the account's keys") }, "ubiquity status says so")
        _ = try await tablet.running(["kv", "set", store, "opened", "again"]) // a write makes it try the store again
        try await Task.sleep(for: .seconds(2))
        let held = try await tablet.running(["kv", "list", store]).output
        #expect(held.contains("written before") && !held.contains("written after"), "\(held)")
        let status = try await tablet.running(["protection", "status"]).output
        #expect(status.contains("does not hold the current key"), "\(status)")
        for agent in agents { try await agent.stopped() } // before the server goes
    }
}
