import Foundation
import Logging
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
}
