import Foundation
import Logging
import NIOCore
import Synchronization
import Testing
import UbiquityTestSupport
import UbiquityProtocol
@testable import UbiquityServer

/// A chunk the database lists whose bytes are gone — removed (by garbage collection or sealing
/// in place) just as a device sent it again, or a pack deleted by hand — is never left listed:
/// it is forgotten, its item said not uploaded, and the device that has it sends it again.
@Suite struct LostChunkTests {
    /// Read: both download routes answer it missing, the item is not uploaded any more (at a new
    /// sequence: devices are told), the log says so without the chunk's name, and an upload
    /// makes the item whole.
    @Test(arguments: Backend.all)
    func aListedChunkWhoseBytesAreGoneIsForgottenWhenReadAndSentAgain(backend: Backend) async throws {
        let capture = LogCapture()
        let server = try await TestServer(backend, logger: capture.logger()); defer { server.remove() }
        let account = try await server.admin.createAccount(name: "ann", password: "correct horse")
        let bytes = (0..<60_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) }
        let hash = sha256(bytes)
        try await server.run { client in
            let laptop = try await client.signIn("ann")
            #expect(try await client.upload(bytes, token: laptop.token).status == .created)
            let committed = try await client.commit(notes, "report", fileUpdate("Report.txt", [bytes]), token: laptop.token)
            #expect(committed.item.uploaded)
            // The bytes go behind the database's back.
            try await server.admin.storage.chunks.remove(hash: hash, account: account.id)

            let batch = try await client.send(.post, "/v1/chunks/fetch", token: laptop.token, json: ChunkFetchRequest(hashes: [hash]))
            #expect(batch.status == .notFound, "\(batch.status)")
            let missing = try await client.send(.post, "/v1/chunks/missing", token: laptop.token, json: MissingChunksRequest(hashes: [hash]))
            #expect(try missing.decode(MissingChunksResponse.self).missing == [hash])
            let page = try await client.changes(notes, since: committed.item.sequence, token: laptop.token)
            #expect(page.items.map(\.id) == ["report"] && page.items.first?.uploaded == false)

            #expect(try await client.upload(bytes, token: laptop.token).status == .created)
            let again = try await client.send(.get, "/v1/chunks/\(hash)", token: laptop.token)
            #expect(again.status == .ok && Array(buffer: again.body) == bytes)
            #expect(try await client.changes(notes, since: page.sequence, token: laptop.token).items.first?.uploaded == true)
        }
        let said = capture.lines.withLock { $0 }.filter { $0.message.contains("lists is not in storage") }
        #expect(said.count == 1, "\(said)")
        #expect(!said.contains { "\($0.message) \($0.metadata)".contains(hash) }, "no chunk's name in the log")
        #expect(try await server.admin.checkStore(repair: false).isClean)
    }

    /// Removed: the database unlisted a chunk, a device sent it again (listed again) before its
    /// bytes went. The removal asks the database again and forgets it: nothing is listed without
    /// its bytes, and the item waits for a device to send it.
    @Test(arguments: Backend.all)
    func aChunkSentAgainWhileItWasRemovedIsAskedOfTheDevicesOnceMore(backend: Backend) async throws {
        let server = try await TestServer(backend); defer { server.remove() }
        let account = try await server.admin.createAccount(name: "ann", password: "correct horse")
        let bytes = (0..<60_000).map { UInt8(truncatingIfNeeded: $0 &* 17 &+ 3) }
        let hash = sha256(bytes)
        let sequence = try await server.run { client in
            let laptop = try await client.signIn("ann")
            #expect(try await client.upload(bytes, token: laptop.token).status == .created)
            return try await client.commit(notes, "report", fileUpdate("Report.txt", [bytes]), token: laptop.token).item.sequence
        }
        // The removal reaches the bytes of a chunk that is listed (again) by now.
        let left = await ChunkRemoval.remove([(account.id, hash)], database: server.admin.storage.database, chunks: server.admin.storage.chunks,
                                             logger: Logger(label: "test"))
        #expect(left.isEmpty)
        #expect(try await server.admin.storage.database.missingChunks(accountId: account.id, hashes: [hash]) == [hash])
        let check = try await server.admin.checkStore(repair: false)
        #expect(check.missing.isEmpty, "listed without its bytes: \(check.missing)")
        try await server.run { client in
            let laptop = try await client.signIn("ann")
            #expect(try await client.changes(notes, since: sequence, token: laptop.token).items.first?.uploaded == false)
            #expect(try await client.upload(bytes, token: laptop.token).status == .created)
            #expect(try await client.changes(notes, since: sequence, token: laptop.token).items.first?.uploaded == true)
        }
    }

    /// Collected while sent: an upload found the account had a chunk (so did not store its
    /// bytes), garbage collection forgot the chunk and removed its bytes, then the upload
    /// recorded it — listed, bytes gone (found by `ubiquity-chaos --object-store`, seed 50).
    /// The upload stores again what it finds listed only now.
    @Test(arguments: Backend.all)
    func aChunkCollectedWhileADeviceSendsItIsStoredAgain(backend: Backend) async throws {
        let capture = LogCapture()
        let server = try await TestServer(backend, logger: capture.logger()); defer { server.remove() }
        let account = try await server.admin.createAccount(name: "ann", password: "correct horse")
        let kept = (0..<60_000).map { UInt8(truncatingIfNeeded: $0 &* 29 &+ 1) }, other = (0..<9_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let hash = sha256(kept)
        let deviceId = try await server.run { client in
            let laptop = try await client.signIn("ann")
            #expect(try await client.upload(kept, token: laptop.token).status == .created) // named by no commit: garbage
            return laptop.deviceId
        }
        let storage = server.admin.storage
        var services = server.server.services
        services.chunks = CollectedOnStore(base: services.chunks) {
            // Between the upload's look and its record: the collection runs (its grace long past).
            let collected = try await storage.database.collectGarbage(now: Date() + 3 * 86_400, retention: 0, grace: 86_400)
            #expect(collected.chunks.map(\.1) == [hash])
            _ = await ChunkRemoval.remove(collected.chunks.map { (account: $0.0, hash: $0.1) }, database: storage.database, chunks: storage.chunks, logger: Logger(label: "test"))
        }
        let device = DeviceAuth(deviceId: deviceId, deviceName: "laptop", accountId: account.id)
        try await services.receive([ChunkBatch.Chunk(hash: hash, bytes: ArraySlice(kept)), ChunkBatch.Chunk(hash: sha256(other), bytes: ArraySlice(other))],
                                   from: device, logger: capture.logger())
        #expect(try await storage.database.missingChunks(accountId: account.id, hashes: [hash]).isEmpty)
        #expect(try await storage.chunks.load(hash: hash, account: account.id) == Data(kept), "listed, and its bytes stored")
        let check = try await server.admin.checkStore(repair: false)
        #expect(check.missing.isEmpty && check.isClean, "\(check.missing)")
        #expect(!capture.lines.withLock { $0 }.contains { "\($0.message) \($0.metadata)".contains(hash) }, "no chunk's name in the log")
    }
}

/// Chunk storage that runs `before` once, the first time chunks are stored (between an upload's
/// look at what the account has and its record of what it sent).
private final class CollectedOnStore: ChunkStorage {
    let base: any ChunkStorage
    let before: @Sendable () async throws -> Void
    private let ran = Mutex(false)

    init(base: any ChunkStorage, before: @escaping @Sendable () async throws -> Void) {
        self.base = base
        self.before = before
    }

    func store(_ chunks: [ChunkBatch.Chunk], account: Int64, checked: Bool, sealed: Bool) async throws {
        let first = ran.withLock { ran in
            defer { ran = true }
            return !ran
        }
        if first { try await before() }
        try await base.store(chunks, account: account, checked: checked, sealed: sealed)
    }
    func sealedDigests(of hashes: [String], account: Int64) async throws -> [String: [UInt8]] { try await base.sealedDigests(of: hashes, account: account) }
    func load(hash: String, account: Int64) async throws -> Data? { try await base.load(hash: hash, account: account) }
    func load(_ hashes: [String], account: Int64, upTo limit: Int) async throws -> [Data] { try await base.load(hashes, account: account, upTo: limit) }
    func loadBatch(_ hashes: [String], account: Int64, upTo limit: Int, into batch: inout ByteBuffer) async throws -> [Range<Int>] {
        try await base.loadBatch(hashes, account: account, upTo: limit, into: &batch)
    }
    func loadVouchedBatch(_ hashes: [String], account: Int64, upTo limit: Int, into batch: inout ByteBuffer) async throws -> (places: [Range<Int>], vouched: [Bool]) {
        try await base.loadVouchedBatch(hashes, account: account, upTo: limit, into: &batch)
    }
    func remove(hash: String, account: Int64) async throws { try await base.remove(hash: hash, account: account) }
    func removeAccount(_ account: Int64) async throws { try await base.removeAccount(account) }
    func compact(orphanAge: TimeInterval) async throws -> Int64 { try await base.compact(orphanAge: orphanAge) }
    func quarantine(hash: String, account: Int64, damaged: Data) async throws -> String? { try await base.quarantine(hash: hash, account: account, damaged: damaged) }
    func storedChunks() async throws -> [ChunkEntry] { try await base.storedChunks() }
}
