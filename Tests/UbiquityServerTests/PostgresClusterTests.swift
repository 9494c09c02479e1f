import CompressNIO
import Crypto
import Foundation
import Hummingbird
import NIOFoundationCompat
import HummingbirdTesting
import HummingbirdWSTesting
import Logging
import PostgresNIO
import Synchronization
import Testing
import UbiquityTestSupport
import UbiquityProtocol
@testable import UbiquityServer

/// Two server instances on one PostgreSQL database: a change committed through one reaches
/// devices connected to the other (LISTEN/NOTIFY), containers and key-value stores alike.
@Suite struct ScaleOutTests {
    /// Two instances on one database (Ada's and Bob's accounts), each listening to the other:
    /// `body` gets a live test client of each.
    func twoInstances(_ body: @escaping @Sendable (any TestClientProtocol & Sendable, any TestClientProtocol & Sendable) async throws -> Void) async throws {
        let first = try await TestServer.withAccount("ada", on: .postgres); defer { first.remove() }
        _ = try await first.admin.createAccount(name: "bob", password: "correct horse")
        let second = try await first.secondInstance()
        let relay = Task { await second.relayChanges() }
        defer {
            relay.cancel()
            Task { await second.close() }
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while !(first.server.services.notifier.isRelaying && second.services.notifier.isRelaying) {
            guard ContinuousClock.now < deadline else { Issue.record("the instances never started listening"); return }
            try await Task.sleep(for: .milliseconds(5))
        }
        try await first.server.makeApplication().test(.live) { rawFirst in
            try await second.makeApplication().test(.live) { rawSecond in try await body(rawFirst, rawSecond) }
        }
    }

    @Test(.enabled(if: Backend.all.contains(.postgres))) func aChangeThroughOneInstanceIsPushedFromTheOther() async throws {
        try await twoInstances { rawFirst, rawSecond in
            let one = Client(client: rawFirst), two = Client(client: rawSecond)
            let laptop = try await one.signIn("ada", device: "laptop")  // on the first instance
            let phone = try await two.signIn("ada", device: "phone")    // on the second
            let bob = try await two.signIn("bob")

            let connected = Confirmations()
            async let phoneEvents = PushTests().listen(rawSecond, token: phone.token) { events in
                if events.count == 1 { connected.mark("phone") }
                return events.contains { $0.type == "keyValueChanged" } && events.contains { $0.type == "changed" && $0.sequence == 1 }
                    && events.contains { $0.type == "keysChanged" }
            }
            async let laptopEvents = PushTests().listen(rawFirst, token: laptop.token) { events in
                if events.count == 1 { connected.mark("laptop") }
                return events.contains { $0.type == "keyValueChanged" }
            }
            async let bobEvents = PushTests().listen(rawSecond, token: bob.token) { events in
                if events.count == 1 { connected.mark("bob") }
                return events.contains { $0.type == "changed" }
            }
            try await connected.wait(for: ["phone", "laptop", "bob"])

            // An upload and its commit through the first instance; a key-value change through the second.
            let chunk: [UInt8] = [7, 7, 7]
            let commit = try await one.commit(notes, "doc", fileUpdate("a.txt", [chunk]), token: laptop.token)
            // Both instances see the same item, whoever asks.
            let seen = try await two.changes(notes, token: phone.token)
            #expect(seen.items.map(\.revision) == [commit.revision] && seen.items.first?.uploaded == true)
            #expect(try await two.send(.get, "/v1/chunks/\(sha256(chunk))", token: phone.token).body == ByteBuffer(bytes: chunk))
            let store = "ABCDE12345.com.example.notes"
            let kv = try await two.send(.post, "/v1/kv/\(store)", token: phone.token,
                                        json: KeyValueUpdate(changes: [KeyValueChange(key: "theme", value: .string("dark"), timestamp: 1_800_000_000)]))
            #expect(kv.status == .ok, "kv: \(String(buffer: kv.body))")
            // The laptop sets the account's keys up through the first instance: the phone, on the second, is told.
            _ = try await SealedKeyValueServerTests().setUpKeys(one, laptop)

            let heardByPhone = try await phoneEvents
            let expected = [PushEvent.connected, PushEvent(type: "changed", container: notes, sequence: 1), PushEvent(type: "keyValueChanged", container: store, sequence: 1),
                            PushEvent(type: "keysChanged")]
            #expect(Set(heardByPhone.map { "\($0)" }) == Set(expected.map { "\($0)" }) && heardByPhone.count == 4, "the phone heard \(heardByPhone)")
            #expect(try await laptopEvents == [.connected, PushEvent(type: "keyValueChanged", container: store, sequence: 1)],
                    "the device that made a change is not told of it (by either instance); it hears the phone's")
            let bobsPhone = try await one.signIn("bob", device: "phone")
            _ = try await one.commit(notes, "b", fileUpdate("b.txt", []), token: bobsPhone.token)
            #expect(try await bobEvents == [.connected, PushEvent(type: "changed", container: notes, sequence: 1)], "Bob heard only his own account")
        }
    }
}

extension ScaleOutTests {
    /// A share's events reach the devices connected to the other instance: Bob, on the second,
    /// hears that he was invited (`sharesChanged`) and that Ada, on the first, changed something
    /// inside the share (`shareChanged`); Ada hears his answer.
    @Test(.enabled(if: Backend.all.contains(.postgres))) func aSharesEventsReachTheOtherInstance() async throws {
        try await twoInstances { rawFirst, rawSecond in
            let one = Client(client: rawFirst), two = Client(client: rawSecond)
            let ada = try await one.signIn("ada", device: "laptop"), bob = try await two.signIn("bob", device: "phone")
            let folder = ItemUpdate(baseRevision: nil, name: "Trip", kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest())
            _ = try await one.commit(notes, "trip", folder, token: ada.token)
            let share = try await one.send(.post, "/v1/shares", token: ada.token, json: ShareCreateRequest(container: notes, item: "trip")).decode(ShareInfo.self)

            let connected = Confirmations()
            async let bobEvents = PushTests().listen(rawSecond, token: bob.token) { events in
                if events.count == 1 { connected.mark("bob") }
                return events.contains { $0.type == "shareChanged" }
            }
            async let adaEvents = PushTests().listen(rawFirst, token: ada.token) { events in
                if events.count == 1 { connected.mark("ada") }
                return events.contains { $0.type == "sharesChanged" }
            }
            try await connected.wait(for: ["bob", "ada"])
            let invitation = try await one.send(.post, "/v1/shares/\(share.id)/participants", token: ada.token, json: ShareInviteRequest(name: "bob", role: .readWrite))
                .decode(ShareInvitationResponse.self)
            #expect(try await two.send(.post, "/v1/shares/invitations/\(invitation.id)/accept", token: bob.token).status == .noContent)
            var note = fileUpdate("Note.txt", [])
            note.parent = "trip"
            let made = try await one.commit(notes, "note", note, token: ada.token)

            let heardByBob = try await bobEvents
            #expect(heardByBob.contains { $0.type == "sharesChanged" }, "Bob was told he was invited: \(heardByBob)")
            #expect(heardByBob.contains(PushEvent(type: "shareChanged", container: share.id, sequence: made.item.sequence)), "\(heardByBob)")
            #expect(try await adaEvents.contains { $0.type == "sharesChanged" }, "Ada was told Bob answered")
        }
    }
}

/// PostgreSQL going away and coming back, on a cluster of the test's own. (Alone it takes 15 s;
/// in the whole suite on two cores, making the cluster and its schema took 130–160 s: the limit
/// is for a hang, not a pace.)
@Suite struct OutageTests {
    @Test(.enabled(if: Backend.all.contains(.postgres)), .timeLimit(.minutes(5)))
    func anOutageIsA503AndDevicesCatchUpWhenTheDatabaseIsBack() async throws {
        let started = try await onOwnThread { try clusterScript(["start"]) } // (seconds of waiting: not on a shared thread)
        #expect(started.status == 0)
        let values = Dictionary(uniqueKeysWithValues: started.output.split(separator: "\n").compactMap { line -> (String, String)? in
            let parts = line.replacingOccurrences(of: "export ", with: "").split(separator: "=", maxSplits: 1)
            return parts.count == 2 ? (String(parts[0]), parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "'"))) : nil
        })
        let url = try #require(values["UBIQUITY_TEST_POSTGRES"]), cluster = try #require(values["UBIQUITY_TEST_POSTGRES_DIR"])
        defer { _ = try? clusterScript(["stop", cluster]) }

        // (A cluster just started beside the whole suite on two cores may take more than the
        // pool's 5 s to give its first connections: tried again, the outage is what is tested.)
        func patiently<T>(_ body: () async throws -> T) async throws -> T {
            for _ in 1..<3 {
                do { return try await body() } catch let error as SyncError where error.code == "databaseUnavailable" {
                    try await Task.sleep(for: .seconds(2))
                }
            }
            return try await body()
        }
        let server = try await patiently { try await TestServer(.postgres, postgresURL: url) }; defer { server.remove() }
        _ = try await patiently { try await server.admin.createAccount(name: "ada", password: "correct horse") }
        try await server.server.makeApplication().test(.live) { raw in
            let client = Client(client: raw)
            let phone = try await client.signIn("ada", device: "phone")
            let catchUps = Confirmations()
            async let events = PushTests().listen(raw, token: phone.token) { events in
                if events.count == 1 { catchUps.mark("first") }
                return events.filter { $0 == .connected }.count == 2
            }
            try await catchUps.wait(for: ["first"])
            let deadline = ContinuousClock.now + .seconds(10)
            while !server.server.services.notifier.isRelaying {
                guard ContinuousClock.now < deadline else { Issue.record("never listening"); return }
                try await Task.sleep(for: .milliseconds(5))
            }

            #expect(try await onOwnThread { try clusterScript(["pause", cluster]) }.status == 0)
            // Each answered, not hung: the pool gives up on a connection after its lease timeout
            // (seconds); the bound is for a hang (CI's two busy cores took 15.1 s for both).
            var before = ContinuousClock.now
            let down = try await client.send(.get, "/health")
            #expect(down.status == .serviceUnavailable && down.errorCode == "databaseUnavailable")
            #expect(ContinuousClock.now - before < .seconds(30), "the health check was answered, not hung")
            before = ContinuousClock.now
            let refused = try await client.put(notes, "doc", fileUpdate("a.txt", []), token: phone.token)
            #expect(refused.status == .serviceUnavailable && refused.errorCode == "databaseUnavailable")
            #expect(ContinuousClock.now - before < .seconds(30), "the commit was answered, not hung")

            // Back: requests work at once, and the device is told to catch up (the relay missed
            // whatever other instances did meanwhile).
            #expect(try await onOwnThread { try clusterScript(["resume", cluster]) }.status == 0)
            let back = ContinuousClock.now + .seconds(20)
            while try await client.send(.get, "/health").status != .ok {
                guard ContinuousClock.now < back else { Issue.record("the server never recovered"); return }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(try await client.commit(notes, "doc", fileUpdate("a.txt", []), token: phone.token).item.sequence == 1)
            let heard = try await events
            #expect(heard.filter { $0 == .connected }.count == 2, "a catch-up after the outage: \(heard)")
        }
    }
}

/// Migrations take a lock of their schema only: instances of one schema migrate one at a time,
/// others never wait on them (seen in CI, when the lock was the whole database's: servers' starts
/// waited more than 90 s behind other schemas' migrations). Two connections, no server: while one
/// holds a schema's lock, the other takes another schema's at once and waits for the same one
/// (until its `lock_timeout`).
@Suite struct MigrationLockTests {
    @Test(.enabled(if: Backend.all.contains(.postgres)), .timeLimit(.minutes(1)))
    func aMigrationHoldsUpItsOwnSchemaOnly() async throws {
        let held = try PostgresLocation(url: try Backend.postgresURL()), other = try PostgresLocation(url: try Backend.postgresURL())
        let logger = Logger(label: "test")
        let holder = try await PostgresConnection.connect(configuration: try held.connectionConfiguration(), id: 9, logger: logger)
        let asker = try await PostgresConnection.connect(configuration: try held.connectionConfiguration(), id: 10, logger: logger)
        // (The connections are closed whatever happens: one left open traps as it goes.)
        do {
            try await holder.query("BEGIN", logger: logger)
            try await PostgresDatabase.lockMigrations(holder, location: held, logger: logger)
            // Another schema's lock: taken at once.
            try await asker.query("BEGIN", logger: logger)
            try await asker.query("SET LOCAL lock_timeout = '3s'", logger: logger)
            try await PostgresDatabase.lockMigrations(asker, location: other, logger: logger)
            try await asker.query("ROLLBACK", logger: logger)
            // The same schema's: waited for, and given up after the timeout.
            try await asker.query("BEGIN", logger: logger)
            try await asker.query("SET LOCAL lock_timeout = '1s'", logger: logger)
            await #expect(throws: PSQLError.self, "a migration of the held schema ran beside it") {
                try await PostgresDatabase.lockMigrations(asker, location: held, logger: logger)
            }
            try await asker.query("ROLLBACK", logger: logger)
            try await holder.query("ROLLBACK", logger: logger)
        } catch {
            Issue.record(error, "another schema's migration lock was not taken at once")
        }
        try await holder.close()
        try await asker.close()
    }
}
