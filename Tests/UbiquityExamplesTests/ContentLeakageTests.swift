import Crypto
import Foundation
import Testing
import Ubiquity
import UbiquityTestSupport

/// What the server keeps of a sealed container's contents (agents with `sealedContents` on),
/// looked at the way an operator, a thief of its disk or a reader of its logs would: after two
/// running devices synced files under Standard and then under Advanced Data Protection, no
/// content and no content hash — the SHA-256 of a file, which names a small file's only chunk
/// in plaintext — is anywhere in the server's data folder or its log, kept at `debug`. (Item
/// records are not sealed yet: file names are left out of this audit until they are.)
@Suite struct ContentLeakageTests {
    static let container = "ABCDE12345.com.example.notes"

    @Test func theServerHoldsNoContentAndNoContentHashOfASealedContainer() async throws {
        let dir = try TemporaryDirectory("content-leakage"); defer { dir.remove() }
        let log = dir.file("server.log")
        let server = try await RunningServer.start(data: dir.file("server").path, logging: "debug", to: log)
        defer { _ = server.stop() }
        let settings = #""greedy": true, "sealedContents": true"#
        let laptop = try TestDevice("laptop", in: dir, container: Self.container, settings: settings)
        let phone = try TestDevice("phone", in: dir, container: Self.container, settings: settings)
        try laptop.login(server)
        try phone.login(server)
        try await laptop.startAgent()
        try await phone.startAgent()
        defer { _ = laptop.stopAgent(); _ = phone.stopAgent() }

        /// Saves `text` on the laptop and waits until the phone has it; the secrets that then
        /// must not be on the server: a marker in it and the file's SHA-256.
        func travel(_ name: String, _ text: String) async throws -> [String] {
            try laptop.save(name, text)
            try await eventually("the phone has \(name)", timeout: .seconds(60)) { phone.read(name) == text }
            return [SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()]
        }
        var secrets: [String] = []
        let standardMarker = "StandardContentMarker-\(UUID().uuidString)"
        secrets += [standardMarker]
        secrets += try await travel("Small.txt", "\(standardMarker): a small note")
        secrets += try await travel("Large.txt", (0..<40_000).map { "\(standardMarker) line \($0)" }.joined(separator: "\n"))
        #expect(KeyValueLeakageTests.leaks(of: secrets, in: dir.file("server")) == [])
        #expect(KeyValueLeakageTests.leaks(of: secrets, in: log) == [])

        // Under Advanced: new files, and an edit of one from before.
        let switched = try runUbiquity(["protection", "advanced", "--yes", "--without-recovery-key"], environment: laptop.environment)
        #expect(switched.status == 0, "\(switched.output)")
        let advancedMarker = "AdvancedContentMarker-\(UUID().uuidString)"
        secrets += [advancedMarker]
        secrets += try await travel("After.txt", "\(advancedMarker): written under Advanced")
        secrets += try await travel("Small.txt", "\(advancedMarker): the small note, edited")
        #expect(KeyValueLeakageTests.leaks(of: secrets, in: dir.file("server")) == [])
        #expect(KeyValueLeakageTests.leaks(of: secrets, in: log) == [])

        // `protection status` says what is sealed, and what is not yet.
        let status = try runUbiquity(["protection", "status"], environment: laptop.environment).output
        #expect(status.contains("sealed:     key-value stores; documents' contents") && status.contains("not sealed: documents' names, sizes and dates\n"), "\(status)")

        // The audit finds plaintext where it is: on the devices.
        #expect(!KeyValueLeakageTests.leaks(of: [standardMarker, advancedMarker], in: phone.documents).isEmpty)
        // The log was kept at debug: it holds the requests, not nothing.
        #expect(((try? String(contentsOf: log, encoding: .utf8)) ?? "").contains("/v1/chunks"), "the audit read a log that says something")
    }
}
