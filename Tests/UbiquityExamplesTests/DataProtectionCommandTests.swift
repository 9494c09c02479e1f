import Foundation
import GRDB
import Testing
import UbiquityTestSupport

/// The account's keys as a user handles them, with real processes: `ubiquity login` sets them
/// up on the first device and joins the next by the server's escrow; `protection advanced`
/// needs a recovery key first and then shuts password sign-in out; the recovery key lets a new
/// device in; a removed device gets no key of the epoch that follows; `protection standard`
/// gives the server its copy back; and a roster the server rolls back is refused.
@Suite(.serialized) struct DataProtectionCommandTests {
    struct Device {
        let name: String
        let home: [String: String]

        init(_ name: String, in dir: TemporaryDirectory) {
            self.name = name
            home = ["XDG_CONFIG_HOME": dir.file("\(name)/config").path, "XDG_DATA_HOME": dir.file("\(name)/share").path,
                    "XDG_RUNTIME_DIR": dir.file("\(name)/run").path]
        }

        func run(_ arguments: [String], input: String = "") throws -> (status: Int32, output: String) {
            try runUbiquity(arguments, environment: home, input: input)
        }

        /// `ubiquity login` (under Advanced, waiting a second at most for a device to answer).
        func login(_ server: RunningServer, recoveryKey: String? = nil) throws -> (status: Int32, output: String) {
            try login(server.base, recoveryKey: recoveryKey)
        }

        /// `ubiquity login` to the server at `base` (a relay in front of one, say).
        func login(_ base: URL, recoveryKey: String? = nil) throws -> (status: Int32, output: String) {
            try run(["login", "--server", base.absoluteString, "--account", "ada", "--device-name", name, "--password-stdin", "--wait-seconds", "1"]
                        + (recoveryKey == nil ? [] : ["--recovery-key"]),
                    input: "correct horse\n" + (recoveryKey.map { $0 + "\n" } ?? ""))
        }

        /// This device's identifier, from `devices list`.
        func identifier() throws -> String {
            let list = try run(["devices", "list"])
            let line = try #require(list.output.split(separator: "\n").first { $0.hasSuffix("(this device)") }, "\(list.output)")
            return String(line.prefix(32))
        }
    }

    @Test func theKeysAreSetUpJoinedSwitchedRecoveredAndRemovedByTheirCommands() async throws {
        let dir = try TemporaryDirectory("protection"); defer { dir.remove() }
        let server = try await RunningServer.start(data: dir.file("data").path)
        defer { server.stop() }
        let laptop = Device("laptop", in: dir), phone = Device("phone", in: dir), tablet = Device("tablet", in: dir)

        // The escrow key: a file of the server's own, mode 0600.
        let escrowMode = try FileManager.default.attributesOfItem(atPath: dir.file("data/escrow.key").path)[.posixPermissions] as? Int
        #expect(escrowMode == 0o600)

        let first = try await laptop.loggingIn(server.base)
        #expect(first.status == 0 && first.output.contains("Standard Data Protection; this device holds the account's keys (epoch 0, 1 device)"), "\(first.output)")
        let keyringMode = try FileManager.default.attributesOfItem(atPath: dir.file("laptop/config/ubiquity/keyring.json").path)[.posixPermissions] as? Int
        #expect(keyringMode == 0o600)
        let second = try await phone.loggingIn(server.base)
        #expect(second.status == 0 && second.output.contains("(epoch 0, 2 devices)"), "joined by the escrow: \(second.output)")
        let status = try await laptop.running(["protection", "status"])
        #expect(status.status == 0 && status.output.contains("Standard Data Protection") && status.output.contains("phone") && status.output.contains("holds the current key"), "\(status.output)")
        // What this device seals is said (the default: documents too), and what it does not,
        // once its agent.json says so.
        #expect(status.output.contains("sealed:     key-value stores; documents' contents, names, types, sizes and dates"), "\(status.output)")
        try Data(#"{"sealedContents": false}"#.utf8).write(to: dir.file("laptop/config/ubiquity/agent.json"))
        let plaintext = try await laptop.running(["protection", "status"])
        #expect(plaintext.output.contains("not sealed by this device: documents' contents, names, types, sizes and dates (this device's agent.json says \"sealedContents\": false)"), "\(plaintext.output)")
        try FileManager.default.removeItem(at: dir.file("laptop/config/ubiquity/agent.json"))

        // Advanced needs a recovery key first (or saying so); then it starts epoch 1.
        let early = try await laptop.running(["protection", "advanced", "--yes"])
        #expect(early.status != 0 && early.output.contains("recovery-key create"), "\(early.output)")
        let created = try await laptop.running(["recovery-key", "create"])
        let recoveryKey = try #require(created.output.split(separator: "\n").map(String.init).first { $0.split(separator: "-").count == 14 }, "\(created.output)")
        #expect(created.status == 0 && recoveryKey.count == 69, "14 groups of 4 and their dashes: \(created.output)")
        let advanced = try await laptop.running(["protection", "advanced", "--yes"])
        #expect(advanced.status == 0 && advanced.output.contains("Advanced Data Protection") && advanced.output.contains("epoch:      1"), "\(advanced.output)")
        let phoneNow = try await phone.running(["protection", "status"])
        #expect(phoneNow.output.contains("Advanced") && phoneNow.output.contains("holds the current key"), "the phone got epoch 1 from the laptop: \(phoneNow.output)")

        // A password no longer lets a device in; the recovery key does.
        let refused = try await tablet.loggingIn(server.base)
        #expect(refused.status == 2 && refused.output.contains("Advanced Data Protection") && refused.output.contains("--recovery-key")
                    && refused.output.contains("no device of the account answered in time"), "\(refused.output)")
        // One character changed (to another than it was: a key ending in Z once passed as "mistyped").
        let mistyped = try await tablet.running(["recovery-key", "use"], input: String(recoveryKey.dropLast()) + (recoveryKey.last == "Z" ? "Y" : "Z") + "\n")
        #expect(mistyped.status != 0 && mistyped.output.contains("mistyped"), "\(mistyped.output)")
        let recovered = try await tablet.loggingIn(server.base, recoveryKey: recoveryKey)
        #expect(recovered.status == 0 && recovered.output.contains("Advanced Data Protection; this device holds the account's keys (epoch 1, 3 devices)"), "\(recovered.output)")

        // The tablet removed: epoch 2, which it never gets.
        let removed = try await laptop.running(["devices", "remove", try await tablet.identifying()])
        #expect(removed.status == 0 && removed.output.contains("epoch 2"), "\(removed.output)")
        let outside = try await tablet.running(["protection", "status"])
        #expect(outside.output.contains("does not hold the current key") && !outside.output.contains("tablet"), "\(outside.output)")
        #expect(try await phone.running(["protection", "status"]).output.contains("holds the current key"))
        // Signed in again, the removed tablet asks to join as a new device (its old keys sign nothing).
        let again = try await tablet.loggingIn(server.base)
        #expect(again.status == 2 && again.output.contains("asking its devices"), "\(again.output)")

        // No escrow copy survives the switch; Standard again seals every epoch to the escrow.
        let database = try DatabaseQueue(path: dir.file("data/ubiquity.sqlite").path)
        #expect(try await database.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM keyEnvelope WHERE recipient = 'escrow'") } == 0)
        let standard = try await laptop.running(["protection", "standard"])
        #expect(standard.status == 0 && standard.output.contains("Standard Data Protection"), "\(standard.output)")
        #expect(try await database.read { try Int.fetchAll($0, sql: "SELECT epoch FROM keyEnvelope WHERE recipient = 'escrow' ORDER BY epoch") } == [0, 1, 2])
        // The operator's check: the roster verifies, and every escrow copy opens with the key file.
        let fsck = try await laptop.running(["fsck", "--data", dir.file("data").path])
        #expect(fsck.status == 0 && fsck.output.contains("checked the keys of 1 account(s)") && fsck.output.contains("no problems found"), "\(fsck.output)")

        // The server rolls the roster back (its last entry dropped): the laptop, which saw that
        // entry, refuses it; the phone, which never saw it, cannot tell (its pinned head is older).
        try await database.write { try $0.execute(sql: "DELETE FROM rosterEntry WHERE idx = (SELECT MAX(idx) FROM rosterEntry)") }
        let rolledBack = try await laptop.running(["protection", "status"])
        #expect(rolledBack.status == 2 && rolledBack.output.contains("rolled back"), "\(rolledBack.output)")
        #expect(try await phone.running(["protection", "status"]).status == 0)
        try database.close()
    }
}
