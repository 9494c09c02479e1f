import Foundation

/// Where a device last saw the roster end: the index and hash of its last entry.
public struct RosterHead: Hashable, Sendable {
    /// The last entry's index.
    public var index: UInt64
    /// The last entry's hash.
    public var hash: [UInt8]

    /// A head.
    public init(index: UInt64, hash: [UInt8]) {
        self.index = index
        self.hash = hash
    }
}

/// The account as its roster says it is.
public struct Roster: Sendable, Equatable {
    /// A device of the account.
    public struct Member: Sendable, Equatable {
        /// Its public keys.
        public var keys: DevicePublicKeys
        /// Its name.
        public var name: String
    }

    /// The devices, by identifier.
    public private(set) var members: [String: Member] = [:]
    /// Devices once in the roster and removed (never to sign again, nor to come back with the
    /// same keys), with the index of the entry that removed each.
    public private(set) var removedAt: [String: UInt64] = [:]
    /// The devices removed.
    public var removed: Set<String> { Set(removedAt.keys) }
    /// Every device that was ever in the roster, with its keys (commits made before a removal stay valid).
    public private(set) var everyDevice: [String: DevicePublicKeys] = [:]
    /// The current epoch.
    public private(set) var epoch: UInt32 = 0
    /// Who holds the root key.
    public private(set) var custody: Custody = .standard
    /// The oldest format the account accepts (``mixedFormat`` until a device raises it; never
    /// lowered, and only by a device of the roster).
    public private(set) var minimumFormat: UInt8 = 1
    /// The server's escrow key while the custody is Standard (nil under Advanced, or before a
    /// device names it).
    public private(set) var escrow: DevicePublicKeys?
    /// The recovery key's public half, if the account has one.
    public private(set) var recovery: DevicePublicKeys?
    /// Each escrow key the roster ever named, with the stretches of entries it was the escrow
    /// under Standard custody: from the entry that named it to the one that named another, or
    /// switched to Advanced (nil: still the escrow). What it signed naming a roster head in
    /// one of them stays valid, as a removed device's earlier commits do.
    public private(set) var escrowTerms: [String: [EscrowTerm]] = [:]

    /// The browsers let in under Advanced Data Protection, by their keys' identifier: each may
    /// sign commits (the page's changes) from the entry that added it until the one that ended
    /// it (``RosterChange/addWebSession(keys:expires:)``).
    public private(set) var webSessions: [String: WebSessionTerm] = [:]

    /// A browser's stretch of the roster.
    public struct WebSessionTerm: Sendable, Equatable {
        /// Its public keys.
        public var keys: DevicePublicKeys
        /// The device that let it in.
        public var approver: String
        /// The entry that added it.
        public var from: UInt64
        /// When its grant ends (seconds since 1970): a device ends the session after it.
        public var expires: UInt64
        /// The entry that ended it (nil: not ended).
        public var until: UInt64?
    }

    /// The browser's keys if `identifier` is a web session whose term holds roster entry `index`.
    public func webSessionKeys(_ identifier: String, at index: UInt64) -> DevicePublicKeys? {
        guard let term = webSessions[identifier], term.from <= index, term.until.map({ index < $0 }) ?? true else { return nil }
        return term.keys
    }

    /// The web sessions not ended whose grants expired before `now` (seconds since 1970).
    public func expiredWebSessions(now: Double) -> [String] {
        webSessions.filter { $0.value.until == nil && Double($0.value.expires) < now }.keys.sorted()
    }

    /// A stretch of the roster during which a key was the escrow.
    public struct EscrowTerm: Sendable, Equatable {
        /// Its public keys.
        public var keys: DevicePublicKeys
        /// The entry that named it.
        public var from: UInt64
        /// The entry that ended it (nil: not ended).
        public var until: UInt64?
    }

    /// The escrow's keys if `identifier` was the escrow under Standard custody at roster entry
    /// `index`; nil otherwise.
    public func escrowKeys(_ identifier: String, at index: UInt64) -> DevicePublicKeys? {
        escrowTerms[identifier]?.first { $0.from <= index && $0.until.map { index < $0 } ?? true }?.keys
    }

    /// A signer's stretch of the roster that has ended: a removed device's membership, or a
    /// term of an escrow key. Its key may still sign a commit naming an entry from before
    /// the end (what it signed then stays valid), so the account's devices close its chains
    /// there (``CommitLedger``, "closing commits" in docs/Encryption.md).
    public struct EndedTerm: Hashable, Sendable {
        /// The device or escrow key.
        public var signer: String
        /// The entry that ended it.
        public var until: UInt64

        /// An ended term.
        public init(signer: String, until: UInt64) {
            self.signer = signer
            self.until = until
        }
    }

    /// Every ended term: each removed device's, and each escrow term that was followed by
    /// another escrow key or by Advanced custody.
    public var endedTerms: Set<EndedTerm> {
        var ended = Set(removedAt.map { EndedTerm(signer: $0.key, until: $0.value) })
        for (identifier, terms) in escrowTerms {
            for term in terms { if let until = term.until { ended.insert(EndedTerm(signer: identifier, until: until)) } }
        }
        for (identifier, term) in webSessions { if let until = term.until { ended.insert(EndedTerm(signer: identifier, until: until)) } }
        return ended
    }

    /// Ends the open web sessions `which` selects at entry `index`.
    private mutating func endWebSessions(at index: UInt64, where which: (WebSessionTerm) -> Bool) {
        for (identifier, term) in webSessions where term.until == nil && which(term) { webSessions[identifier]?.until = index }
    }

    /// Ends the present escrow's term at entry `index`.
    private mutating func endEscrowTerm(at index: UInt64) {
        guard let identifier = escrow?.deviceIdentifier, var terms = escrowTerms[identifier], terms.last?.until == nil else { return }
        terms[terms.count - 1].until = index
        escrowTerms[identifier] = terms
    }
    /// The last entry.
    public private(set) var head: RosterHead

    private init(head: RosterHead) { self.head = head }

    /// Checks `entries` — the whole roster, as the server served it — and returns the account
    /// they describe.
    ///
    /// Refused: a first entry that is not a self-signed genesis; an entry out of place (index,
    /// previous hash); a signature that does not verify, or a signer not in the roster at that
    /// point (a removed device included); a device added under an identifier that is not its
    /// keys'; a device added twice or removed when absent; an epoch that does not go up by
    /// one; a minimum format lowered; and, when `pinned` is given, a roster that does not
    /// contain that head (rolled back, forked or rewritten).
    /// - Parameters:
    ///   - entries: The roster.
    ///   - pinned: The head this device saw last.
    /// - Throws: ``EncryptionError`` naming the entry and the rule.
    public static func verify(_ entries: [RosterEntry], pinned: RosterHead? = nil) throws -> Roster {
        guard let first = entries.first else { throw EncryptionError(.rosterRuleBroken, "the roster is empty") }
        guard first.index == 0, first.previous == Array(repeating: 0, count: 32), case .genesis(let keys, let name) = first.change,
              first.signer == keys.deviceIdentifier, keys.isValidSignature(first.signature, for: first.signedBytes) else {
            throw EncryptionError(.rosterRuleBroken, "the roster does not begin with a genesis signed by its own device")
        }
        var roster = Roster(head: RosterHead(index: 0, hash: first.hash))
        roster.members[first.signer] = Member(keys: keys, name: name)
        roster.everyDevice[first.signer] = keys
        var previous = first
        for entry in entries.dropFirst() {
            guard entry.index == previous.index + 1, entry.previous == previous.hash else {
                throw EncryptionError(.rosterNotExtended, "roster entry \(entry.index) is out of place (reordered, dropped or spliced)")
            }
            guard let signer = roster.signingKeys(of: entry), signer.isValidSignature(entry.signature, for: entry.signedBytes) else {
                throw EncryptionError(.badSignature, "roster entry \(entry.index) is not signed by a device of the roster")
            }
            try roster.apply(entry)
            roster.head = RosterHead(index: entry.index, hash: entry.hash)
            previous = entry
        }
        if let pinned {
            guard pinned.index < UInt64(entries.count), entries[Int(pinned.index)].hash == pinned.hash else {
                throw EncryptionError(.rosterNotExtended, pinned.index >= UInt64(entries.count)
                    ? "the roster ends at entry \(entries.count - 1), before entry \(pinned.index) this device saw: rolled back"
                    : "roster entry \(pinned.index) is not the one this device saw: a forked or rewritten roster")
            }
        }
        return roster
    }

    /// The keys that may sign `entry`: a device's of the roster, or the escrow's for adding a
    /// device while the custody is Standard (a password sign-in); nil for anyone else.
    private func signingKeys(of entry: RosterEntry) -> DevicePublicKeys? {
        if let member = members[entry.signer] { return member.keys }
        guard case .addDevice = entry.change else { return nil }
        if let escrow, custody == .standard, escrow.deviceIdentifier == entry.signer { return escrow }
        if let recovery, recovery.deviceIdentifier == entry.signer { return recovery }
        return nil
    }

    private mutating func apply(_ entry: RosterEntry) throws {
        func broken(_ rule: String) -> EncryptionError { EncryptionError(.rosterRuleBroken, "roster entry \(entry.index): \(rule)") }
        switch entry.change {
        case .genesis:
            throw broken("a second genesis")
        case .addDevice(let keys, let name):
            let identifier = keys.deviceIdentifier
            guard members[identifier] == nil, removedAt[identifier] == nil else { throw broken("adds a device that is or was in the roster") }
            guard identifier != escrow?.deviceIdentifier, identifier != recovery?.deviceIdentifier else { throw broken("adds the escrow or recovery key as a device") }
            guard webSessions[identifier] == nil else { throw broken("adds a browser's keys as a device") }
            members[identifier] = Member(keys: keys, name: name)
            everyDevice[identifier] = keys
        case .removeDevice(let identifier):
            guard members.removeValue(forKey: identifier) != nil else { throw broken("removes a device that is not in the roster") }
            guard !members.isEmpty else { throw broken("removes the last device") }
            removedAt[identifier] = entry.index
            epoch += 1
            // What it let in goes with it.
            endWebSessions(at: entry.index) { $0.approver == identifier }
        case .newEpoch(let next):
            guard next == epoch + 1 else { throw broken("epoch \(next) does not follow epoch \(epoch)") }
            epoch = next
        case .custody(let next):
            guard next != custody else { throw broken("the custody is already \(next)") }
            if next == .advanced {
                // The server's copy is destroyed: a new root key it never sees, and no escrow.
                epoch += 1
                endEscrowTerm(at: entry.index)
                escrow = nil
            } else {
                // (Under Standard the server signs the page's changes: no browser signs.)
                endWebSessions(at: entry.index) { _ in true }
            }
            custody = next
        case .escrow(let keys):
            guard keys == nil || custody == .standard else { throw broken("names an escrow key under Advanced custody") }
            if let identifier = keys?.deviceIdentifier, members[identifier] != nil || removedAt[identifier] != nil || webSessions[identifier] != nil || identifier == recovery?.deviceIdentifier {
                throw broken("names a device's or the recovery key's keys as the escrow key")
            }
            endEscrowTerm(at: entry.index)
            escrow = keys
            if let keys { escrowTerms[keys.deviceIdentifier, default: []].append(EscrowTerm(keys: keys, from: entry.index, until: nil)) }
        case .recovery(let keys):
            if let identifier = keys?.deviceIdentifier, members[identifier] != nil || removedAt[identifier] != nil || webSessions[identifier] != nil || identifier == escrow?.deviceIdentifier {
                throw broken("names a device's or the escrow's keys as the recovery key")
            }
            recovery = keys
        case .addWebSession(let keys, let expires):
            let identifier = keys.deviceIdentifier
            guard custody == .advanced else { throw broken("lets a browser in under Standard custody (the server signs the page's changes there)") }
            guard members[identifier] == nil, removedAt[identifier] == nil, webSessions[identifier] == nil,
                  identifier != escrow?.deviceIdentifier, identifier != recovery?.deviceIdentifier else {
                throw broken("lets in a browser whose keys are or were another's in the roster")
            }
            webSessions[identifier] = WebSessionTerm(keys: keys, approver: entry.signer, from: entry.index, expires: expires, until: nil)
        case .endWebSession(let identifier):
            guard webSessions[identifier]?.until == nil, webSessions[identifier] != nil else { throw broken("ends a browser's session that is not open") }
            webSessions[identifier]?.until = entry.index
        case .minimumFormat(let format):
            guard format >= minimumFormat else { throw broken("lowers the minimum format from \(minimumFormat) to \(format)") }
            minimumFormat = format
        }
    }
}

// MARK: The account's format

extension Roster {
    /// Format 1, where every account starts: what its devices seal is sealed in format 1, and
    /// what was stored before the account had keys — an item without a sealed record, a
    /// key-value pair in plaintext — is still taken (the server seals it in place under Standard).
    public static let mixedFormat: UInt8 = 1
    /// Format 2: every item's record and every key-value value is sealed. A state or a value
    /// served in plaintext is then a downgrade — the server choosing a name, or putting in a
    /// file or a folder of its own — and is refused by devices and by the server alike; devices
    /// seal contents whatever their configuration says. A device raises the account to it once
    /// the server holds nothing of the account in plaintext (`ubiquity protection require-sealed`).
    public static let sealedOnlyFormat: UInt8 = 2
    /// The newest account format this build knows: a roster that requires a newer one asks for
    /// a newer build before anything is synced (it would not keep rules it does not know).
    public static let newestFormat: UInt8 = 2

    /// Whether every item record and key-value value must be sealed (``sealedOnlyFormat``).
    public var requiresSealing: Bool { minimumFormat >= Self.sealedOnlyFormat }

    /// Whether this build knows the rules of the roster's minimum format.
    public var formatIsKnown: Bool { minimumFormat <= Self.newestFormat }
}
