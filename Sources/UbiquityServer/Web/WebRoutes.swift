import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import UbiquityProtocol
import UbiquitySync

/// `GET /web/api/session`: who is signed in, and the session's CSRF token.
struct WebSessionResponse: Codable, ResponseEncodable {
    var account: String
    var device: String
    var csrf: String
    var usedBytes: Int64
    var quotaBytes: Int64
    /// Whether the account is an operator's (the page then offers the administration page).
    var admin: Bool
    /// The account's identity token (what a device's grant to this browser is bound to, under
    /// Advanced Data Protection); nil before it is known.
    var identity: String? = nil
}

/// `GET /web/api/containers`.
struct WebContainersResponse: Codable, ResponseEncodable {
    var containers: [ContainerSummary]
}

/// An item as a folder's page lists it.
typealias WebItem = FolderEntry

extension FolderEntry {
    init(_ item: ItemState) {
        id = item.id
        name = item.name
        kind = item.kind
        size = item.size
        modificationDate = item.modificationDate
        deviceName = item.deviceName
        uploaded = item.uploaded
        conflicts = item.conflicts.count
    }
}

/// `GET /web/api/containers/:container/folder?sort=&filter=&offset=&limit=`: a page of a
/// folder's items (``WebFolderQuery``) and the way up to it.
struct WebFolderResponse: Codable, ResponseEncodable {
    /// The folders from the container down to this one (the container itself is not one).
    var path: [WebCrumb]
    /// The page's items, in the asked order.
    var items: [WebItem]
    /// How many items match (the filter) in the whole folder.
    var total: Int
    /// Where in them the page starts.
    var offset: Int
}

/// A folder on the way to the one listed.
struct WebCrumb: Codable, Sendable, Equatable {
    var id: String
    var name: String
}

/// `POST /web/api/parts`: the chunks a part of an upload became.
struct WebPartResponse: Codable, ResponseEncodable {
    var chunks: [ChunkReference]
}

/// `POST /web/api/containers/:container/files`: a file whose parts were uploaded.
struct WebFileRequest: Codable {
    var name: String
    var parent: String?
    /// The parts' chunks, in order.
    var chunks: [ChunkReference]
    /// The file's modification date (seconds since 1970), or now.
    var modificationDate: Double?
}

/// `POST /web/api/containers/:container/folders`.
struct WebFolderRequest: Codable {
    var name: String
    var parent: String?
}

/// `POST /web/api/sign-in`.
struct WebSignInRequest: Codable {
    var account: String
    var password: String
}

extension WebItem: ResponseEncodable {}

extension SyncServices {
    /// The web interface: its page and scripts under `/web`, its API under `/web/api` (docs/Web.md).
    func addWebRoutes(to router: Router<SyncContext>) {
        router.get("/") { _, _ in Response(status: .seeOther, headers: [.location: "/web/"]) }
        let web = router.group("web").add(middleware: WebHeadersMiddleware())
        web.get { _, _ in try WebAssets.response(for: "index.html") }
        web.get("assets/:name") { _, context in try WebAssets.response(for: try context.parameters.require("name")) }

        let api = web.group("api").add(middleware: WebSessionMiddleware(database: database, sightings: sightings, share: share))
        api.post("sign-in") { request, context -> Response in
            let body = try await request.body.collect(upTo: SignInGuard.bodyLimit)
            // (What did not decode is not echoed: nobody is signed in yet.)
            guard let asked = try? JSONDecoder().decode(WebSignInRequest.self, from: body) else {
                throw SyncError.badRequest("badRequest", "not a sign-in request")
            }
            guard asked.account.utf8.count <= 255, asked.password.utf8.count <= SignInGuard.longestPassword else { throw SyncError.signInFailed }
            let account = try await signIns.check(account: asked.account, password: asked.password, address: context.clientAddress)
            let token = SQLiteDatabase.randomToken()
            let id = try await database.addDevice(accountId: account.id, name: WebSession.deviceName, tokenHash: DeviceAuthMiddleware.hash(token), containers: nil)
            let stored = try await database.account(id: account.id)
            let name = stored?.name ?? asked.account
            context.logger.info("signed in from a browser", metadata: ["account": "\(name)", "device": "\(id)"])
            let usage = try await database.usage(ofAccount: account.id)
            var response = try WebSessionResponse(account: name, device: id, csrf: WebSession.csrfToken(for: token), usedBytes: usage.used, quotaBytes: usage.quota,
                                                  admin: stored?.admin ?? false, identity: stored?.identityToken)
                .response(from: request, context: context)
            response.setCookie(WebSession.cookie(token))
            return response
        }
        api.post("sign-out") { _, context -> Response in
            let device = try context.requireDevice()
            _ = try await database.revokeDevice(id: device.deviceId)
            notifier.disconnect([device.deviceId])
            var response = Response(status: .noContent)
            response.setCookie(WebSession.cookie(nil))
            return response
        }
        api.get("session") { request, context -> WebSessionResponse in
            let device = try context.requireDevice()
            guard let account = try await database.account(id: device.accountId),
                  let token = request.cookies[WebSession.cookieName]?.value else { throw SyncError.unauthorized }
            let usage = try await database.usage(ofAccount: device.accountId)
            return WebSessionResponse(account: account.name, device: device.deviceId, csrf: WebSession.csrfToken(for: token),
                                      usedBytes: usage.used, quotaBytes: usage.quota, admin: account.admin,
                                      identity: try await database.identityToken(ofAccount: device.accountId))
        }
        api.get("containers") { _, context in
            let device = try context.requireDevice()
            return WebContainersResponse(containers: try await database.containers(ofAccount: device.accountId).filter { device.allows($0.identifier) })
        }
        // The account's changes, as they happen (server-sent events): what the push channel says to devices.
        api.get("events") { _, context -> Response in
            let device = try context.requireDevice()
            let (id, events) = notifier.subscribe(device)
            let pace = notifier.pace(forAccount: device.accountId)
            let body = ResponseBody { [notifier] writer in
                defer { notifier.unsubscribe(id) }
                try await writer.write(ByteBuffer(string: "retry: 2000\n\n"))
                var pacer = PushPacer()
                while let waiting = await events.next(pacedBy: &pacer, pace: pace) {
                    for delivery in waiting { try await writer.write(ByteBuffer(string: "data: \(delivery.text)\n\n")) }
                }
                try await writer.finish(nil) // signed out or revoked: the stream ends
            }
            return Response(status: .ok, headers: [.contentType: "text/event-stream", .cacheControl: "no-store"], body: body)
        }

        let containers = api.group("containers/:container")
        containers.get("folder") { request, context in
            let (device, container) = try Self.webContainer(context)
            let parameters = request.uri.queryParameters
            let parent = try Self.folderId(parameters["parent"].map(String.init))
            let query = try WebFolderQuery(sort: parameters["sort"].map(String.init), filter: parameters["filter"].map(String.init),
                                           offset: parameters["offset"].map(String.init), limit: parameters["limit"].map(String.init))
            let records = try await webRecords(ofAccount: device.accountId, container: container)
            let path = try await webPath(to: parent, container: container, account: device.accountId, records: records)
            let entries = try await database.folderEntries(accountId: device.accountId, container: container, parent: parent)
            let page = query.page(of: try await records.open(entries, in: parent))
            return WebFolderResponse(path: path, items: page.items, total: page.total, offset: query.offset)
        }
        containers.get("items/:item/download") { _, context -> Response in
            let (device, container) = try Self.webContainer(context)
            let id = try context.parameters.require("item")
            try Validate.identifier(id, field: "item id")
            guard let item = try await database.item(accountId: device.accountId, container: container, id: id, brief: false), !item.deleted else {
                throw SyncError.notFound
            }
            return try await WebDownload.response(for: try await webRecords(ofAccount: device.accountId, container: container).open(item), chunks: chunks, account: device.accountId,
                                                  opener: try await sealedChunkOpener(ofAccount: device.accountId, container: container))
        }
        // A part of an upload (at most ``WebUpload/partBytes``): cut into chunks as a device
        // cuts a file, stored (against the quota), and answered with their list; a part that
        // failed is sent again, and the parts' lists together make the file's manifest. The
        // page names the whole file's size (`fileSize`), so that a large file's parts are cut
        // into a large file's chunks (``ContentChunker/forFile(ofSize:)``). With the container
        // (`container=C`) of an account that has keys, under Standard: cut by the container's
        // keyed chunker, named by its keyed MAC and sealed with the escrow's keys, as its devices
        // would (the server keeps no plaintext of it; under Advanced the page cannot upload).
        api.post("parts") { request, context -> WebPartResponse in
            let device = try context.requireDevice()
            var codec = ChunkCodec.plain
            if let container = request.uri.queryParameters["container"].map(String.init) {
                try Validate.container(container)
                _ = try context.requireDevice(for: container)
                if let rootKeys = try await escrow?.rootKeys(ofAccount: device.accountId, database: database),
                   let sealed = ChunkCodec.sealed(container: container, rootKeys: rootKeys) {
                    codec = sealed
                }
            }
            let fileSize = try request.uri.queryParameters["fileSize"].map { text in
                guard let size = Int(text), size >= 0 else { throw SyncError.badRequest("invalidSize", "fileSize is a number of bytes") }
                return size
            } ?? 0
            let body: ByteBuffer
            do {
                body = try await request.body.collect(upTo: WebUpload.partBytes)
            } catch {
                throw SyncError(.contentTooLarge, "partTooLarge", "a part is at most \(WebUpload.partBytes) bytes")
            }
            guard body.readableBytes > 0 else { throw SyncError.badRequest("emptyPart", "a part holds at least one byte") }
            let bytes = [UInt8](buffer: body)
            let cut = codec.chunker(forFileOfSize: max(fileSize, bytes.count)).chunks(of: bytes)
            let pieces = try cut.map { chunk in
                let plain = bytes[chunk.offset..<(chunk.offset + chunk.length)]
                guard codec.sealed else { return ChunkBatch.Chunk(hash: chunk.hash, bytes: plain) }
                // (Named as they were cut a moment ago: not named again before sealing.)
                let sealed = try plain.withUnsafeBytes { try codec.seal($0, as: chunk.hash, unchanged: true) }
                return ChunkBatch.Chunk(hash: chunk.hash, bytes: ArraySlice(sealed))
            }
            try await receive(pieces, from: device, logger: context.logger, checked: true, sealed: codec.sealed) // hashed as they were cut
            // Each chunk at its plaintext size, as a device declares it (the file's layout).
            return WebPartResponse(chunks: zip(pieces, cut).map { ChunkReference(hash: $0.hash, size: Int64($1.length)) })
        }
        containers.post("files") { request, context in
            let (device, container) = try Self.webContainer(context)
            let asked = try await request.decode(as: WebFileRequest.self, context: context)
            for chunk in asked.chunks { try Validate.hash(chunk.hash) }
            // Parts uploaded earlier (an upload resumed after the page was reloaded) may have been
            // collected since: the page is told to send them again rather than leave a file
            // waiting for a device that will never bring its contents.
            let missing = try await database.missingChunks(accountId: device.accountId, hashes: Array(Set(asked.chunks.map(\.hash))))
            guard missing.isEmpty else {
                throw SyncError(.conflict, "missingChunks", "\(missing.count) of the file's chunks are not on the server: upload its parts again")
            }
            return try await webCreate(name: asked.name, parent: asked.parent, kind: .file, manifest: Manifest(chunks: asked.chunks),
                                       modificationDate: asked.modificationDate, container: container, device: device, logger: context.logger)
        }
        containers.post("folders") { request, context in
            let (device, container) = try Self.webContainer(context)
            let asked = try await request.decode(as: WebFolderRequest.self, context: context)
            return try await webCreate(name: asked.name, parent: asked.parent, kind: .directory, manifest: Manifest(), modificationDate: nil,
                                       container: container, device: device, logger: context.logger)
        }
        addWebItemRoutes(to: api)
        // Sharing from the page (docs/Sharing.md): the same routes as devices', under the
        // session (`/web/api/shares…`), and a shared file's download.
        addShareRoutes(to: api)
        api.get("shares/:share/items/:item/download") { _, context -> Response in
            let share = try await reachableShare(context).share
            let id = try context.parameters.require("item")
            try Validate.identifier(id, field: "item id")
            var border = ShareBorder(share)
            guard try await border.contains(id, in: database),
                  let item = try await database.item(accountId: share.accountId, container: share.container, id: id, brief: false), !item.deleted else {
                throw SyncError.notFound
            }
            return try await WebDownload.response(for: try await webRecords(ofAccount: share.accountId, container: share.container).open(item), chunks: chunks,
                                                  account: share.accountId, opener: try await sealedChunkOpener(ofAccount: share.accountId, container: share.container))
        }
        addWebApprovalRoutes(to: api)
        addWebAccountRoutes(to: api)
        addWebAdminRoutes(to: api)
        addLinkRoutes(to: router, api: api)
    }

    /// Commits a file or folder made through the web interface, as the browser's device: into
    /// `parent` (a folder of the container, or its top), as a new revision of the item of that
    /// name there (its earlier contents stay a version) or as a new item.
    func webCreate(name: String, parent: String?, kind: ItemKind, manifest: Manifest, modificationDate: Double?,
                   container: String, device: DeviceAuth, logger: Logger) async throws -> WebItem {
        let parent = try Self.folderId(parent)
        try Validate.name(name)
        let records = try await webRecords(ofAccount: device.accountId, container: container)
        _ = try await webPath(to: parent, container: container, account: device.accountId, records: records) // a folder of the container
        let existing = try await webSibling(named: name, in: parent, container: container, account: device.accountId, records: records)
        if let existing, existing.kind != kind {
            throw SyncError(.conflict, "nameTaken", "\(existing.kind == .directory ? "a folder" : "an item") of that name is there already")
        }
        if let existing, kind == .directory { return WebItem(existing) } // the folder is there already
        let itemId = existing?.id ?? RandomIdentifier.make()
        let update = ItemUpdate(baseRevision: existing?.revision, name: name, parent: parent, kind: kind,
                                modificationDate: modificationDate ?? Date().timeIntervalSince1970, manifest: manifest, changeId: RandomIdentifier.make())
        return try await webCommit([(itemId, update)], container: container, device: device, records: records, logger: logger)[0]
    }

    /// The folders from the container's top down to `folder` (empty for the top), each read
    /// by its id (its name opened with `records`).
    /// - Throws: 404 when `folder` is not a folder of the container.
    func webPath(to folder: String?, container: String, account: Int64, records: WebRecords) async throws -> [WebCrumb] {
        var crumbs: [WebCrumb] = [], next = folder, seen = Set<String>()
        while let id = next, seen.insert(id).inserted {
            guard let item = try await database.item(accountId: account, container: container, id: id, brief: true), !item.deleted, item.kind == .directory else {
                guard id != folder else { throw SyncError(.notFound, "notFound", "no such folder") }
                break // the folder beside Documents an item in it sits in
            }
            crumbs.append(WebCrumb(id: item.id, name: try records.open(item).name))
            next = item.parent
        }
        return crumbs.reversed()
    }

    /// The item (not deleted) named `name` in folder `parent`, apart from `excluded`: names are
    /// compared as the file system compares them (canonical composition).
    func webSibling(named name: String, in parent: String?, excluding excluded: String? = nil, container: String, account: Int64,
                    records: WebRecords) async throws -> ItemState? {
        let wanted = name.precomposedStringWithCanonicalMapping
        let entries = try await database.folderEntries(accountId: account, container: container, parent: parent)
        let others = try await records.open(entries.filter { $0.id != excluded }, in: parent)
        guard let found = others.first(where: { $0.name.precomposedStringWithCanonicalMapping == wanted }),
              let item = try await database.item(accountId: account, container: container, id: found.id, brief: false) else { return nil }
        return try records.open(item)
    }

    /// The signed-in device and the container the route names (which it may use).
    static func webContainer(_ context: SyncContext) throws -> (DeviceAuth, String) {
        let container = try context.parameters.require("container")
        return (try context.requireDevice(for: container), container)
    }

    /// A folder's id as asked (nil or empty: the top of the container's `Documents`, where the
    /// web interface starts — what an app keeps beside `Documents` is not shown, as on iCloud.com).
    static func folderId(_ id: String?) throws -> String? {
        guard let id, !id.isEmpty else { return nil }
        try Validate.identifier(id, field: "parent")
        guard id != ContainerLayout.topLevel else { throw SyncError(.notFound, "notFound", "no such folder") }
        return id
    }
}

/// The assets of the page, built into the binary (`Web/`): the page, its style and its modules.
enum WebAssets {
    /// Each asset's bytes and content type.
    static let all: [String: (bytes: [UInt8], type: String)] = [
        "index.html": (PackageResources.index_html, "text/html; charset=utf-8"),
        "app.css": (PackageResources.app_css, "text/css; charset=utf-8"),
        "app.js": (PackageResources.app_js, "text/javascript; charset=utf-8"),
        "api.js": (PackageResources.api_js, "text/javascript; charset=utf-8"),
        "names.js": (PackageResources.names_js, "text/javascript; charset=utf-8"),
        "upload.js": (PackageResources.upload_js, "text/javascript; charset=utf-8"),
        "sealed.js": (PackageResources.sealed_js, "text/javascript; charset=utf-8"),
        "advanced.js": (PackageResources.advanced_js, "text/javascript; charset=utf-8"),
        "link.js": (PackageResources.link_js, "text/javascript; charset=utf-8"),
    ]

    /// The asset named `name`, or 404.
    static func response(for name: String) throws -> Response {
        guard let asset = all[name] else { throw SyncError(.notFound, "notFound", "no such page") }
        // The page is fetched fresh (it names the session's state); scripts and style may be kept briefly.
        let caching = name.hasSuffix(".html") ? "no-store" : "private, max-age=300"
        return Response(status: .ok, headers: [.contentType: asset.type, .cacheControl: caching], body: .init(byteBuffer: ByteBuffer(bytes: asset.bytes)))
    }
}

/// How the page uploads: in parts of at most ``partBytes``, each answered with its chunks.
enum WebUpload {
    /// The largest part (the page sends 4 MiB parts).
    static let partBytes = 4 << 20
}
