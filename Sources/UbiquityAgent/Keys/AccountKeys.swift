import Foundation
import Logging
import UbiquityClient
import UbiquityKeys
import UbiquityProtocol

/// Where this device stands with its account's keys (`ubiquity protection status`).
package struct ProtectionStatus: Sendable, Equatable {
    /// A device of the roster.
    package struct Device: Sendable, Equatable {
        /// Its identifier.
        package var id: String
        /// Its name.
        package var name: String
        /// Whether it is this device.
        package var isThisDevice: Bool
    }

    /// Standard or Advanced Data Protection.
    package var custody: Custody
    /// The current epoch.
    package var epoch: UInt32
    /// The account's devices.
    package var devices: [Device]
    /// Devices removed from the roster.
    package var removed: Int
    /// Whether this device is in the roster and holds the current epoch's root key.
    package var holdsCurrentKey: Bool
    /// Whether the account has a recovery key.
    package var hasRecoveryKey: Bool
    /// Whether the server holds an escrow copy (Standard, with the escrow named).
    package var escrowed: Bool
    /// Whether the account's devices require every item record and key-value value sealed
    /// (``Roster/sealedOnlyFormat``): nothing in plaintext is taken or sent.
    package var sealedOnly = false
    /// The web browsers a device let in whose sessions have not ended (under Advanced).
    package var webSessions: [WebSession] = []

    /// A web browser a device let in (``RosterChange/addWebSession(keys:expires:)``).
    package struct WebSession: Sendable, Equatable {
        /// Its key's identifier.
        package var id: String
        /// The name of the device that let it in.
        package var approver: String
        /// When its grant ends (seconds since 1970).
        package var expires: Double
    }
}

/// Why this device cannot take part in the account's keys yet.
package struct KeySetupError: Error, CustomStringConvertible, Equatable {
    /// What stands in the way.
    package enum Reason: Sendable, Equatable {
        /// The account uses Advanced Data Protection: a device of it, or the recovery key, must let this one in.
        case needsApproval
        /// This device is not in the roster (removed, or not set up).
        case notInRoster
        /// This device holds no key of the current epoch.
        case noCurrentKey
        /// The account has no recovery key, or this one is not it.
        case noRecoveryKey
        /// Another process is changing this device's keys.
        case busy
    }

    /// What stands in the way.
    package var reason: Reason
    /// A sentence saying what to do.
    package var description: String
}

/// This device's side of the account's keys: it reads and checks the roster the server keeps,
/// sets the keys up (the account's first device) or joins, and changes the roster — custody,
/// devices, the recovery key — signing every change itself. The keyring stays on the device
/// (``UbiquityPaths/keyring``); the server sees only signed entries and sealed keys.
package struct AccountKeys: Sendable {
    let client: SyncClient
    let credentials: UbiquityCredentials
    let keyringURL: URL
    let logger: Logger

    /// The keys of the account `credentials` signs in to, kept at `paths`.
    package init(credentials: UbiquityCredentials, paths: UbiquityPaths, client: SyncClient? = nil, logger: Logger = Logger(label: "ubiquity.keys")) {
        self.credentials = credentials
        self.client = client ?? SyncClient(server: credentials.server, token: credentials.token)
        keyringURL = paths.keyring
        self.logger = logger
    }

    /// The account the keys are bound to (its identity token).
    var account: String { credentials.identityToken }

    /// This device's keyring: the one on disk if it is this account's, else a new one (new device keys).
    /// - Throws: ``EncryptionError`` `.keyFileUnusable` for a keyring others can read, or damaged.
    func loadKeyring() throws -> Keyring {
        guard FileManager.default.fileExists(atPath: keyringURL.path) else { return Keyring(account: account) }
        let keyring = try Keyring(contentsOf: keyringURL)
        return keyring.account == account ? keyring : Keyring(account: account)
    }

    /// The roster as the server serves it, checked against the head this device pinned, and
    /// the envelopes for this device (and `holders`) taken into the keyring.
    func read(_ keyring: inout Keyring, holders: [String] = []) async throws -> (entries: [RosterEntry], roster: Roster?, directory: KeyDirectoryResponse) {
        let directory = try await client.keyDirectory(for: [keyring.deviceIdentifier] + holders)
        let entries = try directory.roster.map { try RosterEntry(encoded: $0) }
        guard !entries.isEmpty else {
            // An account with no roster after this device pinned one: the server dropped it.
            if let pinned = keyring.pinned {
                throw EncryptionError(.rosterNotExtended, "the server serves no roster, but this device saw entry \(pinned.index): rolled back")
            }
            return (entries, nil, directory)
        }
        let roster = try keyring.accept(entries)
        let mine = directory.envelopes.filter { $0.recipient == keyring.deviceIdentifier }
        for refusal in keyring.take(mine.map { (UInt32(clamping: $0.epoch), $0.sender, $0.body) }, roster: roster) {
            logger.error("refused a sealed root key the server served", metadata: ["reason": "\(refusal)"])
        }
        return (entries, roster, directory)
    }

    /// Where the device stands, after reading the roster (and taking any keys sealed to it).
    package func status() async throws -> ProtectionStatus {
        try await holdingKeyringLock(waiting: .seconds(5)) { try await statusHoldingLock() }
    }

    private func statusHoldingLock() async throws -> ProtectionStatus {
        var keyring = try loadKeyring()
        let (_, roster, _) = try await read(&keyring)
        try keyring.write(to: keyringURL)
        guard let roster else { throw KeySetupError(reason: .notInRoster, description: "no device has set up this account's keys yet: `ubiquity login` sets them up") }
        return Self.status(roster, keyring: keyring)
    }

    static func status(_ roster: Roster, keyring: Keyring) -> ProtectionStatus {
        let devices = roster.members.map { ProtectionStatus.Device(id: $0.key, name: $0.value.name, isThisDevice: $0.key == keyring.deviceIdentifier) }
            .sorted { ($0.name, $0.id) < ($1.name, $1.id) }
        return ProtectionStatus(custody: roster.custody, epoch: roster.epoch, devices: devices, removed: roster.removed.count,
                                holdsCurrentKey: roster.members[keyring.deviceIdentifier] != nil && keyring.rootKey(epoch: roster.epoch) != nil,
                                hasRecoveryKey: roster.recovery != nil, escrowed: roster.custody == .standard && roster.escrow != nil,
                                sealedOnly: roster.requiresSealing,
                                webSessions: roster.webSessions.filter { $0.value.until == nil }.sorted { $0.key < $1.key }.map { id, term in
                                    ProtectionStatus.WebSession(id: id, approver: roster.members[term.approver]?.name ?? term.approver, expires: Double(term.expires))
                                })
    }

    /// Makes this device a holder of the account's keys: the first device sets them up (a new
    /// root key, Standard custody with the server's escrow); a later one joins by the escrow
    /// under Standard; under Advanced it needs a device's approval or the recovery key.
    /// - Throws: ``KeySetupError`` `.needsApproval` under Advanced; the server's and the roster's refusals.
    @discardableResult
    package func setUp(deviceName: String) async throws -> ProtectionStatus {
        try await holdingKeyringLock { try await setUpHoldingLock(deviceName: deviceName) }
    }

    /// ``setUp(deviceName:)``, the keyring's lock held.
    func setUpHoldingLock(deviceName: String) async throws -> ProtectionStatus {
        var keyring = try loadKeyring()
        for _ in 0..<5 {
            let (_, roster, directory) = try await read(&keyring)
            if let roster {
                if roster.members[keyring.deviceIdentifier] != nil, keyring.rootKey(epoch: roster.epoch) != nil {
                    try keyring.write(to: keyringURL)
                    return Self.status(roster, keyring: keyring)
                }
                if roster.removed.contains(keyring.deviceIdentifier) {
                    // Removed, and signed in again: it joins as a new device (its old keys never sign again).
                    keyring = Keyring(account: account)
                    continue
                }
                guard roster.members[keyring.deviceIdentifier] == nil else {
                    try keyring.write(to: keyringURL)
                    throw KeySetupError(reason: .noCurrentKey, description: "this device is in the roster but holds no key of epoch \(roster.epoch) yet")
                }
                guard roster.custody == .standard, roster.escrow != nil, directory.escrow != nil else {
                    try keyring.write(to: keyringURL)
                    throw KeySetupError(reason: .needsApproval, description: """
                        the account uses Advanced Data Protection: approve this device on one of the account's devices \
                        (`ubiquity devices approve CODE`), or sign in with --recovery-key
                        """)
                }
                let keys = keyring.device.publicKeys
                let joined = try await client.join(JoinRequest(signing: Data(keys.signing), agreement: Data(keys.agreement), name: deviceName))
                let joinedEntries = try joined.roster.map { try RosterEntry(encoded: $0) }
                let now = try keyring.accept(joinedEntries)
                for refusal in keyring.take(joined.envelopes.map { (UInt32(clamping: $0.epoch), $0.sender, $0.body) }, roster: now) {
                    logger.error("refused a sealed root key the server served", metadata: ["reason": "\(refusal)"])
                }
                try keyring.write(to: keyringURL)
                logger.info("joined the account's keys by the server's escrow", metadata: ["device": "\(keyring.deviceIdentifier)", "epoch": "\(now.epoch)"])
                return Self.status(now, keyring: keyring)
            }
            // The account's first device: genesis, the escrow named, a new root key.
            guard let escrowKeys = directory.escrow else {
                throw KeySetupError(reason: .needsApproval, description: "the server keeps no escrow key: set the account up from a device with Advanced Data Protection (not yet supported here)")
            }
            let escrow = try DevicePublicKeys(signing: Array(escrowKeys.signing), agreement: Array(escrowKeys.agreement))
            let root = AccountRootKey(epoch: 0)
            let genesis = try RosterEntry(.genesis(keys: keyring.device.publicKeys, name: deviceName), after: nil, signedBy: keyring.device)
            let named = try RosterEntry(.escrow(escrow), after: genesis, signedBy: keyring.device)
            let envelopes = [
                try envelope(root, to: keyring.device.publicKeys, named: keyring.deviceIdentifier, from: keyring.device),
                try envelope(root, to: escrow, named: KeyEnvelopeRecord.escrowRecipient, from: keyring.device),
            ]
            do {
                let answer = try await client.appendRoster(RosterAppendRequest(after: 0, entries: [genesis.encoded, named.encoded], envelopes: envelopes))
                let roster = try keyring.accept(try answer.roster.map { try RosterEntry(encoded: $0) })
                keyring.add(root)
                try keyring.write(to: keyringURL)
                logger.info("set up the account's keys (Standard Data Protection)", metadata: ["device": "\(keyring.deviceIdentifier)"])
                return Self.status(roster, keyring: keyring)
            } catch let error as SyncClientError where error.code == "rosterChanged" {
                continue // another device set the account up first: join it
            }
        }
        throw KeySetupError(reason: .notInRoster, description: "the roster kept changing while this device joined: try again")
    }

    /// `root` sealed to `recipient` (filed under `name`), from `sender`.
    func envelope(_ root: AccountRootKey, to recipient: DevicePublicKeys, named name: String, from sender: DeviceKeys) throws -> KeyEnvelopeRecord {
        KeyEnvelopeRecord(epoch: Int64(root.epoch), recipient: name, sender: sender.publicKeys.deviceIdentifier,
                          body: try KeyEnvelope.seal(root, account: account, to: recipient, from: sender))
    }
}
