import Foundation
import GRDB
import Testing
import UbiquityTestSupport

/// What the server keeps of an account's key-value stores, looked at the way an operator, a
/// thief of its disk or a reader of its logs would: after two running devices synced values
/// under Standard and then under Advanced Data Protection, no key name and no value is anywhere
/// in the server's data folder (database, its journal, chunk packs) or in its log, kept at
/// `debug`. (Documents are not sealed yet: their names and contents are left out of this audit
/// until they are.)
@Suite struct KeyValueLeakageTests {
    typealias Device = DataProtectionCommandTests.Device
    typealias Agent = HostileKeyValueServerTests.Agent
    static let store = "ABCDE12345.com.example.game"

    /// Every file at or under `place` in which one of `secrets` appears (as UTF-8).
    /// (The search reads every byte of the place once per secret: long CPU work, made on a thread
    /// of its own at low priority, not on one of the two the tests' tasks share.)
    static func leaks(of secrets: [String], in place: URL) async -> [String] {
        (try? await onBackgroundThread { scan(for: secrets, in: place) }) ?? ["the search did not run"]
    }

    static func scan(for secrets: [String], in place: URL) -> [String] {
        var found: [String] = []
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: place.path, isDirectory: &isFolder) else { return ["no \(place.path)"] }
        let files: [URL]
        if isFolder.boolValue {
            guard let listed = FileManager.default.enumerator(at: place, includingPropertiesForKeys: nil) else { return ["cannot list \(place.path)"] }
            files = listed.compactMap { $0 as? URL }
        } else {
            files = [place]
        }
        for file in files {
            guard let bytes = try? Data(contentsOf: file) else { continue }
            for secret in secrets where bytes.range(of: Data(secret.utf8)) != nil { found.append("\(secret) in \(file.lastPathComponent)") }
        }
        return found
    }

    @Test func theServerHoldsNoKeyNameAndNoValueUnderEitherCustody() async throws {
        let dir = try TemporaryDirectory("kv-leakage"); defer { dir.remove() }
        let log = dir.file("server.log")
        let server = try await RunningServer.start(data: dir.file("data").path, logging: "debug", to: log)
        defer { server.stop() }
        let laptop = Device("laptop", in: dir), phone = Device("phone", in: dir)
        for device in [laptop, phone] { #expect(try await device.loggingIn(server.base).status == 0) }
        let laptopAgent = try Agent(laptop, in: dir), phoneAgent = try Agent(phone, in: dir)
        defer { laptopAgent.stop(); phoneAgent.stop() }
        let store = Self.store
        #expect(try await phone.running(["kv", "set", store, "opened", "yes"]).status == 0)

        // Under Standard.
        #expect(try await laptop.running(["kv", "set", store, "standardSecretName", "StandardSecretValue-7f3a"]).status == 0)
        #expect(try await HostileKeyValueServerTests.until(phone, ["kv", "get", store, "standardSecretName"], nudging: phone) { $0.contains("StandardSecretValue-7f3a") })
        var secrets = ["standardSecretName", "StandardSecretValue-7f3a"]
        #expect(await Self.leaks(of: secrets, in: dir.file("data")) == [])
        #expect(await Self.leaks(of: secrets, in: log) == [])

        // Under Advanced, a new value; the old one changed too.
        #expect(try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"]).status == 0)
        #expect(try await laptop.running(["kv", "set", store, "advancedSecretName", "AdvancedSecretValue-19c2"]).status == 0)
        #expect(try await laptop.running(["kv", "set", store, "standardSecretName", "ChangedSecretValue-55be"]).status == 0)
        #expect(try await HostileKeyValueServerTests.until(phone, ["kv", "list", store], nudging: phone) {
            $0.contains("AdvancedSecretValue-19c2") && $0.contains("ChangedSecretValue-55be")
        }, "\(phoneAgent.logged.suffix(2000))")
        secrets += ["advancedSecretName", "AdvancedSecretValue-19c2", "ChangedSecretValue-55be"]
        #expect(await Self.leaks(of: secrets, in: dir.file("data")) == [])
        #expect(await Self.leaks(of: secrets, in: log) == [])
        // The audit finds plaintext where it is: on the devices, which hold the values now set.
        let held = ["standardSecretName", "advancedSecretName", "AdvancedSecretValue-19c2", "ChangedSecretValue-55be"]
        #expect(Set(await Self.leaks(of: held, in: dir.file("phone")).map { $0.components(separatedBy: " in ")[0] }) == Set(held))
        // The log was kept at debug: it holds the requests, not nothing.
        #expect(((try? String(contentsOf: log, encoding: .utf8)) ?? "").contains("/v1/kv/"), "the audit read a log that says something")
        try await laptopAgent.stopped() // before the server goes
        try await phoneAgent.stopped()
    }
}

/// When the roster changes, the server tells the account's other devices at once
/// (`{"type":"keysChanged"}`), and their agents read the keys again: a value the phone sets right
/// after the laptop turned Advanced on is sealed in the new epoch — not with the old key the
/// phone's agent had read a moment before (which it would otherwise keep for up to a minute).
@Suite struct KeysChangedPushTests {
    typealias Device = DataProtectionCommandTests.Device
    typealias Agent = HostileKeyValueServerTests.Agent

    @Test func aDeviceSealsInTheNewEpochAsSoonAsTheRosterChanges() async throws {
        let dir = try TemporaryDirectory("keys-changed"); defer { dir.remove() }
        let server = try await RunningServer.start(data: dir.file("data").path)
        defer { server.stop() }
        let laptop = Device("laptop", in: dir), phone = Device("phone", in: dir)
        for device in [laptop, phone] { #expect(try await device.loggingIn(server.base).status == 0) }
        let laptopAgent = try Agent(laptop, in: dir), phoneAgent = try Agent(phone, in: dir)
        defer { laptopAgent.stop(); phoneAgent.stop() }
        let store = HostileKeyValueServerTests.store
        let database = try DatabaseQueue(path: dir.file("data/ubiquity.sqlite").path)
        defer { try? database.close() }
        /// The epochs of the sealed values the server holds, newest change last.
        @Sendable func epochs() throws -> [UInt32] {
            try database.read { db in
                try Data.fetchAll(db, sql: "SELECT sealed FROM kv WHERE sealed IS NOT NULL ORDER BY sequence").map { sealed in
                    sealed.dropFirst().prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
                }
            }
        }
        // The phone's agent has read the keys (epoch 0) and sealed a value with them.
        #expect(try await phone.running(["kv", "set", store, "before", "1"]).status == 0)
        #expect(await eventuallyValue { (try? epochs()).flatMap { $0.count == 1 ? $0 : nil } } == [0], "\(phoneAgent.logged.suffix(2000))")
        try await Task.sleep(for: .seconds(1)) // the push connection open
        #expect(try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"]).status == 0)
        try await Task.sleep(for: .seconds(1)) // the push delivered, the keys read again
        #expect(try await phone.running(["kv", "set", store, "after", "2"]).status == 0)
        #expect(await eventuallyValue { (try? epochs()).flatMap { $0.count == 2 ? $0 : nil } } == [0, 1], "\(phoneAgent.logged.suffix(2000))")
        try await laptopAgent.stopped() // before the server goes
        try await phoneAgent.stopped()
    }
}
