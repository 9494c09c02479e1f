import Foundation
import UbiquityProtocol
import Synchronization

/// The events waiting for one connected device, coalesced: of several changes to a container
/// before the device's connection could take them, only the latest is sent ("container C is at
/// sequence N" says all the earlier ones said). With many devices and many commits a second,
/// what is written per device is bounded by how fast its connection takes events, not by the
/// commit rate.
final class PushMailbox: Sendable {
    private struct State {
        var pending: [String: PushEvent] = [:]
        var order: [String] = []
        var waiter: CheckedContinuation<Void, Never>?
        var finished = false
    }
    private let state = Mutex(State())

    /// Leaves `event` for the device (replacing an older one of the same kind and container).
    func post(_ event: PushEvent) {
        let key = "\(event.type)\u{0}\(event.container ?? "")"
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.finished else { return nil }
            if let earlier = state.pending[key] {
                if (event.sequence ?? 0) >= (earlier.sequence ?? 0) { state.pending[key] = event }
            } else {
                state.pending[key] = event
                state.order.append(key)
            }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// No more events: ``next()`` answers nil once what is waiting was taken.
    func finish() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// The events waiting, in the order first posted, as soon as there are any; nil when
    /// finished (or when the task is cancelled).
    func next() async -> [PushEvent]? {
        while true {
            let taken = state.withLock { state -> [PushEvent]? in
                guard state.order.isEmpty else {
                    defer { state.pending = [:]; state.order = [] }
                    return state.order.compactMap { state.pending[$0] }
                }
                return state.finished ? [] : nil
            }
            if let taken { return taken.isEmpty ? nil : taken }
            if Task.isCancelled { return nil }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let ready = state.withLock { state -> Bool in
                        // (Cancelled before the waiter was in place: the handler found none to resume.)
                        guard state.order.isEmpty, !state.finished, !Task.isCancelled else { return true }
                        state.waiter = continuation
                        return false
                    }
                    if ready { continuation.resume() }
                }
            } onCancel: {
                let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                    defer { state.waiter = nil }
                    return state.waiter
                }
                waiter?.resume()
            }
        }
    }
}

/// Connected devices, per account, and the events for them.
final class ChangeNotifier: Sendable {
    private struct Subscriber {
        var device: DeviceAuth
        var mailbox: PushMailbox
    }

    private let subscribers = Mutex<[UUID: Subscriber]>([:])
    private let relayState = Mutex(false)

    /// Whether other server instances' changes are being heard (PostgreSQL's LISTEN is active).
    var isRelaying: Bool {
        get { relayState.withLock { $0 } }
        set { relayState.withLock { $0 = newValue } }
    }

    /// The mailbox of the events the device may see; finish it with ``unsubscribe(_:)``.
    func subscribe(_ device: DeviceAuth) -> (UUID, PushMailbox) {
        let id = UUID()
        let mailbox = PushMailbox()
        subscribers.withLock { $0[id] = Subscriber(device: device, mailbox: mailbox) }
        return (id, mailbox)
    }

    func unsubscribe(_ id: UUID) {
        subscribers.withLock { $0.removeValue(forKey: id) }?.mailbox.finish()
    }

    /// Tells every connected device of the account that may use the container (or store),
    /// except the device that made the change (`except`): it knows already.
    func publish(account: Int64, container: String, sequence: Int64, keyValue: Bool = false, except origin: String? = nil) {
        let event = PushEvent(type: keyValue ? "keyValueChanged" : "changed", container: container, sequence: sequence)
        let targets = subscribers.withLock { subscribers in
            subscribers.values.filter { $0.device.accountId == account && $0.device.allows(container) && $0.device.deviceId != origin }.map(\.mailbox)
        }
        for mailbox in targets { mailbox.post(event) }
    }

    /// Tells every connected device to catch up with `changes` (as if it had just connected):
    /// events from other server instances may have been missed while their relay was down.
    func catchUpAll() {
        let targets = subscribers.withLock { $0.values.map(\.mailbox) }
        for mailbox in targets { mailbox.post(.connected) }
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
            return ids.compactMap { subscribers.removeValue(forKey: $0)?.mailbox }
        }
        for mailbox in ended { mailbox.finish() }
    }
}
