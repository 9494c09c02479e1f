import Foundation
import Logging
import UbiquityAgentProtocol
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync

/// The keys of sharing on this device (docs/Sharing.md, "Keys"): the account's sharing
/// identity — published by the first of its devices that holds the account's keys, its private
/// half sealed under the root key for the others — the other accounts' identities it pinned,
/// and the shares' keys: made and sealed by the owner's devices, opened by every member's.
///
/// A key the server could swap is what other products' sharing fell to: every other account's
/// identity is pinned when first seen, and one that changes is refused — nothing is sealed to
/// it, nothing sealed by it opened — until the people compare their code again
/// (`ubiquity shares verify NAME --confirm`).
actor SharingKeys {
    let account: String
    let client: SyncClient
    let keys: SessionKeys
    let pinsURL: URL
    let logger: Logger
    /// This account's identity, once read (or published).
    private var identity: DeviceKeys?
    /// The share keys opened, by share and epoch.
    private var opened: [String: [UInt32: ShareKey]] = [:]
    /// The shares whose items are sealed, as the server last said, and the codecs made from
    /// their keys (made again once the shares were read again: keys may have come).
    private var sealedShares: Set<String> = []
    private var codecs: [String: ChunkCodec] = [:]

    init(account: String, client: SyncClient, keys: SessionKeys, pinsURL: URL, logger: Logger) {
        self.account = account
        self.client = client
        self.keys = keys
        self.pinsURL = pinsURL
        self.logger = logger
    }

    /// Why something of sharing's keys is refused: a sentence for `ubiquity shares list`, no key in it.
    struct Refusal: Error, CustomStringConvertible {
        let description: String
    }

    /// The root keys this device holds; nil for an account that has none (nothing is sealed).
    private func rootKeys() async throws -> [AccountRootKey]? {
        switch try await keys.current() {
        case .plain: return nil
        case .holding(let roots, _, _, _): return roots
        case .waiting(let why): throw Refusal(description: "this device does not hold the account's keys yet (\(why))")
        }
    }

    /// This account's sharing identity: the one its devices published, or a new one published
    /// now (nil for an account without keys).
    /// - Throws: ``Refusal`` when the identity the server publishes is not the one the
    ///   account's devices sealed (a swapped key is never taken for this account's own), or
    ///   what the server answered.
    func ownIdentity() async throws -> DeviceKeys? {
        if let identity { return identity }
        guard let roots = try await rootKeys(), let newest = roots.max(by: { $0.epoch < $1.epoch }) else { return nil }
        for _ in 0..<3 {
            let published: SharingIdentityRecord
            do {
                published = try await client.sharingIdentity()
            } catch let error as SyncClientError where error.status == 404 {
                let made = DeviceKeys()
                do {
                    _ = try await client.publishSharingIdentity(try request(made, under: newest, replacing: nil))
                    logger.info("published this account's sharing identity")
                    identity = made
                    return made
                } catch let error as SyncClientError where error.code == "identityChanged" {
                    continue // another device of the account's published first: that one stands
                }
            }
            let keys: DevicePublicKeys, opened: DeviceKeys
            do {
                keys = try DevicePublicKeys(signing: Array(published.signing), agreement: Array(published.agreement))
                guard let sealed = published.sealed else { throw EncryptionError(.malformed, "the server gave no sealed keys") }
                opened = try SealedSharingIdentity.open(sealed, account: account, published: keys, rootKeys: roots)
                // Sealed in an older epoch: sealed again in the newest (for devices let in later).
                if try SealedSharingIdentity.epoch(of: sealed) < newest.epoch {
                    _ = try? await client.publishSharingIdentity(try request(opened, under: newest, replacing: published.signing))
                }
            } catch let error as EncryptionError {
                logger.error("the sharing identity the server publishes for this account is not the one its devices sealed: refused", metadata: ["error": "\(error)"])
                throw Refusal(description: "the sharing key the server publishes for this account is not the one its devices sealed (\(error.code)): nothing is shared sealed until that is mended")
            }
            identity = opened
            return opened
        }
        throw Refusal(description: "the account's sharing identity kept changing while this device read it")
    }

    private func request(_ identity: DeviceKeys, under root: AccountRootKey, replacing: Data?) throws -> SharingIdentityPublishRequest {
        SharingIdentityPublishRequest(signing: Data(identity.publicKeys.signing), agreement: Data(identity.publicKeys.agreement),
                                      sealed: try SealedSharingIdentity.seal(identity, account: account, under: root), replacing: replacing)
    }

    /// `name`'s sharing identity as the server gives it, and how it stands against the pins
    /// (pinned now when it was never seen).
    func identity(of name: String) async throws -> (SharingIdentity, IdentityPins.Standing) {
        let record = try await client.sharingIdentity(of: name)
        guard record.account == name, let keys = try? DevicePublicKeys(signing: Array(record.signing), agreement: Array(record.agreement)) else {
            throw Refusal(description: "the server's sharing key for \(name) is not a pair of keys of that account")
        }
        let identity = SharingIdentity(account: name, keys: keys)
        var pins = try IdentityPins(contentsOf: pinsURL)
        let standing = pins.check(identity)
        if standing == .new {
            try pins.write(to: pinsURL)
        }
        if standing == .changed {
            logger.warning("another account's sharing key is not the one pinned: refused until its code is compared again")
        }
        return (identity, standing)
    }

    /// The safety code of this account and `name`; `confirm`: its people compared it and it
    /// matched (the key pinned as confirmed — a changed one taken from now on).
    func verify(_ name: String, confirm: Bool) async throws -> SharingCodeSummary {
        guard let own = try await ownIdentity() else { throw Refusal(description: "this account has no keys: nothing it shares is sealed, and there is no code to compare") }
        guard name != account else { throw Refusal(description: "a code is compared with another account") }
        let (other, standing) = try await identity(of: name)
        var confirmed = standing == .pinned(confirmed: true)
        if confirm {
            var pins = try IdentityPins(contentsOf: pinsURL)
            pins.confirm(other)
            try pins.write(to: pinsURL)
            confirmed = true
            opened = [:] // (what a changed key refused opens now)
            logger.info("another account's sharing key confirmed by its code")
        }
        let shown: SharingCodeSummary.Standing = switch standing {
        case .new: .new
        case .pinned(let wasConfirmed): wasConfirmed ? .confirmed : .pinned
        case .changed: .changed
        }
        return SharingCodeSummary(account: name, code: SafetyCode.code(SharingIdentity(account: account, keys: own.publicKeys), other),
                                  standing: shown, confirmed: confirmed)
    }

    /// The share's keys this account holds, every epoch's, opened — sealed by its owner's
    /// identity, which must not have changed since it was pinned.
    /// - Throws: ``Refusal`` for an owner's key that changed; what the server answered.
    func keys(of share: String, owner: String, answer read: ShareKeysResponse? = nil) async throws -> [UInt32: ShareKey] {
        guard let own = try await ownIdentity() else { return [:] }
        let answer: ShareKeysResponse
        if let read { answer = read } else { answer = try await client.shareKeys(share) }
        guard answer.share == share, answer.owner == owner else { throw Refusal(description: "the server answered for another share") }
        let sealer: SharingIdentity
        if owner == account {
            sealer = SharingIdentity(account: account, keys: own.publicKeys)
        } else {
            let (identity, standing) = try await identity(of: owner)
            guard standing != .changed else {
                throw Refusal(description: "\(owner)'s sharing key is not the one pinned: compare your code with theirs (`ubiquity shares verify \(owner)`) before anything sealed by it is opened")
            }
            sealer = identity
        }
        var keys = opened[share] ?? [:]
        for envelope in answer.envelopes where envelope.account == account {
            guard let epoch = UInt32(exactly: envelope.epoch) else { continue }
            if keys[epoch] != nil { continue }
            do {
                keys[epoch] = try ShareKeyEnvelope.open(envelope.envelope, share: share, owner: sealer, participant: (account, own))
            } catch {
                logger.error("a share key envelope does not open: refused", metadata: ["share": "\(share)", "epoch": "\(epoch)", "error": "\(error)"])
            }
        }
        opened[share] = keys
        return keys
    }

    /// Gives the share's current epoch a key (the owner's device; the first one kept stands)
    /// and seals it, with every earlier epoch's, to each participant who accepted and waits — unless that participant's
    /// sharing key changed since it was pinned (refused until compared) or they have none yet.
    /// - Returns: Where the share's key stands now.
    func provide(_ share: ShareInfo) async throws -> ShareKeyStanding? {
        guard share.owner == account, let own = try await ownIdentity() else { return nil }
        let me = SharingIdentity(account: account, keys: own.publicKeys)
        for _ in 0..<3 {
            let answer = try await client.shareKeys(share.id)
            guard let epoch = UInt32(exactly: answer.epoch) else { throw Refusal(description: "the server named an epoch out of range") }
            var held = try await keys(of: share.id, owner: account, answer: answer)
            var envelopes: [ShareKeyEnvelopeRecord] = []
            if held[epoch] == nil {
                let made = ShareKey(share: share.id, epoch: epoch)
                envelopes.append(ShareKeyEnvelopeRecord(account: account, epoch: answer.epoch, envelope: try ShareKeyEnvelope.seal(made, to: me, from: (account, own))))
                held[epoch] = made
            }
            var problems: [String] = []
            for name in answer.waiting ?? [] {
                do {
                    let (identity, standing) = try await identity(of: name)
                    guard standing != .changed else {
                        problems.append("\(name)'s sharing key is not the one pinned: compare your code with theirs (`ubiquity shares verify \(name)`) before the share's key is sealed to it")
                        continue
                    }
                    // Every epoch's key: one who joins (or joins again) reads what is in the share,
                    // whenever it was sealed.
                    for (sealedIn, key) in held.sorted(by: { $0.key < $1.key }) {
                        envelopes.append(ShareKeyEnvelopeRecord(account: name, epoch: Int64(sealedIn),
                                                                envelope: try ShareKeyEnvelope.seal(key, to: identity, from: (account, own))))
                    }
                } catch let error as SyncClientError where error.status == 404 {
                    problems.append("\(name)'s account has no sharing key yet (its devices publish one once they hold its keys)")
                }
            }
            var waiting = answer.waiting
            if !envelopes.isEmpty {
                do {
                    waiting = try await client.publishShareKeys(share.id, ShareKeysPublishRequest(epoch: answer.epoch, envelopes: envelopes)).waiting
                    opened[share.id] = held
                    logger.info("sealed a share's key", metadata: ["share": "\(share.id)", "epoch": "\(epoch)", "envelopes": "\(envelopes.count)"])
                } catch let error as SyncClientError where ["shareKeyExists", "staleEpoch", "notAccepted"].contains(error.code) {
                    opened[share.id] = nil
                    continue // another device of the owner's, or the share, moved meanwhile: read again
                }
            }
            return ShareKeyStanding(epoch: answer.epoch, held: held.keys.sorted().map(Int64.init), waiting: waiting,
                                    problem: problems.isEmpty ? nil : problems.joined(separator: "; "))
        }
        throw Refusal(description: "the share's keys kept changing while this device sealed them")
    }

    /// Where a share joined stands on this device: the epochs whose key it opened.
    func standing(ofJoined share: ShareInfo) async -> ShareKeyStanding? {
        do {
            guard try await ownIdentity() != nil else { return nil }
            let keys = try await keys(of: share.id, owner: share.owner)
            let held = keys.keys.sorted().map(Int64.init)
            return ShareKeyStanding(epoch: share.epoch, held: held,
                                    problem: held.contains(share.epoch) ? nil : "waiting for \(share.owner)'s device to seal the share's key of epoch \(share.epoch) to this account")
        } catch {
            return ShareKeyStanding(epoch: share.epoch, held: [], problem: "\(error)")
        }
    }

    /// Notes which shares are sealed (read from the server now); the codecs made so far are
    /// made again when next asked for.
    func noteShares(sealed: Set<String>) {
        sealedShares = sealed
        codecs = [:]
    }

    /// The codec of a share's items on this device: plain for a share that is not sealed; for
    /// a sealed one, from the share's keys this account holds — the newest epoch's sealing,
    /// every one's opening.
    /// - Throws: ``Refusal`` while this account holds no key of the share (its owner's device
    ///   has not sealed one to it yet, or the owner's key changed: nothing is synced until then).
    /// `justProvided`: ``provide(_:)`` read the share's keys a moment ago (what it opened is
    /// used, not read again).
    func codec(ofShare share: String, owner: String, container: String, justProvided: Bool = false) async throws -> ChunkCodec {
        guard sealedShares.contains(share) else { return .plain }
        if let made = codecs[share] { return made }
        let held: [UInt32: ShareKey]
        if justProvided, let opened = opened[share] { held = opened } else { held = try await keys(of: share, owner: owner) }
        let keys = Array(held.values)
        // The owner's devices open what the container's keys sealed too (what was sealed before
        // the item was shared, or before the share's keys reached a device); a participant's
        // pass over a conflict version sealed so.
        let roots = owner == account ? try await rootKeys() ?? [] : []
        guard var codec = ChunkCodec.shared(keys, alsoOpening: roots.map { $0.chunkKeys(container: container) }) else {
            throw Refusal(description: "waiting for \(owner)'s device to seal the share's key to this account")
        }
        codec.records = ItemRecords.shared(container: container, keys: keys, alsoOpening: roots.map { $0.recordKey(container: container) })
        codec.records?.passesOverUnheldConflicts = owner != account
        codecs[share] = codec
        return codec
    }
}
