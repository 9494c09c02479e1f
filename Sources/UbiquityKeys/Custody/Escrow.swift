import Foundation

/// The server's escrow key under Standard Data Protection: a key pair in a file of the server's
/// own (mode 0600, never in its database), to which devices seal the account's root key so that
/// a password sign-in, the web interface and public links work. Under Advanced it is out of the
/// roster and holds nothing.
public struct EscrowKey: Sendable {
    /// The key pair (an Ed25519 key to sign the entries that add devices, an X25519 key to open
    /// the root keys sealed to it).
    public let keys: DeviceKeys

    /// An escrow key of these keys (one read from its file, or made for a test).
    public init(keys: DeviceKeys) { self.keys = keys }

    /// The key in `url`, or a new one written there (with its folder, mode 0700) if there is no
    /// file: `created` says which.
    /// - Throws: ``EncryptionError`` `.keyFileUnusable` for a file others can read, of another
    ///   format or damaged (never replaced: every account's escrow copies need it).
    public static func loadOrCreate(at url: URL) throws -> (key: EscrowKey, created: Bool) {
        if FileManager.default.fileExists(atPath: url.path) { return (EscrowKey(keys: try DeviceKeys(contentsOf: url)), false) }
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let keys = DeviceKeys()
        try keys.write(to: url)
        return (EscrowKey(keys: keys), true)
    }

    /// The public half (what devices seal to and the roster names).
    public var publicKeys: DevicePublicKeys { keys.publicKeys }

    /// What the escrow does when a device signed in by password asks to join: an entry adding
    /// it to the roster, signed by the escrow, and every epoch's root key the escrow holds
    /// sealed to it (so it reads what was written before it came).
    ///
    /// Refused unless the roster verifies, its custody is Standard and its escrow key is this
    /// one: under Advanced only the account's devices or its recovery key let a device in.
    /// - Parameters:
    ///   - device: The joining device's public keys.
    ///   - name: Its name.
    ///   - roster: The account's roster entries, in order.
    ///   - envelopes: The escrow's envelopes (recipient ``escrowRecipient``), by epoch, each with its sender.
    ///   - account: The account's identity (what every envelope is bound to).
    /// - Returns: The new entry (nil when the device is already in the roster) and the envelopes
    ///   for it, by epoch.
    /// - Throws: ``EncryptionError``: the roster's refusal, `.rosterRuleBroken` under Advanced
    ///   or for another escrow, `.authenticationFailed` for an envelope that does not open.
    public func admit(_ device: DevicePublicKeys, name: String, roster entries: [RosterEntry],
                      envelopes: [(epoch: UInt32, sender: String, body: Data)], account: String) throws -> (entry: RosterEntry?, envelopes: [(epoch: UInt32, body: Data)]) {
        let roster = try Roster.verify(entries)
        guard roster.custody == .standard, roster.escrow == publicKeys else {
            throw EncryptionError(.rosterRuleBroken, roster.custody == .advanced
                ? "the account uses Advanced Data Protection: a device of the account or the recovery key lets a new device in"
                : "the account's roster does not name this server's escrow key")
        }
        let entry: RosterEntry? = roster.members[device.deviceIdentifier] == nil
            ? try RosterEntry(.addDevice(keys: device, name: name), after: entries.last, signedBy: keys) : nil
        let sealed = try open(envelopes, roster: roster, account: account).map { root in
            (root.epoch, try KeyEnvelope.seal(root, account: account, to: device, from: keys))
        }
        return (entry, sealed)
    }

    /// The root keys the escrow holds for an account under Standard: what the server opens
    /// values with for the web interface (never stored, never logged).
    /// - Parameters:
    ///   - entries: The account's roster entries, in order.
    ///   - envelopes: The escrow's envelopes, by epoch, each with its sender.
    ///   - account: The account's identity.
    /// - Throws: ``EncryptionError``: the roster's refusal, `.rosterRuleBroken` under Advanced or
    ///   for another escrow, `.authenticationFailed` for an envelope that does not open.
    public func rootKeys(roster entries: [RosterEntry], envelopes: [(epoch: UInt32, sender: String, body: Data)], account: String) throws -> [AccountRootKey] {
        let roster = try Roster.verify(entries)
        guard roster.custody == .standard, roster.escrow == publicKeys else {
            throw EncryptionError(.rosterRuleBroken, "the account's keys are not in this server's escrow")
        }
        return try open(envelopes, roster: roster, account: account)
    }

    /// The envelopes sealed to the escrow by devices the roster vouches for, opened.
    private func open(_ envelopes: [(epoch: UInt32, sender: String, body: Data)], roster: Roster, account: String) throws -> [AccountRootKey] {
        try envelopes.compactMap { envelope in
            guard let sender = roster.everyDevice[envelope.sender] else { return nil } // sealed by no device of the roster: not trusted
            let root = try KeyEnvelope.open(envelope.body, account: account, recipient: keys, sender: sender)
            guard root.epoch == envelope.epoch else { throw EncryptionError(.authenticationFailed, "an escrow envelope filed under epoch \(envelope.epoch) holds epoch \(root.epoch)") }
            return root
        }
    }

    /// The recipient name of envelopes sealed to the escrow.
    public static let escrowRecipient = "escrow"
}
