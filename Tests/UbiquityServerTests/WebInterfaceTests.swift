import Foundation
import UbiquityTestSupport
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import UbiquityProtocol
import UbiquitySync
@testable import UbiquityServer

/// The web interface's server side (docs/Web.md): its page and headers, the cookie session and
/// its CSRF token, uploads in parts that devices see as any change, downloads as attachments
/// (a package as a zip). The whole of it in a browser: `WebBrowserTests`.
@Suite struct WebInterfaceTests {
    static let page: HTTPFields = [WebSession.pageHeader: "1"]

    /// Signs in through the web API: the session cookie's value and the CSRF token.
    func webSignIn(_ client: Client, password: String = "correct horse") async throws -> (cookie: String, csrf: String, setCookie: String) {
        let answer = try await client.send(.post, "/web/api/sign-in", json: WebSignInRequest(account: "ada", password: password), headers: Self.page)
        #expect(answer.status == .ok, "\(String(buffer: answer.body))")
        let setCookie = try #require(answer.headers[.setCookie])
        let value = try #require(setCookie.split(separator: ";").first?.split(separator: "=", maxSplits: 1).last.map(String.init))
        return (value, try answer.decode(WebSessionResponse.self).csrf, setCookie)
    }

    func session(_ cookie: String, csrf: String? = nil) -> HTTPFields {
        var fields = Self.page
        fields[.cookie] = "\(WebSession.cookieName)=\(cookie)"
        if let csrf { fields[WebSession.csrfHeader] = csrf }
        return fields
    }

    @Test(arguments: Backend.all) func theSessionIsAPrivateCookieAndChangesNeedItsToken(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            // The page: scripts only from the server, never framed, never sniffed.
            let page = try await client.send(.get, "/web/")
            #expect(page.status == .ok && page.headers[.contentType] == "text/html; charset=utf-8")
            let policy = try #require(page.headers[.contentSecurityPolicy])
            #expect(policy.contains("script-src 'self'") && !policy.contains("unsafe-inline") && policy.contains("frame-ancestors 'none'"))
            #expect(page.headers[.xContentTypeOptions] == "nosniff" && page.headers[HTTPField.Name("X-Frame-Options")!] == "DENY")
            #expect(try await client.send(.get, "/").headers[.location] == "/web/")
            #expect(try await client.send(.get, "/web/assets/app.js").headers[.contentType] == "text/javascript; charset=utf-8")
            for missing in ["/web/assets/nothing.js", "/web/assets/..%2F..%2Fubiquity.sqlite", "/web/assets/%2e%2e"] {
                #expect(try await client.send(.get, missing).status == .notFound, "\(missing)")
            }

            // Signing in needs the page's header (a form from elsewhere cannot set it).
            #expect(try await client.send(.post, "/web/api/sign-in", json: WebSignInRequest(account: "ada", password: "correct horse")).status == .forbidden)
            let wrong = try await client.send(.post, "/web/api/sign-in", json: WebSignInRequest(account: "ada", password: "wrong"), headers: Self.page)
            #expect(wrong.status == .unauthorized && wrong.headers[.setCookie] == nil)
            let (cookie, csrf, setCookie) = try await webSignIn(client)
            for attribute in ["__Host-ubiquity=", "HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
                #expect(setCookie.contains(attribute), "\(setCookie)")
            }
            let me = try await client.send(.get, "/web/api/session", headers: session(cookie)).decode(WebSessionResponse.self)
            #expect(me.account == "ada" && me.csrf == csrf && me.csrf != cookie)

            // A change without the session's token (or with another's) changes nothing.
            let folder = "/web/api/containers/\(notes)/folders"
            #expect(try await client.send(.post, folder, json: WebFolderRequest(name: "Forged"), headers: session(cookie)).status == .forbidden)
            #expect(try await client.send(.post, folder, json: WebFolderRequest(name: "Forged"), headers: session(cookie, csrf: String(repeating: "0", count: 64))).status == .forbidden)
            var noPage = session(cookie, csrf: csrf)
            noPage[WebSession.pageHeader] = nil
            #expect(try await client.send(.post, folder, json: WebFolderRequest(name: "Forged"), headers: noPage).status == .forbidden)
            let made = try await client.send(.post, folder, json: WebFolderRequest(name: "Trip"), headers: session(cookie, csrf: csrf))
            #expect(made.status == .ok, "\(String(buffer: made.body))")
            let listed = try await client.send(.get, "/web/api/containers/\(notes)/folder", headers: session(cookie)).decode(WebFolderResponse.self)
            #expect(listed.items.map(\.name) == ["Trip"])

            // The sync API never takes the cookie.
            #expect(try await client.send(.get, "/v1/account", headers: session(cookie)).status == .unauthorized)
            // The browser is a device of the account, listed and signed out like one.
            #expect(try await server.admin.devices(ofAccount: "ada").map(\.name) == [WebSession.deviceName])
            let out = try await client.send(.post, "/web/api/sign-out", headers: session(cookie, csrf: csrf))
            #expect(out.status == .noContent && out.headers[.setCookie]?.contains("Max-Age=0") == true)
            #expect(try await client.send(.get, "/web/api/session", headers: session(cookie)).status == .unauthorized)
        }
    }

    /// A file uploaded in parts is a change like a device's: devices list it and fetch its
    /// chunks; uploaded again under the same name, it is a new revision of the same item (the
    /// earlier one a version). Downloads are attachments under an escaped name.
    @Test(arguments: Backend.all) func anUploadInPartsIsAChangeDevicesSee(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada")
            _ = try await client.commit(notes, "welcome", fileUpdate("Welcome.txt", [[1, 2, 3]]), token: laptop.token)
            let (cookie, csrf, _) = try await webSignIn(client)
            let web = session(cookie, csrf: csrf)

            var state: UInt64 = 0x9E37_79B9_7F4A_7C15 // xorshift: random-looking bytes, quickly
            let bytes = (0..<(5 << 20) / 8).flatMap { _ -> [UInt8] in
                state ^= state << 13; state ^= state >> 7; state ^= state << 17
                return withUnsafeBytes(of: state) { Array($0) }
            }
            var chunks: [ChunkReference] = []
            for start in stride(from: 0, to: bytes.count, by: WebUpload.partBytes) {
                let part = Array(bytes[start..<min(bytes.count, start + WebUpload.partBytes)])
                let answer = try await client.send(.post, "/web/api/parts", raw: part, headers: web)
                #expect(answer.status == .ok, "\(String(buffer: answer.body))")
                chunks += try answer.decode(WebPartResponse.self).chunks
            }
            #expect(chunks.reduce(0) { $0 + $1.size } == Int64(bytes.count) && chunks.count > 100)
            #expect(try await client.send(.post, "/web/api/parts", raw: [UInt8](repeating: 1, count: WebUpload.partBytes + 1), headers: web).status == .contentTooLarge)
            // A part of a large file (as the page names its size) is cut into a large file's
            // chunks, as a device cuts that file; a size that is not one is refused.
            let large = try await client.send(.post, "/web/api/parts?fileSize=\(64 << 20)", raw: Array(bytes.prefix(WebUpload.partBytes)), headers: web)
            let largeChunks = try large.decode(WebPartResponse.self).chunks
            #expect(largeChunks.map(\.hash) == ContentChunker.large.chunks(of: Array(bytes.prefix(WebUpload.partBytes))).map(\.hash))
            #expect(largeChunks.dropLast().allSatisfy { $0.size > Int64(ContentChunker.standard.maximumSize) } && largeChunks.count < chunks.count / 4)
            for bad in ["-1", "lots", "99999999999999999999"] {
                #expect(try await client.send(.post, "/web/api/parts?fileSize=\(bad)", raw: [1, 2, 3], headers: web).status == .badRequest, "fileSize=\(bad)")
            }

            let name = "Q3 \"final\" \\ résumé <b>.bin"
            let request = WebFileRequest(name: name, parent: nil, chunks: chunks, modificationDate: 1_800_000_000)
            let first = try await client.send(.post, "/web/api/containers/\(notes)/files", json: request, headers: web).decode(WebItem.self)
            #expect(first.uploaded && first.size == Int64(bytes.count) && first.deviceName == WebSession.deviceName)
            // The laptop hears of it and finds every chunk.
            let seen = try #require(try await client.changes(notes, token: laptop.token).items.first { $0.name == name })
            #expect(seen.id == first.id && seen.manifest.chunks == chunks && seen.parent == nil)
            let chunk = try await client.send(.get, "/v1/chunks/\(chunks[7].hash)", token: laptop.token)
            #expect(chunk.status == .ok && Array(buffer: chunk.body) == Array(bytes[Int(chunks[..<7].reduce(0) { $0 + $1.size })...].prefix(Int(chunks[7].size))))

            // Downloaded: the bytes, as an attachment whose name cannot break out of its header.
            let download = try await client.send(.get, "/web/api/containers/\(notes)/items/\(first.id)/download", headers: session(cookie))
            #expect(download.status == .ok && Array(buffer: download.body) == bytes)
            #expect(download.headers[.contentType] == "application/octet-stream" && download.headers[.xContentTypeOptions] == "nosniff")
            #expect(download.headers[.contentDisposition] == "attachment; filename=\"Q3 _final_ _ r_sum_ <b>.bin\"; filename*=UTF-8''Q3%20%22final%22%20%5C%20r%C3%A9sum%C3%A9%20%3Cb%3E.bin")

            // The same name again: a new revision of the same item; the first stays a version.
            let again = try await client.send(.post, "/web/api/containers/\(notes)/files",
                                              json: WebFileRequest(name: name, parent: nil, chunks: Array(chunks.prefix(3))), headers: web).decode(WebItem.self)
            #expect(again.id == first.id && again.size == chunks.prefix(3).reduce(0) { $0 + $1.size })
            let revisions = try await client.send(.get, "/v1/containers/\(notes)/items/\(first.id)/revisions", token: laptop.token).decode(ItemRevisionsResponse.self)
            #expect(revisions.revisions.count == 1)

            // Refused: a name with a bidi override, a folder that is not there, the container's top level.
            let files = "/web/api/containers/\(notes)/files"
            let bidi = try await client.send(.post, files, json: WebFileRequest(name: "invoice\u{202E}txt.exe", chunks: []), headers: web)
            #expect(bidi.status == .badRequest && bidi.errorCode == "invalidName")
            #expect(try await client.send(.post, files, json: WebFileRequest(name: "a.txt", parent: "nosuchfolder", chunks: []), headers: web).status == .notFound)
            // Chunks the server does not have (an upload resumed after they were collected): refused, the page sends them again.
            let unknown = ChunkReference(hash: String(repeating: "ab", count: 32), size: 10)
            let missing = try await client.send(.post, files, json: WebFileRequest(name: "resumed.bin", chunks: [chunks[0], unknown]), headers: web)
            #expect(missing.status == .conflict && missing.errorCode == "missingChunks")
            #expect(try await client.send(.get, "/web/api/containers/\(notes)/folder?parent=container", headers: web).status == .notFound)
            #expect(try await client.send(.get, "/web/api/containers/\(notes)/folder?parent=..%2F..", headers: web).status == .badRequest)
            #expect(try await client.send(.get, "/web/api/containers/nocontainer/folder", headers: web).status == .badRequest)
        }
    }

    /// A folder's page comes from one query on the folder (not the whole container), sorted,
    /// searched and cut into pages by the server: folders first, names in the order people
    /// expect (numbers by value, case and accents not counted).
    @Test(arguments: Backend.all) func aFolderIsListedAPageAtATimeInTheOrderPeopleExpect(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada")
            let (cookie, csrf, _) = try await webSignIn(client)
            let web = session(cookie, csrf: csrf)
            let base = "/web/api/containers/\(notes)"
            let music = try await client.send(.post, base + "/folders", json: WebFolderRequest(name: "Music"), headers: web).decode(WebItem.self)
            let names = ["Track 10.m4a", "track 2.m4a", "Track 1.m4a", "Été.txt", "ete 3.txt", "Track 02b.m4a"]
            for (index, name) in names.enumerated() {
                var update = fileUpdate(name, [[UInt8](repeating: 7, count: index + 1)])
                update.parent = music.id
                _ = try await client.commit(notes, "song\(index)", update, token: laptop.token)
            }
            _ = try await client.send(.post, base + "/folders", json: WebFolderRequest(name: "Zeta", parent: music.id), headers: web)
            _ = try await client.commit(notes, "elsewhere", fileUpdate("Track 3.m4a", [[1]]), token: laptop.token) // at the top, not in Music
            var gone = fileUpdate("Track 4.m4a", [[1]])
            gone.parent = music.id
            let deleted = try await client.commit(notes, "gone", gone, token: laptop.token)
            _ = try await client.commit(notes, "gone", ItemUpdate(baseRevision: deleted.revision, name: "Track 4.m4a", parent: music.id, kind: .file,
                                                                  modificationDate: 1, manifest: Manifest(), deleted: true), token: laptop.token)

            func page(_ query: String) async throws -> WebFolderResponse {
                let answer = try await client.send(.get, base + "/folder?parent=\(music.id)&" + query, headers: web)
                #expect(answer.status == .ok, "\(query): \(String(buffer: answer.body))")
                return try answer.decode(WebFolderResponse.self)
            }
            let all = try await page("sort=name")
            #expect(all.path.map(\.name) == ["Music"] && all.total == 7 && all.offset == 0)
            #expect(all.items.map(\.name) == ["Zeta", "ete 3.txt", "Été.txt", "Track 1.m4a", "track 2.m4a", "Track 02b.m4a", "Track 10.m4a"])
            let second = try await page("sort=name&offset=3&limit=2")
            #expect(second.items.map(\.name) == ["Track 1.m4a", "track 2.m4a"] && second.total == 7 && second.offset == 3)
            #expect(try await page("sort=size&limit=3").items.map(\.name) == ["Zeta", "Track 02b.m4a", "ete 3.txt"])
            let found = try await page("filter=TRACK%202")
            #expect(found.items.map(\.name) == ["track 2.m4a"] && found.total == 1)
            #expect(try await page("filter=ETE").total == 2)
            #expect(try await page("offset=50").items.isEmpty)
            for bad in ["sort=colour", "limit=0", "limit=100000", "offset=-1", "offset=x"] {
                #expect(try await client.send(.get, base + "/folder?parent=\(music.id)&" + bad, headers: web).status == .badRequest, "\(bad)")
            }
            // A file is not a folder to list.
            #expect(try await client.send(.get, base + "/folder?parent=song0", headers: web).status == .notFound)
        }
    }

    /// The operator's pages: only for an account made an operator; accounts with their usage,
    /// quotas and devices; a quota set and a device signed out from the page; the server's
    /// health and storage figures.
    @Test(arguments: Backend.all) func operatorsSeeAccountsQuotasDevicesAndHealth(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "grace", password: "correct horse", quotaBytes: 1 << 30)
        try await server.run { client in
            let phone = try await client.signIn("grace", device: "grace's phone")
            _ = try await client.commit(notes, "doc", fileUpdate("Doc.txt", [[1, 2, 3]]), token: phone.token)
            let (cookie, csrf, _) = try await webSignIn(client)
            let web = session(cookie, csrf: csrf)
            // Not an operator: every administration route is refused.
            #expect(try await client.send(.get, "/web/api/session", headers: web).decode(WebSessionResponse.self).admin == false)
            for path in ["/web/api/admin/accounts", "/web/api/admin/health"] {
                let refused = try await client.send(.get, path, headers: web)
                #expect(refused.status == .forbidden && refused.errorCode == "notAnOperator", "\(path)")
            }
            #expect(try await client.send(.post, "/web/api/admin/accounts/grace/quota", json: WebQuotaRequest(bytes: 1), headers: web).status == .forbidden)
            #expect(try await client.send(.post, "/web/api/admin/devices/\(phone.deviceId)/revoke", headers: web).status == .forbidden)

            #expect(try await server.admin.setAdmin(ofAccount: "ada", admin: true))
            #expect(try await server.admin.accounts().first { $0.name == "ada" }?.admin == true)
            #expect(try await client.send(.get, "/web/api/session", headers: web).decode(WebSessionResponse.self).admin == true)
            let accounts = try await client.send(.get, "/web/api/admin/accounts", headers: web).decode(WebAdminAccountsResponse.self).accounts
            #expect(accounts.map(\.name) == ["ada", "grace"] && accounts.map(\.admin) == [true, false])
            let grace = try #require(accounts.last)
            #expect(grace.quotaBytes == 1 << 30 && grace.usedBytes > 0 && grace.items == 1 && grace.devices.map(\.name) == ["grace's phone"])

            // A quota set (refused: negative, no such account; a change without the CSRF token).
            #expect(try await client.send(.post, "/web/api/admin/accounts/grace/quota", json: WebQuotaRequest(bytes: 2 << 30), headers: web).status == .noContent)
            #expect(try await server.admin.accounts().first { $0.name == "grace" }?.quotaBytes == 2 << 30)
            #expect(try await client.send(.post, "/web/api/admin/accounts/grace/quota", json: WebQuotaRequest(bytes: -1), headers: web).errorCode == "invalidQuota")
            #expect(try await client.send(.post, "/web/api/admin/accounts/nobody/quota", json: WebQuotaRequest(bytes: 1), headers: web).status == .notFound)
            #expect(try await client.send(.post, "/web/api/admin/accounts/grace/quota", json: WebQuotaRequest(bytes: 0), headers: session(cookie)).status == .forbidden)

            // Another account's device signed out: its token stops working.
            #expect(try await client.send(.post, "/web/api/admin/devices/\(phone.deviceId)/revoke", headers: web).status == .noContent)
            #expect(try await client.send(.get, "/v1/containers/\(notes)/changes?since=0", token: phone.token).status == .unauthorized)
            #expect(try await client.send(.post, "/web/api/admin/devices/nosuchdevice/revoke", headers: web).status == .notFound)

            let health = try await client.send(.get, "/web/api/admin/health", headers: web).decode(WebHealthResponse.self)
            #expect(health.status == "ok" && health.database == (backend == .postgres ? "PostgreSQL" : "SQLite"))
            #expect(health.accounts == 2 && health.devices == 1 && health.requests > 10 && health.commits >= 1)
            #expect(health.usedBytes >= grace.usedBytes && health.quotaBytes == (5 << 30) + (2 << 30))
            if backend == .sqlite { #expect((health.diskFreeBytes ?? 0) > 0 && (health.diskTotalBytes ?? 0) >= (health.diskFreeBytes ?? 0)) }

            // Taken away again: refused again.
            #expect(try await server.admin.setAdmin(ofAccount: "ada", admin: false))
            #expect(try await client.send(.get, "/web/api/admin/health", headers: web).status == .forbidden)
            #expect(try await server.admin.setAdmin(ofAccount: "nobody", admin: true) == false)
        }
    }

    /// Renaming, moving, deleting a folder with what is in it, recovering, restoring a version
    /// and picking a conflict's winner: each a change devices hear of, refused when it cannot be.
    @Test(arguments: Backend.all) func itemsAreRenamedMovedDeletedRecoveredAndResolved(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada")
            let first = try await client.commit(notes, "doc", fileUpdate("Doc.txt", [[1]]), token: laptop.token)
            let (cookie, csrf, _) = try await webSignIn(client)
            let web = session(cookie, csrf: csrf)
            let base = "/web/api/containers/\(notes)"
            func post<T: Decodable>(_ path: String, _ body: some Encodable, as type: T.Type) async throws -> T {
                let answer = try await client.send(.post, base + path, json: body, headers: web)
                #expect(answer.status == .ok, "\(path): \(String(buffer: answer.body))")
                return try answer.decode(T.self)
            }
            let trip = try await post("/folders", WebFolderRequest(name: "Trip"), as: WebItem.self)
            let inner = try await post("/folders", WebFolderRequest(name: "Days", parent: trip.id), as: WebItem.self)
            #expect(try await post("/folders", WebFolderRequest(name: "Trip"), as: WebItem.self).id == trip.id) // there already

            // Renamed and moved into a folder; the laptop sees both.
            let moved = try await post("/items/doc/move", WebMoveRequest(name: "Plan.txt", parent: inner.id), as: WebItem.self)
            #expect(moved.name == "Plan.txt")
            let seen = try #require(try await client.changes(notes, token: laptop.token).items.first { $0.id == "doc" })
            #expect(seen.name == "Plan.txt" && seen.parent == inner.id && seen.manifest == first.item.manifest)
            // Refused: a folder into itself, a name taken, a folder not there.
            #expect(try await client.send(.post, base + "/items/\(trip.id)/move", json: WebMoveRequest(parent: inner.id), headers: web).errorCode == "intoItself")
            _ = try await post("/folders", WebFolderRequest(name: "Other", parent: inner.id), as: WebItem.self)
            #expect(try await client.send(.post, base + "/items/doc/move", json: WebMoveRequest(name: "Other"), headers: web).errorCode == "nameTaken")
            #expect(try await client.send(.post, base + "/items/doc/move", json: WebMoveRequest(parent: "nowhere"), headers: web).status == .notFound)

            // The folder deleted: everything in it goes; each comes back from Recently Deleted.
            #expect(try await client.send(.delete, base + "/items/\(trip.id)", headers: web).status == .noContent)
            let after = try await client.changes(notes, token: laptop.token).items
            #expect(after.filter { !$0.deleted }.isEmpty && after.count == 4)
            let deleted = try await client.send(.get, "/web/api/deleted", headers: web).decode(WebDeletedResponse.self)
            #expect(Set(deleted.items.map(\.name)) == ["Trip", "Days", "Other", "Plan.txt"] && deleted.retentionDays == 30)
            let restore = try await client.send(.post, "/web/api/deleted/restore", json: WebRestoreRequest(revisions: deleted.items.map(\.revision)), headers: web)
            #expect(restore.status == .noContent)
            let back = try await client.changes(notes, token: laptop.token).items
            #expect(back.filter { !$0.deleted }.count == 4 && back.first { $0.id == "doc" }?.manifest == first.item.manifest)
            #expect(try await client.send(.post, "/web/api/deleted/restore", json: WebRestoreRequest(revisions: ["nosuchrevision"]), headers: web).status == .notFound)

            // A conflict: the phone saved from the first revision after the laptop's second.
            let restoredRevision = try #require(back.first { $0.id == "doc" }?.revision)
            var edit = fileUpdate("Plan.txt", [[2]], base: restoredRevision)
            edit.parent = inner.id
            let second = try await client.commit(notes, "doc", edit, token: laptop.token)
            var stale = fileUpdate("Plan.txt", [[3]], base: first.revision, date: 1_900_000_000)
            stale.parent = inner.id
            let phone = try await client.signIn("ada", device: "phone")
            _ = try await client.commit(notes, "doc", stale, token: phone.token)
            let versions = try await client.send(.get, base + "/items/doc/versions", headers: web).decode(WebVersionsResponse.self)
            #expect(versions.conflicts.count == 1 && versions.item.conflicts == 1)
            #expect(versions.earlier.contains { $0.revision == first.revision })
            let loser = try #require(versions.conflicts.first)
            #expect(loser.revision == second.revision) // the phone's later save won; the page keeps the laptop's
            let download = try await client.send(.get, base + "/items/doc/revisions/\(loser.revision)/download", headers: web)
            #expect(download.status == .ok && download.body.readableBytes == Int(loser.size))
            #expect(try await client.send(.post, base + "/items/doc/resolve", json: WebResolveRequest(keep: first.revision), headers: web).errorCode == "notAVersion")
            let resolved = try await post("/items/doc/resolve", WebResolveRequest(keep: loser.revision), as: WebItem.self)
            #expect(resolved.conflicts == 0)
            let state = try #require(try await client.changes(notes, token: laptop.token).items.first { $0.id == "doc" })
            let kept = Array(buffer: download.body)
            #expect(state.conflicts.isEmpty && state.manifest.chunks == [ChunkReference(hash: sha256(kept), size: 1)] && state.revision == loser.revision)
            // An earlier version restored: a new revision with its contents.
            let restored = try await post("/items/doc/revisions/\(first.revision)/restore", [String: String](), as: WebItem.self)
            #expect(restored.size == 1)
            #expect(try #require(try await client.changes(notes, token: laptop.token).items.first { $0.id == "doc" }).manifest == first.item.manifest)
        }
    }

    /// Devices (signed out from the page), key-value stores as property lists, Manage Storage
    /// and its typed-confirmation "Delete All".
    @Test(arguments: Backend.all) func devicesStorageKeyValuesAndDeleteAll(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada")
            _ = try await client.commit(notes, "a", fileUpdate("A.txt", [[1, 2, 3, 4]]), token: laptop.token)
            var inFolder = fileUpdate("B.txt", [[5]])
            let folder = try await client.commit(notes, "f", ItemUpdate(baseRevision: nil, name: "F", kind: .directory, modificationDate: 1, manifest: Manifest()), token: laptop.token)
            inFolder.parent = folder.item.id
            _ = try await client.commit(notes, "b", inFolder, token: laptop.token)
            let store = "ABCDE12345.com.example.notes"
            let values = KeyValueUpdate(changes: [KeyValueChange(key: "theme", value: .dictionary(["dark": .bool(true), "size": .integer(12)]), timestamp: 1_800_000_000)])
            #expect(try await client.send(.post, "/v1/kv/\(store)", token: laptop.token, json: values).status == .ok)
            let (cookie, csrf, _) = try await webSignIn(client)
            let web = session(cookie, csrf: csrf)

            let devices = try await client.send(.get, "/web/api/devices", headers: web).decode(WebDevicesResponse.self).devices
            #expect(devices.map(\.name) == ["laptop", WebSession.deviceName] && devices.map(\.current) == [false, true])
            #expect(devices.allSatisfy { $0.lastSeen != nil && $0.created > 0 }) // both were heard from
            let laptopId = try #require(devices.first?.id)
            #expect(try await client.send(.post, "/web/api/devices/nosuchdevice/revoke", headers: web).status == .notFound)
            #expect(try await client.send(.post, "/web/api/devices/\(laptopId)/revoke", headers: web).status == .noContent)
            #expect(try await client.send(.get, "/v1/account", token: laptop.token).status == .unauthorized)
            #expect(try await client.send(.get, "/web/api/devices", headers: web).decode(WebDevicesResponse.self).devices.map(\.name) == [WebSession.deviceName])

            let storage = try await client.send(.get, "/web/api/storage", headers: web).decode(WebStorageResponse.self)
            #expect(storage.containers.map(\.identifier) == [notes] && storage.containers[0].items == 3 && storage.containers[0].bytes == 5)
            #expect(storage.keyValueStores.map(\.identifier) == [store] && storage.keyValueStores[0].keys == 1 && storage.usedBytes > 0)
            let kv = try await client.send(.get, "/web/api/kv/\(store)", headers: web).decode(WebKeyValuesResponse.self)
            #expect(kv.entries.map(\.key) == ["theme"] && kv.entries[0].deviceName == "laptop")
            #expect(kv.entries[0].propertyList.contains("<key>dark</key>") && kv.entries[0].propertyList.contains("<true/>") && kv.entries[0].propertyList.contains("<integer>12</integer>"))

            // Delete All needs the container's name typed again; then every item goes (recoverable).
            let deleteAll = "/web/api/containers/\(notes)/delete-all"
            #expect(try await client.send(.post, deleteAll, json: WebDeleteAllRequest(confirm: "yes"), headers: web).errorCode == "notConfirmed")
            let deleted = try await client.send(.post, deleteAll, json: WebDeleteAllRequest(confirm: notes), headers: web).decode(WebDeleteAllResponse.self)
            #expect(deleted.deleted == 3)
            let phone = try await client.signIn("ada", device: "phone")
            #expect(try await client.changes(notes, token: phone.token).items.allSatisfy(\.deleted))
            #expect(try await client.send(.get, "/web/api/deleted", headers: web).decode(WebDeletedResponse.self).items.count == 3)
        }
    }

    /// Published links: the revision current when published, to anyone with the link, as an
    /// attachment that cannot run script in the site's origin; listed and revoked in the page;
    /// refused for a package or a file not uploaded; gone once expired or revoked.
    @Test(arguments: Backend.all) func publishedLinksServeTheirRevisionUntilRevokedOrExpired(backend: Backend) async throws {
        let server = try await TestServer.withAccount("ada", on: backend); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada")
            let first = try await client.commit(notes, "doc", fileUpdate("Plan <b>.html", [Array("<script>alert(1)</script>".utf8)]), token: laptop.token)
            let published = try await client.send(.post, "/v1/containers/\(notes)/items/doc/links", token: laptop.token, json: PublishRequest(seconds: 3_600))
            #expect(published.status == .ok, "\(String(buffer: published.body))")
            let link = try published.decode(PublishedLink.self)
            let path = try #require(link.path)
            #expect(path.hasPrefix("/l/") && path.count == 3 + 64 && link.revision == first.revision)
            #expect(abs(link.expires - link.created - 3_600) < 1)

            // A later save does not change what the link serves.
            _ = try await client.commit(notes, "doc", fileUpdate("Plan <b>.html", [[9, 9]], base: first.revision), token: laptop.token)
            let download = try await client.send(.get, path)
            #expect(download.status == .ok && String(buffer: download.body) == "<script>alert(1)</script>")
            #expect(download.headers[.contentDisposition]?.hasPrefix("attachment;") == true && download.headers[.xContentTypeOptions] == "nosniff")
            #expect(download.headers[.contentType] == "application/octet-stream" && download.headers[.contentSecurityPolicy]?.hasPrefix("sandbox") == true)
            // Guessed, malformed or unknown tokens: nothing said about what exists.
            for wrong in ["/l/" + String(repeating: "a", count: 64), "/l/short", "/l/" + String(path.dropFirst(3).reversed())] {
                #expect(try await client.send(.get, wrong).status == .notFound, "\(wrong)")
            }

            // Refused: a package, a file not uploaded, an item not there.
            let package = ItemUpdate(baseRevision: nil, name: "P.pkg", kind: .package, modificationDate: 1, manifest: Manifest(members: []))
            _ = try await client.commit(notes, "pkg", package, token: laptop.token)
            #expect(try await client.send(.post, "/v1/containers/\(notes)/items/pkg/links", token: laptop.token, json: PublishRequest()).errorCode == "notAFlatFile")
            // (A chunk the server lost — found damaged — makes its file wait for a device to send it again.)
            let lost: [UInt8] = [7, 7, 7]
            _ = try await client.commit(notes, "pending", fileUpdate("Pending.txt", [lost]), token: laptop.token)
            let accountId = try #require(try await server.admin.accounts().first?.id)
            _ = try await server.server.services.database.chunkLost(accountId: accountId, hash: sha256(lost))
            #expect(try await client.send(.post, "/v1/containers/\(notes)/items/pending/links", token: laptop.token, json: PublishRequest()).errorCode == "notUploaded")
            #expect(try await client.send(.post, "/v1/containers/\(notes)/items/nothing/links", token: laptop.token, json: PublishRequest()).status == .notFound)

            // The page lists the account's links and revokes them; a revoked link is gone.
            let (cookie, csrf, _) = try await webSignIn(client)
            let listed = try await client.send(.get, "/web/api/links", headers: session(cookie)).decode(PublishedLinksResponse.self).links
            #expect(listed.map(\.id) == [link.id] && listed[0].path == nil) // the secret part is shown once, when made
            #expect(try await client.send(.post, "/web/api/links/\(link.id)/revoke", headers: session(cookie, csrf: csrf)).status == .noContent)
            #expect(try await client.send(.get, path).status == .notFound)
            #expect(try await client.send(.get, "/web/api/links", headers: session(cookie)).decode(PublishedLinksResponse.self).links.isEmpty)

            // Expired: gone too.
            let account = try #require(try await server.admin.accounts().first?.id)
            let token = String(repeating: "b", count: 64)
            try await server.server.services.database.addLink(
                PublishedLink(id: "old", path: nil, container: notes, item: "doc", revision: first.revision, name: "x", created: 1, expires: 2),
                accountId: account, tokenHash: DeviceAuthMiddleware.hash(token), manifest: nil, manifestBudget: 0)
            #expect(try await client.send(.get, "/l/" + token).status == .notFound)
        }
    }

    /// One address opens at most so many links a minute.
    @Test func linksAreThrottledPerAddress() {
        let throttle = LinkThrottle(limit: 3)
        #expect((0..<5).map { _ in throttle.allow("192.0.2.1") } == [true, true, true, false, false])
        #expect(throttle.allow("192.0.2.2"))
    }

    /// A package downloads as a zip archive of its members under the package's name.
    @Test func aPackageDownloadsAsAZip() async throws {
        let server = try await TestServer.withAccount("ada"); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada")
            let text = Array("the recipe".utf8), image = (0..<70_000).map { UInt8($0 % 251) }
            var update = fileUpdate("Soup.pkg", [text, image])
            update.kind = .package
            update.manifest = Manifest(members: [
                ManifestMember(path: "Text.txt", chunks: [ChunkReference(hash: sha256(text), size: Int64(text.count))]),
                ManifestMember(path: "Images/pot.bin", chunks: [ChunkReference(hash: sha256(image), size: Int64(image.count))]),
                ManifestMember(path: "Audio/", chunks: []),
            ])
            let committed = try await client.commit(notes, "soup", update, token: laptop.token)
            let (cookie, _, _) = try await webSignIn(client)
            let download = try await client.send(.get, "/web/api/containers/\(notes)/items/\(committed.item.id)/download", headers: session(cookie))
            #expect(download.status == .ok && download.headers[.contentDisposition]?.hasPrefix("attachment; filename=\"Soup.pkg.zip\"") == true)
            // Python's zipfile, an independent reader, checks every member's CRC and reads them back.
            let archive = NSTemporaryDirectory() + "web-zip-\(UUID().uuidString).zip"
            defer { try? FileManager.default.removeItem(atPath: archive) }
            try Data(buffer: download.body).write(to: URL(fileURLWithPath: archive))
            let check = ChildProcess()
            check.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            check.arguments = ["python3", "-c", """
                import sys, zipfile, hashlib
                z = zipfile.ZipFile(sys.argv[1])
                assert z.testzip() is None
                assert z.getinfo("Soup.pkg/Audio/").is_dir()
                print(",".join(z.namelist()), z.read("Soup.pkg/Text.txt").decode(), hashlib.sha256(z.read("Soup.pkg/Images/pot.bin")).hexdigest())
                """, archive]
            let pipe = Pipe()
            check.standardOutput = pipe
            try check.run()
            let output = try await onOwnThread { // (not on one of the threads the tests share)
                defer { check.waitUntilExit() }
                return String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            }
            #expect(check.terminationStatus == 0)
            #expect(output == "Soup.pkg/Text.txt,Soup.pkg/Images/pot.bin,Soup.pkg/Audio/ the recipe \(sha256(image))\n")
            #expect(throws: SyncError.self) { try WebDownload.zipPath(package: "Soup.pkg", member: "../../etc/passwd") }
        }
    }
}
