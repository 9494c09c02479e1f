import Foundation
import Testing
import Ubiquity
import UbiquityTestSupport

/// `ubiquity find` and `ubiquity kv`, run as a user would (a home of their own).
@Suite struct QueryCommandTests {
    /// Runs `ubiquity` with `arguments` in `home`, waited for on a thread of its own.
    func ubiquity(_ arguments: [String], home: URL) async throws -> (status: Int32, output: String, errors: String) {
        try await onOwnThread {
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("ubiquity")
            process.arguments = arguments
            var environment = ProcessInfo.processInfo.environment
            environment["HOME"] = home.path
            environment["XDG_CONFIG_HOME"] = home.appendingPathComponent("config").path
            environment["XDG_DATA_HOME"] = home.appendingPathComponent("data").path
            environment["XDG_RUNTIME_DIR"] = home.appendingPathComponent("run").path
            process.environment = environment
            let output = Pipe(), errors = Pipe()
            process.standardOutput = output
            process.standardError = errors
            try process.run()
            let out = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            let err = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (process.terminationStatus, out, err)
        }
    }

    @Test func findListsMatchingDocumentsAndExplainsABadPredicate() async throws {
        let dir = try TemporaryDirectory("find"); defer { dir.remove() }
        let docs = dir.url.appendingPathComponent("docs")
        try FileManager.default.createDirectory(at: docs.appendingPathComponent("sub"), withIntermediateDirectories: true)
        try Data("hello".utf8).write(to: docs.appendingPathComponent("a.txt"))
        try Data("x".utf8).write(to: docs.appendingPathComponent("sub/b.txt"))
        try Data("y".utf8).write(to: docs.appendingPathComponent("c.md"))
        let found = try await ubiquity(["find", docs.path, "kMDItemFSName LIKE '*.txt'", "--sort=-kMDItemFSSize"], home: dir.url)
        #expect(found.status == 0)
        let lines = found.output.split(separator: "\n")
        #expect(lines.count == 2 && lines[0].hasSuffix("/docs/a.txt") && lines[1].hasSuffix("/docs/sub/b.txt") && lines[0].hasPrefix("local"), "\(found.output)")
        #expect(found.errors.contains("2 items"))

        let bad = try await ubiquity(["find", docs.path, "kMDItemFSName LIKE"], home: dir.url)
        #expect(bad.status != 0 && bad.errors.contains("expected a value or a key, found the end"))
        let signedOut = try await ubiquity(["find", "ABCDE12345.com.example.notes", "TRUEPREDICATE"], home: dir.url)
        #expect(signedOut.status != 0 && signedOut.errors.contains("not signed in"))
    }

    @Test func kvSetsGetsListsAndRemovesAndRefusesWhatIsPastTheLimits() async throws {
        let dir = try TemporaryDirectory("kv"); defer { dir.remove() }
        let store = "ABCDE12345.com.example.game"
        #expect(try await ubiquity(["kv", "set", store, "level", "--json", #"{"integer":7}"#], home: dir.url).status == 0)
        #expect(try await ubiquity(["kv", "set", store, "name", "Ada"], home: dir.url).status == 0)
        #expect(try await ubiquity(["kv", "set", store, "tags", "--json", #"["a", 2]"#], home: dir.url).status == 0)
        let long = try await ubiquity(["kv", "set", store, String(repeating: "k", count: 65), "x"], home: dir.url)
        #expect(long.status != 0 && long.errors.contains("refused"))
        #expect(try await ubiquity(["kv", "get", store, "level"], home: dir.url).output == "{\"integer\":7}\n")
        let list = try await ubiquity(["kv", "list", store], home: dir.url).output
        #expect(list == "level = {\"integer\":7}\nname = {\"string\":\"Ada\"}\ntags = {\"array\":[{\"string\":\"a\"},{\"integer\":2}]}\n", "\(list)")
        #expect(try await ubiquity(["kv", "remove", store, "name"], home: dir.url).status == 0)
        #expect(try await ubiquity(["kv", "get", store, "name"], home: dir.url).status == 1, "missing: exit status 1")
        #expect(try await ubiquity(["kv", "set", store, "bad", "--json", "{not json"], home: dir.url).status != 0)
    }
}
