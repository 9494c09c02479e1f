import Foundation
import Hummingbird
import UbiquityProtocol

extension IncomingResponse: ResponseEncodable {}

/// Incoming revisions (docs/SyncProtocol.md, "Incoming revisions"): a device announces the
/// revision it is uploading before its chunks, so that other devices fetch the chunks as they
/// land and have the file staged when it is committed. An announcement is no revision: nothing
/// lists it as the item's, and the item changes only when the commit comes.
extension SyncServices {
    /// `PUT /v1/containers/C/incoming/ITEM` (an ``ItemUpdate``: announced), `POST
    /// …/incoming/ITEM/landed` (more of its chunks are stored: kept, and told), `DELETE
    /// …/incoming/ITEM` (committed or given up), `GET /v1/containers/C/incoming`.
    func addIncomingRoutes(to containers: RouterGroup<SyncContext>) {
        containers.put("incoming/:item") { request, context -> Response in
            let (device, container, item) = try Self.itemAddress(context)
            let asked = try await request.decode(as: ItemUpdate.self, context: context)
            try await refusePlaintext([asked], of: device)
            var update = try await prepared(asked, of: item, in: container, for: device)
            guard update.kind == .file, update.deleted != true, update.contents == nil else {
                throw SyncError.badRequest("notIncoming", "only a flat file's contents are announced before they are uploaded")
            }
            update.manifestDelta = nil
            let body = try JSONEncoder().encode(update)
            let expires = try await incomingStorage.announceIncoming(accountId: device.accountId, container: container, item: item, device: device,
                                                                     update: body, now: Date())
            landing.watch(account: device.accountId, until: expires ?? 0)
            notifier.publishIncoming(account: device.accountId, container: container, except: device.deviceId)
            return try Self.expiring(expires ?? 0)
        }
        containers.post("incoming/:item/landed") { _, context -> Response in
            let (device, container, item) = try Self.itemAddress(context)
            guard let expires = try await incomingStorage.announceIncoming(accountId: device.accountId, container: container, item: item, device: device,
                                                                           update: nil, now: Date()) else {
                throw SyncError(.notFound, "noSuchIncoming", "this device announces no revision of that item (it expired: announce it again)")
            }
            landing.watch(account: device.accountId, until: expires)
            notifier.publishIncoming(account: device.accountId, container: container, except: device.deviceId)
            return try Self.expiring(expires)
        }
        containers.delete("incoming/:item") { _, context -> HTTPResponse.Status in
            let (device, container, item) = try Self.itemAddress(context)
            if try await incomingStorage.withdrawIncoming(accountId: device.accountId, container: container, item: item, device: device.deviceId) {
                notifier.publishIncoming(account: device.accountId, container: container, except: device.deviceId)
            }
            return .noContent
        }
        containers.get("incoming") { _, context in
            let container = try context.parameters.require("container")
            let device = try context.requireDevice(for: container)
            let stored = try await incomingStorage.incoming(accountId: device.accountId, container: container, except: device.deviceId, now: Date())
            let decoder = JSONDecoder()
            // (Each was validated and encoded by this route: one that does not decode is another version's, left out.)
            return IncomingResponse(incoming: stored.compactMap { row in
                (try? decoder.decode(ItemUpdate.self, from: row.update)).map {
                    IncomingRevision(item: row.item, deviceName: row.deviceName, update: $0, touched: row.touched, expires: row.expires)
                }
            })
        }
    }

    /// The database's incoming revisions (both kinds of database keep them).
    var incomingStorage: any IncomingStorage {
        get throws {
            guard let storage = database as? any IncomingStorage else {
                throw SyncError(.internalServerError, "internal", "this database keeps no incoming revisions")
            }
            return storage
        }
    }

    /// `{"expires": SECONDS}`.
    static func expiring(_ expires: Double) throws -> Response {
        Response(status: .ok, headers: [.contentType: "application/json"],
                 body: ResponseBody(byteBuffer: ByteBuffer(bytes: try JSONEncoder().encode(["expires": expires]))))
    }

    /// The answer to a fetch whose chunks are stored or landing (``LandingChunks``), in the
    /// order asked; nil when none of them is landing (the stored path answers).
    /// - Throws: ``SyncError`` 404 naming the first chunk neither stored nor landed.
    func landedAnswer(_ hashes: [String], of device: DeviceAuth) async throws -> Response? {
        for hash in hashes { try Validate.hash(hash) }
        let lacking = Set(try await database.missingChunks(accountId: device.accountId, hashes: hashes))
        guard !lacking.isEmpty else { return nil }
        // (Chunks stored as sealed patches go by the stored path, which says what they are.)
        guard try await database.chunkBases(accountId: device.accountId, hashes: hashes).isEmpty else { return nil }
        let landed = landing.take(lacking, account: device.accountId)
        if let absent = hashes.first(where: { lacking.contains($0) && landed[$0] == nil }) { throw SyncError.noSuchChunk(absent) }
        var body = ByteBuffer(), total = 0
        for hash in hashes {
            let bytes: [UInt8]
            if let ahead = landed[hash] {
                bytes = ahead
            } else {
                // (Stored; checked as any stored chunk is.)
                guard let stored = try await chunks.load(hash: hash, account: device.accountId) else { throw SyncError.noSuchChunk(hash) }
                bytes = [UInt8](stored)
            }
            if total > 0 && total + bytes.count > ChunkBatch.maximumBytes { break }
            body.writeBytes(ChunkBatch.frame(hash: hash, length: bytes.count))
            body.writeBytes(bytes)
            total += bytes.count
        }
        metrics.count(.chunkBytesSent, by: body.readableBytes)
        return Response(status: .ok, headers: [.contentType: "application/octet-stream"], body: .init(byteBuffer: body))
    }
}
