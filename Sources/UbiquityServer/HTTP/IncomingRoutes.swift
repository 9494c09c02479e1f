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

    /// The answer to a fetch of what is there now (``ChunkFetchRequest/available``): of
    /// `hashes`, in the order asked, those stored that the device may read, and — for a device
    /// of the whole account — those landing from an upload in progress (``LandingChunks``);
    /// at most ``ChunkBatch/maximumBytes``. Chunks stored as sealed patches are left out.
    ///
    /// None there yet while an upload of the account lands here: the answer waits (at most
    /// ``landingWait``) for its next chunk, so that a device fetching ahead hears of each
    /// chunk as it lands instead of asking again and again.
    func availableAnswer(_ hashes: [String], of device: DeviceAuth, named: (@Sendable ([String]) async throws -> Set<String>)?,
                         waiting: Bool = true) async throws -> Response {
        for hash in hashes { try Validate.hash(hash) }
        let landings = landing.landings(of: device.accountId)
        var absent: Set<String>
        if let named {
            let lacking = Set(try await database.missingChunks(accountId: device.accountId, hashes: hashes))
            let stored = Array(Set(hashes).subtracting(lacking))
            absent = lacking.union(Set(stored).subtracting(stored.isEmpty ? [] : try await named(stored)))
        } else {
            absent = Set(try await missingChunks(hashes, of: device))
        }
        var landed: [String: [UInt8]] = [:]
        if device.containers == nil, named == nil, !absent.isEmpty, landing.holds(account: device.accountId) {
            landed = landing.take(absent, account: device.accountId)
            absent.subtract(landed.keys)
        }
        absent.formUnion(try await database.chunkBases(accountId: device.accountId, hashes: hashes).keys)
        // What landed first, then what is stored, read as any fetch reads it (each frame names
        // its chunk: the asker takes them in any order).
        var body = ByteBuffer(), total = 0
        let landedHashes = Set(landed.keys)
        for hash in hashes where !absent.contains(hash) {
            guard let ahead = landed.removeValue(forKey: hash) else { continue }
            if total > 0 && total + ahead.count > ChunkBatch.maximumBytes { break }
            body.writeBytes(ChunkBatch.frame(hash: hash, length: ahead.count))
            body.writeBytes(ahead)
            total += ahead.count
        }
        let stored = hashes.filter { !absent.contains($0) && !landedHashes.contains($0) }
        if !stored.isEmpty && total < ChunkBatch.maximumBytes {
            let loaded = try await chunks.loadBatch(stored, account: device.accountId, upTo: ChunkBatch.maximumBytes - total, into: &body)
            metrics.count(.chunkBytesRead, by: loaded.reduce(0) { $0 + $1.count })
        }
        if body.readableBytes == 0, waiting, landing.isWatched(account: device.accountId) {
            // (Without the request's turn of its account: the upload it waits for needs turns.)
            try await AccountShare.away { await landing.waitForLanding(account: device.accountId, after: landings, upTo: landingWait) }
            return try await availableAnswer(hashes, of: device, named: named, waiting: false)
        }
        metrics.count(.chunkBytesSent, by: body.readableBytes)
        return Response(status: .ok, headers: [.contentType: "application/octet-stream"], body: .init(byteBuffer: body))
    }

}
