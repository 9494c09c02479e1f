import Foundation
import GRDB
import ArgumentParser
import Ubiquity
import UbiquityDatabase

/// The database every writer keeps in iCloud, as a shoebox app does (`UbiquitousDatabase`:
/// a local store in `Chaos.nosync/`, change logs in `Databases/Chaos/logs/` synced by the
/// agent): notes only their device writes, and tallies every device writes (merged per column,
/// the latest by the hybrid clock winning).
enum ChaosDatabase {
    static let name = "Chaos"
    /// Rows only their device writes (`note/DEVICE-STEP`).
    static let ownTable = "note"
    /// Rows every device writes (`tally/tK`).
    static let sharedTable = "tally"
    /// How many tallies there are.
    static let sharedRows = 3

    /// The schema.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: ownTable) { table in
                table.primaryKey("id", .text)
                table.column("device", .text).notNull()
                table.column("body", .text).notNull()
            }
            try db.create(table: sharedTable) { table in
                table.primaryKey("id", .text)
                table.column("value", .text).notNull()
            }
        }
        return migrator
    }

    /// Opens (or makes) the database in the container at `root`, whose agent `containers` asks
    /// for segments not downloaded yet.
    static func open(root: URL, containers: UbiquityContainers, automaticallySynchronizes: Bool = true) throws -> UbiquitousDatabase {
        try UbiquitousDatabase(container: root, name: name, migrator: migrator, automaticallySynchronizes: automaticallySynchronizes, containers: containers)
    }

    /// Every row: `TABLE/ID` → its value (a note's body, a tally's value).
    static func rows(in db: Database) throws -> [String: String] {
        var rows: [String: String] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT id, body FROM \(ownTable)") { rows[ownTable + "/" + (row["id"] as String)] = row["body"] }
        for row in try Row.fetchAll(db, sql: "SELECT id, value FROM \(sharedTable)") { rows[sharedTable + "/" + (row["id"] as String)] = row["value"] }
        return rows
    }

    /// Sets (or, with a nil value, deletes) the row `TABLE/ID`.
    static func apply(_ path: String, _ value: String?, device: String, in db: Database) throws {
        let parts = path.split(separator: "/", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { throw ChaosError("not a row: \(path)") }
        switch (parts[0], value) {
        case (ownTable, let value?):
            try db.execute(sql: "INSERT INTO \(ownTable)(id, device, body) VALUES (?, ?, ?) ON CONFLICT(id) DO UPDATE SET body = excluded.body",
                           arguments: [parts[1], device, value])
        case (sharedTable, let value?):
            try db.execute(sql: "INSERT INTO \(sharedTable)(id, value) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET value = excluded.value", arguments: [parts[1], value])
        case (let table, nil):
            try db.execute(sql: "DELETE FROM \(table.quotedDatabaseIdentifier) WHERE id = ?", arguments: [parts[1]])
        default:
            throw ChaosError("not a table of the database: \(parts[0])")
        }
    }
}

extension Writer {
    /// The database, opened if it is not (and the device is signed in: signing out closes it,
    /// its data being the old account's); nil when it cannot be opened, the reason logged.
    mutating func openDatabase() -> UbiquitousDatabase? {
        if let database, !database.isClosed { return database }
        database = nil
        guard identity.token != nil else { return nil }
        do {
            database = try ChaosDatabase.open(root: root, containers: containers)
        } catch {
            FileHandle.standardError.write(Data("writer \(command.device): the database did not open: \(error)\n".utf8))
        }
        return database
    }

    /// Commits one transaction to the database: a note made, changed or deleted, or a note made
    /// with a tally set in the same transaction (which must arrive whole or not at all).
    /// Recorded once the transaction committed; written ahead as an intent.
    mutating func writeDatabase() async throws {
        guard let database = openDatabase() else { return }
        let owned = model.rows.keys.sorted()
        let value = "\(command.device)-\(model.steps)-\(random.next() % 10_000)"
        let note = "\(ChaosDatabase.ownTable)/\(command.device)-\(model.steps)"
        var changes: [(path: String, value: String?)]
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<40: changes = [(note, value)]
        case 40..<70 where !owned.isEmpty: changes = [(owned.randomElement(using: &random)!, value)]
        case 70..<85 where !owned.isEmpty: changes = [(owned.randomElement(using: &random)!, nil)]
        default: changes = [(note, value), ("\(ChaosDatabase.sharedTable)/t\(Int.random(in: 0..<ChaosDatabase.sharedRows, using: &random))", value)]
        }
        try intend("database", changes[0].path, to: changes.count > 1 ? changes[1].path : nil, value: changes[0].value)
        let device = command.device
        let transaction = changes
        do {
            try await database.writer.write { db in
                for change in transaction { try ChaosDatabase.apply(change.path, change.value, device: device, in: db) }
            }
            for change in changes { try record(.row, change.path, value: change.value, via: "database") }
        } catch {
            FileHandle.standardError.write(Data("writer \(command.device): step \(model.steps): the database transaction failed: \(error)\n".utf8))
            if database.isClosed { self.database = nil }
        }
    }

    /// After a kill cut a database step short: the transaction committed whole or not at all,
    /// so its first row says which (its second, a tally, carries the same value).
    mutating func recoverDatabase(_ intent: LedgerEntry) throws {
        guard let database = openDatabase() else { return }
        let rows = try database.writer.read { try ChaosDatabase.rows(in: $0) }
        guard rows[intent.path] == intent.value else { return }
        try record(.row, intent.path, value: intent.value, via: "database", step: intent.step, time: intent.time)
        if let second = intent.to { try record(.row, second, value: intent.value, via: "database", step: intent.step, time: intent.time) }
    }

    /// Publishes what the database captured and closes it (the writer stops). A failure (a full
    /// disk) is logged: what was captured stays in the store, published when it next opens.
    mutating func closeDatabase() async {
        guard let database else { return }
        self.database = nil
        do {
            if !database.isClosed { try await database.synchronize() }
        } catch {
            FileHandle.standardError.write(Data("writer \(command.device): the database's last synchronization failed (kept for its next opening): \(error)\n".utf8))
        }
        do { try database.close() } catch {
            FileHandle.standardError.write(Data("writer \(command.device): the database did not close cleanly: \(error)\n".utf8))
        }
    }
}

/// What a device's database holds once it imported every log it has (see ``DatabaseCommand``).
struct DatabaseState: Codable, Sendable {
    /// Whether it published transactions it had not (a writer killed before it could).
    var published = false
    /// Every row: `TABLE/ID` → value.
    var rows: [String: String] = [:]
    /// Devices whose next segments wait, and why.
    var waiting: [String: String] = [:]
    /// Devices whose logs cannot be read, and why.
    var problems: [String: String] = [:]
    /// Rows on which the store and its logs disagree (`verify()`).
    var differences: [String] = []
}

/// `ubiquity-chaos database`: opens a device's database as its app would at launch (run by the
/// harness with the device's environment, after the devices went quiet), publishes what it had
/// not, imports every other device's logs, verifies the store against them, and prints a
/// ``DatabaseState`` as JSON.
struct DatabaseCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "database",
        abstract: "Import a device's database logs and print its rows (run by the harness in the device's environment).",
        shouldDisplay: false)

    @Option(help: "The container.") var container: String

    func run() async throws {
        let containers = UbiquityContainers(paths: UbiquityPaths(), entitlements: UbiquityEntitlements(containers: [container]))
        guard let root = containers.url(forContainer: container) else { throw ValidationError("not signed in: no container \(container)") }
        let database = try ChaosDatabase.open(root: root, containers: containers, automaticallySynchronizes: false)
        defer { try? database.close() } // (read-only use from here on; a close error changes nothing printed)
        var state = DatabaseState()
        state.published = try database.hasUnpublishedChanges()
        let report = try await database.synchronize()
        state.waiting = report.waiting
        state.problems = report.problems.mapValues { "\($0)" }
        state.rows = try await database.writer.read { try ChaosDatabase.rows(in: $0) }
        state.differences = try database.verify().map { "\($0)" }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        FileHandle.standardOutput.write(try encoder.encode(state) + Data("\n".utf8))
    }
}
