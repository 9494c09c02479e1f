import Foundation
import HummingbirdWSClient
import Logging
import ServiceLifecycle
import Synchronization
import UbiquityClient
import UbiquityFiles
import UbiquityProtocol
import UbiquitySync

/// `ubiquity agent`: one per user and device. Keeps the signed-in account's containers in step
/// with the server (one ``ContainerSync`` each) and answers apps over its local socket.
///
/// A round of a container starts when inotify sees a change in it, when the server pushes that
/// another device changed it, when an app asks, after a failed round (backing off from 2 s to a
/// minute), and every ``AgentConfiguration/rescanSeconds`` regardless — the safety net under
/// inotify and push. Signing in to another account (or out) stops the account's rounds and
/// starts the new one's.
package actor Agent: Service {
    /// Where the user's ubiquity data is.
    package let paths: UbiquityPaths
    /// The agent's settings.
    package let configuration: AgentConfiguration
    let logger: Logger
    private var session: AccountSession?

    /// An agent for the user of `paths`.
    /// How long a push connection may take to open before another attempt is made.
    let pushOpenTimeout: Duration

    package init(paths: UbiquityPaths = UbiquityPaths(), configuration: AgentConfiguration, logger: Logger = Logger(label: "ubiquity.agent"),
                 pushOpenTimeout: Duration = .seconds(20)) {
        self.paths = paths
        self.configuration = configuration
        self.logger = logger
        self.pushOpenTimeout = pushOpenTimeout
    }

    /// Runs until cancelled or shut down gracefully (SIGTERM under a service group).
    package func run() async throws {
        let paths = paths, logger = logger
        FreedMemory.limitRetained() // a process that runs for weeks gives back what it frees
        do {
            try await runUntilShutdown(paths: paths, logger: logger)
        } catch is CancellationError {
            logger.info("agent stopped")
        }
    }

    private func runUntilShutdown(paths: UbiquityPaths, logger: Logger) async throws {
        try await cancelWhenGracefulShutdown {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    try await AgentControlServer.run(socket: paths.agentSocket, logger: logger, answer: { request in await self.answer(request) },
                                                     watch: { request in await self.watch(request) })
                }
                group.addTask { try await self.followAccounts() }
                try await group.next()
                group.cancelAll()
            }
        }
    }

    /// Runs a session for whichever account is signed in, switching when it changes.
    private func followAccounts() async throws {
        var announcedSignedOut = false
        while !Task.isCancelled {
            let credentials: UbiquityCredentials?
            do { credentials = try UbiquityCredentials.load(from: paths) } catch {
                logger.error("cannot read the credentials", metadata: ["error": "\(error)"])
                credentials = nil
            }
            guard let credentials else {
                if !announcedSignedOut { logger.info("not signed in: waiting for `ubiquity login`") }
                announcedSignedOut = true
                try await credentialsChange(in: paths, from: nil)
                continue
            }
            announcedSignedOut = false
            let session = try AccountSession(credentials: credentials, paths: paths, configuration: configuration, logger: logger, pushOpenTimeout: pushOpenTimeout)
            self.session = session
            logger.info("syncing", metadata: ["account": "\(credentials.account)", "server": "\(credentials.server.absoluteString)"])
            let paths = paths
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await session.run() }
                group.addTask {
                    // Until the identity changes (sign-out, another account) or the agent stops.
                    while !Task.isCancelled {
                        do { try await self.credentialsChange(in: paths, from: credentials.token) } catch { return } // cancelled: the agent stops
                        if UbiquityCredentials.signedIn(in: paths)?.token != credentials.token { break } // unreadable counts as changed
                    }
                }
                await group.next()
                group.cancelAll()
            }
            self.session = nil
            logger.info("stopped syncing", metadata: ["account": "\(credentials.account)"])
        }
    }

    /// Returns when something changes in the configuration folder (where `ubiquity login`
    /// writes the credentials), seen through inotify — at once if the signed-in device is
    /// already another than `token`'s; without a watcher, after 5 s.
    private func credentialsChange(in paths: UbiquityPaths, from token: String?) async throws {
        try? FileManager.default.createDirectory(at: paths.configuration, withIntermediateDirectories: true) // a watcher needs the folder; failing, the slow check below stands in
        let (events, changed) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let watcher = try? DirectoryWatcher(root: paths.configuration, logger: logger) { _ in changed.yield() } // nil: the 5 s check below
        defer { watcher?.stop() }
        if watcher == nil {
            try await quietSleep(for: .seconds(5))
            return
        }
        // Written before the watcher watched: no event will say so.
        if UbiquityCredentials.signedIn(in: paths)?.token != token { return }
        await withTaskCancellationHandler {
            for await _ in events { return }
        } onCancel: {
            changed.finish()
        }
        try Task.checkCancellation()
    }

    /// Follows a container's statuses for a `watch` request (one error answer if it cannot).
    func watch(_ request: AgentRequest) async -> AsyncStream<AgentResponse> {
        guard let session, let container = request.container else {
            return AsyncStream { continuation in
                continuation.yield(AgentResponse(error: request.container == nil
                    ? AgentError(.badRequest, "watch needs a container") : AgentError(.notSignedIn, "not signed in (ubiquity login)")))
                continuation.finish()
            }
        }
        return await session.watch(container)
    }

    /// Answers one request from the socket.
    func answer(_ request: AgentRequest) async -> AgentResponse {
        guard let session else {
            if request.operation == .status {
                return AgentResponse(status: AgentStatus(account: nil, server: nil, connected: false, greedy: configuration.greedy, containers: []))
            }
            return AgentResponse(error: AgentError(.notSignedIn, "not signed in (ubiquity login)"))
        }
        do {
            return try await session.answer(request)
        } catch let error as ContainerSyncError {
            return AgentResponse(error: AgentError(error.code, error.reason))
        } catch let error as AgentError {
            return AgentResponse(error: error)
        } catch {
            return AgentResponse(error: AgentError(.failed, "\(error)"))
        }
    }
}

/// One account's sync: its containers, the server's pushes, the folder watcher, the rounds.
actor AccountSession {
    let credentials: UbiquityCredentials
    let paths: UbiquityPaths
    let configuration: AgentConfiguration
    let logger: Logger
    let client: SyncClient
    let store: AgentStore
    /// The account's containers folder.
    let containersFolder: URL
    /// The account's keys as this session uses them.
    let keys: SessionKeys
    /// The keys of sharing on this device: the account's sharing identity, others' pinned, shares' keys.
    let sharingKeys: SharingKeys
    /// The account's key-value stores on this device.
    let keyValues: KeyValueSync
    /// The engines keeping containers in step, by container — and a share's, by
    /// ``shareEngineKey(_:_:)`` (`CONTAINER#SHARE`).
    var containers: [String: ContainerSync] = [:]
    /// The shares kept here, by container (docs/Sharing.md, "On a participant's devices").
    var shareScopes: [String: [ShareScope]] = [:]
    /// Whether the account's shares are being read, whether they are to be read again after, and the wait before the next read when a share could not be let go.
    var followingShares = false, followSharesAgain = false, shareRetryDelay: Duration?
    var connected = false
    /// The push connection's attempts (the one in progress, and those left behind still opening).
    var push = PushAttempts()
    /// How long a push connection may take to open before another attempt is made.
    let pushOpenTimeout: Duration
    /// Containers due for a round (nil: all).
    private var pending: Set<String> = []
    private var pendingAll = false
    /// Containers whose next round looks at every file.
    private var lookEverywhere: Set<String> = []
    /// Per container, how many rounds in a row failed (or left it busy), and when the last one
    /// failed: while they fail, changes seen meanwhile start at most a round a second.
    private var failures: [String: Int] = [:]
    var failedAt: [String: ContinuousClock.Instant] = [:]
    /// Containers whose round waits out the last failure's second.
    private var deferred: Set<String> = []
    /// Clients following containers' statuses, and what they were last told.
    private var watchers: [String: [UUID: WeakMailbox]] = [:]
    private var told: [String: (version: Int, statuses: [String: UbiquityItemStatus])] = [:]
    private let signal: AsyncStream<Void>
    private let poke: AsyncStream<Void>.Continuation
    /// Containers whose items' statuses may have changed (for watching queries).
    private let statusChanges: AsyncStream<Void>
    let statusChanged: AsyncStream<Void>.Continuation

    init(credentials: UbiquityCredentials, paths: UbiquityPaths, configuration: AgentConfiguration, logger: Logger, pushOpenTimeout: Duration = .seconds(20)) throws {
        self.pushOpenTimeout = pushOpenTimeout
        self.credentials = credentials
        self.paths = paths
        self.configuration = configuration
        self.logger = logger
        var client = SyncClient(server: credentials.server, token: credentials.token)
        client.logger = logger
        self.client = client
        let account = paths.account(credentials.identityToken)
        store = try AgentStore(path: account.appendingPathComponent("agent.sqlite").path)
        containersFolder = account.appendingPathComponent("containers")
        keys = SessionKeys(keys: AccountKeys(credentials: credentials, paths: paths, client: client, logger: logger), deviceName: credentials.deviceName, logger: logger)
        keyValues = KeyValueSync(client: client, folder: account.appendingPathComponent("kv"), keys: keys, logger: logger)
        sharingKeys = SharingKeys(account: credentials.account, client: client, keys: keys, pinsURL: paths.sharingPins, logger: logger)
        (signal, poke) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        (statusChanges, statusChanged) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    func run() async {
        do {
            try FileManager.default.createDirectory(at: containersFolder, withIntermediateDirectories: true)
            for identifier in Set(configuration.containers).union(localContainers()) { _ = try container(identifier) }
        } catch {
            logger.error("cannot open the account's containers", metadata: ["error": "\(error)"])
        }
        await openKeptShares()
        let folder = containersFolder.standardizedFileURL.path
        let watcher: DirectoryWatcher?
        do {
            watcher = try DirectoryWatcher(root: containersFolder, logger: logger) { [weak self] event in
                guard let self else { return }
                switch event {
                case .overflow:
                    Task { await self.trigger(nil, everything: true) }
                case .changed(let path):
                    guard path.hasPrefix(folder + "/") else { return }
                    let inside = path.dropFirst(folder.count + 1)
                    let identifier = String(inside.prefix { $0 != "/" })
                    let relative = String(inside.dropFirst(identifier.count + 1))
                    Task { await self.changed(identifier, at: relative) }
                case .moved(let from, let to):
                    guard from.hasPrefix(folder + "/"), to.hasPrefix(folder + "/") else { return }
                    let source = from.dropFirst(folder.count + 1), target = to.dropFirst(folder.count + 1)
                    let identifier = String(source.prefix { $0 != "/" })
                    guard target.prefix(while: { $0 != "/" }) == identifier else { return } // between containers: a delete and a new item
                    let (old, new) = (String(source.dropFirst(identifier.count + 1)), String(target.dropFirst(identifier.count + 1)))
                    Task { await self.moved(identifier, from: old, to: new) }
                }
            }
        } catch {
            logger.warning("cannot watch the containers; relying on periodic rescans", metadata: ["error": "\(error)"])
            watcher = nil
        }
        defer { watcher?.stop() }
        // Apps write their key-value stores there: each write is sent at once.
        let keyValues = keyValues
        let storeWatcher: DirectoryWatcher?
        do {
            try FileManager.default.createDirectory(at: keyValues.folder, withIntermediateDirectories: true)
            storeWatcher = try DirectoryWatcher(root: keyValues.folder, logger: logger) { event in
                switch event {
                case .overflow: Task { await keyValues.trigger(nil) }
                case .moved: break // each end came as `changed`
                case .changed(let path):
                    guard path.hasSuffix(".json") else { return }
                    Task { await keyValues.trigger(String((path as NSString).lastPathComponent.dropLast(5))) }
                }
            }
        } catch {
            // The stores are still sent on pushes, on the rescan timer and at start.
            logger.warning("cannot watch the key-value stores; apps' writes go up on the next rescan", metadata: ["folder": "\(keyValues.folder.path)", "error": "\(error)"])
            storeWatcher = nil
        }
        defer { storeWatcher?.stop() }
        // The shares first (for at most two seconds: a server that does not answer is not waited
        // for): what is written into a sealed share this account owns goes sealed with its keys
        // from the first round on.
        let following = Task { await self.followShares() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await following.value }
            group.addTask { try? await Task.sleep(for: .seconds(2)) }
            await group.next()
            group.cancelAll()
        }
        trigger(nil)
        // The account's keys: set up or joined now if this device signed in before it had any.
        // Then its sharing identity: published by the first of its devices that holds them.
        Task { [keys, sharingKeys, logger] in
            do { _ = try await keys.current() } catch { logger.error("cannot read the account's keys", metadata: ["error": "\(error)"]) }
            do { _ = try await sharingKeys.ownIdentity() } catch { logger.debug("no sharing identity yet", metadata: ["error": "\(error)"]) }
        }
        await keyValues.trigger(nil)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.rounds() }
            group.addTask { await keyValues.run() }
            group.addTask { await self.tellWatchers() }
            group.addTask { await self.listenForPushes() }
            group.addTask {
                while !Task.isCancelled {
                    try? await quietSleep(for: .seconds(self.configuration.rescanSeconds)) // throws only when cancelled
                    await self.followShares()
                    await self.trigger(nil, everything: true)
                    await keyValues.trigger(nil)
                }
            }
            await group.next()
            group.cancelAll()
            stopTellingWatchers()
            await keyValues.stop()
        }
        poke.finish()
    }

    /// Follows `container`'s statuses: first every item's, then the items whose status
    /// changed, as it happens. The first answer is what later ones are changes from (what
    /// watchers were last told), so nothing changes unseen between a list and a watch.
    func watch(_ container: String) async -> AsyncStream<AgentResponse> {
        guard let sync = try? self.container(container) else { // not a container name: answered as such
            let (stream, continuation) = AsyncStream.makeStream(of: AgentResponse.self)
            continuation.yield(AgentResponse(error: AgentError(.unknownContainer, "“\(container)” is not a container")))
            continuation.finish()
            return stream
        }
        let id = UUID()
        _ = sync
        if told[container] == nil {
            let version = await statusVersion(of: container)
            told[container] = (version, Dictionary(await statuses(of: container).map { ($0.path, $0) }, uniquingKeysWith: { $1 }))
        }
        // Released when the client goes (its stream with it): then it is forgotten here.
        let mailbox = StatusMailbox { [weak self] in Task { await self?.unwatch(container, id) } }
        mailbox.post(told[container]?.statuses.values ?? [:].values)
        watchers[container, default: [:]][id] = WeakMailbox(mailbox: mailbox)
        return mailbox.stream()
    }

    private func unwatch(_ container: String, _ id: UUID) {
        watchers[container]?[id] = nil
        if watchers[container]?.isEmpty == true {
            watchers[container] = nil
            told[container] = nil
        }
    }

    /// When a watched container's status may have changed (a round, a transfer's progress, an
    /// error), tells its watchers the items whose status did — at most every 20 ms, so that a
    /// burst of changes is one message. Nothing runs while nothing changes.
    private func tellWatchers() async {
        for await _ in statusChanges {
            guard !watchers.isEmpty else { continue }
            try? await Task.sleep(for: .milliseconds(20)) // what else changes meanwhile goes in the same message
            for container in watchers.keys.sorted() {
                guard containers[container] != nil, let last = told[container] else { continue }
                let version = await statusVersion(of: container)
                guard version != last.version else { continue }
                var now: [String: UbiquityItemStatus] = [:]
                for status in await statuses(of: container) { now[status.path] = status }
                let changed = now.values.filter { last.statuses[$0.path] != $0 }.sorted { $0.path < $1.path }
                told[container] = (version, now)
                guard !changed.isEmpty else { continue }
                for watcher in (watchers[container] ?? [:]).values { watcher.mailbox?.post(changed) }
            }
        }
        for watcher in watchers.values.flatMap(\.values) { watcher.mailbox?.finish() }
    }

    /// Ends the status stream (the session stops).
    private func stopTellingWatchers() {
        statusChanged.finish()
    }

    /// The containers with a folder here.
    private func localContainers() -> [String] {
        do {
            return try FileManager.default.contentsOfDirectory(atPath: containersFolder.path).filter(UbiquityEntitlements.isValidIdentifier)
        } catch let error as CocoaError where error.code == .fileReadNoSuchFile {
            return [] // no container used on this device yet
        } catch {
            logger.error("cannot list the containers on this device", metadata: ["folder": "\(containersFolder.path)", "error": "\(error)"])
            return []
        }
    }

    /// The container's sync (started if new).
    func container(_ identifier: String) throws -> ContainerSync {
        if let known = containers[identifier] { return known }
        guard UbiquityEntitlements.isValidIdentifier(identifier) else { throw ContainerSyncError("“\(identifier)” is not a container identifier", code: .unknownContainer) }
        // Sealed under Advanced always, under Standard when the settings say so.
        let keys = self.keys, sealing = configuration.sealedContents
        let codecs: @Sendable (String) async throws -> ChunkCodec = { container in try await keys.codec(of: container, sealing: sealing) }
        // (A record sealed in an epoch not held here is the container's or a share's: both are read again.)
        let outdated: @Sendable () async -> Void = { [weak self] in await keys.outdated(); Task { await self?.followShares() } }
        let sync = try ContainerSync(container: identifier, root: paths.container(identifier, account: credentials.identityToken), client: client, store: store,
                                     device: credentials.deviceId, greedy: configuration.greedy,
                                     packageExtensions: configuration.allPackageExtensions, logger: logger,
                                     codecs: codecs, keysOutdated: outdated,
                                     onStatusChange: { [statusChanged] in statusChanged.yield() }, account: credentials.account,
                                     streamsUploads: configuration.streamUploads)
        containers[identifier] = sync
        if connected { Task { await sync.notePushes(live: true) } }
        logger.info("keeping a container in step", metadata: ["container": "\(identifier)"])
        return sync
    }

    /// Something changed at `path` in the container `identifier`'s folder (the container is
    /// kept in step from now on if it was not): a round looks there — unless it is the agent's
    /// own (``startsARound(_:)``).
    func changed(_ identifier: String, at path: String) async {
        guard Self.startsARound(path) else { return }
        let sync: ContainerSync
        do {
            sync = try container(identifier)
        } catch {
            return // not a container's folder: nothing to keep in step
        }
        // (In a share's folder: that share's engine's.)
        let key = engineKey(identifier, at: path)
        await (containers[key] ?? sync).noteChange(at: path)
        trigger(key)
    }

    /// Whether a change the watcher saw at `path` starts a round: not one in what the agent
    /// writes for itself (`.ubiquity-…`: staged downloads, version stores). A download that
    /// kept failing made and removed its staging file each time, and each time that started the
    /// next round: ten rounds a second (found by `ubiquity-chaos`).
    static func startsARound(_ path: String) -> Bool {
        !path.split(separator: "/").contains { $0.hasPrefix(".ubiquity-") }
    }

    /// The watcher paired a rename inside the container `identifier`'s folder: the next round
    /// keeps the item at `from` as the one at `to`, whatever the scan finds there.
    func moved(_ identifier: String, from: String, to: String) async {
        let (source, target) = (engineKey(identifier, at: from), engineKey(identifier, at: to))
        guard let sync = containers[source] else { return }
        guard source == target, let other = containers[target] else {
            // Into or out of a share's folder: gone on one side, new on the other (nothing of
            // one account crosses into the other's silently).
            await sync.noteChange(at: from)
            await containers[target]?.noteChange(at: to)
            trigger(source)
            trigger(target)
            return
        }
        await other.noteMove(from: from, to: to)
        trigger(target)
    }

    /// Asks for a round of `identifier` (nil: every container); `everything`: the round looks
    /// at every file, not only where changes were seen (events were lost, or the slow timer).
    func trigger(_ identifier: String?, everything: Bool = false) {
        if let identifier {
            guard containers[identifier] != nil else { return }
            pending.insert(identifier)
            if everything { lookEverywhere.insert(identifier) }
        } else {
            pendingAll = true
            if everything { lookEverywhere.formUnion(containers.keys) }
        }
        poke.yield()
    }

    /// Runs the rounds asked for, one container at a time.
    private func rounds() async {
        for await _ in signal {
            let due = pendingAll ? Set(containers.keys) : pending
            pending = []
            pendingAll = false
            for identifier in due.sorted() {
                guard let sync = containers[identifier], !Task.isCancelled else { continue }
                // A round that failed (a full disk, a store that cannot commit) is not tried
                // again at every change seen meanwhile — once ten times a second (found by
                // `ubiquity-chaos`) — but a second after the failure at the soonest.
                if let failed = failedAt[identifier], case let wait = failed + .seconds(1) - .now, wait > .zero {
                    if deferred.insert(identifier).inserted {
                        Task { [weak self] in
                            try? await quietSleep(for: wait) // throws only when cancelled
                            await self?.endDeferral(identifier)
                        }
                    }
                    continue
                }
                if lookEverywhere.remove(identifier) != nil { await sync.noteEverythingChanged() }
                var failed = false
                do {
                    try await sync.syncOnce()
                } catch {
                    failed = true
                    logger.error("round failed", metadata: ["container": "\(identifier)", "error": "\(error)"])
                }
                failedAt[identifier] = failed ? .now : nil
                if await sync.isIdle && !failed {
                    failures[identifier] = nil
                } else {
                    // Retry with back-off (an unreachable server, a refused change).
                    let count = (failures[identifier] ?? 0) + 1
                    failures[identifier] = count
                    let delay = min(60.0, 2.0 * pow(2.0, Double(min(count, 6) - 1)))
                    Task { [weak self] in
                        try? await quietSleep(for: .seconds(delay)) // throws only when cancelled
                        await self?.trigger(identifier)
                    }
                }
            }
        }
    }

    /// The second after a failed round of `identifier` is over: the round asked for meanwhile runs.
    private func endDeferral(_ identifier: String) {
        deferred.remove(identifier)
        trigger(identifier)
    }

    // MARK: Requests

    func answer(_ request: AgentRequest) async throws -> AgentResponse {
        switch request.operation {
        case .status:
            var statuses: [ContainerStatus] = []
            for (_, sync) in containers.sorted(by: { $0.key < $1.key }) {
                statuses.append(await sync.containerStatus(root: sync.root))
            }
            return AgentResponse(status: AgentStatus(account: credentials.account, server: credentials.server.absoluteString, connected: connected,
                                                     greedy: configuration.greedy, containers: statuses, keyValueErrors: await keyValues.problems))
        case .list:
            guard let identifier = request.container else { throw ContainerSyncError("list needs a container", code: .badRequest) }
            guard containers[identifier] != nil else { throw ContainerSyncError("\(identifier) is not a container kept here", code: .unknownContainer) }
            return AgentResponse(items: await statuses(of: identifier))
        case .item:
            let (sync, name) = try locate(request.path)
            guard let status = await sync.status(ofName: name) else { throw ContainerSyncError("\(name) is not an item of \(sync.container)", code: .unknownItem) }
            return AgentResponse(items: [status])
        case .download:
            let (sync, name) = try locate(request.path)
            try await sync.requestDownload(name)
            trigger(sync.storeKey)
            if request.wait == true { try await sync.waitForDownload(name) }
            return AgentResponse(items: await sync.status(ofName: name).map { [$0] })
        case .evict:
            let (sync, name) = try locate(request.path)
            try await sync.evict(name)
            return AgentResponse(items: await sync.status(ofName: name).map { [$0] })
        case .versions:
            let (sync, name) = try locate(request.path)
            return AgentResponse(versions: try await sync.remoteVersions(of: name))
        case .downloadVersion:
            let (sync, name) = try locate(request.path)
            guard let revision = request.revision else { throw ContainerSyncError("downloadVersion needs a revision", code: .badRequest) }
            try await sync.downloadRemoteVersion(of: name, revision: revision)
            return AgentResponse()
        case .share, .shares, .answerInvitation, .leaveShare, .removeParticipant, .stopSharing, .verifySharing:
            return try await answerSharing(request, locate: locate)
        case .publish:
            let (sync, name) = try locate(request.path)
            let (link, fragment) = try await sync.publish(name)
            guard let path = link.path, let url = URL(string: String(path.dropFirst()), relativeTo: credentials.server.appendingPathComponent("/")) else {
                throw ContainerSyncError("the server answered no link for \(name)", code: .badRequest)
            }
            // (Under Advanced the key that opens it follows "#": browsers never send it.)
            return AgentResponse(link: PublishedItemLink(url: url.absoluteString + (fragment.map { "#" + $0 } ?? ""), expires: link.expires))
        case .sync:
            let chosen = try request.container.map { [try container($0)] } ?? containers.sorted { $0.key < $1.key }.map(\.value)
            for sync in chosen {
                await sync.noteEverythingChanged()
                try await sync.syncOnce()
            }
            return try await answer(AgentRequest(.status))
        case .register:
            guard let identifier = request.container else { throw ContainerSyncError("register needs a container", code: .badRequest) }
            _ = try container(identifier)
            trigger(identifier)
            return AgentResponse()
        case .watch:
            throw ContainerSyncError("watch keeps the connection open: it is answered as a stream", code: .badRequest)
        }
    }

    /// The container and item path (relative to the container's folder) of an absolute path.
    func locate(_ path: String?) throws -> (ContainerSync, String) {
        guard let path else { throw ContainerSyncError("the request needs a path", code: .badRequest) }
        let folder = containersFolder.standardizedFileURL.path + "/"
        let standard = URL(fileURLWithPath: path).standardizedFileURL.path
        guard standard.hasPrefix(folder) else { throw ContainerSyncError("\(path) is not in a container of \(credentials.account)", code: .unknownItem) }
        let parts = standard.dropFirst(folder.count).split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard parts.count >= 2, parts.count > 2 || parts[1] != ContainerLayout.documentsFolder else {
            throw ContainerSyncError("\(path) is a container's folder, not an item in it", code: .badRequest)
        }
        let relative = parts[1...].joined(separator: "/")
        let own = try container(parts[0])
        return (containers[engineKey(parts[0], at: relative)] ?? own, relative)
    }
}

/// A watching client's mailbox, as the session keeps it: weakly (the client's stream holds it).
struct WeakMailbox {
    weak var mailbox: StatusMailbox?
}
