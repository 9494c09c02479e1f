import Foundation
import UbiquityKeys
import UbiquityProtocol

/// A new device's request to join, shown on it as a code to type on the device that answered.
package struct PendingJoin: Sendable, Equatable {
    /// The request's id.
    package var id: String
    /// The code (eight digits, `1234 5678`).
    package var code: String
    /// The name of the device the code is to be typed on.
    package var approver: String
}

extension AccountKeys {
    /// The new device's side of joining by a code: asks, waits for a device of the roster to
    /// answer (`answered` gets the code and that device's name to show), reveals its nonce, and
    /// waits until it is in the roster and holds the current key.
    /// - Parameters:
    ///   - deviceName: This device's name in the roster.
    ///   - timeout: How long to wait for each step (the server keeps a request ten minutes).
    ///   - answered: Called once with the code to show.
    /// - Throws: ``KeySetupError`` when nobody answers or approves in time; the roster's refusals.
    @discardableResult
    package func joinByCode(deviceName: String, timeout: Duration = .seconds(600), poll: Duration = .milliseconds(500),
                            answered: @Sendable (PendingJoin) -> Void) async throws -> ProtectionStatus {
        try await holdingKeyringLock { try await joinByCodeHoldingLock(deviceName: deviceName, timeout: timeout, poll: poll, answered: answered) }
    }

    private func joinByCodeHoldingLock(deviceName: String, timeout: Duration, poll: Duration, answered: @Sendable (PendingJoin) -> Void) async throws -> ProtectionStatus {
        var keyring = try loadKeyring()
        try keyring.write(to: keyringURL) // the keys the request names are the ones this device keeps
        let keys = keyring.device.publicKeys
        let nonce = JoinCode.nonce()
        let commitment = JoinCode.commitment(to: nonce, joining: keys)
        let request = try await client.requestToJoin(KeyRequestCreate(signing: Data(keys.signing), agreement: Data(keys.agreement), name: deviceName,
                                                                      commitment: Data(commitment)))
        let clock = ContinuousClock()
        var deadline = clock.now + timeout
        var answer: KeyRequestRecord?
        while answer == nil {
            answer = try await client.keyRequests().first { $0.id == request.id && $0.answerer != nil }
            if answer == nil {
                guard clock.now < deadline else { throw KeySetupError(reason: .needsApproval, description: "no device of the account answered in time: is one of them online (its agent running)?") }
                try await Task.sleep(for: poll)
            }
        }
        guard let answer, let answerer = answer.answerer, let answerNonce = answer.answerNonce else { throw KeySetupError(reason: .needsApproval, description: "the request was not answered") }
        // Only a device of the roster gets this device's nonce (and so a code to be typed on it).
        let (_, read, _) = try await self.read(&keyring)
        guard let roster = read, let approver = roster.members[answerer] else {
            throw KeySetupError(reason: .needsApproval, description: "the request was answered by \(answerer), which is not a device of the account's roster")
        }
        _ = try await client.revealKeyRequest(request.id, nonce: nonce)
        let code = try JoinCode.code(existing: approver.keys, joining: keys, existingNonce: Array(answerNonce), joiningNonce: nonce, commitment: commitment)
        answered(PendingJoin(id: request.id, code: code, approver: approver.name))
        deadline = clock.now + timeout
        while true {
            let (_, now, _) = try await self.read(&keyring)
            if let now, now.members[keyring.deviceIdentifier] != nil, keyring.rootKey(epoch: now.epoch) != nil {
                try keyring.write(to: keyringURL)
                logger.info("joined the account's keys by a code", metadata: ["device": "\(keyring.deviceIdentifier)", "epoch": "\(now.epoch)"])
                return Self.status(now, keyring: keyring)
            }
            guard clock.now < deadline else {
                try keyring.write(to: keyringURL)
                throw KeySetupError(reason: .needsApproval, description: "the code was not approved in time on \(approver.name)")
            }
            try await Task.sleep(for: poll)
        }
    }

    /// The roster device's side: answers every request nobody has answered yet with this
    /// device's nonce for it (what the agent does when it hears of one), so the new device can
    /// show its code. Nothing is approved here.
    /// - Returns: The requests answered.
    @discardableResult
    package func answerRequests() async throws -> [KeyRequestRecord] {
        var keyring = try loadKeyring()
        let (_, read, _) = try await self.read(&keyring)
        guard let roster = read, roster.members[keyring.deviceIdentifier] != nil, keyring.rootKey(epoch: roster.epoch) != nil else { return [] }
        var answered: [KeyRequestRecord] = []
        for request in try await client.keyRequests() where request.answerer == nil {
            let nonce = JoinCode.answerNonce(device: keyring.device, request: request.id, commitment: Array(request.commitment))
            do {
                answered.append(try await client.answerKeyRequest(request.id, nonce: nonce, answerer: keyring.deviceIdentifier))
            } catch let error as SyncClientError where error.code == "notPending" {
                continue // another device answered first
            }
        }
        return answered
    }

    /// Approves the new device whose code is `code`: among the requests this device answered and
    /// whose nonce was revealed, the one whose code matches joins the roster (signed by this
    /// device) with every epoch's key this device holds. A browser's request (under Advanced
    /// Data Protection) joins nothing: it gets the keys of `containers` (nil: every container
    /// of the account) in every epoch this device holds, for an hour (``WebGrant``).
    /// - Returns: The device or browser approved, and where the account stands.
    /// - Throws: ``KeySetupError`` `.notInRoster` when no request shows that code.
    package func approve(code: String, containers: [String]? = nil) async throws -> (name: String, status: ProtectionStatus) {
        let typed = code.filter(\.isNumber)
        let keyring = try loadKeyring()
        let me = keyring.device.publicKeys
        var match: KeyRequestRecord?
        for request in try await client.keyRequests() where request.answerer == keyring.deviceIdentifier {
            guard let reveal = request.revealNonce, let joining = try? DevicePublicKeys(signing: Array(request.signing), agreement: Array(request.agreement)) else { continue }
            let nonce = JoinCode.answerNonce(device: keyring.device, request: request.id, commitment: Array(request.commitment))
            guard let shown = try? JoinCode.code(existing: me, joining: joining, existingNonce: nonce, joiningNonce: Array(reveal), commitment: Array(request.commitment)) else {
                logger.error("refused a request to join whose nonce is not the one it committed to", metadata: ["request": "\(request.id)"])
                continue
            }
            if shown.filter(\.isNumber) == typed { match = request }
        }
        guard let match, let joining = try? DevicePublicKeys(signing: Array(match.signing), agreement: Array(match.agreement)) else {
            throw KeySetupError(reason: .notInRoster, description: "no device waiting to join shows the code \(code) for this device")
        }
        if match.kind == KeyRequestRecord.browserKind { return try await grant(match, browser: joining, containers: containers) }
        let (roster, after) = try await change({ roster, _ in
            roster.members[joining.deviceIdentifier] == nil ? [.addDevice(keys: joining, name: match.name)] : []
        }, envelopes: { _, keyring in
            try keyring.epochs.compactMap { keyring.rootKey(epoch: $0) }.map {
                try envelope($0, to: joining, named: joining.deviceIdentifier, from: keyring.device)
            }
        })
        try? await client.removeKeyRequest(match.id) // done with; it expires anyway
        return (match.name, Self.status(roster, keyring: after))
    }

    /// Gives the browser of `request` the keys of `containers` (nil: all of the account's) in
    /// every epoch this device holds, sealed to it and signed, for ``WebGrant/lifetime``.
    private func grant(_ request: KeyRequestRecord, browser: DevicePublicKeys, containers: [String]?) async throws -> (name: String, status: ProtectionStatus) {
        var keyring = try loadKeyring()
        let (_, read, _) = try await self.read(&keyring)
        guard let roster = read, roster.members[keyring.deviceIdentifier] != nil else {
            throw KeySetupError(reason: .notInRoster, description: "this device is not in the account's roster: it cannot let a browser in")
        }
        var allowed = containers ?? []
        if containers == nil { allowed = try await client.containerList() }
        guard !allowed.isEmpty else { throw KeySetupError(reason: .notInRoster, description: "the account has no container to open in a browser yet") }
        let expires = (Date().timeIntervalSince1970 + WebGrant.lifetime).rounded(.down)
        // Under Advanced the browser signs the page's changes: the roster lets its key in until
        // the grant ends (then a device that reads the keys ends the session: `SessionKeys`).
        var session: WebGrant.Contents.Session?
        if roster.custody == .advanced {
            let (after, changed) = try await change { roster, _ in
                roster.webSessions[browser.deviceIdentifier] == nil ? [.addWebSession(keys: browser, expires: UInt64(expires))] : []
            }
            keyring = changed
            guard let term = after.webSessions[browser.deviceIdentifier], term.until == nil else {
                throw KeySetupError(reason: .notInRoster, description: "the browser's session is over: let it ask again")
            }
            let (entries, _, _) = try await self.read(&keyring)
            guard term.from < UInt64(entries.count) else { throw KeySetupError(reason: .notInRoster, description: "the roster the server serves ends before the browser's entry") }
            session = .init(index: term.from, hash: Data(entries[Int(term.from)].hash))
        }
        let roots = keyring.epochs.compactMap { keyring.rootKey(epoch: $0) }
        let contents = WebGrant.Contents(format: Int(WebGrant.format), account: account, expires: expires,
                                         keys: allowed.flatMap { container in roots.map { WebGrant.ContainerKeys($0, container: container) } }, session: session)
        let sealed = try WebGrant.seal(contents, to: browser, signedBy: keyring.device)
        try await client.grantBrowser(request.id, WebGrantUpload(body: sealed.body, signature: sealed.signature, containers: allowed, expires: expires))
        logger.info("let a browser in", metadata: ["containers": "\(allowed.count)", "epochs": "\(roots.count)"])
        return ("a web browser, for an hour, with the keys of \(allowed.count) container(s): \(allowed.joined(separator: ", "))", Self.status(roster, keyring: keyring))
    }
}
