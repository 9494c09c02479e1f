import Foundation
import HTTPTypes
import Testing
import UbiquityTestSupport
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityServer

/// The server's half of public links under Advanced Data Protection: it cannot open a sealed
/// file, so it refuses a link without a device's sealed manifest; it keeps the manifest of the
/// file's current revision only; it serves the link's page, the manifest as it was sent, and the
/// chunks of that revision — with the bases of those kept as sealed patches, named in a header —
/// and no other chunk of the account; a revoked link serves nothing; the manifests an account's
/// links hold are bounded.
@Suite struct SealedLinkServerTests {
    @Test(arguments: Backend.all) func aSealedLinkServesItsManifestAndItsRevisionsChunksOnly(backend: Backend) async throws {
        // (Room for two of this test's manifests: a third is refused until one is revoked.)
        var limits = AccountLimits()
        limits.maximumLinkManifestBytes = 1_600
        let server = try await TestServer.withAccount("ada", on: backend, accountLimits: limits); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let keyHolder = SealedKeyValueServerTests()
            let root = try await keyHolder.setUpKeys(client, laptop)
            let keys = root.chunkKeys(container: notes)
            let records = try #require(ItemRecords.keyed(container: notes, rootKeys: [root], sealing: true))
            // A file of two chunks, the second kept as a sealed patch of a chunk no revision names
            // any more; and another file.
            let head = randomBytes(50_000), original = randomBytes(100_000), otherFile = randomBytes(20_000)
            var edited = original
            edited[50_000] ^= 0xff
            let sealed = try [head, original, otherFile].map { try keys.seal($0) }
            for (id, body) in sealed {
                #expect(try await client.send(.put, "/v1/chunks/\(id)?sealed=1", token: laptop.token, raw: Array(body)).status == .created)
            }
            let helper = SealedPatchServerTests()
            let patch = try helper.sealedPatch(edited, from: original, keys: keys)
            #expect(try await client.send(.post, "/v1/chunks/patches?sealed=1", token: laptop.token, raw: helper.batch([patch])).status == .created)
            let (headName, baseName, otherName) = (sealed[0].id.description, sealed[1].id.description, sealed[2].id.description)
            func commit(_ item: String, _ name: String, _ chunks: [(String, Int)]) async throws -> ItemState {
                let manifest = Manifest(chunks: chunks.map { ChunkReference(hash: $0.0, size: Int64($0.1)) })
                let file = ItemUpdate(baseRevision: nil, name: name, kind: .file, modificationDate: 1_800_000_100, manifest: manifest)
                return try await client.commit(notes, item, try records.sealed(file, item: item, manifest: manifest), token: laptop.token).item
            }
            let plan = try await commit("plan", "Plan.txt", [(headName, head.count), (patch.made, edited.count)])
            _ = try await commit("other", "Other.txt", [(otherName, otherFile.count)])

            // Which chunks are patches, of what.
            let bases = try await client.send(.post, "/v1/chunks/bases", token: laptop.token, json: ChunkBasesRequest(hashes: [headName, patch.made]))
            #expect(try bases.decode(ChunkBasesResponse.self).bases == [patch.made: baseName], "\(String(buffer: bases.body))")

            // A link made under Standard: the server opens the file for it, with the escrow's keys.
            let standard = try await client.send(.post, "/v1/containers/\(notes)/items/other/links", token: laptop.token, json: PublishRequest())
            let standardPath = try #require(try standard.decode(PublishedLink.self).path)
            #expect(try await client.send(.get, standardPath).status == .ok)

            // Advanced: the server holds no key.
            let directory = try await KeyDirectoryTests().directory(client, token: laptop.token)
            let entries = try directory.roster.map { try RosterEntry(encoded: $0) }
            let advanced = try RosterEntry(.custody(.advanced), after: entries.last, signedBy: keyHolder.laptop)
            #expect(try await KeyDirectoryTests().append(client, token: laptop.token, after: entries.count, [advanced], [
                try KeyDirectoryTests().envelope(AccountRootKey(epoch: 1), account: laptop.identityToken, to: keyHolder.laptop.publicKeys, from: keyHolder.laptop),
            ]).status == .ok)
            // The Standard link stops, saying why: its address carries no key.
            let stopped = try await client.send(.get, standardPath)
            #expect(stopped.status == .gone && stopped.errorCode == "linkNeedsKey", "\(String(buffer: stopped.body))")
            let links = "/v1/containers/\(notes)/items/plan/links"
            let unsealed = try await client.send(.post, links, token: laptop.token, json: PublishRequest())
            #expect(unsealed.status == .conflict && unsealed.errorCode == "sealedOnDevices", "\(String(buffer: unsealed.body))")
            let manifest = try LinkManifest(name: "Plan.txt", size: Int64(head.count + edited.count), modificationDate: 1_800_000_100,
                                            chunks: [(headName, Int64(head.count)), (patch.made, Int64(edited.count))], bases: [patch.made: baseName], epochKeys: [keys])
            let (body, key) = try manifest.sealed()
            #expect(try await client.send(.post, links, token: laptop.token, json: PublishRequest(revision: "older", manifest: body)).errorCode == "revisionMoved")
            #expect(try await client.send(.post, links, token: laptop.token, json: PublishRequest(revision: plan.revision, manifest: Data("not sealed".utf8))).errorCode == "badManifest")
            let made = try await client.send(.post, links, token: laptop.token, json: PublishRequest(revision: plan.revision, manifest: body))
            let link = try made.decode(PublishedLink.self)
            #expect(link.sealed == true && link.revision == plan.revision)
            #expect(body.count > 600 && body.count <= 800, "the limit above counts on it: \(body.count)")
            // Manifests take room on the server: held to the account's bytes of them.
            #expect(try await client.send(.post, links, token: laptop.token, json: PublishRequest(revision: plan.revision, manifest: body)).status == .ok)
            let full = try await client.send(.post, links, token: laptop.token, json: PublishRequest(revision: plan.revision, manifest: body))
            #expect(full.status == .conflict && full.errorCode == "tooManyLinks", "\(String(buffer: full.body))")
            let path = try #require(link.path)

            // The page: a script of the server's own, nothing of the file.
            let page = try await client.send(.get, path)
            #expect(page.status == .ok && page.headers[.contentType]?.hasPrefix("text/html") == true)
            #expect(page.headers[.contentSecurityPolicy]?.contains("script-src 'self'") == true && page.headers[.cacheControl] == "private, no-store")
            #expect(String(buffer: page.body).contains("/web/assets/link.js"))
            #expect(try await client.send(.get, "/web/assets/link.js").status == .ok)
            // The manifest, as the device sealed it: it opens with the link's key.
            let served = try await client.send(.get, path + "/manifest")
            #expect(served.status == .ok && Data(buffer: served.body) == body)
            #expect(try LinkManifest.open(Data(buffer: served.body), key: key) == manifest)
            // The revision's chunks, and the base of the one kept as a patch, named in a header.
            for (name, patchOf) in [(headName, nil), (patch.made, baseName), (baseName, nil)] as [(String, String?)] {
                let chunk = try await client.send(.get, path + "/chunks/" + name)
                #expect(chunk.status == .ok, "\(name): \(String(buffer: chunk.body))")
                #expect(chunk.headers[HTTPField.Name("X-Ubiquity-Patch-Of")!] == patchOf)
            }
            let opened = try ChunkKeys.open(Data(buffer: try await client.send(.get, path + "/chunks/" + headName).body), as: sealed[0].id,
                                            sharedKey: Array(manifest.keys[0].keys), epoch: keys.epoch)
            #expect(opened == head)
            // No other chunk of the account: not another file's, not a malformed name.
            #expect(try await client.send(.get, path + "/chunks/" + otherName).status == .notFound)
            #expect(try await client.send(.get, path + "/chunks/nothex").status == .badRequest)

            // The account's list says which links are sealed.
            let web = WebInterfaceTests()
            let (cookie, csrf, _) = try await web.webSignIn(client)
            let listed = try await client.send(.get, "/web/api/links", headers: web.session(cookie)).decode(PublishedLinksResponse.self).links
            let sealedLinks = listed.filter { $0.sealed == true }
            #expect(sealedLinks.count == 2 && sealedLinks.contains { $0.id == link.id } && sealedLinks.allSatisfy { $0.stopped != true })
            #expect(listed.count == 3 && listed.contains { $0.sealed != true && $0.stopped == true }, "the Standard link is said to have stopped")
            // Revoked: nothing more.
            #expect(try await client.send(.post, "/web/api/links/\(link.id)/revoke", headers: web.session(cookie, csrf: csrf)).status == .noContent)
            for gone in [path, path + "/manifest", path + "/chunks/" + headName] {
                #expect(try await client.send(.get, gone).status == .notFound, "\(gone)")
            }
            // A revoked link's manifest is dropped: room for another.
            #expect(try await client.send(.post, links, token: laptop.token, json: PublishRequest(revision: plan.revision, manifest: body)).status == .ok)
        }
    }

    /// A link's token is the secret of its address: a request on it that fails (here its chunk's
    /// pack is gone, a 500) is logged without it.
    @Test func aFailedLinkRequestIsLoggedWithoutTheToken() async throws {
        let capture = LogCapture(level: .info)
        let server = try await TestServer(logger: capture.logger()); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ada", password: "correct horse")
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            _ = try await client.commit(notes, "doc", fileUpdate("Doc.txt", [[UInt8](randomBytes(5_000))]), token: laptop.token)
            let path = try #require(try await client.send(.post, "/v1/containers/\(notes)/items/doc/links", token: laptop.token, json: PublishRequest())
                .decode(PublishedLink.self).path)
            let chunks = URL(fileURLWithPath: server.directory).appendingPathComponent("chunks")
            for file in try FileManager.default.subpathsOfDirectory(atPath: chunks.path) where !file.hasPrefix("index.sqlite") {
                var folder: ObjCBool = false
                if FileManager.default.fileExists(atPath: chunks.appendingPathComponent(file).path, isDirectory: &folder), !folder.boolValue {
                    try FileManager.default.removeItem(at: chunks.appendingPathComponent(file))
                }
            }
            #expect(try await client.send(.get, path).status == .internalServerError)
        }
        let token = try #require(capture.lines.withLock { $0 }.first { $0.message == "request failed" }?.metadata["path"], "the failure was logged")
        #expect("\(token)" == "/l/…", "the token is not in the log: \(token)")
        #expect(!capture.lines.withLock { $0 }.contains { line in line.metadata.values.contains { "\($0)".contains("/l/") && "\($0)" != "/l/…" } })
    }
}
