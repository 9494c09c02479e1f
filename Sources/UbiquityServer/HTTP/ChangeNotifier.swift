import CompressNIO
import Foundation
import NIOCore
import NIOFoundationCompat
import Synchronization
@_spi(UbiquityInternal) import UbiquityFiles
import UbiquityProtocol

/// The events waiting for one connected device, coalesced: of several changes to a container
/// before the device's connection could take them, only the latest is sent ("container C is at
/// sequence N" says all the earlier ones said). With many devices and many commits a second,
/// what is written per device is bounded by how fast its connection takes events, and by
/// ``pace``, not by the commit rate.
final class PushMailbox: Sendable {
    /// An event and its message (JSON text, encoded once for every device it goes to), or,
    /// for a device that asked for pages, the event with its changes (``PushEvent/items``) as
    /// gzip-compressed JSON, sent as a binary message.
    struct Delivery: Sendable, Equatable {
        var event: PushEvent
        var text: String
        var page: Data? = nil
    }

    /// The shortest time between two messages to one device: events that come closer together
    /// wait (coalesced) until it has passed. A device that hears nothing for a while hears the
    /// next change at once. (``ChangeNotifier/pace(forAccount:)`` lengthens it for accounts with
    /// many devices connected.)
    static let pace: Duration = .milliseconds(20)

    /// What paced reads wait on (nil: a timer of their own).
    private let clock: PushClock?

    /// An empty mailbox whose paced reads wait on `clock`.
    init(clock: PushClock? = nil) {
        self.clock = clock
    }

    /// By kind and container; a later event replaces an earlier one unless its sequence is lower.
    private let waiting = CoalescingMailbox<String, Delivery> { earlier, later in
        (later.event.sequence ?? 0) >= (earlier.event.sequence ?? 0) ? later : earlier
    }

    /// Leaves `event` for the device (replacing an older one of the same kind and container).
    func post(_ event: PushEvent) {
        post(Delivery(event: event, text: Self.message(event)))
    }

    /// Leaves an event already encoded (``message(_:)``) for the device.
    func post(_ delivery: Delivery) {
        post(delivery, key: Self.key(of: delivery.event))
    }

    /// Leaves an event already encoded for the device under its ``key(of:)`` (made once for
    /// every device an event goes to).
    func post(_ delivery: Delivery, key: String) {
        waiting.post(delivery, for: key)
    }

    /// What an event waits under: its kind and container (a later one of both replaces it).
    static func key(of event: PushEvent) -> String {
        "\(event.type)\u{0}\(event.container ?? "")"
    }

    /// An event as the push message's JSON text.
    static func message(_ event: PushEvent) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        // An event is two strings and a number: it always encodes.
        return (try? String(decoding: encoder.encode(event), as: UTF8.self)) ?? "{}"
    }

    /// The events waiting, no sooner than `pace` after the last ones this reader took (see
    /// ``PushPacer``); nil when finished or cancelled.
    func next(pacedBy pacer: inout PushPacer, pace: Duration) async -> [Delivery]? {
        let waited: [Delivery]?
        if let clock {
            waited = await waiting.next(notBefore: pacer.notBefore) { await clock.sleep(until: $0) }
        } else {
            waited = await waiting.next(notBefore: pacer.notBefore)
        }
        guard let waiting = waited else { return nil }
        pacer.delivered(at: .now, pace: pace)
        return waiting
    }

    /// No more events: ``next(notBefore:)`` answers nil once what is waiting was taken.
    func finish() {
        waiting.finish()
    }

    /// The events waiting, in the order first posted, as soon as there are any and not before
    /// `notBefore` (what comes meanwhile joins them, coalesced); nil when finished (or when the
    /// task is cancelled).
    func next(notBefore: ContinuousClock.Instant? = nil) async -> [Delivery]? {
        await waiting.next(notBefore: notBefore)
    }
}

/// When one device's next push message may go: ``PushMailbox/pace`` after its last one.
///
/// A device that was idle hears the next change at once, and so does every other idle device
/// of the account, all woken by the same commit. Paced alike from then on, they would stay
/// together: a thousand messages written at once every pace, during which the account's
/// commits wait for the processor, and idle time between. So the message after one that woke
/// an idle device comes after a random part (half to all) of the pace: the devices' messages
/// spread evenly over the pace and stay spread while changes keep coming (issue 49). No
/// device waits longer than the pace.
struct PushPacer: Sendable {
    /// The next message waits until then.
    private(set) var notBefore = ContinuousClock.now

    /// The reader took messages at `now`.
    mutating func delivered(at now: ContinuousClock.Instant, pace: Duration) {
        // Later than due by more than a quarter of the pace: the device had nothing waiting, and
        // the change that woke it woke the others too.
        let wokenFromIdle = now - notBefore > pace / 4
        notBefore = now + (wokenFromIdle ? pace * Double.random(in: 0.5...1) : pace)
    }
}

/// Connected devices, per account, and the events for them.
final class ChangeNotifier: Sendable {
    private struct Subscriber {
        var device: DeviceAuth
        var mailbox: PushMailbox
        /// Whether the connection takes pages of changes (`pages=gzip`).
        var pages = false
        /// Up to how many bytes a small file's contents come inline in those pages (`inline=N`).
        var inline = 0
    }

    /// A commit's changes, small enough to push along with the event that tells of them.
    struct PushedPage: Sendable {
        /// The container's sequence before them.
        var since: Int64
        /// Every item that changed after `since` (brief states, without contents).
        var items: [ItemState]
        /// Small files' bytes, by item id.
        var contents: [String: Data]
        /// The place of the container's newest signed commit kept (``PushEvent/signedCommits``).
        var signedCommits: Int64?
    }

    /// One connection as a commit's push reaches it.
    private struct Target {
        var deviceId: String
        var mailbox: PushMailbox
        var pages: Bool
        var inline: Int
    }

    /// The connected devices, and for each account and container the connections that may use
    /// it: a commit reaches a thousand devices without looking at each one's token (issue 49).
    private struct Connections {
        /// By account, then by connection.
        var accounts: [Int64: [UUID: Subscriber]] = [:]
        /// ``Target``s by account and container, made when first needed; an account's are
        /// dropped whenever its connections change.
        var targets: [Int64: [String: [Target]]] = [:]

        /// How many containers' targets are kept for an account at most.
        static let containersKept = 64

        /// The connections of `account` that may use `container`.
        mutating func targets(account: Int64, container: String) -> [Target] {
            if let cached = targets[account]?[container] { return cached }
            let made = (accounts[account] ?? [:]).values.filter { $0.device.allows(container) }
                .map { Target(deviceId: $0.device.deviceId, mailbox: $0.mailbox, pages: $0.pages, inline: $0.inline) }
            // (Bounded: an account's many containers make it start again, not grow.)
            if targets[account]?.count ?? 0 >= Self.containersKept { targets[account] = nil }
            targets[account, default: [:]][container] = made
            return made
        }
    }

    private let connections = Mutex(Connections())
    private let relayState = Mutex(false)
    /// What every connection's pace waits on.
    private let clock = PushClock()

    /// Whether other server instances' changes are being heard (PostgreSQL's LISTEN is active).
    var isRelaying: Bool {
        get { relayState.withLock { $0 } }
        set { relayState.withLock { $0 = newValue } }
    }

    /// Connections listening now (devices' push connections and pages' event streams), and the
    /// accounts they belong to.
    var listening: (connections: Int, accounts: Int) {
        connections.withLock { connections in (connections.accounts.values.reduce(0) { $0 + $1.count }, connections.accounts.count) }
    }

    /// The mailbox of the events the device may see; finish it with ``unsubscribe(_:)``.
    /// - Parameters:
    ///   - pages: Whether the connection takes pages of changes with its events.
    ///   - inline: Up to how many bytes a small file's contents come inline in them.
    func subscribe(_ device: DeviceAuth, pages: Bool = false, inline: Int = 0) -> (UUID, PushMailbox) {
        let id = UUID()
        let mailbox = PushMailbox(clock: clock)
        connections.withLock {
            $0.accounts[device.accountId, default: [:]][id] = Subscriber(device: device, mailbox: mailbox, pages: pages, inline: inline)
            $0.targets[device.accountId] = nil
        }
        return (id, mailbox)
    }

    func unsubscribe(_ id: UUID) {
        let removed = connections.withLock { connections -> Subscriber? in
            for (account, subscribers) in connections.accounts where subscribers[id] != nil {
                let removed = connections.accounts[account]?.removeValue(forKey: id)
                if connections.accounts[account]?.isEmpty == true { connections.accounts[account] = nil }
                connections.targets[account] = nil
                return removed
            }
            return nil
        }
        removed?.mailbox.finish()
    }

    /// Tells every connected device of the account that may use the container (or store),
    /// except the device that made the change (`except`): it knows already.
    /// With `page` (a commit's changes, when small), devices that take pages get them along,
    /// so that they need no request for them.
    func publish(account: Int64, container: String, sequence: Int64, keyValue: Bool = false, except origin: String? = nil, page: PushedPage? = nil) {
        let event = PushEvent(type: keyValue ? "keyValueChanged" : "changed", container: container, sequence: sequence)
        let delivery = PushMailbox.Delivery(event: event, text: PushMailbox.message(event)) // encoded once for all
        let targets = connections.withLock { $0.targets(account: account, container: container) }
        // Each form of the page is encoded once, for every device that takes it.
        var withContents: PushMailbox.Delivery?, withoutContents: PushMailbox.Delivery?
        let largest = page?.contents.values.map(\.count).max()
        let key = PushMailbox.key(of: event)
        for target in targets where target.deviceId != origin {
            guard target.pages, let page else {
                target.mailbox.post(delivery, key: key)
                continue
            }
            if let largest, target.inline >= largest {
                if withContents == nil { withContents = Self.delivery(event, page, contents: true) ?? delivery }
                target.mailbox.post(withContents ?? delivery, key: key)
            } else {
                if withoutContents == nil { withoutContents = Self.delivery(event, page, contents: false) ?? delivery }
                target.mailbox.post(withoutContents ?? delivery, key: key)
            }
        }
    }

    /// Tells every connected device of the account (but `origin`, which made it) that a request
    /// to join changed: made, answered or revealed (`{"type":"keyRequest"}`).
    /// Tells every connected device that may use `container` (but `origin`, which sent them)
    /// that signed commits of it were kept (`{"type":"signed","container":…}`): a device that
    /// holds back states no commit named yet (under Advanced) looks again at once, instead of
    /// at its next round — a commit is stored a few milliseconds after the change it signs,
    /// whose push came first.
    func publishSigned(account: Int64, container: String, except origin: String? = nil) {
        publishContainerEvent("signed", account: account, container: container, except: origin)
    }

    /// Tells every connected device that may use `container` (but `origin`, which uploads it)
    /// that its incoming revisions changed (`{"type":"incoming","container":…}`): one was
    /// announced, more of its chunks landed, or it was withdrawn. They read the list again.
    func publishIncoming(account: Int64, container: String, except origin: String? = nil) {
        publishContainerEvent("incoming", account: account, container: container, except: origin)
    }

    private func publishContainerEvent(_ type: String, account: Int64, container: String, except origin: String?) {
        let event = PushEvent(type: type, container: container, sequence: nil)
        let delivery = PushMailbox.Delivery(event: event, text: PushMailbox.message(event))
        let targets = connections.withLock { ($0.accounts[account] ?? [:]).values.filter { $0.device.allows(container) && $0.device.deviceId != origin } }
        for target in targets { target.mailbox.post(delivery) }
    }

    /// Tells the connected devices of `accounts` that may use `container` (but `origin`) that
    /// share `share` moved on to `sequence` (`{"type":"shareChanged","container":SHARE,…}`: they
    /// read its changes), or, with no share, that their shares changed (`{"type":"sharesChanged"}`:
    /// they read their list of shares again).
    func publishShare(share: String?, sequence: Int64?, accounts: [Int64], container: String, except origin: String?) {
        let event = PushEvent(type: share == nil ? "sharesChanged" : "shareChanged", container: share, sequence: sequence)
        let delivery = PushMailbox.Delivery(event: event, text: PushMailbox.message(event))
        let targets = connections.withLock { connections in
            Set(accounts).flatMap { (connections.accounts[$0] ?? [:]).values.filter { $0.device.allows(container) && $0.device.deviceId != origin } }
        }
        for target in targets { target.mailbox.post(delivery) }
    }

    func publishKeyRequest(account: Int64, except origin: String? = nil) {
        publishKeyEvent("keyRequest", account: account, except: origin)
    }

    /// Tells every connected device of the account (but `origin`, which made it) that its roster
    /// or sealed keys changed (`{"type":"keysChanged"}`): a device removed, a new epoch, the
    /// custody switched — devices read their keys again at once instead of sealing with old ones.
    func publishKeysChanged(account: Int64, except origin: String? = nil) {
        publishKeyEvent("keysChanged", account: account, except: origin)
    }

    private func publishKeyEvent(_ type: String, account: Int64, except origin: String?) {
        let event = PushEvent(type: type)
        let delivery = PushMailbox.Delivery(event: event, text: PushMailbox.message(event))
        let targets = connections.withLock { ($0.accounts[account] ?? [:]).values.filter { $0.device.deviceId != origin } }
        for target in targets { target.mailbox.post(delivery) }
    }

    /// `event` with `page`'s changes, gzip-compressed; nil if it cannot be encoded (the event
    /// then goes alone, and devices fetch the page).
    static func delivery(_ event: PushEvent, _ page: PushedPage, contents: Bool) -> PushMailbox.Delivery? {
        var items = page.items
        if contents { for index in items.indices { items[index].contents = page.contents[items[index].id] } }
        var paged = event
        paged.since = page.since
        paged.items = items
        paged.signedCommits = page.signedCommits
        do {
            var body = ByteBuffer(bytes: try JSONEncoder().encode(paged))
            let compressed = try body.compress(with: SyncResponseEncoder.gzip)
            guard compressed.readableBytes <= PushEvent.maximumMessageBytes - 16 else { return nil } // (frame header)
            return PushMailbox.Delivery(event: event, text: PushMailbox.message(event), page: Data(buffer: compressed))
        } catch {
            return nil
        }
    }

    /// Tells every connected device to catch up with `changes` (as if it had just connected):
    /// events from other server instances may have been missed while their relay was down.
    func catchUpAll() {
        let targets = connections.withLock { $0.accounts.values.flatMap { $0.values.map(\.mailbox) } }
        let delivery = PushMailbox.Delivery(event: .connected, text: PushMailbox.message(.connected))
        for mailbox in targets { mailbox.post(delivery) }
    }

    /// How many push messages an account's connected devices get a second between them, at
    /// most, however fast its containers change: pushes say "container C is at sequence N", so
    /// the latest says what the ones before it said, and the work of telling every device is
    /// bounded by devices × messages, not devices × commits.
    /// This instance's: several instances each pace their own share of an account's devices.
    static let defaultMessagesPerAccountPerSecond = 15_000

    /// ``defaultMessagesPerAccountPerSecond`` or what the server was configured with.
    let messagesPerAccountPerSecond: Int

    /// - Parameter messagesPerAccountPerSecond: How many push messages an account's devices
    ///   connected to this instance get a second between them, at most.
    init(messagesPerAccountPerSecond: Int = ChangeNotifier.defaultMessagesPerAccountPerSecond) {
        self.messagesPerAccountPerSecond = max(1, messagesPerAccountPerSecond)
    }

    /// The shortest time between two messages to a device of `account`: ``PushMailbox/pace``,
    /// or longer when so many of its devices are connected that they would get more than
    /// ``messagesPerAccountPerSecond`` between them (1,000 devices: 40 ms).
    func pace(forAccount account: Int64) -> Duration {
        let devices = connections.withLock { $0.accounts[account]?.count ?? 0 }
        return max(PushMailbox.pace, .microseconds(devices * 1_000_000 / messagesPerAccountPerSecond))
    }

    /// How many devices are connected.
    var connected: Int { connections.withLock { $0.accounts.values.reduce(0) { $0 + $1.count } } }

    /// The devices connected now.
    var connectedDevices: Set<String> { connections.withLock { Set($0.accounts.values.flatMap { $0.values.map(\.device.deviceId) }) } }

    /// Ends the push connections of `devices` (revoked, signed out, their account deleted):
    /// their streams finish, and the connections close.
    func disconnect(_ devices: Set<String>) {
        let ended = connections.withLock { connections in
            var ended: [PushMailbox] = []
            for account in Array(connections.accounts.keys) {
                let ids = connections.accounts[account, default: [:]].filter { devices.contains($0.value.device.deviceId) }.map(\.key)
                guard !ids.isEmpty else { continue }
                ended += ids.compactMap { connections.accounts[account]?.removeValue(forKey: $0)?.mailbox }
                if connections.accounts[account]?.isEmpty == true { connections.accounts[account] = nil }
                connections.targets[account] = nil
            }
            return ended
        }
        for mailbox in ended { mailbox.finish() }
    }
}
