import Foundation
import GRDB
import Testing
import UbiquitySync
@testable import UbiquityAgent

@Suite struct AgentStoreTests {
    @Test func stateAndFilesSurviveAReopenAndChangeTogether() async throws {
        let directory = NSTemporaryDirectory() + "agent-store-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let container = "ABCDE12345.com.example.notes"
        var device = DeviceSyncState(device: "laptop")
        device.save(item: "doc", name: "Doc.txt", content: "v1", date: 1)
        let print = LocalFingerprint(inode: UInt64.max - 1, size: 3, modified: 1_800_000_000_000_000_000, changed: 1_800_000_000_000_000_001)
        do {
            let store = try AgentStore(path: directory + "/agent.sqlite")
            #expect(try store.state(of: container) == nil && store.files(of: container).isEmpty)
            let touched = device.takeTouched()
            try await store.record(container, state: device.persisted, touched: touched.items, changed: touched.changed,
                                   upsert: [.init(path: "Documents/Doc.txt", item: "doc", fingerprint: print, content: "v1"),
                                            .init(path: "Documents/Old.txt", item: "old", fingerprint: print, content: "v0")])
            try await store.record(container, state: device.persisted, touched: [], changed: false, removed: ["Documents/Old.txt"])
        }
        let reopened = try AgentStore(path: directory + "/agent.sqlite")
        #expect(try reopened.state(of: container) == device.persisted)
        #expect(try reopened.files(of: container) == ["Documents/Doc.txt": .init(path: "Documents/Doc.txt", item: "doc", fingerprint: print, content: "v1")],
                "inodes above Int64.max round-trip")
        #expect(try reopened.state(of: "ABCDE12345.com.example.other") == nil, "containers apart")
        let restored = DeviceSyncState(restoring: try #require(try reopened.state(of: container)))
        #expect(restored.hasLocalChanges("doc") && restored.visible("doc")?.content == "v1", "a restarted agent resumes with its unsent change")
    }

    @Test func onlyTheRowsOfWhatChangedAreWritten() async throws {
        let directory = NSTemporaryDirectory() + "agent-store-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let container = "ABCDE12345.com.example.notes"
        let store = try AgentStore(path: directory + "/agent.sqlite")
        var device = DeviceSyncState(device: "laptop")
        for index in 0..<1_000 { device.save(item: "doc\(index)", name: "Doc \(index).txt", content: "v1", date: 1) }
        var touched = device.takeTouched()
        #expect(touched.items.count == 1_000 && touched.changed)
        try await store.record(container, state: device.persisted, touched: touched.items, changed: touched.changed)
        device.save(item: "doc7", content: "v2", date: 2)
        touched = device.takeTouched()
        #expect(touched.items == ["doc7"], "one edit touches one item")
        try await store.record(container, state: device.persisted, touched: touched.items, changed: touched.changed)
        #expect(try store.state(of: container) == device.persisted)
        // A change not marked is not written: the store writes rows, not the whole state.
        var unmarked = device
        unmarked.save(item: "doc8", content: "v2", date: 3)
        _ = unmarked.takeTouched()
        try await store.record(container, state: unmarked.persisted, touched: [], changed: false)
        #expect(try store.state(of: container)?.local["doc8"]?.content == "v1")
        #expect(try store.state(of: container)?.local["doc7"]?.content == "v2")
    }

    @Test func aStoreFromBeforeRowsPerItemIsCarriedOver() throws {
        let directory = NSTemporaryDirectory() + "agent-store-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let container = "ABCDE12345.com.example.notes"
        var device = DeviceSyncState(device: "laptop")
        device.save(item: "doc", name: "Doc.txt", content: "v1", date: 1)
        device.fetched([ItemSnapshot(id: "other", revision: "r1", name: "Other.txt", content: "c", deleted: false, sequence: 4, conflicts: [])], upTo: 4)
        // The layout of the store's first three migrations, with the state as one document.
        let old = try DatabaseQueue(path: directory + "/agent.sqlite")
        try old.write { db in
            try db.execute(sql: """
                CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                INSERT INTO grdb_migrations VALUES ('v1'), ('v2-downloads-and-conflicts'), ('v3-folders-and-packages');
                CREATE TABLE containerState (container TEXT PRIMARY KEY, persisted BLOB NOT NULL);
                CREATE TABLE localFile (
                    container TEXT NOT NULL, path TEXT NOT NULL, item TEXT NOT NULL, inode INTEGER NOT NULL,
                    size INTEGER NOT NULL, modified INTEGER NOT NULL, changed INTEGER NOT NULL, content TEXT NOT NULL,
                    kind TEXT NOT NULL DEFAULT 'file', revision TEXT, PRIMARY KEY(container, path));
                CREATE TABLE downloadRequest (container TEXT NOT NULL, item TEXT NOT NULL, PRIMARY KEY(container, item));
                CREATE TABLE conflictCopy (container TEXT NOT NULL, item TEXT NOT NULL, revision TEXT NOT NULL, PRIMARY KEY(container, item, revision));
                """)
            try db.execute(sql: "INSERT INTO containerState VALUES (?, ?)", arguments: [container, try JSONEncoder().encode(device.persisted)])
        }
        try old.close()
        let store = try AgentStore(path: directory + "/agent.sqlite")
        #expect(try store.state(of: container) == device.persisted)
    }

    @Test func aFileThatIsNotADatabaseIsAClearError() throws {
        let path = NSTemporaryDirectory() + "agent-store-\(UUID().uuidString.prefix(8)).sqlite"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(repeating: 0x42, count: 4_096).write(to: URL(fileURLWithPath: path))
        #expect(throws: (any Error).self) { try AgentStore(path: path) }
    }
}
