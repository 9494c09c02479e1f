import Foundation
import HTTPTypes
import Hummingbird
import UbiquityProtocol

/// `GET /web/api/devices`: the account's devices signed in now.
struct WebDevicesResponse: Codable, ResponseEncodable {
    var devices: [WebDevice]
}

/// A device as the Devices page lists it.
struct WebDevice: Codable, Sendable, Equatable {
    var id: String
    var name: String
    var created: Double
    var lastSeen: Double?
    /// Whether it is the browser asking.
    var current: Bool
}

/// `GET /web/api/storage`: Manage Storage — what counts against the quota, by container.
struct WebStorageResponse: Codable, ResponseEncodable {
    var quotaBytes: Int64
    var usedBytes: Int64
    var chunkBytes: Int64
    var keyValueBytes: Int64
    var metadataBytes: Int64
    var pendingBytes: Int64
    var containers: [ContainerSummary]
    var keyValueStores: [KeyValueStoreSummary]
}

/// `GET /web/api/kv/:store`: a key-value store's values, each as a property list.
struct WebKeyValuesResponse: Codable, ResponseEncodable {
    var store: String
    var entries: [WebKeyValue]
    /// Values sealed with keys the server does not hold (Advanced Data Protection): only the
    /// account's devices read them.
    var sealed: Int
}

/// One key of a key-value store.
struct WebKeyValue: Codable, Sendable, Equatable {
    var key: String
    /// The value as an XML property list (what `defaults` and Xcode show).
    var propertyList: String
    var bytes: Int
    var deviceName: String
    var timestamp: Double
}

/// `POST /web/api/containers/:container/delete-all`: the container's identifier typed again.
struct WebDeleteAllRequest: Codable {
    var confirm: String
}

/// `POST /web/api/containers/:container/delete-all`: how many items were deleted.
struct WebDeleteAllResponse: Codable, ResponseEncodable {
    var deleted: Int
}

extension SyncServices {
    /// Devices, key-value stores, Manage Storage.
    func addWebAccountRoutes(to api: RouterGroup<SyncContext>) {
        addWebProtectionRoutes(to: api)
        api.get("devices") { _, context in
            let device = try context.requireDevice()
            guard let account = try await database.account(id: device.accountId) else { throw SyncError.unauthorized }
            let devices = try await database.devices(ofAccount: account.name).filter { !$0.revoked }
            return WebDevicesResponse(devices: devices.map {
                WebDevice(id: $0.id, name: $0.name, created: $0.created, lastSeen: $0.lastSeen, current: $0.id == device.deviceId)
            })
        }
        // Signs a device out (its token stops working, its push connection closes).
        api.post("devices/:device/revoke") { _, context -> HTTPResponse.Status in
            let device = try context.requireDevice()
            let id = try context.parameters.require("device")
            try Validate.identifier(id, field: "device")
            guard let account = try await database.account(id: device.accountId),
                  try await database.devices(ofAccount: account.name).contains(where: { $0.id == id && !$0.revoked }) else {
                throw SyncError(.notFound, "notFound", "no such device")
            }
            _ = try await database.revokeDevice(id: id)
            notifier.disconnect([id])
            context.logger.notice("a device was signed out from the web interface", metadata: ["account": "\(account.name)", "device": "\(id)"])
            return .noContent
        }
        api.get("storage") { _, context in
            let device = try context.requireDevice()
            let usage = try await database.usage(ofAccount: device.accountId)
            return WebStorageResponse(quotaBytes: usage.quota, usedBytes: usage.used, chunkBytes: usage.chunkBytes, keyValueBytes: usage.keyValueBytes,
                                      metadataBytes: usage.metadataBytes, pendingBytes: usage.pendingBytes,
                                      containers: try await database.containers(ofAccount: device.accountId).filter { device.allows($0.identifier) },
                                      keyValueStores: try await database.keyValueStores(ofAccount: device.accountId).filter { device.allows($0.identifier) })
        }
        api.get("kv/:store") { _, context in
            let store = try context.parameters.require("store")
            let device = try context.requireDevice(for: store)
            let answer = try await database.keyValueChanges(accountId: device.accountId, store: store, since: 0)
            // Sealed values open with the escrow's keys under Standard; under Advanced only the
            // account's devices read them.
            let rootKeys = answer.entries.contains { $0.sealed != nil } ? try await escrow?.rootKeys(ofAccount: device.accountId, database: database) : nil
            let opened = OpenedKeyValues(answer.entries, store: store, rootKeys: rootKeys, logger: context.logger)
            let entries = try opened.entries.sorted { $0.key < $1.key }.map { entry in
                let value = try Self.propertyList(entry.value!)
                return WebKeyValue(key: entry.key, propertyList: value, bytes: entry.key.utf8.count + value.utf8.count,
                                   deviceName: entry.deviceName, timestamp: entry.timestamp)
            }
            return WebKeyValuesResponse(store: store, entries: entries, sealed: opened.sealed)
        }
        // Manage Storage's "Delete All": every item of the container deleted (recoverable for
        // the retention period), so every device removes its copy.
        api.post("containers/:container/delete-all") { request, context in
            let (device, container) = try Self.webContainer(context)
            let asked = try await request.decode(as: WebDeleteAllRequest.self, context: context)
            guard asked.confirm == container else {
                throw SyncError.badRequest("notConfirmed", "type the container's identifier to confirm")
            }
            let records = try await webRecords(ofAccount: device.accountId, container: container)
            let listing = try await WebListing.load(database: database, account: device.accountId, container: container, records: records)
            // Innermost first: a folder goes after what is in it.
            func depth(_ item: ItemState) -> Int { listing.path(to: item.id).count }
            let doomed = listing.items.values.sorted { depth($0) > depth($1) } // what is beside Documents too: all the app's data
            try await webDelete(doomed, container: container, device: device, records: records, logger: context.logger)
            context.logger.notice("a container's items were deleted from the web interface", metadata: ["container": "\(container)", "items": "\(doomed.count)"])
            return WebDeleteAllResponse(deleted: doomed.count)
        }
    }

    /// `value` as an XML property list.
    static func propertyList(_ value: PropertyListValue) throws -> String {
        func object(_ value: PropertyListValue) -> Any {
            switch value {
            case .string(let text): text
            case .integer(let number): NSNumber(value: number)
            case .real(let number): NSNumber(value: number)
            case .bool(let flag): NSNumber(value: flag)
            case .date(let seconds): Date(timeIntervalSince1970: seconds)
            case .data(let bytes): bytes
            case .array(let values): values.map(object)
            case .dictionary(let values): values.mapValues(object)
            }
        }
        let data = try PropertyListSerialization.data(fromPropertyList: object(value), format: .xml, options: 0)
        return String(decoding: data, as: UTF8.self)
    }
}
