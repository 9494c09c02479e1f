import Foundation
import HTTPTypes
import Hummingbird
import UbiquityKeys
import UbiquityProtocol

/// `GET /web/api/approval/ID`: a browser's request as it stands, with the device that answered
/// it (its name and public keys, from the roster: the page computes the code from them).
struct WebApprovalState: Codable, ResponseEncodable {
    /// The device of the roster that answered.
    struct Approver: Codable, Equatable {
        var id: String
        var name: String
        var signing: Data
        var agreement: Data
    }

    var request: KeyRequestRecord
    var approver: Approver?
}

/// `POST /web/api/approval`: the browser's public keys and its commitment to a nonce.
struct WebApprovalCreate: Codable {
    var signing: Data
    var agreement: Data
    var commitment: Data
}

extension WebGrantUpload: ResponseEncodable {}

/// `POST /web/api/containers/C/sealed/items/I/resolve` (a granted page, under Advanced): the
/// item's state the resolution made, and the revision that was current before (the page signs
/// it as the outcome's base when another revision won).
struct WebSealedResolution: Codable, ResponseEncodable {
    var item: ItemState
    var replaced: String
}

extension SyncServices {
    /// A browser under Advanced Data Protection (issue 45, docs/Encryption.md "The web under
    /// Advanced"): it asks the account's devices for the keys of its containers as a new device
    /// asks to join (a commitment, a device's answer, the nonce revealed, a code the person types
    /// on that device), gets them sealed to it and signed (`WebGrant`), and reads the sealed
    /// data it opens itself — only while the grant lasts, and only of the containers it names.
    /// The server relays and keeps what it cannot open.
    func addWebApprovalRoutes(to api: RouterGroup<SyncContext>) {
        api.post("approval") { request, context in
            let device = try context.requireDevice()
            let create = try await request.decode(as: WebApprovalCreate.self, context: context)
            guard create.signing.count == 32, create.agreement.count == 32, create.commitment.count == 32 else {
                throw SyncError.badRequest("invalidKeys", "the keys and the commitment are 32 bytes each")
            }
            guard (try? DevicePublicKeys(signing: Array(create.signing), agreement: Array(create.agreement))) != nil else {
                throw SyncError.badRequest("invalidKeys", "a browser's public keys are two 32-byte Curve25519 keys")
            }
            let now = Date().timeIntervalSince1970
            let record = KeyRequestRecord(id: RandomIdentifier.make(), signing: create.signing, agreement: create.agreement, name: "web browser",
                                          commitment: create.commitment, created: now, kind: KeyRequestRecord.browserKind)
            guard try await database.addKeyRequest(accountId: device.accountId, deviceId: device.deviceId, request: record,
                                                   since: now - KeyLimits.requestLifetime, limit: KeyLimits.pendingRequests) else {
                throw SyncError(.tooManyRequests, "tooManyRequests", "the account has \(KeyLimits.pendingRequests) requests waiting: answer or let them expire")
            }
            context.logger.info("a browser asks the account's devices for its keys", metadata: ["device": "\(device.deviceId)"])
            notifier.publishKeyRequest(account: device.accountId, except: device.deviceId)
            return record
        }
        api.get("approval/:id") { _, context in
            let device = try context.requireDevice()
            let request = try await Self.pendingRequest(try context.parameters.require("id"), of: device, in: database)
            var approver: WebApprovalState.Approver?
            if let answerer = request.answerer {
                let stored = try await database.accountKeys(accountId: device.accountId, recipients: [])
                let roster = try? Roster.verify(try stored.roster.map { try RosterEntry(encoded: $0) })
                if let member = roster?.members[answerer] {
                    approver = .init(id: answerer, name: member.name, signing: Data(member.keys.signing), agreement: Data(member.keys.agreement))
                }
            }
            return WebApprovalState(request: request, approver: approver)
        }
        api.post("approval/:id/reveal") { request, context -> HTTPResponse.Status in
            let device = try context.requireDevice()
            let reveal = try await request.decode(as: KeyRequestNonce.self, context: context)
            guard reveal.nonce.count == 32 else { throw SyncError.badRequest("invalidNonce", "a nonce is 32 bytes") }
            guard try await database.revealKeyRequest(accountId: device.accountId, id: try context.parameters.require("id"), deviceId: device.deviceId,
                                                      nonce: reveal.nonce, since: Date().timeIntervalSince1970 - KeyLimits.requestLifetime) else {
                throw SyncError(.conflict, "notPending", "no such request of this browser waits to be revealed (not answered yet, revealed already, or expired)")
            }
            notifier.publishKeyRequest(account: device.accountId, except: device.deviceId)
            return .noContent
        }
        api.get("grant") { _, context in
            let device = try context.requireDevice()
            guard let grant = try await database.webGrant(accountId: device.accountId, deviceId: device.deviceId, now: Date().timeIntervalSince1970) else {
                throw SyncError(.notFound, "noGrant", "no device has approved this browser (or its approval ended)")
            }
            return grant
        }

        // The sealed data a granted session reads: changes, an item's whole state, a chunk as stored.
        let sealed = api.group("containers/:container/sealed")
        sealed.get("changes") { request, context in
            let (device, container) = try await granted(context)
            let since = try request.uri.queryParameters["since"].map { text -> Int64 in
                guard let value = Int64(text), value >= 0 else { throw SyncError.badRequest("invalidSince", "since is a sequence, 0 or more") }
                return value
            } ?? 0
            return try await database.changes(accountId: device.accountId, container: container, since: since, limit: 5_000, brief: true)
        }
        sealed.get("items/:id") { _, context in
            let (device, container) = try await granted(context)
            let id = try context.parameters.require("id")
            try Validate.identifier(id, field: "id")
            guard let item = try await database.item(accountId: device.accountId, container: container, id: id, brief: false) else { throw SyncError.notFound }
            return item
        }
        // An item's earlier revisions and one revision's contents, as devices read them: the
        // versions page under Advanced opens their records itself.
        sealed.get("items/:id/revisions") { _, context in
            let (device, container) = try await granted(context)
            let id = try context.parameters.require("id")
            try Validate.identifier(id, field: "id")
            guard let revisions = try await database.itemRevisions(accountId: device.accountId, container: container, item: id,
                                                                   since: Date().timeIntervalSince1970 - retention, limit: ItemRevisionsResponse.maximumCount) else {
                throw SyncError.notFound
            }
            return ItemRevisionsResponse(revisions: revisions)
        }
        sealed.get("items/:id/revisions/:revision") { _, context in
            let (device, container) = try await granted(context)
            let id = try context.parameters.require("id"), revision = try context.parameters.require("revision")
            try Validate.identifier(id, field: "id")
            try Validate.identifier(revision, field: "revision")
            guard let contents = try await database.revisionContents(accountId: device.accountId, container: container, item: id, revision: revision) else {
                throw SyncError(.notFound, "notFound", "no such version")
            }
            return contents
        }
        // The page's own changes under Advanced (docs/Encryption.md, "The page's changes under
        // Advanced"): records sealed and names tagged in the browser, then the commit it signed
        // with its key, which the roster let in. Nothing in plaintext is taken.
        sealed.post("commits") { request, context in
            let (device, container) = try await granted(context)
            return try await commitBatch(request, context: context, container: container, device: device, sealedOnly: true)
        }
        // A conflict the page resolved (docs/Encryption.md, "Versions under Advanced"): the
        // revision it chose wins, every other is resolved; the page signs what this made, as a
        // device signs its resolutions.
        sealed.post("items/:id/resolve") { request, context in
            let (device, container) = try await granted(context)
            let id = try context.parameters.require("id")
            try Validate.identifier(id, field: "id")
            let asked = try await request.decode(as: WebResolveRequest.self, context: context)
            let (state, replaced) = try await webResolve(id, keeping: asked.keep, container: container, device: device)
            return WebSealedResolution(item: state, replaced: replaced)
        }
        // A chunk the page sealed (an upload): kept unread, as a device's sealed chunk is.
        sealed.put("chunks/:hash") { request, context -> HTTPResponse.Status in
            try await receiveChunk(request, context: context, device: try await granted(context).0, sealed: true)
            return .noContent
        }
        sealed.post("signed-commits") { request, context in
            let (device, container) = try await granted(context)
            return try await keepSignedCommits(request, context: context, container: container, device: device)
        }
        // Which of a file's chunks are kept as sealed patches (the page names their keys in a link).
        sealed.post("bases") { request, context in try await chunkBases(request, context: context, device: try await granted(context).0) }
        sealed.get("chunks/:hash") { _, context in
            let (device, _) = try await granted(context)
            let hash = try context.parameters.require("hash")
            guard hash.utf8.count == 64, hash.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) else {
                throw SyncError.badRequest("invalidHash", "a chunk's name is 64 hexadecimal digits")
            }
            guard let bytes = try await chunks.load(hash: hash, account: device.accountId) else { throw SyncError.noSuchChunk(hash) }
            var headers = HTTPFields()
            headers[.contentType] = "application/octet-stream"
            headers[.cacheControl] = "no-store"
            // A chunk kept as a sealed patch of another: the page fetches that one and applies it.
            if let base = try await database.chunkBases(accountId: device.accountId, hashes: [hash])[hash] { headers[Self.patchOfHeader] = base }
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
        }
    }

    /// Says a sealed chunk served to a page is kept as a sealed patch of the chunk it names.
    static let patchOfHeader = HTTPField.Name("X-Ubiquity-Patch-Of")!

    /// The session's device and the container asked for, if a device's grant that has not
    /// expired names it (else 403 `noGrant`).
    private func granted(_ context: SyncContext) async throws -> (DeviceAuth, String) {
        let container = try context.parameters.require("container")
        let device = try context.requireDevice(for: container)
        guard let grant = try await database.webGrant(accountId: device.accountId, deviceId: device.deviceId, now: Date().timeIntervalSince1970),
              grant.containers.contains(container) else {
            throw SyncError(.forbidden, "noGrant", "no device has given this browser the keys of that container (or the approval ended)")
        }
        return (device, container)
    }
}
