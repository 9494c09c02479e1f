import Foundation
import GRDB
import Testing
import UbiquityClient
import UbiquityKeys
import UbiquityProtocol
import UbiquityTestSupport
@testable import UbiquityAgent

/// Key-value stores under the account's keys, with a real server and the agent's store sync:
/// what the server keeps names no key and holds no value, and what a lying server serves — a
/// value moved to another key, an old value again, a plaintext value under Advanced Data
/// Protection — is refused, the store keeping what it had. The lies are told the way a
/// malicious operator would tell them: by changing the server's database.
@Suite struct SealedKeyValueTests {
    let game = "ABCDE12345.com.example.game"
    let tests = KeyValueSyncTests()

    /// The server's database, as its operator sees it.
    static func database(_ dir: String) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        return try DatabaseQueue(path: dir + "/server/ubiquity.sqlite", configuration: configuration)
    }

    /// Serves `change` to devices as the store's next change (what a server does when a row
    /// changes), on a thread of its own (it may wait for the server's write lock).
    static func serve(_ dir: String, _ change: @escaping @Sendable (Database) throws -> Void) async throws {
        try await onOwnThread {
            let queue = try database(dir)
            try queue.write { db in
                try change(db)
                try db.execute(sql: "UPDATE kvStore SET sequence = sequence + 1")
                try db.execute(sql: "UPDATE kv SET sequence = (SELECT sequence FROM kvStore WHERE kvStore.id = kv.storeId) WHERE sequence = -1")
            }
            try queue.close()
        }
    }

    /// The name the server files `key` under, as `device` computes it.
    func tag(_ key: String, on device: KeyValueSyncTests.Device) async throws -> String {
        guard case .holding(let rootKeys, _, _, _) = try await #require(device.keys).current() else { throw EncryptionError(.malformed, "no keys") }
        return try KeyValueKeys(store: game, rootKeys: rootKeys).storedName(of: key)
    }

    /// Two devices in step: the laptop named the player and reached level 7.
    func twoDevices(_ base: URL, _ dir: String) async throws -> (laptop: KeyValueSyncTests.Device, phone: KeyValueSyncTests.Device) {
        let laptop = try await tests.device("laptop", base: base, dir: dir)
        let phone = try await tests.device("phone", base: base, dir: dir)
        laptop.kv.set("Ada Lovelace", forKey: "player")
        laptop.reach(7)
        try await laptop.sync.sync(game)
        #expect(try await phone.sync.sync(game).isEmpty)
        let (game, phoneStore) = (game, phone)
        #expect(await eventually { phoneStore.kv.string(forKey: "player") == "Ada Lovelace" && phoneStore.kv.longLong(forKey: "highestLevel") == 7 })
        #expect(phone.file(game).entries["player"]?.value == .string("Ada Lovelace"))
        return (laptop, phone)
    }

    @Test func theServerKeepsNeitherNamesNorValues() async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let (laptop, phone) = try await twoDevices(base, dir)
            defer { laptop.remove(); phone.remove() }
            let rows = try Self.database(dir).read { db in try Row.fetchAll(db, sql: "SELECT key, value, sealed FROM kv") }
            #expect(rows.count == 2)
            for row in rows {
                let key: String = row["key"], sealed: Data? = row["sealed"], value: Data? = row["value"]
                #expect(key.count == 43 && key != "player" && key != "highestLevel")
                #expect(sealed != nil && value == Data(), "the value is sealed; its column only says it is there")
            }
            // Nor anywhere in the database's files.
            for file in ["ubiquity.sqlite", "ubiquity.sqlite-wal"] {
                let bytes = (try? Data(contentsOf: URL(fileURLWithPath: dir + "/server/" + file))) ?? Data()
                for plaintext in ["Lovelace", "highestLevel"] { #expect(bytes.range(of: Data(plaintext.utf8)) == nil, "\(plaintext) in \(file)") }
            }
        }
    }

    @Test func aValueMovedToAnotherKeyIsRefused() async throws {
        let game = game
        try await ContainerSyncTests().withServer { base, dir in
            let (laptop, phone) = try await twoDevices(base, dir)
            defer { laptop.remove(); phone.remove() }
            // The server swaps the two keys' sealed values.
            try await Self.serve(dir) { db in
                let rows = try Row.fetchAll(db, sql: "SELECT key, sealed FROM kv ORDER BY key")
                for (row, other) in zip(rows, rows.reversed()) {
                    try db.execute(sql: "UPDATE kv SET sealed = ?, sequence = -1 WHERE key = ?", arguments: [other["sealed"] as Data, row["key"] as String])
                }
            }
            let refusals = try await phone.sync.sync(game)
            #expect(refusals.map(\.code) == [.authenticationFailed, .authenticationFailed], "\(refusals)")
            #expect(phone.file(game).entries["player"]?.value == .string("Ada Lovelace") && phone.file(game).entries["highestLevel"]?.value == .integer(7))
            #expect(await phone.sync.errors[game] == nil, "sync() itself does not record; run() does")
        }
    }

    @Test func anOldValueServedAgainIsRefused() async throws {
        let game = game
        try await ContainerSyncTests().withServer { base, dir in
            let (laptop, phone) = try await twoDevices(base, dir)
            defer { laptop.remove(); phone.remove() }
            let level = try await tag("highestLevel", on: phone)
            let old = try Self.database(dir).read { db in try Row.fetchOne(db, sql: "SELECT key, sealed, timestamp FROM kv WHERE key = ?", arguments: [level]) }
            // The laptop reaches level 9; the phone takes it.
            laptop.reach(9)
            try await laptop.sync.sync(game)
            #expect(try await phone.sync.sync(game).isEmpty)
            #expect(phone.file(game).entries["highestLevel"]?.value == .integer(9))
            // The server serves level 7 again, with its own seal and time: an honest old value.
            let row = try #require(old)
            let (sealed, timestamp): (Data, Double) = (row["sealed"], row["timestamp"])
            try await Self.serve(dir) { db in
                try db.execute(sql: "UPDATE kv SET sealed = ?, timestamp = ?, sequence = -1 WHERE key = ?", arguments: [sealed, timestamp, level])
            }
            let refusals = try await phone.sync.sync(game)
            #expect(refusals.map(\.code) == [.replayed], "\(refusals)")
            #expect(phone.file(game).entries["highestLevel"]?.value == .integer(9))
        }
    }

    @Test func aChangedTimestampOrAFlippedRemovalChangesNothing() async throws {
        let game = game
        try await ContainerSyncTests().withServer { base, dir in
            let (laptop, phone) = try await twoDevices(base, dir)
            defer { laptop.remove(); phone.remove() }
            // The server says the player was removed (a value kept as a removal), and dates the
            // level later than its device did (to make it win over a newer one).
            let (player, level) = (try await tag("player", on: phone), try await tag("highestLevel", on: phone))
            try await Self.serve(dir) { db in
                try db.execute(sql: "UPDATE kv SET value = NULL, sequence = -1 WHERE key = ?", arguments: [player])
                try db.execute(sql: "UPDATE kv SET timestamp = timestamp + 1000, sequence = -1 WHERE key = ?", arguments: [level])
            }
            let refusals = try await phone.sync.sync(game)
            #expect(refusals.map(\.code) == [.authenticationFailed], "the timestamp: \(refusals)")
            #expect(phone.file(game).entries["player"]?.value == .string("Ada Lovelace"), "the removal flag is not what removes a key: the seal is")
            #expect(phone.file(game).entries["highestLevel"]?.value == .integer(7))
        }
    }

    /// Why the account takes no plaintext value.
    enum SealedOnly: String, CaseIterable, Sendable {
        /// Advanced Data Protection.
        case advanced
        /// Standard, its devices requiring everything sealed (`ubiquity protection require-sealed`).
        case required
    }

    @Test(arguments: SealedOnly.allCases) func aPlaintextValueUnderAdvancedOrOnceEverythingIsSealedIsRefused(rule: SealedOnly) async throws {
        let game = game
        try await ContainerSyncTests().withServer { base, dir in
            let (laptop, phone) = try await twoDevices(base, dir)
            defer { laptop.remove(); phone.remove() }
            let laptopKeys = try #require(laptop.keys), phoneKeys = try #require(phone.keys)
            switch rule {
            case .advanced: _ = try await laptopKeys.keys.setCustody(.advanced)
            case .required: #expect(try await laptopKeys.keys.requireSealing().sealedOnly)
            }
            _ = try await phoneKeys.current(refresh: true)
            // Under Advanced the server holds no key: it can only put a plaintext value in (and
            // under Standard, once everything must be sealed, a plaintext one is a downgrade).
            try await Self.serve(dir) { db in
                try db.execute(sql: """
                    INSERT INTO kv (storeId, key, value, size, timestamp, deviceId, deviceName, sequence)
                    SELECT storeId, 'player', ?, 30, ?, deviceId, deviceName, -1 FROM kv LIMIT 1
                    """, arguments: [Data(#"{"string":"Mallory"}"#.utf8), Date().timeIntervalSince1970 + 100])
            }
            let refusals = try await phone.sync.sync(game)
            #expect(refusals.map(\.code) == [.unsupportedFormat], "\(refusals)")
            #expect(phone.file(game).entries["player"]?.value == .string("Ada Lovelace"))
            // Values written now are sealed in the new epoch, and still reach the other device.
            laptop.reach(8)
            try await laptop.sync.sync(game)
            #expect(try await phone.sync.sync(game).isEmpty)
            #expect(phone.file(game).entries["highestLevel"]?.value == .integer(8))
        }
    }

    @Test func plaintextValuesAnOlderBuildLeftAreSealedInTheirPlace() async throws {
        let game = game
        try await ContainerSyncTests().withServer { base, dir in
            // A device of the older build wrote values as they were.
            let old = try await tests.device("old", base: base, dir: dir, sealed: false)
            defer { old.remove() }
            old.kv.set("Ada Lovelace", forKey: "player")
            old.reach(3)
            old.kv.set("gone", forKey: "removed")
            #expect(old.kv.synchronize())
            try await old.sync.sync(game)
            old.kv.removeObject(forKey: "removed")
            #expect(old.kv.synchronize())
            try await old.sync.sync(game)
            let keys = try await Self.database(dir).read { db in try String.fetchAll(db, sql: "SELECT key FROM kv ORDER BY key") }
            #expect(keys == ["highestLevel", "player", "removed"])
            // The upgraded laptop sets the account's keys up, takes the values, seals them in place.
            let laptop = try await tests.device("laptop", base: base, dir: dir)
            defer { laptop.remove() }
            #expect(try await laptop.sync.sync(game).isEmpty)
            #expect(laptop.file(game).entries["player"]?.value == .string("Ada Lovelace") && laptop.file(game).entries["highestLevel"]?.value == .integer(3))
            let rows = try Self.database(dir).read { db in try Row.fetchAll(db, sql: "SELECT key, value, sealed FROM kv") }
            #expect(rows.count == 2 && rows.allSatisfy { ($0["key"] as String).count == 43 && $0["sealed"] as Data? != nil }, "\(rows)")
            // Another upgraded device reads them sealed.
            let phone = try await tests.device("phone", base: base, dir: dir)
            defer { phone.remove() }
            #expect(try await phone.sync.sync(game).isEmpty)
            #expect(phone.file(game).entries["player"]?.value == .string("Ada Lovelace") && phone.file(game).entries["removed"] == nil)
        }
    }
}
