import Foundation
import Synchronization
import Testing
import Ubiquity
import UbiquityProtocol
import UbiquityTestSupport

/// A lying server against a sealed container's contents (agents with `sealedContents` on), told
/// through a relay in front of the phone: the chunks it serves for a new version of a file are
/// changed in transit, or swapped — each one's sealed bytes served under the other's name (the
/// server keeps the SHA-256 of what it stores, so only the device can tell). The phone refuses
/// them, says so in its log, and keeps the version it had; once the relay tells the truth again,
/// the new version arrives (nothing was lost).
@Suite(.serialized) struct HostileContentServerTests {
    typealias Device = DataProtectionCommandTests.Device
    typealias Agent = HostileKeyValueServerTests.Agent
    static let container = "ABCDE12345.com.example.notes"

    enum Attack: String, CaseIterable, Sendable {
        /// A bit of a sealed chunk flipped.
        case chunkChanged
        /// Two sealed chunks of the file, each served under the other's name.
        case chunksSwapped
    }

    /// The device's container folder's `Documents`, as its apps see it.
    static func documents(of device: Device) throws -> URL {
        let containers = UbiquityContainers(paths: UbiquityPaths(environment: device.home), entitlements: UbiquityEntitlements(containers: [container]))
        return try #require(containers.url(forContainer: container)).appendingPathComponent("Documents")
    }

    /// Has `device`'s agent seal the container and look at it every second (the relay carries
    /// no pushes: the phone learns of changes by asking).
    static func seal(_ device: Device) throws {
        let settings = URL(fileURLWithPath: try #require(device.home["XDG_CONFIG_HOME"])).appendingPathComponent("ubiquity/agent.json")
        try FileManager.default.createDirectory(at: settings.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(#"{"containers": ["\#(container)"], "greedy": true, "sealedContents": true, "rescanSeconds": 1}"#.utf8).write(to: settings)
    }

    /// The hostile setup, both devices' agents sealing and looking at their containers every
    /// second (the relay carries no pushes: the phone learns of changes by asking).
    static func sealedSetup() async throws -> HostileKeyServerTests.Setup {
        let setup = try await HostileKeyServerTests.Setup()
        for device in [setup.laptop, setup.phone] { try seal(device) }
        return setup
    }

    /// Runs `body` with both sealing agents running behind the hostile setup: the phone's relay,
    /// where the laptop and the phone keep `file` in their containers' `Documents` (its folder
    /// made), and the phone's agent (its log). The agents stop before the server and the relays.
    static func withSealedAgents(file: String, _ body: (HostileRelay, URL, URL, Agent) async throws -> Void) async throws {
        let setup = try await sealedSetup()
        defer { setup.tearDown() }
        let laptopAgent = try Agent(setup.laptop, in: setup.dir), phoneAgent = try Agent(setup.phone, in: setup.dir)
        defer { laptopAgent.stop(); phoneAgent.stop() }
        // (Asked of the agents on a thread of its own: never one of the two the in-process tests share.)
        let (laptop, phone) = (setup.laptop, setup.phone)
        let (onLaptop, onPhone) = try await onOwnThread {
            (try documents(of: laptop).appendingPathComponent(file), try documents(of: phone).appendingPathComponent(file))
        }
        try FileManager.default.createDirectory(at: onLaptop.deletingLastPathComponent(), withIntermediateDirectories: true)
        try await body(setup.phoneRelay, onLaptop, onPhone, phoneAgent)
        try await laptopAgent.stopped()
        try await phoneAgent.stopped()
    }

    @Test(arguments: Attack.allCases) func thePhoneRefusesTheLieAndKeepsWhatItHad(attack: Attack) async throws {
        try await Self.withSealedAgents(file: "Data.bin") { relay, onLaptop, onPhone, phoneAgent in
            let first = randomBytes(200_000)
            try first.write(to: onLaptop)
            #expect(await eventuallyValue(seconds: 60) { (try? Data(contentsOf: onPhone)) == first ? true : nil } == true, "\(phoneAgent.logged.suffix(2000))")

            // From now on the relay lies about every batch of chunks it serves the phone.
            let told = Told()
            relay.tamper.withLock {
                $0 = { exchange in
                    guard exchange.method == "POST", exchange.path.hasPrefix("/v1/chunks/fetch"), exchange.status == 200,
                          var batch = try? ChunkBatch(decoding: [UInt8](exchange.body), maximumChunkSize: 16 << 20), !batch.chunks.isEmpty else { return exchange }
                    switch attack {
                    case .chunkChanged:
                        let middle = batch.chunks[0].bytes.startIndex + batch.chunks[0].bytes.count / 2
                        batch.chunks[0].bytes[middle] ^= 0x01
                    case .chunksSwapped:
                        guard batch.chunks.count >= 2 else { return exchange }
                        (batch.chunks[0].bytes, batch.chunks[1].bytes) = (batch.chunks[1].bytes, batch.chunks[0].bytes)
                    }
                    told.count.withLock { $0 += 1 }
                    var lie = exchange
                    lie.body = Data(batch.encoded())
                    return lie
                }
            }
            let second = randomBytes(200_000)
            try second.write(to: onLaptop)
            #expect(try await HostileKeyValueServerTests.until(phoneAgent, logs: "is not the chunk asked for"), "\(phoneAgent.logged.suffix(3000))")
            #expect(told.count.withLock { $0 } > 0, "the lie was told")
            #expect(try Data(contentsOf: onPhone) == first, "the phone keeps the version it had")

            // The truth again: the new version arrives.
            relay.tamper.withLock { $0 = nil }
            #expect(await eventuallyValue(seconds: 60) { (try? Data(contentsOf: onPhone)) == second ? true : nil } == true, "\(phoneAgent.logged.suffix(2000))")
        }
    }

    enum RecordAttack: String, CaseIterable, Sendable {
        /// Two items' sealed records (and name tags) swapped in a page of changes: each file
        /// shown under the other's name.
        case recordsSwapped
        /// A file in a folder shown at the top instead (its record is bound to its folder).
        case movedToAnotherFolder
        /// A record shown beside another name's tag.
        case tagChanged
    }

    /// Sealed records at a running agent (issue 45): a page of changes whose records the server
    /// swapped, moved or relabelled is refused whole — logged, and not one file is written
    /// under a name it was not given — and once the truth is told every file arrives.
    @Test(arguments: RecordAttack.allCases) func thePhoneRefusesARecordTheServerMovedOrSwapped(attack: RecordAttack) async throws {
        let setup = try await Self.sealedSetup()
        defer { setup.tearDown() }
        let (laptop, phone, relay) = (setup.laptop, setup.phone, setup.phoneRelay)
        // Every page the phone is served is a lie from the start.
        let told = Told()
        relay.rewrite(ChangesResponse.self, where: { $0.contains("/changes") }) { page in
            let files = page.items.indices.filter { page.items[$0].kind == .file && page.items[$0].record != nil }
            switch attack {
            case .recordsSwapped:
                guard files.count >= 2 else { return }
                let (a, b) = (files[0], files[1])
                (page.items[a].record, page.items[b].record) = (page.items[b].record, page.items[a].record)
                (page.items[a].name, page.items[b].name) = (page.items[b].name, page.items[a].name)
            case .movedToAnotherFolder:
                guard let inner = files.first(where: { page.items[$0].parent != nil }) else { return }
                page.items[inner].parent = nil
            case .tagChanged:
                guard files.count >= 2 else { return }
                page.items[files[0]].name = page.items[files[1]].name
            }
            told.count.withLock { $0 += 1 }
        }
        let laptopAgent = try Agent(laptop, in: setup.dir), phoneAgent = try Agent(phone, in: setup.dir)
        defer { laptopAgent.stop(); phoneAgent.stop() }
        let (onLaptop, onPhone) = try await onOwnThread { (try Self.documents(of: laptop), try Self.documents(of: phone)) }
        let files = ["Folder/Inner.txt": "inside", "One.txt": "the first", "Two.txt": "the second"]
        try FileManager.default.createDirectory(at: onLaptop.appendingPathComponent("Folder"), withIntermediateDirectories: true)
        for (name, text) in files { try Data(text.utf8).write(to: onLaptop.appendingPathComponent(name)) }

        #expect(try await HostileKeyValueServerTests.until(phoneAgent, logs: "a page of changes was refused"), "\(phoneAgent.logged.suffix(3000))")
        #expect(told.count.withLock { $0 } > 0, "the lie was told")
        for (name, text) in files {
            let there = try? String(contentsOf: onPhone.appendingPathComponent(name), encoding: .utf8)
            #expect(there == nil || there == text, "\(name) holds another file's contents: \(there ?? "")")
        }

        // The truth: every file arrives, each under its own name.
        relay.tamper.withLock { $0 = nil }
        #expect(await eventuallyValue(seconds: 60) {
            files.allSatisfy { (try? String(contentsOf: onPhone.appendingPathComponent($0.key), encoding: .utf8)) == $0.value } ? true : nil
        } == true, "\(phoneAgent.logged.suffix(2000))")
        try await laptopAgent.stopped()
        try await phoneAgent.stopped()
    }

    enum HistoryAttack: String, CaseIterable, Sendable {
        /// A file's older revision served again (its record, as first served) after the laptop
        /// signed a newer one.
        case olderRevisionServedAgain
        /// The laptop's newer revision left out of the pages.
        case changeHidden
    }

    /// Signed commits at a running agent (issue 45): a page of changes that serves a file's
    /// older revision again, or leaves out the newer one the laptop signed, is refused — logged,
    /// the file kept as it was — and once the truth is told the newer revision arrives. The lies
    /// records cannot refuse: the older record is genuine, sealed by the laptop.
    @Test(arguments: HistoryAttack.allCases) func thePhoneRefusesAnOlderRevisionServedAgainOrAChangeHidden(attack: HistoryAttack) async throws {
        try await Self.withSealedAgents(file: "Note.txt") { relay, onLaptop, onPhone, phoneAgent in
            try Data("the first".utf8).write(to: onLaptop)
            #expect(await eventuallyValue(seconds: 60) { (try? String(contentsOf: onPhone, encoding: .utf8)) == "the first" ? true : nil } == true,
                    "\(phoneAgent.logged.suffix(2000))")

            // The note as the phone was first served it (the server's answers, as the relay saw them).
            let pages = relay.exchanges.withLock { $0 }.filter { $0.path.contains("/changes") }.compactMap { $0.decoded(ChangesResponse.self) }
            let original = try #require(pages.lazy.compactMap { $0.items.first { $0.kind == .file && $0.record != nil } }.first)
            // From now on the phone is shown the note as it was first, or not at all — in pages of
            // changes and when it asks for the note by id.
            let told = Told()
            relay.tamper.withLock {
                $0 = { exchange in
                    @Sendable func lie(_ items: inout [ItemState]) -> Bool {
                        guard let index = items.firstIndex(where: { $0.id == original.id && $0.revision != original.revision }) else { return false }
                        switch attack {
                        case .olderRevisionServedAgain: items[index] = original
                        case .changeHidden: items.remove(at: index)
                        }
                        told.count.withLock { $0 += 1 }
                        return true
                    }
                    var served = exchange
                    if exchange.path.contains("/changes"), var page = exchange.decoded(ChangesResponse.self), lie(&page.items) {
                        served.encode(page)
                    } else if exchange.path.contains("/fetch"), var answer = exchange.decoded(ItemsResponse.self), lie(&answer.items) {
                        served.encode(answer)
                    }
                    return served
                }
            }
            try Data("the second".utf8).write(to: onLaptop)
            #expect(try await HostileKeyValueServerTests.until(phoneAgent, logs: "a change hidden"), "\(phoneAgent.logged.suffix(3000))")
            #expect(told.count.withLock { $0 } > 0, "the lie was told")
            #expect(try String(contentsOf: onPhone, encoding: .utf8) == "the first", "the phone keeps the version it had")

            // The truth: the newer revision arrives.
            relay.tamper.withLock { $0 = nil }
            #expect(await eventuallyValue(seconds: 60) { (try? String(contentsOf: onPhone, encoding: .utf8)) == "the second" ? true : nil } == true,
                    "\(phoneAgent.logged.suffix(2000))")
        }
    }
}
