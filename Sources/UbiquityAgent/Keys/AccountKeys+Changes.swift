import Foundation
import UbiquityKeys
import UbiquityProtocol

extension AccountKeys {
    /// Appends `changes` to the roster, signed by this device (which must be in it and hold the
    /// current key). When they start a new epoch, a new root key goes with them, sealed to every
    /// holder the roster then has: its devices, the escrow under Standard, the recovery key.
    /// `envelopes` adds others (given the keyring). Retried when another device appended first.
    /// - Returns: The roster after the change, and the keyring.
    @discardableResult
    func change(_ changes: @escaping (Roster, Keyring) throws -> [RosterChange],
                envelopes: (Roster, Keyring) throws -> [KeyEnvelopeRecord] = { _, _ in [] }) async throws -> (Roster, Keyring) {
        try await holdingKeyringLock { try await changeHoldingLock(changes, envelopes: envelopes) }
    }

    func changeHoldingLock(_ changes: @escaping (Roster, Keyring) throws -> [RosterChange],
                                   envelopes: (Roster, Keyring) throws -> [KeyEnvelopeRecord]) async throws -> (Roster, Keyring) {
        var keyring = try loadKeyring()
        for _ in 0..<5 {
            let (entries, read, _) = try await self.read(&keyring)
            guard let before = read, before.members[keyring.deviceIdentifier] != nil else {
                throw KeySetupError(reason: .notInRoster, description: "this device is not in the account's roster: `ubiquity login` sets it up")
            }
            var signed: [RosterEntry] = []
            for change in try changes(before, keyring) {
                signed.append(try RosterEntry(change, after: signed.last ?? entries.last, signedBy: keyring.device))
            }
            let after = try Roster.verify(entries + signed)
            var sealed = try envelopes(after, keyring)
            if after.epoch != before.epoch {
                let root = AccountRootKey(epoch: after.epoch)
                keyring.add(root)
                sealed += try holders(of: after).map { try envelope(root, to: $0.keys, named: $0.name, from: keyring.device) }
            }
            do {
                let answer = try await client.appendRoster(RosterAppendRequest(after: entries.count, entries: signed.map(\.encoded), envelopes: sealed))
                let roster = try keyring.accept(try answer.roster.map { try RosterEntry(encoded: $0) })
                try keyring.write(to: keyringURL)
                return (roster, keyring)
            } catch let error as SyncClientError where error.code == "rosterChanged" {
                keyring = try loadKeyring() // the new root key was not stored: made again on the next turn
                continue
            }
        }
        throw KeySetupError(reason: .notInRoster, description: "the roster kept changing: try again")
    }

    /// Who holds a copy of the root key under `roster`: its devices, the escrow it names (Standard
    /// only), the recovery key.
    func holders(of roster: Roster) -> [(name: String, keys: DevicePublicKeys)] {
        var holders = roster.members.map { (name: $0.key, keys: $0.value.keys) }
        if roster.custody == .standard, let escrow = roster.escrow {
            holders.append((KeyEnvelopeRecord.escrowRecipient, escrow))
        }
        if let recovery = roster.recovery { holders.append((KeyEnvelopeRecord.recoveryRecipient, recovery)) }
        return holders
    }

    /// Turns Advanced Data Protection on (a new epoch the server never sees; its escrow copies
    /// are destroyed) or back off (the server's escrow key named again and sealed every epoch
    /// this device holds, so the web and password sign-in work again).
    @discardableResult
    package func setCustody(_ custody: Custody) async throws -> ProtectionStatus {
        let escrow: DevicePublicKeys?
        if custody == .standard {
            guard let served = try await client.keyDirectory(for: []).escrow else {
                throw KeySetupError(reason: .needsApproval, description: "the server keeps no escrow key, so Standard Data Protection is not possible there")
            }
            escrow = try DevicePublicKeys(signing: Array(served.signing), agreement: Array(served.agreement))
        } else {
            escrow = nil
            // What the server still holds in plaintext is sealed first, while it holds the
            // escrow's keys: after the switch nothing could, and it would stay readable there for good.
            try await sealServersPlaintext(before: "the switch")
        }
        let (roster, keyring) = try await change({ roster, _ in
            guard roster.custody != custody else { return [] }
            return custody == .advanced ? [.custody(.advanced)] : [.custody(.standard), .escrow(escrow)]
        }, envelopes: { roster, keyring in
            guard custody == .standard, let escrow = roster.escrow else { return [] }
            return try keyring.epochs.compactMap { keyring.rootKey(epoch: $0) }.map {
                try envelope($0, to: escrow, named: KeyEnvelopeRecord.escrowRecipient, from: keyring.device)
            }
        })
        logger.info("changed the account's data protection", metadata: ["custody": "\(roster.custody)", "epoch": "\(roster.epoch)"])
        return Self.status(roster, keyring: keyring)
    }

    /// Has the server seal in place what it still holds of the account in plaintext (a device
    /// that did not seal, an older build's, revisions too young for its periodic round) — under
    /// Standard, with its escrow's keys; nothing to do where it has none.
    private func sealServersPlaintext(before what: String) async throws {
        do {
            let sealed = try await client.sealInPlaceNow()
            logger.info("the server sealed the account's plaintext in place", metadata: ["before": "\(what)", "revisions": "\(sealed.revisions)", "left": "\(sealed.left)"])
            if sealed.left > 0 {
                logger.warning("the server left revisions in plaintext (a chunk they name is missing or damaged)", metadata: ["left": "\(sealed.left)"])
            }
        } catch let error as SyncClientError where ["noEscrow", "notStandard"].contains(error.code) {
            // (No escrow: nothing was ever sealed by the server, nor can be; Advanced: its devices seal.)
        }
    }

    /// Raises the account to ``Roster/sealedOnlyFormat``, for good: from then on its devices
    /// take no item state or key-value value in plaintext (one served is a downgrade, refused
    /// and logged), seal contents whatever their configuration says, and the server takes no
    /// plaintext name or value either. The server first seals in place what it still holds in
    /// plaintext (under Standard); it refuses the change (`plaintextRemains`) while anything is
    /// left — a device's agent seals an older build's key-value values when it syncs their store.
    @discardableResult
    package func requireSealing() async throws -> ProtectionStatus {
        try await sealServersPlaintext(before: "requiring everything sealed")
        let (roster, keyring) = try await change { roster, _ in
            roster.requiresSealing ? [] : [.minimumFormat(Roster.sealedOnlyFormat)]
        }
        logger.info("the account's devices require everything sealed", metadata: ["format": "\(roster.minimumFormat)"])
        return Self.status(roster, keyring: keyring)
    }

    /// Removes a device from the roster: a new epoch begins, whose key it never gets.
    /// - Parameter identifier: The device's identifier (or a unique prefix of it, or its unique name).
    @discardableResult
    package func removeDevice(_ identifier: String) async throws -> ProtectionStatus {
        let (roster, keyring) = try await change { roster, keyring in
            let matches = roster.members.filter { $0.key == identifier || $0.key.hasPrefix(identifier) || $0.value.name == identifier }
            guard matches.count == 1, let match = matches.first else {
                throw KeySetupError(reason: .notInRoster, description: matches.isEmpty ? "no device of the roster is “\(identifier)”" : "“\(identifier)” names \(matches.count) devices: give more of the identifier")
            }
            guard match.key != keyring.deviceIdentifier else {
                throw KeySetupError(reason: .notInRoster, description: "this device cannot remove itself: remove it from another device, or sign out")
            }
            return [.removeDevice(identifier: match.key)]
        }
        return Self.status(roster, keyring: keyring)
    }

    /// Makes a new recovery key (replacing any other, and then starting a new epoch the old one
    /// never gets) and seals it every epoch's key this device holds. Show the key to the person
    /// once: nothing else keeps it.
    package func createRecoveryKey() async throws -> (RecoveryKey, ProtectionStatus) {
        let recoveryKey = RecoveryKey()
        let keys = recoveryKey.deviceKeys(account: account).publicKeys
        let (roster, keyring) = try await change({ roster, _ in
            roster.recovery == nil ? [.recovery(keys)] : [.recovery(keys), .newEpoch(roster.epoch + 1)]
        }, envelopes: { _, keyring in
            // Every epoch this device held before (a new one is sealed to the recovery key with the rest).
            try keyring.epochs.compactMap { keyring.rootKey(epoch: $0) }.map {
                try envelope($0, to: keys, named: KeyEnvelopeRecord.recoveryRecipient, from: keyring.device)
            }
        })
        return (recoveryKey, Self.status(roster, keyring: keyring))
    }

    /// Lets this device in with the recovery key (any custody): the recovery key signs the entry
    /// adding it, and every epoch's key sealed to the recovery key is sealed again to it.
    /// - Throws: ``KeySetupError`` `.noRecoveryKey` when the account has no recovery key or this
    ///   is not it; ``EncryptionError`` when a sealed key does not open.
    @discardableResult
    package func useRecoveryKey(_ recoveryKey: RecoveryKey, deviceName: String) async throws -> ProtectionStatus {
        try await holdingKeyringLock { try await useRecoveryKeyHoldingLock(recoveryKey, deviceName: deviceName) }
    }

    private func useRecoveryKeyHoldingLock(_ recoveryKey: RecoveryKey, deviceName: String) async throws -> ProtectionStatus {
        var keyring = try loadKeyring()
        let signer = recoveryKey.deviceKeys(account: account)
        for _ in 0..<5 {
            let (entries, read, directory) = try await self.read(&keyring, holders: [KeyEnvelopeRecord.recoveryRecipient])
            guard let roster = read, roster.recovery == signer.publicKeys else {
                throw KeySetupError(reason: .noRecoveryKey, description: "this is not the account's recovery key (or the account has none)")
            }
            var signed: [RosterEntry] = []
            if roster.members[keyring.deviceIdentifier] == nil {
                signed.append(try RosterEntry(.addDevice(keys: keyring.device.publicKeys, name: deviceName), after: entries.last, signedBy: signer))
            }
            var sealed: [KeyEnvelopeRecord] = []
            for record in directory.envelopes where record.recipient == KeyEnvelopeRecord.recoveryRecipient {
                guard let sender = roster.everyDevice[record.sender] else { continue } // not sealed by a device: not trusted
                let root = try KeyEnvelope.open(record.body, account: account, recipient: signer, sender: sender)
                keyring.add(root)
                sealed.append(try envelope(root, to: keyring.device.publicKeys, named: keyring.deviceIdentifier, from: keyring.device))
            }
            do {
                let answer = try await client.appendRoster(RosterAppendRequest(after: entries.count, entries: signed.map(\.encoded), envelopes: sealed))
                let now = try keyring.accept(try answer.roster.map { try RosterEntry(encoded: $0) })
                try keyring.write(to: keyringURL)
                logger.info("joined the account's keys with the recovery key", metadata: ["device": "\(keyring.deviceIdentifier)", "epoch": "\(now.epoch)"])
                return Self.status(now, keyring: keyring)
            } catch let error as SyncClientError where error.code == "rosterChanged" {
                continue
            }
        }
        throw KeySetupError(reason: .notInRoster, description: "the roster kept changing: try again")
    }
}
