import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Synchronization
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
        router.post("v1/containers/:container/items/:item/links") { request, context -> Response in
            let (device, container, item) = try Self.itemAddress(context)
            let asked = try await request.decode(as: PublishRequest.self, context: context)
            let link = try await publish(item, in: container, for: device, seconds: asked.seconds, logger: context.logger)
            return try link.response(from: request, context: context)
        }
        // The download: no session, no cookie; an attachment that cannot run script here.
        router.get("l/:token") { _, context -> Response in
            let address = context.clientAddress.map { $0.ipAddress ?? "\($0)" } ?? "unknown"
            guard links.allow(address) else {
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
            // (A sealed record's name, size and date opened with the escrow's keys: Standard only.)
            let opened = try await webRecords(ofAccount: account, container: link.container).open(contents, item: link.item)
            let item = ItemState(id: link.item, revision: link.revision, name: contents.record == nil ? link.name : opened.name, parent: nil, kind: opened.kind, size: opened.size,
                                 modificationDate: opened.modificationDate, type: nil, deleted: false, uploaded: opened.uploaded,
                                 deviceName: opened.deviceName, sequence: 0, manifest: opened.manifest, conflicts: [])
            var response = try await WebDownload.response(for: item, chunks: chunks, account: account,
                                                          opener: try await sealedChunkOpener(ofAccount: account, container: link.container))
            for field in WebSession.securityHeaders { response.headers[field.name] = field.value }
            response.headers[.contentSecurityPolicy] = "sandbox; default-src 'none'"
            response.headers[.cacheControl] = "private, no-store"
            return response
        }
        api.get("links") { _, context in
            let device = try context.requireDevice()
            var links = try await database.links(ofAccount: device.accountId).filter { device.allows($0.container) }
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
            let link = try await publish(item, in: container, for: device, seconds: nil, logger: context.logger)
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
    /// still serves the revision published, for as long as the server keeps it.
    /// - Throws: ``SyncError`` 404 for an item not there, 409 `notAFlatFile` or `notUploaded`.
    func publish(_ id: String, in container: String, for device: DeviceAuth, seconds: Double?, logger: Logger) async throws -> PublishedLink {
        guard let item = try await database.item(accountId: device.accountId, container: container, id: id, brief: true), !item.deleted else {
            throw SyncError.notFound
        }
        guard item.kind == .file else { throw SyncError(.conflict, "notAFlatFile", "only a flat file can be published, not a package or a folder") }
        guard item.uploaded else { throw SyncError(.conflict, "notUploaded", "the file has not reached iCloud yet: publish it once it is uploaded") }
        let now = Date().timeIntervalSince1970
        let lifetime = min(max(seconds ?? PublishedLink.longestLifetime, 60), PublishedLink.longestLifetime, retention)
        let token = SQLiteDatabase.randomToken()
        let link = PublishedLink(id: RandomIdentifier.make(), path: "/l/" + token, container: container, item: id, revision: item.revision,
                                 name: item.name, created: now, expires: now + lifetime)
        try await database.addLink(link, accountId: device.accountId, tokenHash: DeviceAuthMiddleware.hash(token))
        logger.info("an item was published", metadata: ["container": "\(container)", "item": "\(id)", "link": "\(link.id)", "device": "\(device.deviceId)"])
        return link
    }
}
