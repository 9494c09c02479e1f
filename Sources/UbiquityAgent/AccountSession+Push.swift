import CompressNIO
import Foundation
import NIOFoundationCompat
import NIOCore
import HummingbirdWSClient
import Logging
import Synchronization
import UbiquityProtocol

// The push connection of an account's session: how the agent hears of other devices' changes.
extension AccountSession {
    /// Keeps a push connection to the server: every change another device makes to one of
    /// these containers starts a round at once. Reconnects with back-off (1 s … 30 s).
    func listenForPushes() async {
        var scheme = credentials.server.scheme == "https" ? "wss" : "ws"
        if credentials.server.scheme != "https" && credentials.server.scheme != "http" { scheme = "ws" }
        var components = URLComponents(url: credentials.server, resolvingAgainstBaseURL: false)!
        components.scheme = scheme
        components.path = (components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path) + "/v1/push"
        // Small commits' changes come along with their events (no request for them), with
        // small files' bytes for an agent that keeps every file here.
        components.queryItems = [URLQueryItem(name: "pages", value: "gzip"), URLQueryItem(name: "inline", value: "\(configuration.greedy ? ItemUpdate.maximumInlineBytes : 0)")]
        let url = components.string!
        var configuration = WebSocketClientConfiguration()
        configuration.additionalHeaders = [.authorization: "Bearer \(credentials.token)"]
        // A page of changes comes as one frame (WebSocket's default of 16 KiB would refuse it,
        // and the connection with it).
        configuration.maxFrameSize = PushEvent.maximumMessageBytes
        // A connection that died without a word (a laptop that slept, a NAT that forgot it) is
        // found by its unanswered ping and closed, then opened again.
        configuration.autoPing = .enabled(timePeriod: Self.pushPingPeriod)
        var delay = 1.0
        var warned = false
        // Each attempt that does not open in time gives the next one twice as long (up to eight
        // times the first): a slow link or a loaded server still gets a connection opened.
        var openTimeout = pushOpenTimeout
        while !Task.isCancelled {
            // Opening is bounded: an attempt made while the network dropped packets can wait for
            // an answer for ever (no timeout covers the WebSocket handshake) — found by
            // `ubiquity-chaos`: a device that never heard of changes again. Such an attempt is
            // left behind (it cannot be cancelled; at most a few are kept) and another is made;
            // whichever opens first speaks for the server (one left behind that opens late is
            // taken, not ignored: under load, every attempt may take longer than the first wait).
            // (One left behind that opened during the pause is taken rather than another made.)
            var ended: EndFlag?
            if push.live == nil {
                let attempt = openPushConnection(url: url, configuration: configuration)
                let flag = push.opening[attempt]!.ended
                ended = flag
                let deadline = ContinuousClock.now + openTimeout
                while push.live == nil && !flag.isSet && ContinuousClock.now < deadline && !Task.isCancelled {
                    try? await quietSleep(for: .milliseconds(200))
                }
                if push.live == nil && !flag.isSet && !Task.isCancelled {
                    logger.warning("push connection did not open in time; trying again", metadata: ["seconds": "\(openTimeout.components.seconds)"])
                    openTimeout = min(openTimeout * 2, pushOpenTimeout * 8)
                    // Bounded: past a few stuck attempts, wait for one to end (or open) before another.
                    if push.opening.count > Self.abandonedAttemptsKept {
                        while push.live == nil && !push.opening.values.contains(where: { $0.ended.isSet }) && !Task.isCancelled {
                            try? await quietSleep(for: .seconds(1))
                        }
                    }
                }
            }
            if let open = push.live.flatMap({ push.opening[$0] }) ?? push.opening.values.first(where: { $0.ended === ended && $0.ended.isSet }) {
                do {
                    // (The connection is a task of its own: the agent stopping must end it.)
                    try await withTaskCancellationHandler { try await open.connection.value } onCancel: { open.connection.cancel() }
                } catch {
                    if Task.isCancelled { break }
                    if !warned { logger.warning("push connection lost; reconnecting", metadata: ["error": "\(error)"]) }
                    warned = true
                }
            }
            push.opening = push.opening.filter { !$0.value.ended.isSet }
            if connected { delay = 1; warned = false; openTimeout = pushOpenTimeout }
            connected = false
            push.live = nil
            for sync in containers.values { await sync.notePushes(live: false) } // every round fetches meanwhile
            try? await quietSleep(for: .seconds(delay)) // throws only when cancelled: the loop ends
            delay = min(delay * 2, 30)
        }
        // Stopping: attempts still opening are given up.
        for left in push.opening.values { left.connection.cancel() }
        push.opening = [:]
    }

    /// Starts one attempt at the push connection (kept in ``PushAttempts/opening`` until it
    /// ends); its number.
    private func openPushConnection(url: String, configuration: WebSocketClientConfiguration) -> Int {
        push.current += 1
        let attempt = push.current
        let ended = EndFlag()
        let connection = Task {
            defer { ended.set() }
            let close = try await WebSocketClient.connect(url: url, configuration: configuration, logger: self.logger) { inbound, _, _ in
                for try await message in inbound.messages(maxSize: Self.pushMessageBytes) {
                    let json: Data
                    switch message {
                    case .text(let text): json = Data(text.utf8)
                    case .binary(var compressed): // an event with its page of changes, gzip-compressed
                        do {
                            json = Data(buffer: try compressed.decompress(with: .gzip(), maxSize: Self.pushPageBytes))
                        } catch {
                            self.logger.warning("push page not readable; ignored (the changes are fetched)", metadata: ["bytes": "\(compressed.readableBytes)", "error": "\(error)"])
                            continue
                        }
                    }
                    do {
                        // An attempt that opened while another speaks for the server closes.
                        guard await self.pushed(try JSONDecoder().decode(PushEvent.self, from: json), attempt: attempt) else { return }
                    } catch {
                        // A newer server's event, or a broken one: the rescan timer still catches up.
                        self.logger.warning("push message not understood; ignored", metadata: ["message": "\(String(decoding: json.prefix(200), as: UTF8.self))", "error": "\(error)"])
                    }
                }
            }
            // Closed without an error (by the server, or by this side on a frame it would not
            // take): said, since every one costs a reconnection; the loop reconnects.
            if !Task.isCancelled && self.push.live == attempt {
                self.logger.notice("push connection closed; reconnecting", metadata: ["code": "\(close.map { "\($0.closeCode)" } ?? "none")", "reason": "\(close?.reason ?? "")"])
            }
        }
        push.opening[attempt] = PushAttempts.Attempt(connection: connection, ended: ended)
        return attempt
    }

    /// The most bytes one push message takes as it comes (a compressed page of changes).
    static let pushMessageBytes = PushEvent.maximumMessageBytes
    /// The most bytes a push message's page of changes takes once inflated.
    static let pushPageBytes = 4 << 20

    /// How often an open push connection is pinged (unanswered by the next ping: closed).
    static let pushPingPeriod: Duration = .seconds(30)
    /// How many stuck opening attempts are left behind before the agent waits for one to end.
    static let abandonedAttemptsKept = 4

    /// Takes one push event; false when the attempt it came on is not the one that speaks for
    /// the server (it is to close).
    private func pushed(_ event: PushEvent, attempt: Int) -> Bool {
        if event.type == "connected" {
            // The first attempt to open while none is open speaks for the server — the one in
            // progress, or one left behind that opened late.
            guard push.live == nil, push.opening[attempt] != nil else { return false }
            push.live = attempt
        } else if attempt != push.live {
            return false
        }
        switch event.type {
        case "connected":
            connected = true
            failedAt = [:] // the server is back: rounds that failed on it run at once
            Task {
                // Pushes tell what changes from now on; the first round catches up on the rest.
                for sync in containers.values { await sync.notePushes(live: true) }
                trigger(nil)
                await followShares()
                await keyValues.trigger(nil)
            }
        case "changed":
            // Another device changed a container; a push for a change already fetched is old news.
            guard let container = event.container, let sync = containers[container] else { return true }
            Task {
                if let sequence = event.sequence, await sync.cursor >= sequence { return }
                await sync.noteRemoteChange(upTo: event.sequence)
                if let since = event.since, let sequence = event.sequence, let items = event.items {
                    await sync.notePushedPage(ChangesResponse(sequence: sequence, items: items, more: false, signedCommits: event.signedCommits), since: since)
                }
                self.trigger(container)
            }
        case "signed":
            // Signed commits of a container were kept: one holding back states no commit named
            // yet (under Advanced) looks again now.
            guard let container = event.container, let sync = containers[container] else { return true }
            Task {
                guard await sync.isAwaitingSignatures else { return }
                await sync.noteRemoteChange(upTo: nil)
                self.trigger(container)
            }
        case "incoming":
            // Another device is uploading into a container (or more of it landed, or it ended):
            // what this device will download is fetched as it lands.
            guard let container = event.container, let sync = containers[container] else { return true }
            Task { await sync.noteIncoming() }
        case "shareChanged":
            // A share this account joined moved on (its owner's or a participant's change).
            guard let id = event.container else { return true }
            guard let key = shareScopes.first(where: { $0.value.contains { $0.id == id } }).map({ Self.shareEngineKey($0.key, id) }),
                  let sync = containers[key] else {
                // A sealed share joined and not kept here yet (its top item not sealed with the
                // share's keys when it was read): read the shares again.
                Task { await self.followShares() }
                return true
            }
            Task {
                if let sequence = event.sequence, await sync.cursor >= sequence { return }
                await sync.noteRemoteChange(upTo: event.sequence)
                self.trigger(key)
            }
        case "sharesChanged":
            // Invited, accepted, removed, stopped, left: the shares kept here are read again.
            Task { await self.followShares() }
        case "keyValueChanged":
            if let store = event.container { Task { await keyValues.trigger(store) } }
        case "keysChanged":
            // The roster or the sealed keys changed (a device removed, a new epoch, the custody
            // switched): read at once, so nothing more is sealed with a key of the epoch before.
            let (keys, keyValues, logger) = (keys, keyValues, logger)
            Task {
                do { _ = try await keys.current(refresh: true) } catch { logger.error("cannot read the account's keys", metadata: ["error": "\(error)"]) }
                await keyValues.trigger(nil)
            }
        case "keyRequest":
            // A new device asks to join by a code, or a web browser for the containers' keys
            // (Advanced): answer it, so it can show its code (typed here with `ubiquity devices
            // approve CODE`; answering approves nothing).
            let keys = AccountKeys(credentials: credentials, paths: paths, logger: logger)
            let logger = logger
            Task {
                do {
                    let answered = try await keys.answerRequests()
                    for request in answered {
                        logger.notice(request.kind == KeyRequestRecord.browserKind
                                      ? "a web browser asks for the account's keys: approve it with `ubiquity devices approve CODE`, the code it shows"
                                      : "a device asks to join the account: approve it with `ubiquity devices approve CODE`, the code it shows")
                    }
                } catch {
                    logger.error("cannot answer a request to join", metadata: ["error": "\(error)"])
                }
            }
        default:
            break
        }
        return true
    }
}

/// The push connection's attempts: the one in progress, those left behind still opening, and
/// the one that speaks for the server.
struct PushAttempts {
    /// One attempt's connection, and whether it ended.
    struct Attempt {
        /// The connection's task (ends when the connection does).
        let connection: Task<Void, any Error>
        /// Set once the task ended.
        let ended: EndFlag
    }
    /// The attempt most recently made.
    var current = 0
    /// The attempt that opened and speaks for the server (nil: none is open).
    var live: Int?
    /// The attempts not ended yet, by number.
    var opening: [Int: Attempt] = [:]
}

/// Whether a task has ended (set by the task, read by whoever waits for it without awaiting it).
final class EndFlag: Sendable {
    private let value = Mutex(false)
    /// Marks the end.
    func set() { value.withLock { $0 = true } }
    /// Whether it ended.
    var isSet: Bool { value.withLock { $0 } }
}
