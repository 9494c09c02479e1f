import Crypto
import Foundation
import Logging
import Synchronization
import Testing
import UbiquityObjectStore
import UbiquityProtocol
import UbiquityTestSupport
@testable import UbiquityServer

/// Chunk contents in a real object store (SeaweedFS) indexed in a real PostgreSQL (issue 47):
/// packs written intent first, small uploads packed later, death decided in SQL, compaction and
/// collection — also by two instances at once — and a crash between every step of the write
/// protocol, none of which loses a live chunk or leaves a live object without a row.
@Suite(.enabled(if: TestObjectStore.configured && Backend.all.contains(.postgres), "needs SeaweedFS and PostgreSQL (.ci/seaweedfs, .ci/postgres)"))
struct ObjectChunkStoreTests {
    /// A fresh schema, an account in it, and a store on a fresh prefix of the bucket.
    struct Fixture {
        let admin: ServerAdministration
        let database: PostgresDatabase
        let objects: S3Client
        let account: Int64

        init() async throws {
            let directory = NSTemporaryDirectory() + "object-chunks-\(UUID().uuidString.prefix(8))"
            admin = try await ServerAdministration(dataDirectory: directory, database: try Backend.postgresURL(), bcryptCost: 4)
            database = try #require(admin.storage.database as? PostgresDatabase)
            account = try await admin.createAccount(name: "ada", password: "correct horse").id
            let store = try TestObjectStore.fresh()
            objects = S3Client(location: try ObjectStoreLocation(parsing: store.url), credentials: try ObjectStoreCredentials.read(file: store.credentialsFile),
                               retry: S3Client.RetryPolicy(attempts: 3, baseDelay: .milliseconds(20)))
        }

        /// A store on the fixture's database and bucket (call again for a second instance).
        func store(_ settings: ObjectChunkStore.Settings = Fixture.settings, afterStep: (@Sendable (ObjectChunkStore.Step) async throws -> Void)? = nil) -> ObjectChunkStore {
            ObjectChunkStore(database: database, objects: objects, settings: settings, logger: Logger(label: "test.objects"), afterStep: afterStep)
        }

        /// Small sizes, no waiting: every step happens in a test's time.
        static var settings: ObjectChunkStore.Settings {
            var settings = ObjectChunkStore.Settings()
            settings.directPackMinimum = 64 << 10
            settings.packTarget = 256 << 10
            settings.packAfter = 0
            settings.grace = 0
            settings.intentTimeout = 60
            return settings
        }

        func packs() async throws -> [(key: String, state: String, size: Int64, live: Int64)] {
            try await database.read { db in
                try await db.rows("SELECT object_key, state, size, live_bytes FROM pack ORDER BY id").map {
                    (try $0.get("object_key", as: String.self), try $0.get("state", as: String.self), try $0.get("size", as: Int64.self), try $0.get("live_bytes", as: Int64.self))
                }
            }
        }

        func waiting() async throws -> Int {
            try await database.read { db in Int(try await db.rows("SELECT COUNT(*) AS n FROM chunk_content").first!.get("n", as: Int64.self)) }
        }

        func close() async {
            try? await objects.shutdown()
            await admin.close()
        }
    }

    /// A chunk of `size` bytes made from `seed`, named by its SHA-256.
    static func chunk(_ seed: Int, size: Int) -> ChunkBatch.Chunk {
        var generator = SeededGenerator(seed: UInt64(seed))
        let bytes = (0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return ChunkBatch.Chunk(hash: SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined(), bytes: ArraySlice(bytes))
    }

    @Test func aLargeBatchIsAPackAndSmallOnesWaitUntilPacked() async throws {
        let fixture = try await Fixture()
        defer { Task { await fixture.close() } }
        let store = fixture.store()
        let large = (0..<3).map { Self.chunk($0, size: 40_000) }
        try await store.store(large, account: fixture.account)
        #expect(try await fixture.packs().map(\.state) == ["live"])
        #expect(try await fixture.objects.listAll().count == 1)

        let small = (10..<15).map { Self.chunk($0, size: 3_000) }
        try await store.store(small, account: fixture.account)
        #expect(try await fixture.waiting() == 5, "small uploads wait in the database")
        #expect(try await fixture.objects.listAll().count == 1)
        for chunk in large + small { #expect(try await store.load(hash: chunk.hash, account: fixture.account) == Data(chunk.bytes)) }

        let done = try await store.housekeep(now: Date(), packingAll: true)
        #expect(done.packed == 1)
        #expect(try await fixture.waiting() == 0)
        #expect(try await fixture.packs().map(\.state) == ["live", "live"])
        let loaded = try await store.load((large + small).map(\.hash), account: fixture.account, upTo: .max)
        #expect(loaded == (large + small).map { Data($0.bytes) })
        // The trailer lists what a pack holds: the bucket alone could rebuild the index.
        let key = try #require(try await fixture.packs().last?.key)
        let trailer = try ChunkPack.trailer(of: try await fixture.objects.get(key))
        #expect(trailer.format == 1 && trailer.account == fixture.account && Set(trailer.chunks.map(\.hash)) == Set(small.map(\.hash)))
    }

    /// A pack fetched in parts is read from the store once (the first part reads ahead to the
    /// pack's end), and ten fetches of it at once on another instance share one read.
    @Test func aPackFetchedInPartsIsReadOnceAndFetchesAtOnceShareARead() async throws {
        let fixture = try await Fixture()
        defer { Task { await fixture.close() } }
        var settings = Fixture.settings
        settings.readAheadMinimum = 150_000
        settings.directPackMinimum = 64 << 10
        let chunks = (0..<8).map { Self.chunk(200 + $0, size: 100_000) }
        try await fixture.store(settings).store(chunks, account: fixture.account)
        #expect(try await fixture.packs().count == 1)
        let gets = { fixture.objects.requestsSent["GET"] ?? 0 }

        let reader = fixture.store(settings)
        var before = gets()
        for first in stride(from: 0, to: 8, by: 2) {
            let loaded = try await reader.load(chunks[first..<(first + 2)].map(\.hash), account: fixture.account, upTo: .max)
            #expect(loaded == chunks[first..<(first + 2)].map { Data($0.bytes) })
        }
        #expect(gets() - before == 1, "one GET for the pack, not one per fetch")
        #expect(reader.cache.hits == 3)

        let other = fixture.store(settings)
        before = gets()
        let all = chunks.map(\.hash), wanted = chunks.map { Data($0.bytes) }
        try await withThrowingTaskGroup(of: [Data].self) { group in
            for _ in 0..<10 { group.addTask { try await other.load(all, account: fixture.account, upTo: .max) } }
            for try await loaded in group { #expect(loaded == wanted) }
        }
        #expect(gets() - before == 1, "ten fetches at once, one GET")
        // Small reads are not kept: a single chunk is read as it is — unless a pack read
        // lately holds it (what is left of a fetch, asked again).
        let single = fixture.store(settings)
        before = gets()
        for _ in 0..<2 { _ = try await single.load(hash: chunks[3].hash, account: fixture.account) }
        #expect(gets() - before == 2 && single.cache.keptBytes == 0)
        before = gets()
        #expect(try await other.load(hash: chunks[3].hash, account: fixture.account) == Data(chunks[3].bytes))
        #expect(gets() - before == 0)
    }

    @Test func removalDoomsAPackAndCompactionAndCollectionFreeTheRoom() async throws {
        let fixture = try await Fixture()
        defer { Task { await fixture.close() } }
        let store = fixture.store()
        let chunks = (0..<4).map { Self.chunk(100 + $0, size: 30_000) }
        try await store.store(chunks, account: fixture.account)
        let first = try #require(try await fixture.packs().first)
        #expect(first.live == 120_000)

        // Three of four go: the pack is mostly dead, and rewritten with the one left.
        for chunk in chunks.prefix(3) { try await store.remove(hash: chunk.hash, account: fixture.account) }
        #expect(try await fixture.packs().first?.live == 30_000)
        let done = try await store.housekeep(now: Date().addingTimeInterval(1))
        #expect(done.compacted == 1)
        #expect(try await store.load(hash: chunks[3].hash, account: fixture.account) == Data(chunks[3].bytes))
        #expect(try await store.load(hash: chunks[0].hash, account: fixture.account) == nil)
        // The old pack is doomed, and goes (object, then row) after its grace.
        try await store.housekeep(now: Date().addingTimeInterval(2))
        let packs = try await fixture.packs()
        #expect(packs.map(\.state) == ["live"] && packs.first?.key != first.key)
        #expect(try await fixture.objects.listAll().map(\.key) == packs.map(\.key))
        #expect(try await store.load(hash: chunks[3].hash, account: fixture.account) == Data(chunks[3].bytes))

        // The last chunk goes: the pack is doomed at once, then collected.
        try await store.remove(hash: chunks[3].hash, account: fixture.account)
        #expect(try await fixture.packs().map(\.state) == ["doomed"])
        try await store.housekeep(now: Date().addingTimeInterval(3))
        #expect(try await fixture.packs().isEmpty)
        #expect(try await fixture.objects.listAll().isEmpty)
    }

    /// A crash after each step of the write protocol: nothing is acknowledged, no chunk points
    /// at anything, and collection (after the intent's timeout) leaves nothing behind; the
    /// upload made again then stores everything.
    @Test(arguments: [ObjectChunkStore.Step.intentRecorded, .objectWritten])
    func aCrashBetweenStepsLeavesNothingLiveAndIsCollected(_ step: ObjectChunkStore.Step) async throws {
        let fixture = try await Fixture()
        defer { Task { await fixture.close() } }
        struct Crash: Error {}
        let crashing = fixture.store(afterStep: { if $0 == step { throw Crash() } })
        let chunks = (0..<3).map { Self.chunk(200 + $0, size: 30_000) }
        await #expect(throws: Crash.self) { try await crashing.store(chunks, account: fixture.account) }
        #expect(try await fixture.packs().map(\.state) == ["writing"])
        #expect(try await fixture.objects.listAll().count == (step == .objectWritten ? 1 : 0))
        let store = fixture.store()
        #expect(try await store.load(hash: chunks[0].hash, account: fixture.account) == nil)

        // Not before the intent's timeout (a slow upload is not taken for a crashed one)…
        try await store.housekeep(now: Date())
        #expect(try await fixture.packs().count == 1)
        // …and after it, the row and its object go.
        try await store.housekeep(now: Date().addingTimeInterval(Fixture.settings.intentTimeout + 1))
        #expect(try await fixture.packs().isEmpty)
        #expect(try await fixture.objects.listAll().isEmpty)

        try await store.store(chunks, account: fixture.account)
        for chunk in chunks { #expect(try await store.load(hash: chunk.hash, account: fixture.account) == Data(chunk.bytes)) }
    }

    /// Objects no row names (a crash between the object and its row's removal, or written by
    /// something else) are swept once old enough; a live pack whose object is gone is an alarm.
    @Test func theSweepRemovesUnnamedObjectsAndFindsMissingOnes() async throws {
        let fixture = try await Fixture()
        defer { Task { await fixture.close() } }
        let store = fixture.store()
        try await store.store((0..<3).map { Self.chunk(300 + $0, size: 30_000) }, account: fixture.account)
        let live = try #require(try await fixture.packs().first?.key)
        try await fixture.objects.put("chunks/\(fixture.account)/stray", body: .init(bytes: [1, 2, 3]))
        var sweep = try await store.sweep(now: Date())
        #expect(sweep.unnamed.isEmpty && sweep.missing.isEmpty && sweep.listed == 2, "young objects stay")
        sweep = try await store.sweep(now: Date().addingTimeInterval(86_400 + 60), removing: false)
        #expect(sweep.unnamed == ["chunks/\(fixture.account)/stray"])
        #expect(try await fixture.objects.listAll().count == 2, "only looked at")
        sweep = try await store.sweep(now: Date().addingTimeInterval(86_400 + 60))
        #expect(sweep.unnamed == ["chunks/\(fixture.account)/stray"])
        #expect(try await fixture.objects.listAll().map(\.key) == [live])

        try await fixture.objects.delete(live)
        sweep = try await store.sweep(now: Date().addingTimeInterval(600))
        #expect(sweep.missing == [live])
    }

    /// `ubiquity storage migrate`: an installation's chunks in database rows move into the
    /// object store — stopped midway as a kill would, then run again, it finishes; each chunk is
    /// checked first, and a damaged one stays in the database, said.
    @Test func chunksInRowsMigrateResumablyAndDamagedOnesStay() async throws {
        let fixture = try await Fixture()
        defer { Task { await fixture.close() } }
        let rows = PostgresChunkStore(database: fixture.database)
        let chunks = (0..<60).map { Self.chunk(2_000 + $0, size: 9_000 + $0 * 100) }
        for start in stride(from: 0, to: chunks.count, by: 15) { try await rows.store(Array(chunks[start..<start + 15]), account: fixture.account) }
        let damaged = chunks[7].hash
        try await fixture.database.transaction { db in
            try await db.rows("UPDATE chunk_content SET data = '\\x0102'::BYTEA WHERE hash = \(damaged)")
        }
        var settings = Fixture.settings
        settings.packTarget = 150_000 // several packs
        struct Killed: Error {}
        let written = Counter()
        let stopping = fixture.store(settings, afterStep: { step in
            if step == .objectWritten, written.next() == 2 { throw Killed() }
        })
        await #expect(throws: Killed.self) { _ = try await stopping.migrate { _, _ in } }
        let store = fixture.store(settings)
        #expect(try await store.waiting().chunks > 1, "stopped midway")
        // A day later: the killed run's claims have lapsed (after the intent's timeout), and the
        // damaged chunk it found is looked at again.
        let later = fixture.store(settings)
        try await fixture.database.transaction { db in try await db.rows("UPDATE chunk_content SET packing = NULL") }
        let done = try await later.migrate { _, _ in }
        #expect(done.damaged.map(\.hash) == [damaged])
        #expect(try await store.waiting().chunks == 1, "only the damaged chunk stays in the database")
        for chunk in chunks where chunk.hash != damaged {
            #expect(try await store.load(hash: chunk.hash, account: fixture.account) == Data(chunk.bytes))
        }
        #expect(try await fixture.packs().allSatisfy { $0.state != "live" || $0.live > 0 })
    }

    /// Two instances pack, compact and collect at once while chunks are stored, removed and
    /// read: every chunk still stored reads back whole, every live pack's object is there, and
    /// the bucket holds no object without a row.
    @Test func twoInstancesHousekeepingAtOnceLoseNothing() async throws {
        let fixture = try await Fixture()
        defer { Task { await fixture.close() } }
        let one = fixture.store(), two = fixture.store()
        let chunks = (0..<120).map { Self.chunk(1_000 + $0, size: 4_000 + ($0 % 7) * 1_000) }
        for (index, batch) in stride(from: 0, to: chunks.count, by: 10).map({ Array(chunks[$0..<min($0 + 10, chunks.count)]) }).enumerated() {
            try await (index.isMultiple(of: 2) ? one : two).store(batch, account: fixture.account)
        }
        let removed = Set(chunks.indices.filter { $0 % 3 == 0 }.map { chunks[$0].hash })
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, store) in [one, two, one, two].enumerated() {
                group.addTask {
                    for round in 0..<4 { try await store.housekeep(now: Date().addingTimeInterval(Double(index * 4 + round)), packingAll: true) }
                }
            }
            group.addTask {
                for hash in removed { try await one.remove(hash: hash, account: fixture.account) }
            }
            group.addTask {
                for _ in 0..<5 {
                    let kept = chunks.filter { !removed.contains($0.hash) }.prefix(30)
                    let loaded = try await two.load(kept.map(\.hash), account: fixture.account, upTo: .max)
                    #expect(loaded == kept.map { Data($0.bytes) }, "a read during housekeeping")
                }
            }
            try await group.waitForAll()
        }
        for _ in 0..<3 { try await one.housekeep(now: Date().addingTimeInterval(100), packingAll: true) }
        for chunk in chunks {
            let loaded = try await two.load(hash: chunk.hash, account: fixture.account)
            #expect(loaded == (removed.contains(chunk.hash) ? nil : Data(chunk.bytes)), "\(chunk.hash)")
        }
        let packs = try await fixture.packs()
        let listed = Set(try await fixture.objects.listAll().map(\.key))
        #expect(Set(packs.filter { $0.state == "live" }.map(\.key)).isSubset(of: listed), "every live pack's object is there")
        #expect(listed.isSubset(of: Set(packs.map(\.key))), "no object without a row")
        #expect(!packs.contains { $0.state == "writing" })
    }
}

/// Counts calls, from any task.
final class Counter: Sendable {
    let value = Mutex(0)
    /// One more; the count so far.
    func next() -> Int { value.withLock { $0 += 1; return $0 } }
}
