import Foundation
import Logging
import UbiquityKeys
import UbiquitySync

/// What this device can do with its account's keys now.
enum KeyState: Sendable {
    /// The account has no keys and none can be set up (a server that keeps no escrow and no
    /// roster): values go as they are.
    case plain
    /// This device holds the account's keys: it seals what it sends and opens what it gets, and
    /// signs its commits (`signer`). `sealedOnly`: the account's devices raised it to
    /// ``Roster/sealedOnlyFormat`` (nothing in plaintext is taken or sent).
    case holding(rootKeys: [AccountRootKey], custody: Custody, signer: CommitSigner?, sealedOnly: Bool)
    /// The account has keys this device does not hold (Advanced Data Protection, waiting for a
    /// device's approval): nothing is sent or taken until it does.
    case waiting(String)
}

extension AccountKeys {
    /// The keys this device syncs with, after setting them up or joining when it can: the
    /// account's first device signed in before accounts had keys sets them up; a later one joins
    /// by the escrow under Standard. Under Advanced a device not yet let in waits.
    /// - Throws: The server's and the roster's refusals (a rolled-back roster, a bad signature):
    ///   never answered by going on in plaintext.
    func prepare(deviceName: String) async throws -> KeyState {
        do {
            return try await holdingKeyringLock(waiting: .seconds(2)) { try await prepareHoldingLock(deviceName: deviceName) }
        } catch let error as KeySetupError where error.reason == .busy {
            return .waiting(error.description) // a command is setting the keys up or joining: read again later
        }
    }

    private func prepareHoldingLock(deviceName: String) async throws -> KeyState {
        var keyring = try loadKeyring()
        let before = (keyring.pinned, keyring.epochs)
        let (_, roster, directory) = try await read(&keyring)
        if let roster, !roster.formatIsKnown {
            if (keyring.pinned, keyring.epochs) != before { try keyring.write(to: keyringURL) }
            return .waiting("the account's devices require format \(roster.minimumFormat), newer than this build knows (\(Roster.newestFormat)): update ubiquity")
        }
        if var roster, roster.members[keyring.deviceIdentifier] != nil, keyring.rootKey(epoch: roster.epoch) != nil {
            if (keyring.pinned, keyring.epochs) != before { try keyring.write(to: keyringURL) }
            // A browser's grant that has run out: its session ends in the roster, so nothing its
            // key signs later is taken (any device of the roster ends it).
            if !roster.expiredWebSessions(now: Date().timeIntervalSince1970).isEmpty {
                do {
                    (roster, keyring) = try await changeHoldingLock({ roster, _ in
                        roster.expiredWebSessions(now: Date().timeIntervalSince1970).map { .endWebSession(identifier: $0) }
                    }, envelopes: { _, _ in [] })
                    logger.info("ended the sessions of web browsers whose approval ran out")
                } catch {
                    logger.warning("cannot end the sessions of web browsers whose approval ran out", metadata: ["error": "\(error)"])
                }
            }
            return .holding(rootKeys: keyring.epochs.compactMap { keyring.rootKey(epoch: $0) }, custody: roster.custody,
                            signer: keyring.pinned.map { CommitSigner(keys: keyring.device, rosterHead: $0, roster: roster) },
                            sealedOnly: roster.requiresSealing)
        }
        if roster == nil, directory.escrow == nil { return .plain }
        if let roster, roster.removed.contains(keyring.deviceIdentifier) {
            // Removed on another device: it never rejoins by itself (under Standard the escrow
            // would let it) — only a new sign-in, by its user, does.
            return .waiting("this device was removed from the account's keys on another device: `ubiquity login` signs it in again")
        }
        do {
            let status = try await setUpHoldingLock(deviceName: deviceName)
            var now = try loadKeyring()
            // The roster as it stands, checked against the head just pinned: the signed commits
            // are checked from this device's first round (else only once the keys were read
            // again, up to a minute later).
            let pinned = (now.pinned, now.epochs)
            let roster = try await read(&now).roster
            if (now.pinned, now.epochs) != pinned { try now.write(to: keyringURL) }
            return .holding(rootKeys: now.epochs.compactMap { now.rootKey(epoch: $0) }, custody: roster?.custody ?? status.custody,
                            signer: now.pinned.map { CommitSigner(keys: now.device, rosterHead: $0, roster: roster) },
                            sealedOnly: roster?.requiresSealing ?? false)
        } catch let error as KeySetupError {
            return .waiting(error.description)
        }
    }
}

/// The account's keys as one session of the agent uses them: read when it starts, again at
/// least once a minute while it syncs, when this device's keyring file changes (a command
/// changed the custody or the devices), and when an object of an epoch it does not hold comes.
actor SessionKeys {
    let keys: AccountKeys
    let deviceName: String
    let logger: Logger
    private var state: KeyState?
    private var readAt: ContinuousClock.Instant?
    private var keyringChanged: Date?
    /// How long a reading stands.
    static let freshness: Duration = .seconds(60)

    init(keys: AccountKeys, deviceName: String, logger: Logger) {
        self.keys = keys
        self.deviceName = deviceName
        self.logger = logger
    }

    /// A reading under way, which every caller meanwhile waits for (one at a time: a device
    /// must never set its keys up twice).
    private var reading: Task<KeyState, any Error>?
    /// The codecs made from the keys now, by container and whether it seals: made once per
    /// reading of the keys (a sealed codec derives its chunkers' tables, and one was made for
    /// every batch of chunks a device sent or took).
    private var codecs: [CodecKey: ChunkCodec] = [:]
    private struct CodecKey: Hashable {
        let container: String
        let sealing: Bool
    }

    /// The keys now (read again when `refresh`, or when the reading is old).
    func current(refresh: Bool = false) async throws -> KeyState {
        if let reading { return try await reading.value }
        let changed = (try? FileManager.default.attributesOfItem(atPath: keys.keyringURL.path))?[.modificationDate] as? Date
        if !refresh, let state, let readAt, readAt.duration(to: .now) < Self.freshness, changed == keyringChanged { return state }
        let task = Task { [keys, deviceName] in try await keys.prepare(deviceName: deviceName) }
        reading = task
        defer { reading = nil }
        let now = try await task.value
        if case .waiting(let why) = now, state.map({ if case .waiting = $0 { false } else { true } }) ?? true {
            logger.warning("this device does not hold the account's keys yet: nothing encrypted is synced until it does", metadata: ["why": "\(why)"])
        }
        state = now
        codecs = [:]
        readAt = .now
        keyringChanged = (try? FileManager.default.attributesOfItem(atPath: keys.keyringURL.path))?[.modificationDate] as? Date
        return now
    }

    /// Has the keys read again at the next look, unless they were read in the last five
    /// seconds (an object of an epoch this device does not hold came: the roster moved and no
    /// push said so — or the server serves what no key it can get opens, which must not make
    /// every round read the keys).
    func outdated() {
        if let readAt, readAt.duration(to: .now) < .seconds(5) { return }
        readAt = nil
    }

    /// How `container`'s chunks go now: sealed while this device holds the account's keys —
    /// always under Advanced Data Protection or once the account's devices require everything
    /// sealed (``Roster/sealedOnlyFormat``), under Standard when `sealing` (the agent's
    /// `sealedContents`; otherwise plaintext, the sealed ones of other devices opened) — and
    /// plain for an account without keys.
    /// - Throws: ``ContainerSyncError`` while the account has keys this device does not hold
    ///   (nothing of the container is sent or taken until it does), or what reading them threw.
    func codec(of container: String, sealing: Bool) async throws -> ChunkCodec {
        let now = try await current()
        let key = CodecKey(container: container, sealing: sealing)
        if let made = codecs[key] { return made }
        let made = try codec(of: container, sealing: sealing, keys: now)
        codecs[key] = made
        return made
    }

    private func codec(of container: String, sealing: Bool, keys: KeyState) throws -> ChunkCodec {
        switch keys {
        case .plain:
            return .plain
        case .holding(let rootKeys, let custody, let signer, let sealedOnly):
            // Not sealing, it still opens what the account's sealing devices sealed.
            let seals = sealing || custody == .advanced || sealedOnly
            guard var codec = seals ? ChunkCodec.sealed(container: container, rootKeys: rootKeys)
                    : ChunkCodec.reading(container: container, rootKeys: rootKeys) else { return .plain }
            // Records go sealed with the chunks; a device that does not seal opens them.
            codec.records = ItemRecords.keyed(container: container, rootKeys: rootKeys, sealing: seals)
            // Once the account's devices require it, a state served in plaintext is a downgrade.
            codec.records?.sealedOnly = sealedOnly
            // What its commits made is signed where its records go sealed; others' commits are
            // checked by every device that holds the keys (docs/Encryption.md).
            codec.signer = signer
            return codec
        case .waiting(let why):
            throw ContainerSyncError("this device does not hold the account's keys yet (\(why)): nothing is synced until it does", code: .failed)
        }
    }
}
