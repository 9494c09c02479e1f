import Foundation
import UbiquityProtocol
import Synchronization

/// Connected devices, per account, and the events for them.
final class ChangeNotifier: Sendable {
    private struct Subscriber {
        var device: DeviceAuth
        var continuation: AsyncStream<PushEvent>.Continuation
    }

    private let subscribers = Mutex<[UUID: Subscriber]>([:])
    private let relayState = Mutex(false)

    /// Whether other server instances' changes are being heard (PostgreSQL's LISTEN is active).
    var isRelaying: Bool {
        get { relayState.withLock { $0 } }
        set { relayState.withLock { $0 = newValue } }
    }

    /// A stream of the events the device may see; finish it with ``unsubscribe(_:)``.
    func subscribe(_ device: DeviceAuth) -> (UUID, AsyncStream<PushEvent>) {
        let id = UUID()
        let (stream, continuation) = AsyncStream<PushEvent>.makeStream(bufferingPolicy: .bufferingNewest(1_024))
        subscribers.withLock { $0[id] = Subscriber(device: device, continuation: continuation) }
        return (id, stream)
    }

    func unsubscribe(_ id: UUID) {
        subscribers.withLock { $0.removeValue(forKey: id) }?.continuation.finish()
    }

    /// Tells every connected device of the account that may use the container (or store),
    /// except the device that made the change (`except`): it knows already.
    func publish(account: Int64, container: String, sequence: Int64, keyValue: Bool = false, except origin: String? = nil) {
        let event = PushEvent(type: keyValue ? "keyValueChanged" : "changed", container: container, sequence: sequence)
        let targets = subscribers.withLock { subscribers in
            subscribers.values.filter { $0.device.accountId == account && $0.device.allows(container) && $0.device.deviceId != origin }.map(\.continuation)
        }
        for continuation in targets { continuation.yield(event) }
    }

    /// Tells every connected device to catch up with `changes` (as if it had just connected):
    /// events from other server instances may have been missed while their relay was down.
    func catchUpAll() {
        let targets = subscribers.withLock { $0.values.map(\.continuation) }
        for continuation in targets { continuation.yield(.connected) }
    }

    /// How many devices are connected.
    var connected: Int { subscribers.withLock { $0.count } }

    /// The devices connected now.
    var connectedDevices: Set<String> { subscribers.withLock { Set($0.values.map(\.device.deviceId)) } }

    /// Ends the push connections of `devices` (revoked, signed out, their account deleted):
    /// their streams finish, and the connections close.
    func disconnect(_ devices: Set<String>) {
        let ended = subscribers.withLock { subscribers in
            let ids = subscribers.filter { devices.contains($0.value.device.deviceId) }.map(\.key)
            return ids.compactMap { subscribers.removeValue(forKey: $0)?.continuation }
        }
        for continuation in ended { continuation.finish() }
    }
}
