import Foundation
import Testing
import UbiquityKeys
import UbiquityProtocol
import UbiquityTestSupport

/// A server that lies about the account's keys, with real devices (the `ubiquity` commands)
/// behind a ``HostileRelay`` each: every answer a malicious server could give about the roster,
/// the sealed keys and requests to join is refused by the device, with the failure named, and
/// nothing the device holds is changed by it.
@Suite struct HostileKeyServerTests {
    typealias Device = DataProtectionCommandTests.Device

    /// The attacks, one test each.
    enum Attack: String, CaseIterable, Sendable {
        case rosterRolledBack, rosterForkedBySwallowingAnAppend, strangerInjectedIntoRoster, deviceRenamedInRoster, rosterEntryDowngraded
        case escrowAddsADeviceUnderAdvanced, envelopeOfAnotherDeviceServed, envelopeFromAStranger, joinAnsweredByAStranger, revealedNonceSubstituted
        case joinSignedByAForgedEscrow, recoveryEnvelopeChanged, newEpochKeyWithheld, deviceAddedByAStrangerDuringApproval
    }

    /// A server, a relay for each device, the laptop (the account's first device) and the phone
    /// (joined by the escrow), both signed in through their relays.
    struct Setup {
        let dir: TemporaryDirectory
        let server: RunningServer
        let laptopRelay: HostileRelay, phoneRelay: HostileRelay
        let laptop: Device, phone: Device

        init() async throws {
            dir = try TemporaryDirectory("hostile-keys")
            server = try await RunningServer.start(data: dir.file("data").path)
            laptopRelay = try await HostileRelay.start(to: server.base)
            phoneRelay = try await HostileRelay.start(to: server.base)
            laptop = Device("laptop", in: dir)
            phone = Device("phone", in: dir)
            let first = try await laptop.loggingIn(laptopRelay.base), second = try await phone.loggingIn(phoneRelay.base)
            #expect(first.status == 0 && second.status == 0, "\(first.output)\n\(second.output)")
        }

        func tearDown() {
            laptopRelay.stop()
            phoneRelay.stop()
            server.stop()
            dir.remove()
        }
    }

    /// Changes the roster in every `GET /v1/keys` answer.
    static func rewriteRoster(_ relay: HostileRelay, _ change: @escaping @Sendable ([Data]) -> [Data]) {
        relay.rewriteDirectories { $0.roster = change($0.roster) }
    }

    /// Expects `ubiquity protection status` on `device` to refuse, naming `words`.
    static func refuses(_ device: Device, naming words: String) async throws {
        let status = try await device.running(["protection", "status"])
        #expect(status.status == 2 && status.output.contains(words), "\(status.output)")
    }

    @Test(arguments: Attack.allCases) func theDeviceRefusesTheLie(attack: Attack) async throws {
        let setup = try await Setup()
        defer { setup.tearDown() }
        let (laptop, phone) = (setup.laptop, setup.phone)
        switch attack {
        case .rosterRolledBack:
            // The phone saw three entries; the server serves two.
            Self.rewriteRoster(setup.phoneRelay) { Array($0.dropLast()) }
            try await Self.refuses(phone, naming: "rolled back")

        case .rosterForkedBySwallowingAnAppend:
            // The phone makes a recovery key (entry 3, stored); the server hides it from the laptop
            // and pretends to store the laptop's own entry 3 (turning Advanced on): two histories.
            #expect(try await phone.running(["recovery-key", "create"]).status == 0)
            Self.rewriteRoster(setup.laptopRelay) { Array($0.prefix(3)) }
            setup.laptopRelay.intercept.withLock {
                $0 = { exchange in
                    guard exchange.method == "POST", exchange.path == "/v1/keys/roster",
                          let append = try? JSONDecoder().decode(RosterAppendRequest.self, from: exchange.requestBody) else { return nil }
                    var faked = exchange
                    faked.status = 200
                    let seen = setup.laptopRelay.lastDirectory
                    faked.encode(KeyDirectoryResponse(roster: Array((seen?.roster ?? []).prefix(3)) + append.entries, envelopes: [], escrow: nil))
                    return faked
                }
            }
            let believed = try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"])
            #expect(believed.status == 0, "\(believed.output)")
            setup.laptopRelay.intercept.withLock { $0 = nil }
            setup.laptopRelay.tamper.withLock { $0 = nil }
            try await Self.refuses(laptop, naming: "forked or rewritten")

        case .strangerInjectedIntoRoster:
            let stranger = DeviceKeys()
            Self.rewriteRoster(setup.phoneRelay) { roster in
                guard let last = roster.last.flatMap({ try? RosterEntry(encoded: $0) }),
                      let added = try? RosterEntry(.addDevice(keys: stranger.publicKeys, name: "server"), after: last, signedBy: stranger) else { return roster }
                return roster + [added.encoded]
            }
            try await Self.refuses(phone, naming: "not signed by a device of the roster")

        case .deviceRenamedInRoster:
            Self.rewriteRoster(setup.phoneRelay) { roster in
                guard let entry = try? RosterEntry(encoded: roster[2]), case .addDevice(let keys, _) = entry.change else { return roster }
                var changed = roster
                changed[2] = RosterEntry(index: entry.index, previous: entry.previous, change: .addDevice(keys: keys, name: "evil"),
                                         signer: entry.signer, signature: entry.signature).encoded
                return changed
            }
            try await Self.refuses(phone, naming: "not signed by a device of the roster")

        case .rosterEntryDowngraded:
            Self.rewriteRoster(setup.phoneRelay) { roster in
                var changed = roster
                changed[0][0] = 0
                return changed
            }
            try await Self.refuses(phone, naming: "format 0")

        case .escrowAddsADeviceUnderAdvanced:
            // The server keeps its escrow key's file: after Advanced it signs a device in anyway.
            #expect(try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"]).status == 0)
            let escrow = try DeviceKeys(contentsOf: setup.dir.file("data/escrow.key"))
            Self.rewriteRoster(setup.phoneRelay) { roster in
                guard let last = roster.last.flatMap({ try? RosterEntry(encoded: $0) }),
                      let added = try? RosterEntry(.addDevice(keys: DeviceKeys().publicKeys, name: "lawful access"), after: last, signedBy: escrow) else { return roster }
                return roster + [added.encoded]
            }
            try await Self.refuses(phone, naming: "not signed by a device of the roster")

        case .envelopeOfAnotherDeviceServed, .envelopeFromAStranger:
            // Advanced: epoch 1, sealed by the laptop to each device. The phone is served the
            // laptop's copy, or its own claimed from a device the roster does not know.
            #expect(try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"]).status == 0)
            let laptopID = try await laptop.identifying()
            let laptopCopy = try await setup.server.envelope(recipient: laptopID, epoch: 1)
            setup.phoneRelay.rewriteDirectories { directory in
                for index in directory.envelopes.indices where directory.envelopes[index].epoch == 1 {
                    if attack == .envelopeOfAnotherDeviceServed { directory.envelopes[index].body = laptopCopy } else { directory.envelopes[index].sender = String(repeating: "e", count: 32) }
                }
            }
            let status = try await phone.running(["protection", "status"])
            #expect(status.output.contains("does not hold the current key"), "\(status.output)")
            #expect(status.output.contains(attack == .envelopeOfAnotherDeviceServed ? "does not open" : "does not vouch for"), "the refusal is logged: \(status.output)")

        case .joinAnsweredByAStranger:
            // Advanced; a new device's request is "answered" by a device the roster does not have.
            #expect(try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"]).status == 0)
            let tablet = Device("tablet", in: setup.dir)
            let relay = try await HostileRelay.start(to: setup.server.base)
            defer { relay.stop() }
            relay.rewriteRequests { request in
                request.answerer = String(repeating: "f", count: 32)
                request.answerNonce = Data(repeating: 9, count: 32)
            }
            let login = try await tablet.loggingIn(relay.base)
            #expect(login.status == 2 && login.output.contains("not a device of the account's roster"), "\(login.output)")

        case .revealedNonceSubstituted:
            // The new device's revealed nonce is changed on its way to the laptop: the code the
            // person types matches nothing (the nonce is not the one committed to).
            #expect(try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"]).status == 0)
            let tablet = Device("tablet", in: setup.dir)
            let (waiting, lines) = try JoinByCodeTests().startLogin(tablet, setup.server)
            defer { waiting.terminate() }
            var answered = try await laptop.running(["devices", "approve"])
            for _ in 0..<20 where !answered.output.contains("answered tablet") {
                try await Task.sleep(for: .milliseconds(200))
                answered = try await laptop.running(["devices", "approve"])
            }
            let shown = try #require(await lines.waitFor(timeout: 20) { $0.contains("devices approve") }, "\(lines.all)")
            setup.laptopRelay.rewriteRequests { $0.revealNonce = Data(repeating: 7, count: 32) }
            let refused = try await laptop.running(["devices", "approve", String(shown.split(separator: "approve ").last ?? "")])
            #expect(refused.status == 2 && refused.output.contains("no device waiting to join shows the code"), "\(refused.output)")

        case .joinSignedByAForgedEscrow:
            // A third device signs in by password; the server answers its join with an entry
            // signed by a key of its choosing, not the escrow the roster names.
            let tablet = Device("tablet", in: setup.dir)
            let relay = try await HostileRelay.start(to: setup.server.base)
            defer { relay.stop() }
            let forger = DeviceKeys()
            relay.intercept.withLock {
                $0 = { exchange in
                    guard exchange.path == "/v1/keys/join", let join = try? JSONDecoder().decode(JoinRequest.self, from: exchange.requestBody),
                          let seen = relay.lastDirectory,
                          let last = seen.roster.last.flatMap({ try? RosterEntry(encoded: $0) }),
                          let keys = try? DevicePublicKeys(signing: Array(join.signing), agreement: Array(join.agreement)),
                          let added = try? RosterEntry(.addDevice(keys: keys, name: join.name), after: last, signedBy: forger) else { return nil }
                    var faked = exchange
                    faked.status = 200
                    faked.encode(KeyDirectoryResponse(roster: seen.roster + [added.encoded], envelopes: [], escrow: seen.escrow))
                    return faked
                }
            }
            let login = try await tablet.loggingIn(relay.base)
            #expect(login.status == 2 && login.output.contains("not signed by a device of the roster"), "\(login.output)")

        case .recoveryEnvelopeChanged:
            // The sealed copy for the recovery key is changed on its way to a device using it.
            let created = try await laptop.running(["recovery-key", "create"])
            let recoveryKey = try #require(created.output.split(separator: "\n").map(String.init).first { $0.split(separator: "-").count == 14 })
            setup.phoneRelay.rewriteDirectories { directory in
                for index in directory.envelopes.indices where directory.envelopes[index].recipient == "recovery" {
                    directory.envelopes[index].body[directory.envelopes[index].body.count - 1] ^= 1
                }
            }
            let used = try await phone.running(["recovery-key", "use"], input: recoveryKey + "\n")
            #expect(used.status == 2 && used.output.contains("does not open"), "\(used.output)")

        case .newEpochKeyWithheld:
            // Advanced (epoch 1); the server withholds the phone's key of epoch 1: the phone says
            // it does not hold the current key (and keeps what it had), never that it does.
            #expect(try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"]).status == 0)
            setup.phoneRelay.rewriteDirectories { $0.envelopes.removeAll { $0.epoch == 1 } }
            let status = try await phone.running(["protection", "status"])
            #expect(status.status == 0 && status.output.contains("does not hold the current key") && status.output.contains("epoch:      1"), "\(status.output)")

        case .deviceAddedByAStrangerDuringApproval:
            // A device waits to join an Advanced account; the server, instead of a device's
            // approval, serves it a roster in which a stranger added it: it keeps waiting, then gives up.
            #expect(try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"]).status == 0)
            let tablet = Device("tablet", in: setup.dir)
            let relay = try await HostileRelay.start(to: setup.server.base)
            defer { relay.stop() }
            let stranger = DeviceKeys()
            relay.tamper.withLock {
                $0 = { exchange in
                    if exchange.path == "/v1/keys/requests", var listed = exchange.decoded(KeyRequestsResponse.self) {
                        // "Answered" by the laptop, so the tablet goes on to wait for its approval.
                        let seen = relay.lastDirectory
                        let laptopID = seen?.roster.first.flatMap { try? RosterEntry(encoded: $0) }?.signer
                        listed.requests = listed.requests.map { var request = $0; request.answerer = laptopID; request.answerNonce = Data(repeating: 3, count: 32); return request }
                        var changed = exchange
                        changed.encode(listed)
                        return changed
                    }
                    guard exchange.path.hasPrefix("/v1/keys?"), var directory = exchange.decoded(KeyDirectoryResponse.self),
                          let request = relay.exchanges.withLock({ $0.last { $0.path == "/v1/keys/requests" && $0.method == "POST" } }),
                          let asked = try? JSONDecoder().decode(KeyRequestCreate.self, from: request.requestBody),
                          let keys = try? DevicePublicKeys(signing: Array(asked.signing), agreement: Array(asked.agreement)),
                          let last = directory.roster.last.flatMap({ try? RosterEntry(encoded: $0) }),
                          let added = try? RosterEntry(.addDevice(keys: keys, name: "tablet"), after: last, signedBy: stranger) else { return exchange }
                    directory.roster.append(added.encoded)
                    var changed = exchange
                    changed.encode(directory)
                    return changed
                }
            }
            let login = try await tablet.loggingIn(relay.base)
            #expect(login.status == 2 && login.output.contains("not signed by a device of the roster"), "\(login.output)")
        }
        // Whatever the lie, the laptop's own view, asked honestly, still holds.
        setup.laptopRelay.tamper.withLock { $0 = nil }
        setup.laptopRelay.intercept.withLock { $0 = nil }
        if attack != .rosterForkedBySwallowingAnAppend {
            #expect(try await laptop.running(["protection", "status"]).status == 0)
        }
    }
}

extension HostileRelay {
    /// From now on, every key directory (`GET /v1/keys`) reaches the device changed by `change`.
    func rewriteDirectories(_ change: @escaping @Sendable (inout KeyDirectoryResponse) -> Void) {
        rewrite(KeyDirectoryResponse.self, where: { $0 == "/v1/keys" || $0.hasPrefix("/v1/keys?") }, change)
    }

    /// From now on, every request to join listed (`GET /v1/keys/requests`) is changed by `change`.
    func rewriteRequests(_ change: @escaping @Sendable (inout KeyRequestRecord) -> Void) {
        rewrite(KeyRequestsResponse.self, where: { $0 == "/v1/keys/requests" }) { listed in
            for index in listed.requests.indices { change(&listed.requests[index]) }
        }
    }

    /// The last key directory the server answered.
    var lastDirectory: KeyDirectoryResponse? { last(KeyDirectoryResponse.self) { $0.hasPrefix("/v1/keys?") } }
}

extension DataProtectionCommandTests.Device {
    /// ``run(_:input:)`` on a thread of its own: the relay in this process answers meanwhile (a
    /// blocked task would hold one of the few threads Swift's tasks share).
    func running(_ arguments: [String], input: String = "") async throws -> (status: Int32, output: String) {
        let home = self.home
        return try await onOwnThread { try runUbiquity(arguments, environment: home, input: input) }
    }

    /// ``login(_:recoveryKey:)`` on a thread of its own.
    func loggingIn(_ base: URL, recoveryKey: String? = nil) async throws -> (status: Int32, output: String) {
        let device = self
        return try await onOwnThread { try device.login(base, recoveryKey: recoveryKey) }
    }

    /// ``identifier()`` on a thread of its own.
    func identifying() async throws -> String {
        let device = self
        return try await onOwnThread { try device.identifier() }
    }
}

extension RunningServer {
    /// The sealed root key of `epoch` for `recipient`, read from the server's database (what a
    /// malicious server has at hand).
    func envelope(recipient: String, epoch: Int) async throws -> Data {
        let directory = try await request("v1/keys?for=\(recipient)", token: try await token())
        let decoded = try JSONDecoder().decode(KeyDirectoryResponse.self, from: Data(directory.1.utf8))
        return try #require(decoded.envelopes.first { $0.recipient == recipient && $0.epoch == Int64(epoch) }).body
    }
}
