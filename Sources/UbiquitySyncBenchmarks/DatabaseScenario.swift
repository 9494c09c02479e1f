import Foundation
import GRDB
import UbiquityDatabase

/// A database in iCloud between the two devices: a one-row update on device A timed until device
/// B's database announces it (its import committed), `count` times, with the bytes both legs
/// carried (each update is a segment the agent commits and the other agent downloads).
struct DatabaseUpdates: Encodable {
    var updates: Int
    var p50Ms: Double
    var p90Ms: Double
    var maxMs: Double
    var bytesPerUpdate: Double
    var transfer: Transfer
}

func databaseUpdates(_ peer: UbiquityPeer, count: Int) async throws -> DatabaseUpdates {
    log("ubiquity: \(count) one-row updates of a database in iCloud")
    var migrator = DatabaseMigrator()
    migrator.registerMigration("v1") { db in
        try db.execute(sql: "CREATE TABLE item(id TEXT PRIMARY KEY, name TEXT NOT NULL, qty INTEGER NOT NULL)")
    }
    let a = try UbiquitousDatabase(container: peer.rootA, name: "Bench", migrator: migrator, containers: peer.devices[0])
    let b = try UbiquitousDatabase(container: peer.rootB, name: "Bench", migrator: migrator, containers: peer.devices[1])
    defer { try? a.close(); try? b.close() }
    var imports = b.importedChanges().makeAsyncIterator()
    func nextImport() async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while let changes = await imports.next() {
            if !changes.isEmpty { return }
            if ContinuousClock.now > deadline { break }
        }
        throw BenchError("the other device's database did not import the update")
    }
    // The first row makes the logs' folders and each device's first segment.
    try await a.writer.write { db in try db.execute(sql: "INSERT INTO item VALUES ('x', 'counter', 0)") }
    try await nextImport()
    var times: [Double] = []
    let figures = try await transfer(peer) {
        for index in 1...count {
            let start = ContinuousClock.now
            try await a.writer.write { db in try db.execute(sql: "UPDATE item SET qty = ? WHERE id = 'x'", arguments: [index]) }
            try await nextImport()
            times.append((ContinuousClock.now - start).inMilliseconds)
        }
    }
    let landed = try await b.writer.read { db in try Int.fetchOne(db, sql: "SELECT qty FROM item WHERE id = 'x'") }
    expect(landed == count, "ubiquity: the other device's database has qty \(String(describing: landed)), not \(count)")
    times.sort()
    return DatabaseUpdates(updates: count, p50Ms: times[times.count / 2].rounded(toPlaces: 1), p90Ms: times[times.count * 9 / 10].rounded(toPlaces: 1),
                           maxMs: (times.last ?? 0).rounded(toPlaces: 1), bytesPerUpdate: (Double(figures.bytesOnWire) / Double(count)).rounded(toPlaces: 0),
                           transfer: figures)
}
