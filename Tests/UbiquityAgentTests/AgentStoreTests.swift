import Foundation
import Testing
import UbiquitySync
@testable import UbiquityAgent

@Suite struct AgentStoreTests {
    @Test func stateAndFilesSurviveAReopenAndChangeTogether() throws {
        let directory = NSTemporaryDirectory() + "agent-store-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let container = "ABCDE12345.com.example.notes"
        var device = DeviceSyncState(device: "laptop")
        device.save(item: "doc", name: "Doc.txt", content: "v1", date: 1)
        let print = LocalFingerprint(inode: UInt64.max - 1, size: 3, modified: 1_800_000_000_000_000_000, changed: 1_800_000_000_000_000_001)
        do {
            let store = try AgentStore(path: directory + "/agent.sqlite")
            #expect(try store.state(of: container) == nil && store.files(of: container).isEmpty)
            try store.record(container, state: device.persisted,
                             upsert: [.init(path: "Documents/Doc.txt", item: "doc", fingerprint: print, content: "v1"),
                                      .init(path: "Documents/Old.txt", item: "old", fingerprint: print, content: "v0")])
            try store.record(container, state: device.persisted, removed: ["Documents/Old.txt"])
        }
        let reopened = try AgentStore(path: directory + "/agent.sqlite")
        #expect(try reopened.state(of: container) == device.persisted)
        #expect(try reopened.files(of: container) == ["Documents/Doc.txt": .init(path: "Documents/Doc.txt", item: "doc", fingerprint: print, content: "v1")],
                "inodes above Int64.max round-trip")
        #expect(try reopened.state(of: "ABCDE12345.com.example.other") == nil, "containers apart")
        let restored = DeviceSyncState(restoring: try #require(try reopened.state(of: container)))
        #expect(restored.hasLocalChanges("doc") && restored.visible("doc")?.content == "v1", "a restarted agent resumes with its unsent change")
    }

    @Test func aFileThatIsNotADatabaseIsAClearError() throws {
        let path = NSTemporaryDirectory() + "agent-store-\(UUID().uuidString.prefix(8)).sqlite"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(repeating: 0x42, count: 4_096).write(to: URL(fileURLWithPath: path))
        #expect(throws: (any Error).self) { try AgentStore(path: path) }
    }
}
