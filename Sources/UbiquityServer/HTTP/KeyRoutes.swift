import Foundation
import HTTPTypes
import Hummingbird
import Logging
import UbiquityKeys
import UbiquityProtocol

extension KeyDirectoryResponse: ResponseEncodable {}
extension KeyRequestRecord: ResponseEncodable {}
extension SealNowResponse: ResponseEncodable {}
extension KeyRequestsResponse: ResponseEncodable {}

/// The server's escrow key (Standard Data Protection), loaded from its file at start.
struct ServerEscrow: Sendable {
    let key: EscrowKey

    var publicKeys: EscrowPublicKeys {
        EscrowPublicKeys(signing: Data(key.publicKeys.signing), agreement: Data(key.publicKeys.agreement))
    }
}

/// Bounds on what a device may store of its account's keys.
enum KeyLimits {
    /// Entries a roster may reach (each append checks them all).
    static let rosterEntries = 4_096
    /// Entries one request may append.
    static let entriesPerRequest = 64
    /// Envelopes one request may store.
    static let envelopesPerRequest = 1_024
    /// Bytes of one entry or envelope.
    static let objectBytes = 4_096
    /// Holders one `GET /v1/keys` may ask envelopes for.
    static let recipientsPerRequest = 8
    /// How long a request to join waits (seconds).
    static let requestLifetime: Double = 600
    /// Requests to join an account may have waiting.
    static let pendingRequests = 8
    /// Sealed root keys one account may keep (its holders times its epochs, bounded: what a
    /// device of the account can make the server store).
    static let envelopesPerAccount = 65_536
    /// The refusal past ``envelopesPerAccount``.
    static let tooManyEnvelopes = SyncError.badRequest("tooManyEnvelopes", "the account keeps \(envelopesPerAccount) sealed keys, the most it may")
}

extension SyncServices {
    /// `GET /v1/keys`, `POST /v1/keys/roster`, `POST /v1/keys/join`: the account's roster and
    /// sealed root keys, which devices write and the server keeps (it verifies what it can — the
    /// signatures and the chain — and cannot open what is sealed to devices).
    func addKeyRoutes(to v1: RouterGroup<SyncContext>) {
        let keys = v1.group("keys")
        addKeyRequestRoutes(to: keys)
        keys.get { request, context in
            let device = try context.requireDevice()
            let recipients = (request.uri.queryParameters["for"].map(String.init) ?? "").split(separator: ",").map(String.init)
            guard recipients.count <= KeyLimits.recipientsPerRequest else { throw SyncError.badRequest("tooMany", "at most \(KeyLimits.recipientsPerRequest) holders per request") }
            for recipient in recipients { try Self.validateHolder(recipient, field: "for") }
            let stored = try await database.accountKeys(accountId: device.accountId, recipients: recipients)
            return KeyDirectoryResponse(roster: stored.roster, envelopes: stored.envelopes, escrow: escrow?.publicKeys)
        }
        keys.post("roster") { request, context in
            let device = try context.requireDevice()
            let append = try await request.decode(as: RosterAppendRequest.self, context: context)
            guard append.after >= 0, append.after <= KeyLimits.rosterEntries, append.entries.count <= KeyLimits.entriesPerRequest,
                  append.after + append.entries.count <= KeyLimits.rosterEntries, append.envelopes.count <= KeyLimits.envelopesPerRequest else {
                throw SyncError.badRequest("tooMany", "at most \(KeyLimits.entriesPerRequest) entries and \(KeyLimits.envelopesPerRequest) envelopes a request, \(KeyLimits.rosterEntries) entries in all")
            }
            guard append.entries.allSatisfy({ $0.count <= KeyLimits.objectBytes }), append.envelopes.allSatisfy({ $0.body.count <= KeyLimits.objectBytes }) else {
                throw SyncError.badRequest("tooLarge", "a roster entry or envelope is at most \(KeyLimits.objectBytes) bytes")
            }
            for envelope in append.envelopes {
                try Self.validateHolder(envelope.recipient, field: "recipient")
                try Self.validateHolder(envelope.sender, field: "sender")
                guard envelope.epoch >= 0, envelope.epoch <= Int64(UInt32.max) else { throw SyncError.badRequest("invalidEpoch", "an epoch is 0 to \(UInt32.max)") }
            }
            try await checkFormatRaise(append.entries, of: device, logger: context.logger)
            let envelopes = append.envelopes
            let appended = try await database.appendKeys(accountId: device.accountId, after: append.after, entries: append.entries,
                                                         envelopes: envelopes, envelopeLimit: KeyLimits.envelopesPerAccount) { try Self.checkRoster($0, envelopes: envelopes) }
            guard appended else { throw SyncError(.conflict, "rosterChanged", "the roster has changed since entry \(append.after): read it again") }
            notifier.publishKeysChanged(account: device.accountId, except: device.deviceId)
            if append.after == 0, let escrow {
                // The account's first keys: its names from before are indexed by their tags at
                // once, so that the sealed names to come meet them (``SealInPlace``).
                let sealing = SealInPlace(database: database, chunks: chunks, escrow: escrow, logger: context.logger)
                Task { [account = device.accountId, logger = context.logger] in
                    do { _ = try await sealing.reindex(account: account) } catch {
                        logger.warning("cannot index an account's names by their tags yet; the next sealing round will", metadata: ["error": "\(error)"])
                    }
                }
            }
            let stored = try await database.accountKeys(accountId: device.accountId, recipients: [])
            return KeyDirectoryResponse(roster: stored.roster, envelopes: [], escrow: escrow?.publicKeys)
        }
        keys.post("seal-in-place") { _, context in
            // Before a device turns Advanced on: what the server still holds of the account in
            // plaintext (a device that did not seal, revisions too young for the periodic
            // round) is sealed now, while the escrow can — after the switch nothing can.
            let device = try context.requireDevice()
            guard let escrow else { throw SyncError(.conflict, "noEscrow", "this server keeps no escrow key: it seals nothing in place") }
            guard try await custody(ofAccount: device.accountId) == .standard else {
                throw SyncError(.conflict, "notStandard", "the server holds no key of this account: its devices seal")
            }
            var sealing = SealInPlace(database: database, chunks: chunks, escrow: escrow, logger: context.logger)
            sealing.settle = 0
            let report = try await sealing.run(account: device.accountId)
            context.logger.info("sealed an account's plaintext in place before a switch to Advanced",
                                metadata: ["device": "\(device.deviceId)", "revisions": "\(report.revisions)", "left": "\(report.left)"])
            return SealNowResponse(revisions: report.revisions, chunks: report.chunks, left: report.left)
        }
        keys.post("join") { request, context in
            let device = try context.requireDevice()
            let join = try await request.decode(as: JoinRequest.self, context: context)
            guard let escrow else { throw SyncError(.conflict, "noEscrow", "this server keeps no escrow key: a device of the account lets a new one in") }
            let publicKeys: DevicePublicKeys
            do { publicKeys = try DevicePublicKeys(signing: Array(join.signing), agreement: Array(join.agreement)) } catch {
                throw SyncError.badRequest("invalidKeys", "a device's public keys are two 32-byte Curve25519 keys")
            }
            guard !join.name.isEmpty, join.name.utf8.count <= 256 else { throw SyncError.badRequest("invalidName", "a device's name is 1 to 256 bytes") }
            guard let account = try await database.identityToken(ofAccount: device.accountId) else { throw SyncError.unauthorized }
            for _ in 0..<5 {
                let stored = try await database.accountKeys(accountId: device.accountId, recipients: [EscrowKey.escrowRecipient])
                let entries: [RosterEntry]
                do { entries = try stored.roster.map { try RosterEntry(encoded: $0) } } catch {
                    throw SyncError(.conflict, "badRoster", "the account's stored roster does not read: \(error)")
                }
                guard !entries.isEmpty else { throw SyncError(.conflict, "noRoster", "no device has set up this account's keys yet") }
                let admitted: (entry: RosterEntry?, envelopes: [(epoch: UInt32, body: Data)])
                do {
                    admitted = try escrow.key.admit(publicKeys, name: join.name, roster: entries,
                                                    envelopes: stored.envelopes.map { (UInt32(clamping: $0.epoch), $0.sender, $0.body) }, account: account)
                } catch let error as EncryptionError {
                    throw SyncError(.conflict, error.code == .rosterRuleBroken ? "advancedProtection" : "badRoster", error.description)
                }
                let envelopes = admitted.envelopes.map {
                    KeyEnvelopeRecord(epoch: Int64($0.epoch), recipient: publicKeys.deviceIdentifier, sender: EscrowKey.escrowRecipient, body: $0.body)
                }
                let appended = try await database.appendKeys(accountId: device.accountId, after: entries.count, entries: admitted.entry.map { [$0.encoded] } ?? [],
                                                             envelopes: envelopes, envelopeLimit: KeyLimits.envelopesPerAccount) { try Self.checkRoster($0, envelopes: envelopes) }
                if appended {
                    context.logger.info("a device joined its account's roster by the escrow", metadata: ["account": "\(device.accountId)", "device": "\(device.deviceId)"])
                    notifier.publishKeysChanged(account: device.accountId, except: device.deviceId)
                    let roster = admitted.entry.map { stored.roster + [$0.encoded] } ?? stored.roster
                    return KeyDirectoryResponse(roster: roster, envelopes: envelopes, escrow: escrow.publicKeys)
                }
            }
            throw SyncError(.conflict, "rosterChanged", "the roster kept changing: try again")
        }
    }

    /// `POST /v1/keys/requests`, `GET /v1/keys/requests`, `POST /v1/keys/requests/ID/answer`,
    /// `POST /v1/keys/requests/ID/reveal`, `DELETE /v1/keys/requests/ID`: a new device asks to
    /// join by a code. It commits to a nonce; a device of the roster answers with its own; it
    /// reveals; both show a code made of both devices' keys and nonces, which the person compares
    /// by typing it on the device that answered. The server relays and cannot choose a code.
    func addKeyRequestRoutes(to keys: RouterGroup<SyncContext>) {
        let requests = keys.group("requests")
        requests.post { request, context in
            let device = try context.requireDevice()
            let create = try await request.decode(as: KeyRequestCreate.self, context: context)
            guard create.signing.count == 32, create.agreement.count == 32, create.commitment.count == 32 else {
                throw SyncError.badRequest("invalidKeys", "the keys and the commitment are 32 bytes each")
            }
            guard !create.name.isEmpty, create.name.utf8.count <= 256 else { throw SyncError.badRequest("invalidName", "a device's name is 1 to 256 bytes") }
            let now = Date().timeIntervalSince1970
            let record = KeyRequestRecord(id: RandomIdentifier.make(), signing: create.signing, agreement: create.agreement, name: create.name,
                                          commitment: create.commitment, created: now)
            guard try await database.addKeyRequest(accountId: device.accountId, deviceId: device.deviceId, request: record,
                                                   since: now - KeyLimits.requestLifetime, limit: KeyLimits.pendingRequests) else {
                throw SyncError(.tooManyRequests, "tooManyRequests", "the account has \(KeyLimits.pendingRequests) requests to join waiting: answer or let them expire")
            }
            notifier.publishKeyRequest(account: device.accountId, except: device.deviceId)
            return record
        }
        requests.get { _, context in
            let device = try context.requireDevice()
            let pending = try await database.keyRequests(accountId: device.accountId, since: Date().timeIntervalSince1970 - KeyLimits.requestLifetime)
            return KeyRequestsResponse(requests: pending.map(\.request))
        }
        requests.post(":id/answer") { request, context in
            let device = try context.requireDevice()
            let id = try context.parameters.require("id")
            let answer = try await request.decode(as: KeyRequestNonce.self, context: context)
            guard answer.nonce.count == 32, let answerer = answer.answerer else { throw SyncError.badRequest("invalidNonce", "an answer is a 32-byte nonce and the answering device") }
            try Self.validateHolder(answerer, field: "answerer")
            guard try await database.answerKeyRequest(accountId: device.accountId, id: id, answerer: answerer, nonce: answer.nonce,
                                                      since: Date().timeIntervalSince1970 - KeyLimits.requestLifetime) else {
                throw SyncError(.conflict, "notPending", "no such request waits for an answer (answered already, or expired)")
            }
            notifier.publishKeyRequest(account: device.accountId, except: device.deviceId)
            return try await Self.pendingRequest(id, of: device, in: database)
        }
        requests.post(":id/reveal") { request, context in
            let device = try context.requireDevice()
            let id = try context.parameters.require("id")
            let reveal = try await request.decode(as: KeyRequestNonce.self, context: context)
            guard reveal.nonce.count == 32 else { throw SyncError.badRequest("invalidNonce", "a nonce is 32 bytes") }
            guard try await database.revealKeyRequest(accountId: device.accountId, id: id, deviceId: device.deviceId, nonce: reveal.nonce,
                                                      since: Date().timeIntervalSince1970 - KeyLimits.requestLifetime) else {
                throw SyncError(.conflict, "notPending", "no such request of this device waits to be revealed (not answered yet, revealed already, or expired)")
            }
            notifier.publishKeyRequest(account: device.accountId, except: device.deviceId)
            return try await Self.pendingRequest(id, of: device, in: database)
        }
        requests.post(":id/grant") { request, context -> HTTPResponse.Status in
            // A device's answer to a browser it approved (`WebGrant`): kept for the browser's
            // session until it expires (an hour at most), the request gone.
            let device = try context.requireDevice()
            let grant = try await request.decode(as: WebGrantUpload.self, context: context)
            let now = Date().timeIntervalSince1970
            guard grant.body.count <= 1 << 20, grant.signature.count == 64 else { throw SyncError.badRequest("invalidGrant", "a grant is at most 1 MiB, its signature 64 bytes") }
            guard (1...1_000).contains(grant.containers.count) else { throw SyncError.badRequest("invalidGrant", "a grant names 1 to 1,000 containers") }
            for container in grant.containers { try Validate.container(container) }
            guard grant.expires > now, grant.expires <= now + WebGrant.lifetime + 300 else {
                throw SyncError.badRequest("invalidGrant", "a grant lasts at most an hour")
            }
            guard try await database.keepWebGrant(accountId: device.accountId, id: try context.parameters.require("id"), grant: grant,
                                                  since: now - KeyLimits.requestLifetime) else {
                throw SyncError(.conflict, "notPending", "no browser's request waits for a grant there (not revealed yet, or expired)")
            }
            context.logger.info("a device let a browser in", metadata: ["device": "\(device.deviceId)", "containers": "\(grant.containers.count)"])
            return .noContent
        }
        requests.delete(":id") { _, context -> HTTPResponse.Status in
            let device = try context.requireDevice()
            try await database.removeKeyRequest(accountId: device.accountId, id: try context.parameters.require("id"))
            return .noContent
        }
    }

    static func pendingRequest(_ id: String, of device: DeviceAuth, in database: any SyncDatabase) async throws -> KeyRequestRecord {
        let pending = try await database.keyRequests(accountId: device.accountId, since: Date().timeIntervalSince1970 - KeyLimits.requestLifetime)
        guard let found = pending.first(where: { $0.request.id == id }) else { throw SyncError(.conflict, "notPending", "the request expired") }
        return found.request
    }

    /// Refuses a roster that does not verify (the server checks what a device would, so that a
    /// broken or hostile device cannot leave the account a roster its other devices refuse), and
    /// envelopes for holders or epochs the roster does not have (so what is kept stays bounded by
    /// the roster: its holders times its epochs).
    /// Answers whether the escrow's copies go (the custody is Advanced: the server destroys
    /// what it could open).
    static func checkRoster(_ encoded: [Data], envelopes: [KeyEnvelopeRecord]) throws -> Bool {
        let roster: Roster
        do {
            roster = try Roster.verify(try encoded.map { try RosterEntry(encoded: $0) })
        } catch let error as EncryptionError {
            throw SyncError.badRequest("badRoster", error.description)
        }
        for envelope in envelopes {
            let holder = roster.members[envelope.recipient] != nil || (envelope.recipient == KeyEnvelopeRecord.recoveryRecipient && roster.recovery != nil)
                || (envelope.recipient == KeyEnvelopeRecord.escrowRecipient && roster.escrow != nil)
            guard holder, envelope.epoch <= Int64(roster.epoch) else {
                throw SyncError.badRequest("badEnvelope", "an envelope for \(envelope.recipient) in epoch \(envelope.epoch): not a holder of the roster, or past its epoch \(roster.epoch)")
            }
        }
        return roster.custody == .advanced
    }

    /// Refuses entries that raise the account's minimum format past what this server knows
    /// (400 `badRoster`), or to ``Roster/sealedOnlyFormat`` while the server still holds some of
    /// the account in plaintext (409 `plaintextRemains`, saying how much): its devices would
    /// refuse those states and values from then on, and a name nobody can open again is lost.
    func checkFormatRaise(_ encoded: [Data], of device: DeviceAuth, logger: Logger) async throws {
        let raised = encoded.compactMap { bytes -> UInt8? in
            guard let entry = try? RosterEntry(encoded: bytes), case .minimumFormat(let format) = entry.change else { return nil }
            return format
        }.max()
        guard let raised else { return }
        guard raised <= Roster.newestFormat else {
            throw SyncError.badRequest("badRoster", "format \(raised) is newer than this server knows (\(Roster.newestFormat)): update the server first")
        }
        guard raised >= Roster.sealedOnlyFormat else { return }
        let left = try await database.plaintextLeft(accountId: device.accountId)
        guard left.revisions + left.values == 0 else {
            logger.notice("refused to require everything sealed while plaintext is left", metadata: ["revisions": "\(left.revisions)", "values": "\(left.values)"])
            throw SyncError(.conflict, "plaintextRemains", "the server still holds \(left.revisions) revisions and \(left.values) key-value values of the account in plaintext: "
                            + "under Standard it seals revisions in place (`ubiquity protection require-sealed` asks it to first), and a device's agent seals the values when it syncs their store")
        }
    }

    /// A holder's name: a device identifier (32 hexadecimal digits), `escrow` or `recovery`.
    static func validateHolder(_ holder: String, field: String) throws {
        let isIdentifier = holder.utf8.count == 32 && holder.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
        guard isIdentifier || holder == KeyEnvelopeRecord.escrowRecipient || holder == KeyEnvelopeRecord.recoveryRecipient else {
            throw SyncError.badRequest("invalidHolder", "\(field) is a device identifier (32 hexadecimal digits), escrow or recovery")
        }
    }
}
