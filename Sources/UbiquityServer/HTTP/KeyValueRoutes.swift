import Hummingbird
import UbiquityProtocol

extension SyncServices {
    /// `GET /v1/kv/STORE?since=N`, `POST /v1/kv/STORE`: key-value stores
    /// (`NSUbiquitousKeyValueStore`), named like containers.
    func addKeyValueRoutes(to v1: RouterGroup<SyncContext>) {
        v1.get("kv/:store") { request, context in
            let store = try context.parameters.require("store")
            let device = try context.requireDevice(for: store)
            let since = try Self.integer(request.uri.queryParameters["since"], name: "since", default: 0)
            return try await database.keyValueChanges(accountId: device.accountId, store: store, since: max(0, since))
        }
        v1.post("kv/:store") { request, context in
            let store = try context.parameters.require("store")
            let device = try context.requireDevice(for: store)
            let update = try await request.decode(as: KeyValueUpdate.self, context: context)
            try Validate.keyValues(update)
            if update.changes.contains(where: { $0.sealed == nil }), let why = try await sealedOnly(device) {
                // Under Advanced the server keeps nothing it could read, and once the devices
                // require everything sealed they would refuse it: an older build's plaintext is refused.
                context.logger.warning("refused plaintext key-value changes for an account that takes none", metadata: ["store": "\(store)", "why": "\(why)"])
                throw SyncError(.conflict, "sealedOnly", "\(why): its devices seal every value (update this device's ubiquity)")
            }
            let answer = try await database.applyKeyValues(accountId: device.accountId, store: store, changes: update.changes, device: device)
            notifier.publish(account: device.accountId, container: store, sequence: answer.sequence, keyValue: true)
            return answer
        }
    }
}
