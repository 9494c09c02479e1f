import Foundation
import GRDB
import NIOCore
import Testing
import UbiquityTestSupport
#if canImport(Glibc)
import Glibc
#endif
import UbiquityProtocol
@testable import UbiquityServer

/// A stored chunk damaged where it is kept (a flipped bit on disk, a row changed in PostgreSQL):
/// never served, put aside and logged, asked of the devices again, repaired by a new upload.
extension TestServer {
    /// Flips one byte of the stored chunk `hash` of `account`, wherever the backend keeps it.
    func damage(_ hash: String, of account: String) async throws {
        let server = self
        let id = try #require(try await server.admin.accounts().first { $0.name == account }?.id)
        switch server.admin.storage.chunks {
        case let files as FileChunkStore:
            let found = try files.index.read { db in
                try Row.fetchOne(db, sql: "SELECT pack, offset FROM chunk WHERE account = ? AND hash = ?", arguments: [id, hash])
            }
            let place = try #require(found)
            let fd = open(files.packPath(account: id, pack: place["pack"]), O_RDWR)
            defer { close(fd) }
            var byte: UInt8 = 0
            let offset: Int64 = place["offset"] + 1000
            #expect(pread(fd, &byte, 1, off_t(offset)) == 1)
            byte ^= 0x01
            #expect(pwrite(fd, &byte, 1, off_t(offset)) == 1)
        default:
            let database = try #require(server.admin.storage.database as? PostgresDatabase)
            try await database.transaction { db in
                // One bit flipped (setting the byte to zero left it as it was when it was zero
                // already: one run in 256 found nothing to find).
                _ = try await db.rows("UPDATE chunk_content SET data = set_byte(data, 1000, get_byte(data, 1000) # 1) WHERE account_id = \(id) AND hash = \(hash)")
            }
        }
    }

    /// Removes the database's record that `account` holds chunk `hash` (its bytes stay).
    func unlist(_ hash: String, of account: String) async throws {
        let id = try #require(try await admin.accounts().first { $0.name == account }?.id)
        switch admin.storage.database {
        case let sqlite as SQLiteDatabase:
            try await sqlite.pool.write { db in try db.execute(sql: "DELETE FROM chunk WHERE accountId = ? AND hash = ?", arguments: [id, hash]) }
        default:
            let database = try #require(admin.storage.database as? PostgresDatabase)
            try await database.transaction { db in _ = try await db.rows("DELETE FROM chunk WHERE account_id = \(id) AND hash = \(hash)") }
        }
    }
}

@Suite struct ChunkIntegrityTests {

    @Test(arguments: Backend.all)
    func aDamagedChunkIsNeverServedAndARepeatedUploadRepairsIt(backend: Backend) async throws {
        let capture = LogCapture()
        let server = try await TestServer(backend, logger: capture.logger()); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ann", password: "correct horse")
        let bytes = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let hash = sha256(bytes)
        try await server.run { client in
            let laptop = try await client.signIn("ann")
            #expect(try await client.upload(bytes, token: laptop.token).status == .created)
            let committed = try await client.commit(notes, "report", fileUpdate("Report.txt", [bytes]), token: laptop.token)
            #expect(committed.item.uploaded)
            try await server.damage(hash, of: "ann")

            // Neither download route serves the damaged bytes: the chunk is missing now.
            let single = try await client.send(.get, "/v1/chunks/\(hash)", token: laptop.token)
            #expect(single.status == .notFound, "\(single.status)")
            let batch = try await client.send(.post, "/v1/chunks/fetch", token: laptop.token, json: ChunkFetchRequest(hashes: [hash]))
            #expect(batch.status == .notFound, "\(batch.status)")
            let missing = try await client.send(.post, "/v1/chunks/missing", token: laptop.token, json: MissingChunksRequest(hashes: [hash]))
            #expect(try missing.decode(MissingChunksResponse.self).missing == [hash])
            // The item says it is not uploaded, at a new sequence (devices are told).
            let page = try await client.changes(notes, since: committed.item.sequence, token: laptop.token)
            #expect(page.items.map(\.id) == ["report"])
            #expect(page.items.first?.uploaded == false)

            // Sent again: stored afresh, served, the item complete again.
            #expect(try await client.upload(bytes, token: laptop.token).status == .created)
            let again = try await client.send(.get, "/v1/chunks/\(hash)", token: laptop.token)
            #expect(again.status == .ok)
            #expect(Array(buffer: again.body) == bytes)
            let repaired = try await client.changes(notes, since: page.sequence, token: laptop.token)
            #expect(repaired.items.first?.uploaded == true)
        }
        #expect(try await server.storedChunk(hash, of: "ann").map { [UInt8]($0) } == bytes)
        let said = capture.lines.withLock { $0 }.filter { $0.level == .error && $0.metadata["hash"] == "\(hash)" }
        #expect(said.count == 1, "\(said)")
        if backend == .sqlite {
            // The damaged bytes are kept for the operator.
            let kept = try FileManager.default.contentsOfDirectory(atPath: server.directory + "/chunks/quarantine")
            #expect(kept.count == 1 && kept[0].contains(hash))
        }
    }
}

extension ChunkIntegrityTests {
    /// A fetch is read from storage straight into the answer; a damaged chunk in the middle of
    /// it ends the answer before it, whole and well framed (the device asks again for the rest).
    @Test(arguments: Backend.all)
    func aFetchEndsBeforeADamagedChunkWithWhatCameBefore(backend: Backend) async throws {
        let server = try await TestServer(backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ann", password: "correct horse")
        let pieces = (0..<3).map { piece in (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* (piece + 3) &+ piece) } }
        let hashes = pieces.map { sha256($0) }
        try await server.run { client in
            let laptop = try await client.signIn("ann")
            for piece in pieces { #expect(try await client.upload(piece, token: laptop.token).status == .created) }
            #expect(try await client.commit(notes, "report", fileUpdate("Report.txt", pieces), token: laptop.token).item.uploaded)
            let whole = try await client.send(.post, "/v1/chunks/fetch", token: laptop.token, json: ChunkFetchRequest(hashes: hashes))
            let all = try ChunkBatch(decoding: Array(buffer: whole.body), maximumChunkSize: 1 << 20)
            #expect(all.chunks.map(\.hash) == hashes && all.chunks.map { Array($0.bytes) } == pieces)

            try await server.damage(hashes[1], of: "ann")
            let cut = try await client.send(.post, "/v1/chunks/fetch", token: laptop.token, json: ChunkFetchRequest(hashes: hashes))
            #expect(cut.status == .ok)
            let before = try ChunkBatch(decoding: Array(buffer: cut.body), maximumChunkSize: 1 << 20)
            #expect(before.chunks.map(\.hash) == [hashes[0]] && before.chunks.map { Array($0.bytes) } == [pieces[0]])
            let rest = try await client.send(.post, "/v1/chunks/fetch", token: laptop.token, json: ChunkFetchRequest(hashes: [hashes[2]]))
            #expect(try ChunkBatch(decoding: Array(buffer: rest.body), maximumChunkSize: 1 << 20).chunks.map { Array($0.bytes) } == [pieces[2]])
        }
    }
}

/// A device whose token is limited to some containers reads only the chunks their items name
/// (chunks are the account's, shared by its containers).
@Suite struct ContainerScopedChunkTests {
    @Test(arguments: Backend.all)
    func aLimitedTokenReadsOnlyItsContainersChunks(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        let photos = "ABCDE12345.com.example.photos"
        try await server.run { client in
            let laptop = try await client.signIn("ada")
            let notesOnly = try await client.signIn("ada", device: "notes app", containers: [notes])
            let secret = Array("the photos' secret".utf8), shared = Array("in both containers".utf8), own = Array("a note".utf8)
            for bytes in [secret, shared] { #expect(try await client.upload(bytes, token: laptop.token).status == .created) }
            _ = try await client.commit(photos, "secret", fileUpdate("Secret.jpg", [secret, shared]), token: laptop.token)
            _ = try await client.commit(notes, "shared", fileUpdate("Shared.txt", [shared]), token: laptop.token)
            #expect(try await client.upload(own, token: notesOnly.token).status == .created)
            _ = try await client.commit(notes, "own", fileUpdate("Own.txt", [own]), token: notesOnly.token)

            // Another container's chunk: absent, by every route that reads chunks.
            let hash = sha256(secret)
            #expect(try await client.send(.get, "/v1/chunks/\(hash)", token: notesOnly.token).status == .notFound)
            #expect(try await client.send(.post, "/v1/chunks/fetch", token: notesOnly.token, json: ChunkFetchRequest(hashes: [sha256(shared), hash])).status == .notFound)
            #expect(try await client.send(.post, "/v1/chunks/signatures", token: notesOnly.token, json: ChunkSignaturesRequest(hashes: [hash])).status == .notFound)
            // Its own containers' chunks, also one another container names too: read.
            #expect(Array(buffer: try await client.send(.get, "/v1/chunks/\(sha256(shared))", token: notesOnly.token).body) == shared)
            #expect(try await client.send(.post, "/v1/chunks/fetch", token: notesOnly.token, json: ChunkFetchRequest(hashes: [sha256(own), sha256(shared)])).status == .ok)
            // Asked whether it is there, the same: absent — sent again, it is kept once, and
            // once an item of its own containers names it, there.
            func missing(_ hashes: [String]) async throws -> [String] {
                try await client.send(.post, "/v1/chunks/missing", token: notesOnly.token, json: MissingChunksRequest(hashes: hashes)).decode(MissingChunksResponse.self).missing
            }
            #expect(try await missing([hash, sha256(shared), sha256(own)]) == [hash])
            #expect(try await client.upload(secret, token: notesOnly.token).status == .created)
            #expect(try await missing([hash]) == [hash])
            _ = try await client.commit(notes, "copied", fileUpdate("Copied.jpg", [secret]), token: notesOnly.token)
            #expect(try await missing([hash]) == [])
            #expect(try await client.send(.post, "/v1/chunks/missing", token: laptop.token, json: MissingChunksRequest(hashes: [hash])).decode(MissingChunksResponse.self).missing == [])
            // A token for every container reads all.
            #expect(Array(buffer: try await client.send(.get, "/v1/chunks/\(hash)", token: laptop.token).body) == secret)
        }
    }
}
