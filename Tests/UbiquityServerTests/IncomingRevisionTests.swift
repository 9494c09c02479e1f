import Foundation
import Testing
import UbiquityProtocol
import UbiquityTestSupport
@testable import UbiquityServer

/// Incoming revisions (issue 48): a device announces the revision it is uploading before its
/// chunks; the others list it, are pushed each change of it, and may fetch its chunks as they
/// land — before the commit, which alone changes the item.
@Suite struct IncomingRevisionTests {
    @Test(arguments: Backend.all)
    func anAnnouncedUploadIsListedAndItsChunksReadableBeforeTheCommit(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ann", on: backend); defer { server.remove() }
        let chunks = (0..<3).map { [UInt8](randomBytes(50_000 + $0)) }
        let update = fileUpdate("Film.mov", chunks)
        try await server.run { client in
            let laptop = try await client.signIn("ann"), phone = try await client.signIn("ann", device: "phone")
            let account = try #require(try await server.admin.accounts().first).id
            let phoneDevice = DeviceAuth(deviceId: phone.deviceId, deviceName: "phone", accountId: account)
            let (_, events) = server.server.services.notifier.subscribe(phoneDevice)

            let announced = try await client.send(.put, "/v1/containers/\(notes)/incoming/film", token: laptop.token, json: update)
            #expect(announced.status == .ok, "\(String(buffer: announced.body))")
            let pushed = await events.next()
            #expect(pushed?.map(\.event) == [PushEvent(type: "incoming", container: notes, sequence: nil)], "the phone is told at once")
            var listed = try await client.send(.get, "/v1/containers/\(notes)/incoming", token: phone.token).decode(IncomingResponse.self)
            #expect(listed.incoming.map(\.item) == ["film"] && listed.incoming.first?.deviceName == "laptop")
            #expect(listed.incoming.first?.update.manifest.allChunks.map(\.hash) == chunks.map(sha256))
            #expect(try await client.send(.get, "/v1/containers/\(notes)/incoming", token: laptop.token).decode(IncomingResponse.self).incoming.isEmpty,
                    "a device is not told of its own")
            #expect(try await client.changes(notes, token: phone.token).items.isEmpty, "an announcement is no revision")

            // The first chunk lands: the phone may fetch it, and not yet the others.
            #expect(try await client.upload(chunks[0], token: laptop.token).status == .created)
            #expect(try await client.send(.post, "/v1/containers/\(notes)/incoming/film/landed", token: laptop.token).status == .ok)
            let first = try await client.send(.post, "/v1/chunks/fetch", token: phone.token, json: ChunkFetchRequest(hashes: [sha256(chunks[0])]))
            #expect(first.status == .ok)
            #expect(try ChunkBatch(decoding: Array(buffer: first.body), maximumChunkSize: 1 << 22).chunks.map { Array($0.bytes) } == [chunks[0]])
            let rest = try await client.send(.post, "/v1/chunks/fetch", token: phone.token, json: ChunkFetchRequest(hashes: [sha256(chunks[1])]))
            #expect(rest.status == .notFound)
            // Asked for what is there now: the one that landed, the others left out; none there: an empty answer.
            let available = try await client.send(.post, "/v1/chunks/fetch", token: phone.token, json: ChunkFetchRequest(hashes: chunks.map(sha256), available: true))
            #expect(available.status == .ok)
            #expect(try ChunkBatch(decoding: Array(buffer: available.body), maximumChunkSize: 1 << 22).chunks.map(\.hash) == [sha256(chunks[0])])
            let none = try await client.send(.post, "/v1/chunks/fetch", token: phone.token, json: ChunkFetchRequest(hashes: [sha256(chunks[2])], available: true))
            #expect(none.status == .ok && none.body.readableBytes == 0)
            let otherApp = try await client.signIn("ann", device: "other app", containers: ["ABCDE12345.com.example.other"])
            let outside = try await client.send(.post, "/v1/chunks/fetch", token: otherApp.token, json: ChunkFetchRequest(hashes: [sha256(chunks[0])], available: true))
            #expect(outside.status == .ok && outside.body.readableBytes == 0, "a chunk no item of its containers names is not there for a limited token")
            // A chunk landing (its upload under way): there for a device of the whole account, not
            // for one limited to some containers (no item of them names it).
            chunks[1].withUnsafeBytes { server.server.services.landing.land(account: account, hash: sha256(chunks[1]), bytes: $0, sealed: false) }
            let landed = try await client.send(.post, "/v1/chunks/fetch", token: phone.token, json: ChunkFetchRequest(hashes: [sha256(chunks[1])], available: true))
            #expect(try ChunkBatch(decoding: Array(buffer: landed.body), maximumChunkSize: 1 << 22).chunks.map { Array($0.bytes) } == [chunks[1]])
            let limited = try await client.send(.post, "/v1/chunks/fetch", token: otherApp.token, json: ChunkFetchRequest(hashes: [sha256(chunks[1])], available: true))
            #expect(limited.status == .ok && limited.body.readableBytes == 0, "a landing chunk is not given to a token limited to some containers")

            // Committed and withdrawn: the item changes, and nothing is incoming.
            #expect(try await client.commit(notes, "film", update, token: laptop.token).item.uploaded)
            #expect(try await client.send(.delete, "/v1/containers/\(notes)/incoming/film", token: laptop.token).status == .noContent)
            listed = try await client.send(.get, "/v1/containers/\(notes)/incoming", token: phone.token).decode(IncomingResponse.self)
            #expect(listed.incoming.isEmpty)
            #expect(try await client.changes(notes, token: phone.token).items.map(\.name) == ["Film.mov"])
            let landedAgain = try await client.send(.post, "/v1/containers/\(notes)/incoming/film/landed", token: laptop.token)
            #expect(landedAgain.status == .notFound && landedAgain.errorCode == "noSuchIncoming")
        }
    }

    /// What may not be announced, and who may not read the announcements.
    @Test(arguments: Backend.all)
    func onlyFlatFilesAreAnnouncedAndOnlyToDevicesOfTheContainer(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ann", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ann")
            let other = try await client.signIn("ann", device: "other app", containers: ["ABCDE12345.com.example.other"])
            var folder = fileUpdate("Folder", [])
            folder.kind = .directory
            let refused = try await client.send(.put, "/v1/containers/\(notes)/incoming/folder", token: laptop.token, json: folder)
            #expect(refused.status == .badRequest && refused.errorCode == "notIncoming")
            let deletion = try await client.send(.put, "/v1/containers/\(notes)/incoming/gone", token: laptop.token,
                                                 json: fileUpdate("Gone.txt", [[1]], deleted: true))
            #expect(deletion.status == .badRequest)
            #expect(try await client.send(.put, "/v1/containers/\(notes)/incoming/a", token: laptop.token, json: fileUpdate("A.bin", [[2]])).status == .ok)
            let outside = try await client.send(.get, "/v1/containers/\(notes)/incoming", token: other.token)
            #expect(outside.status == .forbidden, "a token for another container reads nothing of this one")
        }
    }

    /// An announcement lasts ``IncomingRevision/lifetime`` after its device last spoke of it,
    /// and a device keeps at most ``IncomingRevision/maximumPerDevice``: a device that dies
    /// announcing, or one that announces without end, leaves nothing behind.
    @Test(arguments: Backend.all)
    func announcementsExpireAndEachDeviceKeepsAFew(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ann", on: backend); defer { server.remove() }
        let account = try #require(try await server.admin.accounts().first).id
        let storage = try server.server.services.incomingStorage
        let laptop = DeviceAuth(deviceId: "laptop-id", deviceName: "laptop", accountId: account)
        let start = Date()
        let body = try JSONEncoder().encode(fileUpdate("A.bin", [[3]]))
        for index in 0..<(IncomingRevision.maximumPerDevice + 2) {
            _ = try await storage.announceIncoming(accountId: account, container: notes, item: "item\(index)", device: laptop, update: body,
                                                   now: start.addingTimeInterval(Double(index)))
        }
        var listed = try await storage.incoming(accountId: account, container: notes, except: "phone", now: start.addingTimeInterval(10))
        #expect(listed.map(\.item) == (2..<(IncomingRevision.maximumPerDevice + 2)).map { "item\($0)" }, "the oldest two went")
        // Kept alive, one stays past the others' lifetime.
        #expect(try await storage.announceIncoming(accountId: account, container: notes, item: "item9", device: laptop, update: nil,
                                                   now: start.addingTimeInterval(100)) != nil)
        listed = try await storage.incoming(accountId: account, container: notes, except: "phone", now: start.addingTimeInterval(10 + IncomingRevision.lifetime))
        #expect(listed.map(\.item) == ["item9"])
        #expect(try await storage.announceIncoming(accountId: account, container: notes, item: "item2", device: laptop, update: nil,
                                                   now: start.addingTimeInterval(10 + IncomingRevision.lifetime)) == nil, "an expired one is not kept alive")
    }

    /// Chunks kept as they land: only while the account has an announcement, at most the
    /// capacity (the oldest out first), and a plaintext chunk whose bytes are not its name's is
    /// never given out.
    @Test func landingChunksAreBoundedAndChecked() {
        let landing = LandingChunks(capacity: 250_000)
        #expect(!landing.isWatched(account: 1))
        landing.watch(account: 1, until: Date().timeIntervalSince1970 + 60)
        landing.watch(account: 2, until: Date().timeIntervalSince1970 - 1)
        #expect(landing.isWatched(account: 1) && !landing.isWatched(account: 2))
        let chunks = (0..<4).map { [UInt8](randomBytes(100_000 + $0)) }
        for chunk in chunks { chunk.withUnsafeBytes { landing.land(account: 1, hash: sha256(chunk), bytes: $0, sealed: false) } }
        #expect(landing.keptBytes <= 250_000)
        let kept = landing.take(Set(chunks.map(sha256)), account: 1)
        #expect(kept.count == 2 && kept[sha256(chunks[3])] == chunks[3] && kept[sha256(chunks[0])] == nil, "the oldest went")
        #expect(landing.take([sha256(chunks[3])], account: 2).isEmpty, "another account's are not its")
        let forged = [UInt8](randomBytes(1_000))
        forged.withUnsafeBytes { landing.land(account: 1, hash: sha256(chunks[0]), bytes: $0, sealed: false) }
        #expect(landing.take([sha256(chunks[0])], account: 1).isEmpty, "bytes that are not the chunk named are never given out")
    }

    /// A fetch of what is there, while an upload of the account is announced and nothing of it
    /// landed yet, waits for the next chunk and answers it — without holding one of the
    /// account's turns meanwhile (here its only one: the upload it waits for needs it; held, the
    /// upload would wait out the fetch's whole wait, which would then answer nothing).
    @Test(arguments: Backend.all)
    func aFetchOfWhatIsThereWaitsForTheNextChunkWithoutHoldingATurn(backend: Backend) async throws {
        var share = AccountShareLimits()
        share.working = 1
        let server = try await TestServer(backend, accountShare: share, landingWait: .seconds(60)); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ann", password: "correct horse")
        let chunk = [UInt8](randomBytes(70_000))
        try await server.run { client in
            let laptop = try await client.signIn("ann"), phone = try await client.signIn("ann", device: "phone")
            #expect(try await client.send(.put, "/v1/containers/\(notes)/incoming/film", token: laptop.token, json: fileUpdate("Film.mov", [chunk])).status == .ok)
            async let waited = client.send(.post, "/v1/chunks/fetch", token: phone.token, json: ChunkFetchRequest(hashes: [sha256(chunk)], available: true))
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await client.send(.post, "/v1/chunks", token: laptop.token, raw: ChunkBatch([ChunkBatch.Chunk(hash: sha256(chunk), bytes: chunk)]).encoded()).status == .created)
            let answer = try await waited
            #expect(answer.status == .ok)
            #expect(try ChunkBatch(decoding: Array(buffer: answer.body), maximumChunkSize: 1 << 22).chunks.map { Array($0.bytes) } == [chunk],
                    "the fetch answered the chunk that landed while it waited")
        }
    }
}
