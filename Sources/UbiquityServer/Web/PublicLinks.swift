import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Synchronization
import UbiquityKeys
import UbiquityProtocol

extension PublishedLink: ResponseEncodable {}

/// `GET /web/api/links`: the account's links not revoked.
struct PublishedLinksResponse: Codable, ResponseEncodable {
    var links: [PublishedLink]
}

/// How often one address may open published links: at most ``limit`` a minute. Tokens are
/// 256 random bits — guessing is hopeless — but a link is a download anyone may start, and a
/// flood of them is refused (429) before it reaches the database. Bounded: at most
/// ``addresses`` are counted in a minute; past that, new addresses wait for the next one.
final class LinkThrottle: Sendable {
    /// Requests per address per minute.
    let limit: Int
    /// Addresses counted per minute.
    let addresses = 100_000
    private let state = Mutex<(minute: Int64, counts: [String: Int])>((0, [:]))

    init(limit: Int = 60) {
        self.limit = limit
    }

    /// Whether `address` may open a link now (and counts it).
    func allow(_ address: String) -> Bool {
        let minute = Int64(Date().timeIntervalSince1970 / 60)
        return state.withLock { state in
            if state.minute != minute { state = (minute, [:]) }
            guard state.counts[address] != nil || state.counts.count < addresses else { return false }
            let count = (state.counts[address] ?? 0) + 1
            state.counts[address] = count
            return count <= limit
        }
    }
}

extension SyncServices {
    /// Publishing (`FileManager.url(forPublishingUbiquitousItemAt:expiration:)`), the links'
    /// downloads, and the web interface's list of them.
    func addLinkRoutes(to router: Router<SyncContext>, api: RouterGroup<SyncContext>) {
        addSealedLinkRoutes(to: router)
        router.post("v1/containers/:container/items/:item/links") { request, context -> Response in
            let (device, container, item) = try Self.itemAddress(context)
            let asked = try await request.decode(as: PublishRequest.self, context: context)
            let link = try await publish(item, in: container, for: device, seconds: asked.seconds, sealed: asked.manifest.map { ($0, asked.revision) },
                                         logger: context.logger)
            return try link.response(from: request, context: context)
        }
        // The download: no session, no cookie; an attachment that cannot run script here. A
        // link a device sealed (Advanced) is a page that opens the file with its fragment's key.
        router.get("l/:token") { _, context -> Response in
            let (account, link, contents) = try await openLink(context, throttle: links)
            if link.sealed == true { return Self.sealedLinkPage() }
            do {
                // (A sealed record's name, size and date opened with the escrow's keys: Standard only.)
                let opened = try await webRecords(ofAccount: account, container: link.container).open(contents, item: link.item)
                let item = ItemState(id: link.item, revision: link.revision, name: contents.record == nil ? link.name : opened.name, parent: nil, kind: opened.kind, size: opened.size,
                                     modificationDate: opened.modificationDate, type: nil, deleted: false, uploaded: opened.uploaded,
                                     deviceName: opened.deviceName, sequence: 0, manifest: opened.manifest, conflicts: [])
                var response = try await WebDownload.response(for: item, chunks: chunks, account: account,
                                                              opener: try await sealedChunkOpener(ofAccount: account, container: link.container))
                Self.guardLinkAnswer(&response)
                return response
            } catch let error as SyncError where error.code == "sealedOnDevices" {
                // A link made under Standard, its account under Advanced since: the server holds
                // no key any more, and the link's address carries none.
                throw SyncError(.gone, "linkNeedsKey",
                                "this link stopped working when its owner turned on Advanced Data Protection (its address carries no key): ask them to share the file again")
            }
        }
        api.get("links") { _, context in
            let device = try context.requireDevice()
            var links = try await database.links(ofAccount: device.accountId).filter { device.allows($0.container) }
            // Under Advanced the server opens no record: a link it would have opened stopped.
            if try await custody(ofAccount: device.accountId) == .advanced {
                for index in links.indices where links[index].sealed != true { links[index].stopped = true }
                return PublishedLinksResponse(links: links)
            }
            // A link keeps the name the server knew: a sealed record's tag, opened here (Standard).
            var records: [String: WebRecords] = [:]
            for index in links.indices where ServerRules.isNameTag(links[index].name) {
                let link = links[index]
                guard let contents = try await database.revisionContents(accountId: device.accountId, container: link.container, item: link.item, revision: link.revision),
                      contents.record != nil else { continue }
                if records[link.container] == nil { records[link.container] = try await webRecords(ofAccount: device.accountId, container: link.container) }
                if let opened = try? records[link.container]?.open(contents, item: link.item) { links[index].name = opened.name }
            }
            return PublishedLinksResponse(links: links)
        }
        api.post("containers/:container/items/:item/links") { request, context -> Response in
            let (device, container, item) = try Self.webItem(context)
            // Under Advanced the page sends the manifest it sealed with the keys a device gave it.
            let body = try await request.body.collect(upTo: context.maxUploadSize)
            var asked = PublishRequest()
            if body.readableBytes > 0 {
                guard let decoded = try? JSONDecoder().decode(PublishRequest.self, from: Data(buffer: body)) else {
                    throw SyncError.badRequest("badRequest", "not a publish request")
                }
                asked = decoded
            }
            let link = try await publish(item, in: container, for: device, seconds: nil, sealed: asked.manifest.map { ($0, asked.revision) },
                                         logger: context.logger)
            return try link.response(from: request, context: context)
        }
        api.post("links/:link/revoke") { _, context -> HTTPResponse.Status in
            let device = try context.requireDevice()
            let id = try context.parameters.require("link")
            try Validate.identifier(id, field: "link")
            guard try await database.revokeLink(id: id, accountId: device.accountId) else { throw SyncError(.notFound, "notFound", "no such link") }
            return .noContent
        }
    }

    /// Publishes `item`'s current revision: a flat file, uploaded. The link lasts `seconds`
    /// (at most 30 days, or the retention period if shorter); once the file changes, the link
    /// still serves the revision published, for as long as the server keeps it. `sealed`: the
    /// manifest a device sealed for the link's page and the revision it is of (Advanced Data
    /// Protection, where the server cannot open the file for a download of its own).
    /// - Throws: ``SyncError`` 404 for an item not there, 409 `notAFlatFile` or `notUploaded`;
    ///   409 `revisionMoved` for a manifest of another revision than the current one; 409
    ///   `tooManyLinks` past the account's bytes of manifests (``AccountLimits``); 400
    ///   `badManifest` for bytes that are not a sealed manifest; 409 `sealedOnDevices` for a
    ///   sealed file the server cannot open, published without a manifest.
    func publish(_ id: String, in container: String, for device: DeviceAuth, seconds: Double?, sealed: (manifest: Data, revision: String?)?,
                 logger: Logger) async throws -> PublishedLink {
        guard let item = try await database.item(accountId: device.accountId, container: container, id: id, brief: true), !item.deleted else {
            throw SyncError.notFound
        }
        guard item.kind == .file else { throw SyncError(.conflict, "notAFlatFile", "only a flat file can be published, not a package or a folder") }
        guard item.uploaded else { throw SyncError(.conflict, "notUploaded", "the file has not reached iCloud yet: publish it once it is uploaded") }
        if let sealed {
            guard sealed.manifest.count <= LinkManifest.maximumSealedBytes else {
                throw SyncError(.contentTooLarge, "manifestTooLarge", "a link's manifest is at most \(LinkManifest.maximumSealedBytes) bytes")
            }
            guard sealed.manifest.count > 5 + 12 + 16, sealed.manifest.first == LinkManifest.format else {
                throw SyncError.badRequest("badManifest", "the manifest is not a sealed link manifest of format \(LinkManifest.format)")
            }
            guard sealed.revision == item.revision else {
                throw SyncError(.conflict, "revisionMoved", "the manifest is of revision \(sealed.revision ?? "none"), and the file's current one is \(item.revision): seal it again")
            }
        } else if item.record != nil, try await webRecords(ofAccount: device.accountId, container: container).records == nil {
            throw SyncError(.conflict, "sealedOnDevices",
                            "this file is end-to-end encrypted (Advanced Data Protection): a link to it is made on one of the account's devices, which seals its keys into the link")
        }
        let now = Date().timeIntervalSince1970
        let lifetime = min(max(seconds ?? PublishedLink.longestLifetime, 60), PublishedLink.longestLifetime, retention)
        let token = SQLiteDatabase.randomToken()
        let link = PublishedLink(id: RandomIdentifier.make(), path: "/l/" + token, container: container, item: id, revision: item.revision,
                                 name: item.name, created: now, expires: now + lifetime, sealed: sealed == nil ? nil : true)
        try await database.addLink(link, accountId: device.accountId, tokenHash: DeviceAuthMiddleware.hash(token), manifest: sealed?.manifest,
                                   manifestBudget: accountLimits.maximumLinkManifestBytes)
        logger.info("an item was published", metadata: ["container": "\(container)", "item": "\(id)", "link": "\(link.id)", "device": "\(device.deviceId)",
                                                        "sealed": "\(sealed != nil)"])
        return link
    }

    /// The link a request's `token` names, if it has not expired or been revoked, with its
    /// account and the revision it serves; counted against the asking address by `throttle`.
    /// - Throws: ``SyncError`` 429 past the throttle's limit, 404 for no such link.
    func openLink(_ context: SyncContext, throttle: LinkThrottle) async throws -> (account: Int64, link: PublishedLink, contents: RevisionContentsResponse) {
        let address = context.clientAddress.map { $0.ipAddress ?? "\($0)" } ?? "unknown"
        guard throttle.allow(address) else {
            context.logger.notice("published links refused: too many requests", metadata: ["address": "\(address)"])
            throw SyncError(.tooManyRequests, "tooManyRequests", "too many requests for links from this address: try again in a minute", retryAfter: 60)
        }
        let token = try context.parameters.require("token")
        guard token.utf8.count == 64, token.allSatisfy(\.isHexDigit),
              let (account, link) = try await database.link(tokenHash: DeviceAuthMiddleware.hash(token)),
              link.expires > Date().timeIntervalSince1970,
              let contents = try await database.revisionContents(accountId: account, container: link.container, item: link.item, revision: link.revision) else {
            throw SyncError(.notFound, "notFound", "no such link (it may have expired or been revoked)")
        }
        return (account, link, contents)
    }
}

// Links under Advanced Data Protection (docs/Encryption.md, "Public links under Advanced"): the
// page, its sealed manifest, and the chunks of the revision it serves — only those.
extension SyncServices {
    /// The page, manifest and chunks of sealed links.
    func addSealedLinkRoutes(to router: Router<SyncContext>) {
        router.get("l/:token/manifest") { _, context -> Response in
            let (_, link, _) = try await openLink(context, throttle: links)
            guard link.sealed == true, let manifest = try await database.linkManifest(tokenHash: DeviceAuthMiddleware.hash(try context.parameters.require("token"))) else {
                throw SyncError(.notFound, "notFound", "this link has no sealed manifest")
            }
            return Self.linkResponse(ByteBuffer(data: manifest), type: "application/octet-stream")
        }
        router.get("l/:token/chunks/:hash") { _, context -> Response in
            let (account, link, contents) = try await openLink(context, throttle: linkChunks)
            let hash = try context.parameters.require("hash")
            try Validate.hash(hash)
            guard link.sealed == true, try await linkReads(hash, of: contents, account: account) else {
                throw SyncError(.notFound, "notFound", "no such chunk in this link's file")
            }
            guard let bytes = try await chunks.load(hash: hash, account: account) else { throw SyncError.noSuchChunk(hash) }
            var response = Self.linkResponse(ByteBuffer(data: bytes), type: "application/octet-stream")
            // Kept as a sealed patch of another chunk: the page fetches that one and applies it.
            if let base = try await database.chunkBases(accountId: account, hashes: [hash])[hash] { response.headers[Self.patchOfHeader] = base }
            return response
        }
    }

    /// Whether a link's page may read chunk `hash`: one of the revision's, or one that a chunk
    /// of it is made from (its sealed patch's base, and so on down) — nothing else of the account.
    func linkReads(_ hash: String, of contents: RevisionContentsResponse, account: Int64) async throws -> Bool {
        let named = Set(contents.manifest.allChunks.map(\.hash))
        if named.contains(hash) { return true }
        var frontier: Set<String> = [hash]
        for _ in 0..<Self.maximumPatchDepth where !frontier.isEmpty {
            let patching = try await database.chunksPatching(accountId: account, bases: Array(frontier))
            if patching.keys.contains(where: named.contains) { return true }
            frontier = Set(patching.keys)
        }
        return false
    }

    /// A sealed link's page: the file's name and a download, made in the browser with the key
    /// in the address's fragment.
    static func sealedLinkPage() -> Response {
        var response = linkResponse(ByteBuffer(bytes: PackageResources.link_html), type: "text/html; charset=utf-8")
        response.headers[.contentSecurityPolicy] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            + "form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
        return response
    }

    /// An answer of a link's: never kept, never framed, sent to nobody else.
    static func linkResponse(_ body: ByteBuffer, type: String) -> Response {
        var response = Response(status: .ok, headers: [.contentType: type], body: .init(byteBuffer: body))
        guardLinkAnswer(&response)
        return response
    }

    /// Gives a link's answer the web's security headers, a sandbox that runs no script, and no caching.
    static func guardLinkAnswer(_ response: inout Response) {
        for field in WebSession.securityHeaders { response.headers[field.name] = field.value }
        response.headers[.contentSecurityPolicy] = "sandbox; default-src 'none'"
        response.headers[.cacheControl] = "private, no-store"
    }
}

extension LinkThrottle {
    /// How many chunks of links' pages one address may fetch a minute.
    static let chunksPerMinute = 20_000
}

extension SyncError {
    /// The refusal of a link whose manifest would take the account past `budget` bytes of them.
    static func tooManyLinks(budget: Int64) -> SyncError {
        SyncError(.conflict, "tooManyLinks",
                  "the account's links that still open hold \(budget) bytes of sealed manifests at most: revoke some (or wait for them to expire) and publish again")
    }
}
