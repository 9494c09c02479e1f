import Crypto
import Foundation
import GRDB
import Testing
import Ubiquity
import UbiquityDatabase
import UbiquityExamples
import UbiquityTestSupport

/// What the server keeps of a sealed container (agents with `sealedContents` on), looked at the
/// way an operator, a thief of its disk or a reader of its logs would: after two running devices
/// synced files and folders under Standard and then under Advanced Data Protection, no content,
/// no content hash — the SHA-256 of a file, which names a small file's only chunk in plaintext —
/// and no file or folder name is anywhere in the server's data folder or its log, kept at
/// `debug`.
@Suite struct ContentLeakageTests {
    static let container = "ABCDE12345.com.example.notes"

    @Test func theServerHoldsNoContentAndNoContentHashOfASealedContainer() async throws {
        let dir = try TemporaryDirectory("content-leakage"); defer { dir.remove() }
        let log = dir.file("server.log")
        let server = try await RunningServer.start(data: dir.file("server").path, logging: "debug", to: log)
        defer { server.stop() }
        let settings = #""greedy": true, "sealedContents": true"#
        let laptop = try TestDevice("laptop", in: dir, container: Self.container, settings: settings)
        let phone = try TestDevice("phone", in: dir, container: Self.container, settings: settings)
        // (What blocks — a command, a coordinated save the agent answers, stopping an agent — runs
        // on threads of its own, never the two the in-process tests beside this one share.)
        try await onOwnThread { try laptop.login(server); try phone.login(server) }
        try await laptop.startAgent()
        try await phone.startAgent()
        defer { _ = laptop.stopAgent(); _ = phone.stopAgent() } // (stopped on a thread of their own below; here if the test failed)
        let phoneDocuments = try await onOwnThread { phone.documents }

        /// Saves `text` on the laptop and waits until the phone has it; the secrets that then
        /// must not be on the server: a marker in it, the file's SHA-256 and its name (in any
        /// folders of its path, named with markers too).
        func travel(_ name: String, _ text: String) async throws -> [String] {
            try await onOwnThread {
                if name.contains("/") {
                    try FileManager.default.createDirectory(at: laptop.documents.appendingPathComponent(name).deletingLastPathComponent(), withIntermediateDirectories: true)
                }
                try laptop.save(name, text)
            }
            try await eventually("the phone has \(name)", timeout: .seconds(60)) {
                (try? String(contentsOf: phoneDocuments.appendingPathComponent(name), encoding: .utf8)) == text
            }
            return [SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()] + name.split(separator: "/").map(String.init)
        }
        var secrets: [String] = []
        let standardMarker = "StandardContentMarker-\(UUID().uuidString)"
        let nameMarker = "NameMarker\(UUID().uuidString.prefix(8))"
        secrets += [standardMarker, nameMarker]
        secrets += try await travel("Small \(nameMarker).txt", "\(standardMarker): a small note")
        secrets += try await travel("Trips \(nameMarker)/Large \(nameMarker).txt", (0..<40_000).map { "\(standardMarker) line \($0)" }.joined(separator: "\n"))
        #expect(await KeyValueLeakageTests.leaks(of: secrets, in: dir.file("server")) == [])
        #expect(await KeyValueLeakageTests.leaks(of: secrets, in: log) == [])

        // Under Advanced: new files, and an edit of one from before.
        let switched = try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"])
        #expect(switched.status == 0, "\(switched.output)")
        let advancedMarker = "AdvancedContentMarker-\(UUID().uuidString)"
        secrets += [advancedMarker]
        secrets += try await travel("After \(nameMarker).txt", "\(advancedMarker): written under Advanced")
        secrets += try await travel("Small \(nameMarker).txt", "\(advancedMarker): the small note, edited")
        #expect(await KeyValueLeakageTests.leaks(of: secrets, in: dir.file("server")) == [])
        #expect(await KeyValueLeakageTests.leaks(of: secrets, in: log) == [])

        // `protection status` says what is sealed, and what is not yet.
        let status = try await laptop.running(["protection", "status"]).output
        #expect(status.contains("sealed:     key-value stores; documents' contents, names, types, sizes and dates") && status.contains("the server sees: which items there are"), "\(status)")

        // The audit finds plaintext where it is: on the devices.
        #expect(!(await KeyValueLeakageTests.leaks(of: [standardMarker, advancedMarker], in: phoneDocuments)).isEmpty)
        // The log was kept at debug: it holds the requests, not nothing.
        #expect(((try? String(contentsOf: log, encoding: .utf8)) ?? "").contains("/v1/chunks"), "the audit read a log that says something")
        try await onOwnThread { _ = laptop.stopAgent(); _ = phone.stopAgent() }
    }
}

/// Advanced Data Protection turned on while files and key-value changes are on their way:
/// nothing is lost — every file the laptop wrote before, during and after the switch reaches the
/// phone whole, and so does every value.
@Suite struct SwitchInFlightTests {
    /// Files, key-value pairs and a database's rows written on the laptop a tenth of a second
    /// apart, Advanced turned on half-way: everything reaches the phone.
    @Test func switchingToAdvancedWithFilesValuesAndADatabaseInFlightLosesNothing() async throws {
        let dir = try TemporaryDirectory("switch-in-flight"); defer { dir.remove() }
        let server = try await RunningServer.start(data: dir.file("server").path)
        defer { server.stop() }
        let settings = #""greedy": true, "sealedContents": true"#
        let container = ContentLeakageTests.container, store = "ABCDE12345.com.example.game"
        let laptop = try TestDevice("laptop", in: dir, container: container, settings: settings)
        let phone = try TestDevice("phone", in: dir, container: container, settings: settings)
        try await onOwnThread { try laptop.login(server); try phone.login(server) }
        try await laptop.startAgent()
        try await phone.startAgent()
        defer { _ = laptop.stopAgent(); _ = phone.stopAgent() } // (stopped on a thread of their own below; here if the test failed)
        let phoneDocuments = try await onOwnThread { phone.documents }
        // Each device's database in its container (the test process is each device's app).
        let (laptopContainer, phoneContainer) = (try #require(laptop.containers.url(forContainer: container)), try #require(phone.containers.url(forContainer: container)))
        let recipes = try UbiquitousDatabase(container: laptopContainer, name: "Recipes", migrator: RecipeBook.migrator, containers: laptop.containers)
        let phoneRecipes = try UbiquitousDatabase(container: phoneContainer, name: "Recipes", migrator: RecipeBook.migrator, containers: phone.containers)
        defer { try? recipes.close(); try? phoneRecipes.close() }

        // Files and values written a tenth of a second apart; the switch half-way.
        let count = 24
        @Sendable func text(_ index: Int) -> String { (0..<(index % 3 == 0 ? 4_000 : 40)).map { "file \(index) line \($0)" }.joined(separator: "\n") }
        let switching = Task.detached {
            try await Task.sleep(for: .milliseconds(1_200))
            return try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"])
        }
        for index in 0..<count {
            try await onOwnThread { try laptop.save("File \(index).txt", text(index)) }
            let set = try await laptop.running(["kv", "set", store, "key\(index)", "value \(index)"])
            #expect(set.status == 0, "\(set.output)")
            try await recipes.writer.write { db in try db.execute(sql: "INSERT INTO recipe(id, title, minutes) VALUES (?, ?, ?)", arguments: ["r\(index)", "Recipe \(index)", index]) }
            try await Task.sleep(for: .milliseconds(100))
        }
        let switched = try await switching.value
        #expect(switched.status == 0 && switched.output.contains("Advanced Data Protection"), "\(switched.output)")
        try await eventually("the phone has every file", timeout: .seconds(90)) {
            (0..<count).allSatisfy { (try? String(contentsOf: phoneDocuments.appendingPathComponent("File \($0).txt"), encoding: .utf8)) == text($0) }
        }
        var listed = ""
        let asked = ContinuousClock.now
        while !(0..<count).allSatisfy({ listed.contains(#"key\#($0) = {"string":"value \#($0)"}"#) }), ContinuousClock.now - asked < .seconds(90) {
            listed = try await phone.running(["kv", "list", store]).output
            try await Task.sleep(for: .milliseconds(500))
        }
        #expect((0..<count).allSatisfy { listed.contains(#"key\#($0) = {"string":"value \#($0)"}"#) }, "the phone has every value: \(listed)")
        try await eventually("the phone's database has every row", timeout: .seconds(90)) {
            try phoneRecipes.writer.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM recipe") } == count
        }
        #expect(try DatabaseEndToEndTests.recipe(phoneRecipes, "r\(count - 1)") == "Recipe \(count - 1)|\(count - 1)")
        #expect(phoneRecipes.lastError == nil && recipes.lastError == nil, "\(String(describing: phoneRecipes.lastError)) \(String(describing: recipes.lastError))")
        let status = try await phone.running(["protection", "status"]).output
        #expect(status.contains("Advanced Data Protection") && status.contains("holds the current key"), "\(status)")
        try await onOwnThread { _ = laptop.stopAgent(); _ = phone.stopAgent() }
    }
}

/// A device that does not seal (`"sealedContents": false`) wrote a file just before Advanced Data
/// Protection is turned on — too young for the server's periodic sealing in place. The switch
/// has the server seal it first, while it holds the escrow's keys: after it, the server's data
/// folder holds neither its name nor its contents (before this, they stayed there for good).
@Suite struct SealBeforeAdvancedTests {
    @Test func whatTheServerHeldInPlaintextIsSealedBeforeTheSwitch() async throws {
        let dir = try TemporaryDirectory("seal-before-advanced"); defer { dir.remove() }
        let server = try await RunningServer.start(data: dir.file("server").path)
        defer { server.stop() }
        let laptop = try TestDevice("laptop", in: dir, container: ContentLeakageTests.container, settings: #""greedy": true, "sealedContents": false"#)
        try await onOwnThread { try laptop.login(server) }
        try await laptop.startAgent()
        defer { _ = laptop.stopAgent() }
        let nameMarker = "PlainName\(UUID().uuidString.prefix(8))", contentMarker = "PlainContent-\(UUID().uuidString)"
        try await onOwnThread { try laptop.save("Notes \(nameMarker).txt", "\(contentMarker): written by a device that does not seal") }
        // On the server in plaintext (the device does not seal; the server's round waits ten minutes).
        let data = dir.file("server")
        try await eventually("the server has the plaintext", timeout: .seconds(60)) {
            KeyValueLeakageTests.scan(for: [nameMarker, contentMarker], in: data).count == 2
        }
        let switched = try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"])
        #expect(switched.status == 0, "\(switched.output)")
        #expect(await KeyValueLeakageTests.leaks(of: [nameMarker, contentMarker], in: dir.file("server")) == [])
        try await onOwnThread { _ = laptop.stopAgent() }
    }
}
