import Crypto
import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import NIOCore
import Testing
import UbiquityProtocol
@testable import UbiquityServer

/// Many chunks per request, both ways: `POST /v1/chunks` and `POST /v1/chunks/fetch`.
@Suite struct ChunkBatchTests {
    static func batch(_ parts: [[UInt8]]) -> [UInt8] {
        ChunkBatch(parts.map { ChunkBatch.Chunk(hash: sha256($0), bytes: $0) }).encoded()
    }

    /// Batch bodies are gathered into arrays kept for the next ones: a few, none too large, and
    /// given back whatever the request's handling did.
    @Test func batchBodiesAreGatheredIntoKeptArrays() async throws {
        let bodies = BatchBodies()
        func request(_ bytes: [UInt8]) -> Request {
            Request(head: HTTPRequest(method: .post, scheme: "http", authority: "localhost", path: "/v1/chunks"), body: .init(buffer: ByteBuffer(bytes: bytes)))
        }
        let small = [UInt8](repeating: 7, count: 1 << 20)
        #expect(try await bodies.gather(request(small), framing: ChunkBatch.framing) { $0 } == small)
        #expect(bodies.keptArrays == 1)
        struct Refused: Error {}
        await #expect(throws: Refused.self) { try await bodies.gather(request(small), framing: ChunkBatch.framing) { _ in throw Refused() } }
        #expect(bodies.keptArrays == 1, "given back after a refusal too")
        let large = [UInt8](repeating: 8, count: BatchBodies.keptCapacity + 1)
        #expect(try await bodies.gather(request(large), framing: ChunkBatch.framing) { $0.count } == large.count)
        #expect(bodies.keptArrays == 0, "a larger array goes back to the allocator (and the kept one was used for it)")
    }

    @Test func digestsAreNamedAndComparedInLowercaseHex() {
        let bytes: [UInt8] = [0x00, 0x0f, 0xa5, 0xff]
        #expect(bytes.lowercaseHex == "000fa5ff")
        #expect(bytes.matches(lowercaseHex: "000fa5ff"))
        #expect(!bytes.matches(lowercaseHex: "000FA5FF") && !bytes.matches(lowercaseHex: "000fa5fe") && !bytes.matches(lowercaseHex: "000fa5f"))
        let digest = SHA256.hash(data: Data("ubiquity".utf8))
        #expect(digest.lowercaseHex == digest.map { String(format: "%02x", $0) }.joined())
        #expect(digest.matches(lowercaseHex: digest.lowercaseHex) && [UInt8]().lowercaseHex.isEmpty)
    }

    @Test func theFramingReadsBackAndRefusesWhatIsNotABatch() throws {
        let parts: [[UInt8]] = [Array("one".utf8), [], Array(repeating: 9, count: 70_000)]
        let encoded = Self.batch(parts)
        #expect(encoded.count == parts.reduce(0) { $0 + 68 + $1.count })
        let decoded = try ChunkBatch(decoding: encoded, maximumChunkSize: 1 << 20)
        #expect(decoded.chunks.map { Array($0.bytes) } == parts && decoded.chunks.map(\.hash) == parts.map(sha256))
        // The frames name each chunk's bytes where they are; a batch inside a larger body
        // (a slice that does not start at 0) reads the same.
        let frames = try encoded.withUnsafeBytes { try ChunkBatch.frames(in: $0, maximumChunkSize: 1 << 20) }
        #expect(frames.map(\.hash) == parts.map(sha256) && frames.map { Array(encoded[$0.bytes]) } == parts)
        let inside = [7, 7, 7] + encoded + [7]
        let sliced = try ChunkBatch(decoding: inside[3..<(inside.count - 1)], maximumChunkSize: 1 << 20)
        #expect(sliced.chunks.map { Array($0.bytes) } == parts && sliced == decoded)

        #expect(throws: ChunkBatch.FormatError.self) { try ChunkBatch(decoding: Array(encoded.dropLast()), maximumChunkSize: 1 << 20) }
        #expect(throws: ChunkBatch.FormatError.self) { try ChunkBatch(decoding: Array(encoded.prefix(40)), maximumChunkSize: 1 << 20) }
        #expect(throws: ChunkBatch.FormatError.self, "a chunk over the limit") { try ChunkBatch(decoding: encoded, maximumChunkSize: 60_000) }
        var badHash = encoded
        badHash[0] = UInt8(ascii: "/")
        #expect(throws: ChunkBatch.FormatError.self) { try ChunkBatch(decoding: badHash, maximumChunkSize: 1 << 20) }
        #expect(try ChunkBatch(decoding: [UInt8](), maximumChunkSize: 1).chunks.isEmpty)
    }

    @Test(arguments: Backend.all) func aBatchHoldsARevisionsChunksAndComesBackInOrder(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let phone = try await client.signIn("ada", device: "phone")
            let parts: [[UInt8]] = (0..<40).map { Array("part \($0) of the film ".utf8) }
            let film = fileUpdate("Film.raw", parts)

            // 39 chunks in one request (one of them twice): the commit still lacks one.
            let first = try await client.send(.post, "/v1/chunks", token: laptop.token, raw: Self.batch(Array(parts.dropLast()) + [parts[0]]))
            #expect(first.status == .created, "\(String(buffer: first.body))")
            let early = try await client.put(notes, "film", film, token: laptop.token)
            #expect(early.status == .conflict && (try? early.decode(ErrorResponse.self).error.missingChunks) == [sha256(parts[39])])
            // The last chunk, sent with one the server has: the commit goes, downloadable.
            #expect(try await client.send(.post, "/v1/chunks", token: laptop.token, raw: Self.batch([parts[3], parts[39]])).status == .created)
            #expect(try await client.put(notes, "film", film, token: laptop.token).status == .ok)
            let changes = try await client.changes(notes, token: phone.token)
            #expect(changes.items.count == 1 && changes.items[0].uploaded)

            // Down: in the order asked, repeats included.
            let asked = [parts[39], parts[0], parts[7], parts[0]].map(sha256)
            let fetched = try await client.send(.post, "/v1/chunks/fetch", token: phone.token, json: ChunkFetchRequest(hashes: asked))
            #expect(fetched.status == .ok)
            let answer = try ChunkBatch(decoding: Array(buffer: fetched.body), maximumChunkSize: 1 << 20)
            #expect(answer.chunks.map(\.hash) == asked && answer.chunks.map { Array($0.bytes) } == [parts[39], parts[0], parts[7], parts[0]])

            // A chunk the account does not have, an empty or too long request, a bad hash: clear errors.
            let unknown = try await client.send(.post, "/v1/chunks/fetch", token: phone.token, json: ChunkFetchRequest(hashes: [asked[0], sha256([1, 2, 3])]))
            #expect(unknown.status == .notFound && String(buffer: unknown.body).contains(sha256([1, 2, 3])))
            #expect(try await client.send(.post, "/v1/chunks/fetch", token: phone.token, json: ChunkFetchRequest(hashes: [])).errorCode == "tooMany")
            let tooMany = ChunkFetchRequest(hashes: Array(repeating: asked[0], count: ChunkBatch.maximumCount + 1))
            #expect(try await client.send(.post, "/v1/chunks/fetch", token: phone.token, json: tooMany).errorCode == "tooMany")
            #expect(try await client.send(.post, "/v1/chunks/fetch", token: phone.token, json: ChunkFetchRequest(hashes: ["../../etc/passwd"])).errorCode == "invalidHash")
            #expect(try await client.send(.post, "/v1/chunks/fetch", json: ChunkFetchRequest(hashes: asked)).status == .unauthorized)
        }
    }

    @Test(arguments: Backend.all) func aBadBatchStoresNothing(backend: Backend) async throws {
        let server = try await TestServer(backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ada", password: "correct horse", quotaBytes: 1_000)
        try await server.run { client in
            let ada = try await client.signIn("ada")
            let good: [UInt8] = Array("good".utf8), other: [UInt8] = Array("other".utf8)
            func missing() async throws -> Int {
                try await client.send(.post, "/v1/chunks/missing", token: ada.token, json: MissingChunksRequest(hashes: [sha256(good), sha256(other)]))
                    .decode(MissingChunksResponse.self).missing.count
            }

            // One chunk whose bytes do not match its hash: none of the batch is kept.
            var mislabelled = ChunkBatch([.init(hash: sha256(good), bytes: good), .init(hash: sha256(good), bytes: other)])
            var answer = try await client.send(.post, "/v1/chunks", token: ada.token, raw: mislabelled.encoded())
            #expect(answer.status == .badRequest && answer.errorCode == "hashMismatch")
            #expect(try await missing() == 2)
            #expect(try await server.storedChunk(sha256(good), of: "ada") == nil)

            // Cut short, empty, or not a batch at all.
            mislabelled = ChunkBatch([.init(hash: sha256(good), bytes: good)])
            answer = try await client.send(.post, "/v1/chunks", token: ada.token, raw: Array(mislabelled.encoded().dropLast(2)))
            #expect(answer.status == .badRequest && answer.errorCode == "badBatch")
            #expect(try await client.send(.post, "/v1/chunks", token: ada.token, raw: []).errorCode == "badBatch")
            #expect(try await client.send(.post, "/v1/chunks", token: ada.token, raw: Array(String(repeating: "x", count: 100).utf8)).errorCode == "badBatch")
            #expect(try await missing() == 2)
            // Longer than any batch can be (16 MiB of chunks, or one chunk of up to 16 MiB, and
            // the framing of a full batch): refused by its length, before anything is read into it.
            let longest = ChunkBatch.maximumBytes + (16 << 20) + ChunkBatch.maximumCount * ChunkBatch.framing
            let tooLong = try await client.send(.post, "/v1/chunks", token: ada.token, raw: [UInt8](repeating: UInt8(ascii: "a"), count: longest + 1))
            #expect(tooLong.status == .contentTooLarge && tooLong.errorCode == "batchTooLarge")

            // Past the quota as a whole: refused, nothing stored, though each chunk alone would fit.
            let big = (0..<3).map { [UInt8](repeating: UInt8($0), count: 400) }
            answer = try await client.send(.post, "/v1/chunks", token: ada.token, raw: Self.batch(big))
            #expect(answer.status.code == 507 && answer.errorCode == "quotaExceeded")
            for part in big { #expect(try await server.storedChunk(sha256(part), of: "ada") == nil) }
            #expect(try await client.send(.post, "/v1/chunks", token: ada.token, raw: Self.batch(Array(big.prefix(2)))).status == .created)
            let account = String(buffer: try await client.send(.get, "/v1/account", token: ada.token).body)
            #expect(account.contains("\"usedBytes\":800"))
        }
    }

    @Test func aFetchAnswersAsManyAsFitAndTheClientAsksForTheRest() async throws {
        let server = try await TestServer.withAccount("ada"); defer { server.remove() }
        try await server.run { client in
            let ada = try await client.signIn("ada")
            let large = (0..<3).map { [UInt8](repeating: UInt8($0), count: 7 << 20) }
            for part in large { #expect(try await client.send(.post, "/v1/chunks", token: ada.token, raw: Self.batch([part])).status == .created) }
            let asked = large.map(sha256)
            let fetched = try await client.send(.post, "/v1/chunks/fetch", token: ada.token, json: ChunkFetchRequest(hashes: asked))
            let answer = try ChunkBatch(decoding: Array(buffer: fetched.body), maximumChunkSize: 16 << 20)
            #expect(answer.chunks.map(\.hash) == Array(asked.prefix(2)), "two of 7 MiB fit in 16 MiB, the third is asked for again")
        }
    }
}

/// The data directory's chunk store: a pack file per stored batch, an index, compaction.
@Suite struct PackedChunkStoreTests {
    let directory = NSTemporaryDirectory() + "ubiquity-packs-\(UUID().uuidString.prefix(8))"

    func packs(_ account: Int64) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "\(directory)/\(account)/packs")) ?? []).sorted()
    }

    /// Keeps `bytes` as earlier versions kept a chunk, one file of its own; its path.
    @discardableResult
    func keepLoose(_ bytes: [UInt8], account: Int64, in store: FileChunkStore) throws -> String {
        let loose = store.loosePath(account: account, hash: sha256(bytes))
        try FileManager.default.createDirectory(atPath: (loose as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: loose, contents: Data(bytes))
        return loose
    }

    static func chunks(_ count: Int, seed: UInt8) -> [ChunkBatch.Chunk] {
        (0..<count).map { index in
            let bytes = [UInt8](repeating: seed, count: 1_000 + index) + [UInt8(index)]
            return ChunkBatch.Chunk(hash: sha256(bytes), bytes: bytes)
        }
    }

    @Test func aBatchIsOnePackAndComesBackChunkByChunk() async throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try FileChunkStore(directory: directory)
        let batch = Self.chunks(50, seed: 1)
        try await store.store(batch, account: 7)
        #expect(packs(7).count == 1)
        for chunk in batch { #expect(try await store.load(hash: chunk.hash, account: 7) == Data(chunk.bytes)) }
        #expect(try await store.load(hash: batch[0].hash, account: 8) == nil, "accounts are apart")
        #expect(try await store.load(hash: sha256([9]), account: 7) == nil)

        // Stored again, alone or with new ones: nothing more is kept of them (a pack of known
        // chunks only goes at once; known ones beside new ones are dead bytes, compacted later).
        try await store.store(batch, account: 7)
        #expect(packs(7).count == 1)
        try await store.store(Array(batch.prefix(3)) + Self.chunks(2, seed: 2), account: 7)
        #expect(packs(7).count == 2)
        let live = try await store.index.read { db in try Int.fetchOne(db, sql: "SELECT SUM(live) FROM pack") }
        #expect(live == (batch + Self.chunks(2, seed: 2)).reduce(0) { $0 + $1.bytes.count }, "each chunk live once")

        // A mislabelled chunk stores nothing of its batch.
        let wrong = [ChunkBatch.Chunk(hash: sha256([1]), bytes: [2])] + Self.chunks(3, seed: 3)
        await #expect(throws: SyncError.self) { try await store.store(wrong, account: 7) }
        let unstored = try await store.load(hash: Self.chunks(3, seed: 3)[0].hash, account: 7)
        #expect(packs(7).count == 2 && unstored == nil)

        // Reopened, the index still knows everything.
        let reopened = try FileChunkStore(directory: directory)
        for chunk in batch { #expect(try await reopened.load(hash: chunk.hash, account: 7) == Data(chunk.bytes)) }
    }

    @Test func theSameChunksStoredAtOnceEndUpOnce() async throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try FileChunkStore(directory: directory)
        let batch = Self.chunks(40, seed: 4)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 { group.addTask { try await store.store(batch, account: 1) } }
            try await group.waitForAll()
        }
        for chunk in batch { #expect(try await store.load(hash: chunk.hash, account: 1) == Data(chunk.bytes)) }
        let live = try await store.index.read { db in try Int.fetchOne(db, sql: "SELECT SUM(live) FROM pack") }
        #expect(live == batch.reduce(0) { $0 + $1.bytes.count }, "each chunk counted live once")
        let indexed = try await store.index.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM pack") }
        #expect(packs(1).count == indexed, "a pack nothing uses is gone")
    }

    @Test func removedChunksAreCompactedAwayAndOrphansSwept() async throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try FileChunkStore(directory: directory)
        let first = Self.chunks(30, seed: 5), second = Self.chunks(10, seed: 6)
        try await store.store(first, account: 2)
        try await store.store(second, account: 2)
        #expect(packs(2).count == 2)

        // Every chunk of a pack removed: the pack goes at once.
        for chunk in second { try await store.remove(hash: chunk.hash, account: 2) }
        #expect(packs(2).count == 1)
        // Most of a pack removed: compaction rewrites the rest into a smaller pack.
        for chunk in first.prefix(20) { try await store.remove(hash: chunk.hash, account: 2) }
        let freed = try await store.compact(orphanAge: 3_600)
        #expect(freed == Int64(first.prefix(20).reduce(0) { $0 + $1.bytes.count }))
        #expect(packs(2).count == 1)
        for chunk in first.prefix(20) { #expect(try await store.load(hash: chunk.hash, account: 2) == nil) }
        for chunk in first.suffix(10) { #expect(try await store.load(hash: chunk.hash, account: 2) == Data(chunk.bytes)) }

        // A pack a crash left unindexed goes once it is old enough; indexed ones stay.
        let orphan = "\(directory)/2/packs/left-by-a-crash.pack"
        _ = FileManager.default.createFile(atPath: orphan, contents: Data(repeating: 1, count: 500))
        let young = try await store.compact(orphanAge: 3_600)
        #expect(young == 0 && FileManager.default.fileExists(atPath: orphan), "could be an upload in progress")
        let old = try await store.compact(orphanAge: -1)
        #expect(old == 500 && !FileManager.default.fileExists(atPath: orphan))
        for chunk in first.suffix(10) { #expect(try await store.load(hash: chunk.hash, account: 2) == Data(chunk.bytes)) }

        // A damaged pack is a clear error, not wrong bytes.
        let pack = "\(directory)/2/packs/\(packs(2)[0])"
        try FileManager.default.removeItem(atPath: pack)
        _ = FileManager.default.createFile(atPath: pack, contents: Data(repeating: 0, count: 10))
        await #expect(throws: SyncError.self) { try await store.load(hash: first[29].hash, account: 2) }

        try await store.removeAccount(2)
        #expect(!FileManager.default.fileExists(atPath: "\(directory)/2"))
        #expect(try await store.load(hash: first[29].hash, account: 2) == nil)
    }

    /// A fetch's batch read straight from the packs (and loose files) into one buffer, in the
    /// order asked, as many as fit, ending before the first chunk not stored.
    @Test func aBatchIsReadIntoOneBufferInTheOrderAsked() async throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try FileChunkStore(directory: directory)
        let first = Self.chunks(5, seed: 8), second = Self.chunks(5, seed: 9)
        try await store.store(first, account: 4)
        try await store.store(second, account: 4)
        let looseBytes: [UInt8] = Array("kept by an earlier version".utf8), looseHash = sha256(looseBytes)
        try keepLoose(looseBytes, account: 4, in: store)

        let asked = [second[3], first[1], ChunkBatch.Chunk(hash: looseHash, bytes: looseBytes), first[4], second[0]]
        var body = ByteBuffer(string: "before")
        let places = try await store.loadBatch(asked.map(\.hash), account: 4, upTo: 1 << 20, into: &body)
        #expect(places.count == asked.count)
        let batch = try ChunkBatch(decoding: Array(body.readableBytesView.dropFirst(6)), maximumChunkSize: 1 << 20)
        #expect(batch.chunks.map(\.hash) == asked.map(\.hash) && batch.chunks.map { Array($0.bytes) } == asked.map { Array($0.bytes) })
        for (place, chunk) in zip(places, asked) { #expect(Array(body.readableBytesView[place]) == Array(chunk.bytes)) }

        // As many as fit (at least one), and none past one that is not stored.
        var limited = ByteBuffer()
        #expect(try await store.loadBatch(asked.map(\.hash), account: 4, upTo: asked[0].bytes.count + asked[1].bytes.count, into: &limited).count == 2)
        var single = ByteBuffer()
        #expect(try await store.loadBatch(asked.map(\.hash), account: 4, upTo: 1, into: &single).count == 1)
        var stopped = ByteBuffer()
        let unknown = sha256([1, 2, 3])
        #expect(try await store.loadBatch([first[0].hash, unknown, first[2].hash], account: 4, upTo: 1 << 20, into: &stopped).count == 1)
        #expect(stopped.readableBytes == ChunkBatch.framing + first[0].bytes.count)
    }

    /// The chunks of a pack this store wrote are vouched for (a fetch does not hash them again)
    /// while the file is as written, and for a while only: not by another store (a restarted
    /// server), not once anything wrote the file (even the same byte), not past the window, not
    /// once more packs were written than it remembers; a chunk not from a pack never is.
    @Test func aPackThisStoreWroteIsVouchedForUntilAnythingWritesIt() async throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try FileChunkStore(directory: directory)
        let first = Self.chunks(3, seed: 10), second = Self.chunks(2, seed: 11)
        try await store.store(first, account: 5)
        try await store.store(second, account: 5)
        let looseBytes: [UInt8] = Array("kept by an earlier version".utf8)
        try keepLoose(looseBytes, account: 5, in: store)
        func vouched(_ store: FileChunkStore, _ hashes: [String]) async throws -> [Bool] {
            var body = ByteBuffer()
            let loaded = try await store.loadVouchedBatch(hashes, account: 5, upTo: 1 << 20, into: &body)
            #expect(loaded.places.count == hashes.count)
            let batch = try ChunkBatch(decoding: Array(body.readableBytesView), maximumChunkSize: 1 << 20)
            #expect(batch.chunks.map(\.hash) == hashes, "the bytes are read whatever is vouched for")
            return loaded.vouched
        }
        let asked = (first + second).map(\.hash) + [sha256(looseBytes)]
        #expect(try await vouched(store, asked) == [true, true, true, true, true, false])
        #expect(try await vouched(try FileChunkStore(directory: directory), asked) == Array(repeating: false, count: 6))

        // The same byte written again over the first pack's: its chunks are hashed again, the
        // other pack's still not.
        let place = try #require(try await store.places(of: [first[0].hash], account: 5)[first[0].hash])
        let fd = open(store.packPath(account: 5, pack: place.pack), O_RDWR)
        var byte: UInt8 = 0
        #expect(pread(fd, &byte, 1, off_t(place.offset)) == 1 && pwrite(fd, &byte, 1, off_t(place.offset)) == 1)
        close(fd)
        #expect(try await vouched(store, asked) == [false, false, false, true, true, false])

        // Past the window; past the count remembered (the oldest forgotten first).
        try FileManager.default.removeItem(atPath: directory)
        let brief = try FileChunkStore(directory: directory, freshPacks: FreshPacks(trustedFor: .zero))
        try await brief.store(first, account: 5)
        #expect(try await vouched(brief, first.map(\.hash)) == [false, false, false])
        try FileManager.default.removeItem(atPath: directory)
        let forgetful = try FileChunkStore(directory: directory, freshPacks: FreshPacks(maximumCount: 2))
        let third = Self.chunks(1, seed: 12)
        for batch in [first, second, third] { try await forgetful.store(batch, account: 5) }
        #expect(forgetful.freshPacks.count == 2)
        #expect(try await vouched(forgetful, (first + second + third).map(\.hash)) == [false, false, false, true, true, true])
    }

    @Test func chunksKeptOneFileEachByEarlierVersionsAreStillServed() async throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try FileChunkStore(directory: directory)
        let bytes: [UInt8] = Array("from an earlier version".utf8), hash = sha256(bytes)
        let loose = try keepLoose(bytes, account: 3, in: store)
        #expect(try await store.load(hash: hash, account: 3) == Data(bytes))
        try await store.store([ChunkBatch.Chunk(hash: hash, bytes: bytes)], account: 3)
        #expect(packs(3).isEmpty, "not written twice")
        try await store.remove(hash: hash, account: 3)
        let gone = try await store.load(hash: hash, account: 3)
        #expect(gone == nil && !FileManager.default.fileExists(atPath: loose))
    }

    @Test func aChunkThatCannotBeRemovedIsAnErrorNotSilence() async throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try FileChunkStore(directory: directory)
        let bytes: [UInt8] = Array("stuck".utf8), hash = sha256(bytes)
        // Something that unlink(2) refuses stands where the chunk's loose file would be.
        let loose = store.loosePath(account: 4, hash: hash)
        try FileManager.default.createDirectory(atPath: loose + "/inside", withIntermediateDirectories: true)
        await #expect(throws: SyncError.self) { try await store.remove(hash: hash, account: 4) }
        try FileManager.default.removeItem(atPath: loose)
        try await store.remove(hash: hash, account: 4) // nothing there: nothing to do
    }
}
