import Foundation
import Logging
import UbiquityCoordination
import UbiquityClient
import UbiquityProtocol
import UbiquitySync

// The shares an account joined, kept in step on its devices (docs/Sharing.md, "On a
// participant's devices"): each by an engine of its own (a ``ContainerSync`` through the share's
// routes, keeping only the share's folder at the top of the container's `Documents`), while the
// container's own engine passes over that folder.
extension AccountSession {
    /// The key of the engine of share `id` of `container` (in ``containers``).
    static func shareEngineKey(_ container: String, _ id: String) -> String { "\(container)#\(id)" }

    /// The path of a share's folder (or file) relative to the container's folder.
    static func sharePath(_ scope: ShareScope) -> String { ContainerLayout.documentsFolder + "/" + scope.name }

    /// The engines of `container` kept here: its own, and those of the shares in it.
    func engines(of container: String) -> [ContainerSync] {
        ([containers[container]] + (shareScopes[container] ?? []).map { containers[Self.shareEngineKey(container, $0.id)] }).compactMap { $0 }
    }

    /// Every item of `container` with its state: its own and its shares'.
    func statuses(of container: String) async -> [UbiquityItemStatus] {
        var all: [UbiquityItemStatus] = []
        for sync in engines(of: container) { all += await sync.statuses() }
        return all
    }

    /// What changes whenever an item's state of `container` may have (its engines' versions,
    /// and which engines there are).
    func statusVersion(of container: String) async -> Int {
        var version = 0
        for sync in engines(of: container) { version = version &* 31 &+ (await sync.statusVersion) }
        return version
    }

    /// Which engine keeps `path` (relative to `container`'s folder): a share's, when it is its
    /// folder, in it, or its placeholder; else the container's own.
    func engineKey(_ container: String, at path: String) -> String {
        for scope in shareScopes[container] ?? [] {
            let top = Self.sharePath(scope)
            if path == top || path.hasPrefix(top + "/") || path == LocalContents.placeholderPath(for: top) {
                return Self.shareEngineKey(container, scope.id)
            }
        }
        return container
    }

    /// Opens the engines of the shares kept here when the agent last ran (before any round: the
    /// container's own engine must pass over their folders from its first look).
    func openKeptShares() async {
        do {
            for (container, scopes) in try store.keptShares() where containers[container] != nil {
                for scope in scopes {
                    do { try await open(scope, of: container) } catch {
                        logger.error("cannot keep a share in step", metadata: ["container": "\(container)", "share": "\(scope.id)", "error": "\(error)"])
                    }
                }
            }
        } catch {
            logger.error("cannot open the shares kept here", metadata: ["error": "\(error)"])
        }
    }

    /// Reads the account's shares and keeps in step here those it joined (of the containers
    /// this device keeps); those it no longer has leave this device. At start, on a push
    /// (`sharesChanged`) and on the slow timer; one at a time (asked meanwhile: once more after).
    func followShares() async {
        if followingShares {
            followSharesAgain = true
            return
        }
        followingShares = true
        defer { followingShares = false }
        var held = false // (a share whose access ended could not be let go yet)
        repeat {
            followSharesAgain = false
            let answer: SharesResponse
            do {
                answer = try await client.shares()
            } catch {
                logger.warning("cannot read the account's shares", metadata: ["error": "\(error)"])
                return
            }
            let joined = Dictionary(answer.joined.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            for (container, scopes) in shareScopes {
                for scope in scopes where joined[scope.id]?.container != container {
                    if !(await close(scope, of: container)) { held = true }
                }
            }
            for info in answer.joined.sorted(by: { $0.id < $1.id }) where containers[info.container] != nil {
                guard !(shareScopes[info.container] ?? []).contains(where: { $0.id == info.id }) else { continue }
                do {
                    guard Self.isIdentifier(info.id), Self.isIdentifier(info.item) else {
                        throw ContainerSyncError("the server named a share or its item with something that is not an id", code: .failed)
                    }
                    var named = info
                    if info.sealed == true {
                        // Its name is in its top item's record: kept here once that opens (the
                        // owner's device gave this account the share's key and sealed it with it).
                        guard let name = await sealedRootName(info) else { continue }
                        named.name = name
                    }
                    let scope = ShareScope(id: info.id, root: info.item, name: shareName(named), owner: info.owner)
                    try await open(scope, of: info.container)
                    logger.info("keeping a share in step", metadata: ["container": "\(info.container)", "share": "\(info.id)"])
                } catch {
                    logger.error("cannot keep a share in step", metadata: ["container": "\(info.container)", "share": "\(info.id)", "error": "\(error)"])
                }
            }
            // The items this account shares, for Apple's shared-item values on its own items.
            let owned = Dictionary(grouping: answer.owned, by: \.container)
            for (container, sync) in containers where !container.contains("#") {
                await sync.setSharedRoots(Set((owned[container] ?? []).filter { ($0.participants ?? []).contains { $0.state == .accepted || $0.state == .invited } }.map(\.item)))
            }
            // Each share's role as the server says it now (the owner may have changed it).
            for info in answer.joined {
                await containers[Self.shareEngineKey(info.container, info.id)]?.setReadOnly(info.role == .readOnly)
            }
            // The key of each share this account owns, sealed to whoever accepted it (an
            // account that seals: docs/Sharing.md, "Keys"); what is sealed in the shares it
            // owns goes sealed with their keys.
            await sharingKeys.noteShares(sealed: Set((answer.owned + answer.joined).filter { $0.sealed == true }.map(\.id)))
            var sealedOwned: [String: [String: ChunkCodec]] = [:]
            for info in answer.owned where info.sealed == true || (info.participants ?? []).contains(where: { $0.state == .accepted }) {
                do {
                    _ = try await sharingKeys.provide(info)
                    if info.sealed == true {
                        sealedOwned[info.container, default: [:]][info.item] = try await sharingKeys.codec(ofShare: info.id, owner: info.owner, container: info.container,
                                                                                                         justProvided: true)
                    }
                } catch {
                    logger.warning("cannot give a share its key", metadata: ["share": "\(info.id)", "error": "\(error)"])
                }
            }
            // (A container whose folder is here and whose engine is not running yet: its engine
            // starts. One this device does not use stays so.)
            for container in sealedOwned.keys where containers[container] == nil
                && FileManager.default.fileExists(atPath: paths.container(container, account: credentials.identityToken).path) {
                do {
                    _ = try self.container(container)
                } catch {
                    logger.warning("cannot keep a container in step", metadata: ["container": "\(container)", "error": "\(error)"])
                }
            }
            // (Every sealed share it owns, its keys here or not: what is sent into one whose keys
            // are not waits for them.)
            let sealedRoots = Dictionary(grouping: answer.owned.filter { $0.sealed == true }, by: \.container).mapValues { Set($0.map(\.item)) }
            for (container, sync) in containers where !container.contains("#") {
                if await sync.setOwnedShareCodecs(sealedOwned[container] ?? [:], sealedRoots: sealedRoots[container] ?? []) { trigger(container) }
            }
        } while followSharesAgain
        if held {
            // Read again soon (a second, then twice as long each time, at most a minute): a
            // full disk is not for ever, and the slow timer is minutes away.
            let delay = min((shareRetryDelay ?? .milliseconds(500)) * 2, .seconds(60))
            shareRetryDelay = delay
            Task {
                try? await Task.sleep(for: delay)
                await self.followShares()
            }
        } else {
            shareRetryDelay = nil
        }
    }

    /// The name of a sealed share's top item, opened with the share's keys; nil until it opens
    /// (no key of the share here yet, or the item not sealed with it yet).
    func sealedRootName(_ info: ShareInfo) async -> String? {
        do {
            guard let records = try await sharingKeys.codec(ofShare: info.id, owner: info.owner, container: info.container).records else { return nil }
            let scope = ShareScope(id: info.id, root: info.item, name: "", owner: info.owner)
            return try records.opened(try await client.through(scope).item(container: info.container, id: info.item)).name
        } catch {
            logger.info("a sealed share is not kept here until its top item opens with the share's keys", metadata: ["share": "\(info.id)", "error": "\(error)"])
            return nil
        }
    }

    /// The name a share's folder gets at the top of its container's `Documents`: its owner's
    /// name for it — or, when that is not a plain file name or is taken here (by a file of this
    /// account's own, or another share's), with " (from OWNER)" before its extension, then a
    /// number. (A sealed share's root is named by its record: ``sealedRootName(_:)``; without a
    /// name, "Shared by OWNER".)
    func shareName(_ info: ShareInfo) -> String {
        let documents = ((try? container(info.container))?.documents) // (the container is kept here: checked by the caller)
        let owner = Self.plainName(info.owner) ?? "someone"
        let base = info.name.flatMap(Self.plainName) ?? "Shared by \(owner)"
        let taken = Set(shareScopes[info.container]?.map(\.name) ?? [])
        func free(_ name: String) -> Bool {
            guard !taken.contains(name), let documents else { return !taken.contains(name) }
            let path = documents.appendingPathComponent(name).path
            let placeholder = documents.appendingPathComponent(UbiquityPlaceholder.fileName(for: name)).path
            return !FileManager.default.fileExists(atPath: path) && !FileManager.default.fileExists(atPath: placeholder)
        }
        if free(base) { return base }
        let stem = (base as NSString).deletingPathExtension, ext = (base as NSString).pathExtension
        let dotted = ext.isEmpty || stem.isEmpty ? "" : "." + ext
        let (front, back) = dotted.isEmpty ? (base, "") : (stem, dotted)
        for number in 1...999 {
            let name = front + " (from \(owner))" + (number == 1 ? "" : " \(number)") + back
            if free(name) { return name }
        }
        return base + " " + info.id.prefix(8)
    }

    /// Whether the server's id for a share or an item is one (it goes into request paths and
    /// the store's keys): 1 to 128 letters, digits, `-`, `_` and `.` (as the server takes ids),
    /// not only dots.
    static func isIdentifier(_ id: String) -> Bool {
        (1...128).contains(id.utf8.count) && !id.utf8.allSatisfy { $0 == 0x2E }
            && id.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) || $0 == 0x2D || $0 == 0x5F || $0 == 0x2E }
    }

    /// `name` if it can name a file at the top of `Documents` that syncs (no slash, not hidden,
    /// not `.`/`..`, not a name that stays local, at most 255 bytes); nil otherwise.
    static func plainName(_ name: String) -> String? {
        guard !name.isEmpty, name.utf8.count <= 255, !name.contains("/"), !name.contains("\0"), !name.hasPrefix("."),
              !LocalScanner.isExcluded(name) else { return nil }
        return name
    }

    /// Starts keeping `scope` of `container` in step: the container's own engine passes over
    /// its folder first, then the share's engine opens. If it cannot (its store cannot be
    /// written: a full disk), nothing of it stays, and the next look at the shares tries again.
    func open(_ scope: ShareScope, of container: String) async throws {
        let own = try self.container(container)
        var scopes = shareScopes[container] ?? []
        scopes.removeAll { $0.id == scope.id }
        scopes.append(scope)
        shareScopes[container] = scopes
        await own.passOver(Set(scopes.map(Self.sharePath)))
        let key = Self.shareEngineKey(container, scope.id)
        guard containers[key] == nil else { return }
        let sync: ContainerSync
        do {
            // A share not kept here starts from nothing: records an earlier time it was kept
            // left under its key are not of the folder it gets now. Nor are records of the
            // share kept under another name: they name files where its folder is not (found
            // by `ubiquity-chaos --sealed-share`, seed 39: a folder the full disk kept when
            // access ended took the name, the share came back as "shared (from ada)", and its
            // engine took every file it had recorded at the old name for deleted there — and
            // deleted them for everyone).
            if try !(store.keptShares()[container] ?? []).contains(where: { $0.id == scope.id && $0.name == scope.name }) { try store.forgetShare(scope.id, key: key) }
            sync = try ContainerSync(container: container, root: own.root, client: client.through(scope), store: store,
                                     device: credentials.deviceId, greedy: configuration.greedy,
                                     packageExtensions: configuration.allPackageExtensions, logger: logger,
                                     codecs: { [sharingKeys] container in try await sharingKeys.codec(ofShare: scope.id, owner: scope.owner, container: container) },
                                     onStatusChange: { [statusChanged] in statusChanged.yield() }, share: scope, account: credentials.account)
            try store.keep(scope, of: container)
        } catch {
            // Left in the scopes, the share would be taken for kept here, and never tried again
            // (found by `ubiquity-chaos --share`: accepted again while the disk was full).
            shareScopes[container]?.removeAll { $0.id == scope.id }
            await own.passOver(Set((shareScopes[container] ?? []).map(Self.sharePath)))
            throw error
        }
        containers[key] = sync
        if connected { await sync.notePushes(live: true) }
        trigger(key)
    }

    /// Stops keeping `scope` of `container` in step (access ended: removed, stopped, left). Its
    /// folder leaves this device — unless it holds changes the server did not take, when it is
    /// kept beside, renamed, as this account's own (nothing the person typed is lost).
    /// Its records go first: if they cannot (a full disk), nothing changes — the engine keeps
    /// the folder, the container's own engine still passes over it — and the next look at the
    /// shares tries again. (Let go before, the folder stayed, the container's own engine took
    /// it for this account's own, and the share, back, got another name while its engine
    /// kept the old name's records: found by `ubiquity-chaos --sealed-share`, seed 39.)
    /// - Returns: False when it could not be let go yet.
    @discardableResult
    func close(_ scope: ShareScope, of container: String) async -> Bool {
        let key = Self.shareEngineKey(container, scope.id)
        guard let sync = containers[key] else {
            shareScopes[container]?.removeAll { $0.id == scope.id }
            return true
        }
        let unsent = await sync.holdsUnsentChanges()
        do {
            try store.forgetShare(scope.id, key: key)
        } catch {
            logger.error("cannot let a share go yet; the next look at the shares tries again", metadata: ["container": "\(container)", "share": "\(scope.id)", "error": "\(error)"])
            return false
        }
        shareScopes[container]?.removeAll { $0.id == scope.id }
        containers[key] = nil
        let path = Self.sharePath(scope), root = sync.root
        let fileManager = FileManager.default
        let folder = root.appendingPathComponent(path), placeholder = root.appendingPathComponent(LocalContents.placeholderPath(for: path))
        do {
            if unsent, fileManager.fileExists(atPath: folder.path) {
                // Placeholders of the share's items never downloaded go: they hold nothing of the
                // person's, and kept they named items this account cannot reach (found by
                // `ubiquity-chaos --sealed-share`: one stayed a placeholder on the device for ever).
                for placeholder in Materialiser.placeholdersOnDisk(in: folder, packageExtensions: sync.packageExtensions).keys {
                    try fileManager.removeItem(at: folder.appendingPathComponent(placeholder))
                }
                var kept = shareNameAside(scope.name, in: sync.documents)
                if kept.isEmpty { kept = scope.name + " " + scope.id.prefix(8) }
                try fileManager.moveItem(at: folder, to: sync.documents.appendingPathComponent(kept))
                NSFileVersion.removeThisProcessStaging(under: sync.documents.appendingPathComponent(kept))
                logger.notice("a share's access ended with changes not sent: kept as this account's own", metadata: ["container": "\(container)", "share": "\(scope.id)"])
            } else if fileManager.fileExists(atPath: folder.path) {
                try fileManager.removeItem(at: folder)
            }
            if fileManager.fileExists(atPath: placeholder.path) { try fileManager.removeItem(at: placeholder) }
        } catch {
            logger.error("cannot remove a share's folder", metadata: ["container": "\(container)", "share": "\(scope.id)", "error": "\(error)"])
        }
        await containers[container]?.passOver(Set((shareScopes[container] ?? []).map(Self.sharePath)))
        trigger(container)
        logger.info("a share left this device", metadata: ["container": "\(container)", "share": "\(scope.id)"])
        return true
    }

    /// A free name beside a share's folder for what it held that the server did not take.
    private func shareNameAside(_ name: String, in documents: URL) -> String {
        for number in 1...999 {
            let candidate = name + " (not shared)" + (number == 1 ? "" : " \(number)")
            if !FileManager.default.fileExists(atPath: documents.appendingPathComponent(candidate).path) { return candidate }
        }
        return ""
    }
}

// `ubiquity share` and `ubiquity shares` (docs/Sharing.md), answered by the agent: it knows
// which item a path is and which share a folder is.
extension AccountSession {
    /// Answers a sharing request (``AgentRequest/Operation/share`` … ``AgentRequest/Operation/stopSharing``).
    func answerSharing(_ request: AgentRequest, locate: (String?) throws -> (ContainerSync, String)) async throws -> AgentResponse {
        switch request.operation {
        case .share:
            guard let name = request.participant, !name.isEmpty else { throw ContainerSyncError("share needs the name of the account to share with", code: .badRequest) }
            let (sync, item) = try await ownItem(request.path, locate: locate)
            let share = try await client.makeShare(container: sync.container, item: item)
            _ = try await client.invite(name, to: share.id, role: request.readOnly == true ? .readOnly : .readWrite)
            await followShares()
            return AgentResponse(shares: try await summaries().filter { $0.id == share.id })
        case .shares:
            return AgentResponse(shares: try await summaries())
        case .answerInvitation:
            guard let id = request.share else { throw ContainerSyncError("answering an invitation needs its id", code: .badRequest) }
            guard let invitation = try await client.shares().invitations.first(where: { $0.id == id || $0.invitation == id }), let answer = invitation.invitation else {
                throw ContainerSyncError("no invitation \(id) (it may have expired)", code: .unknownItem)
            }
            try await client.answer(invitation: answer, accept: request.accept == true)
            await followShares()
            return AgentResponse(shares: try await summaries().filter { $0.id == invitation.id })
        case .leaveShare:
            let (sync, _) = try locate(request.path)
            guard let scope = sync.share else { throw ContainerSyncError("\(request.path ?? "") is not in a share another account shared with you", code: .badRequest) }
            try await client.leave(scope.id)
            await followShares()
            return AgentResponse(shares: try await summaries())
        case .removeParticipant, .stopSharing:
            let (sync, item) = try await ownItem(request.path, locate: locate)
            guard let share = try await client.shares().owned.first(where: { $0.container == sync.container && $0.item == item }) else {
                throw ContainerSyncError("\(request.path ?? "") is not shared", code: .unknownItem)
            }
            if request.operation == .stopSharing {
                try await client.stopSharing(share.id)
            } else {
                guard let participant = (share.participants ?? []).first(where: { $0.name == request.participant && ($0.state == .accepted || $0.state == .invited) }) else {
                    throw ContainerSyncError("\(request.participant ?? "nobody") is not in that share", code: .unknownItem)
                }
                try await client.remove(participant.id, from: share.id)
            }
            await followShares()
            return AgentResponse(shares: try await summaries())
        case .verifySharing:
            guard let name = request.participant, !name.isEmpty else { throw ContainerSyncError("verify needs the name of the account to compare codes with", code: .badRequest) }
            do {
                return AgentResponse(sharingCode: try await sharingKeys.verify(name, confirm: request.accept == true))
            } catch let error as SyncClientError where error.status == 404 {
                throw ContainerSyncError("this account shares nothing with an account named \(name) (or it has no sharing key yet)", code: .unknownItem)
            } catch let error as SharingKeys.Refusal {
                throw ContainerSyncError(error.description, code: .failed)
            }
        default:
            throw ContainerSyncError("not a sharing request", code: .badRequest)
        }
    }

    /// The container's own engine and the item at `path` in it (one of this account's own: a
    /// share another account shared is not shared on, nor changed from here).
    private func ownItem(_ path: String?, locate: (String?) throws -> (ContainerSync, String)) async throws -> (ContainerSync, String) {
        let (sync, name) = try locate(path)
        guard sync.share == nil else { throw ContainerSyncError("\(path ?? "") is in a share another account shared with you: only its owner shares it", code: .badRequest) }
        guard let item = await sync.item(at: name) else { throw ContainerSyncError("\(name) is not an item of \(sync.container) yet", code: .unknownItem) }
        return (sync, item)
    }

    /// The account's shares as `ubiquity shares list` shows them.
    func summaries() async throws -> [ShareSummary] {
        let answer = try await client.shares()
        func participants(_ info: ShareInfo) -> [ShareParticipantSummary] {
            (info.participants ?? []).map { ShareParticipantSummary(name: $0.name, readOnly: $0.role == .readOnly, state: $0.state.rawValue) }
        }
        var summaries: [ShareSummary] = []
        for info in answer.owned {
            var key: ShareKeyStanding?
            do {
                key = try await sharingKeys.provide(info)
            } catch {
                key = ShareKeyStanding(epoch: info.epoch, held: [], problem: "\(error)")
            }
            summaries.append(ShareSummary(id: info.id, standing: .owned, owner: info.owner, container: info.container, name: info.name,
                                          participants: participants(info), key: key))
        }
        for info in answer.joined {
            let scope = shareScopes[info.container]?.first { $0.id == info.id }
            let path = scope.flatMap { containers[Self.shareEngineKey(info.container, $0.id)]?.documents.appendingPathComponent($0.name).path }
            summaries.append(ShareSummary(id: info.id, standing: .joined, owner: info.owner, container: info.container, name: info.name, path: path,
                                          readOnly: info.role == .readOnly, key: await sharingKeys.standing(ofJoined: info)))
        }
        summaries += answer.invitations.map {
            ShareSummary(id: $0.id, standing: .invited, owner: $0.owner, container: $0.container, name: $0.name, readOnly: $0.role == .readOnly, expires: $0.expires)
        }
        return summaries
    }
}
