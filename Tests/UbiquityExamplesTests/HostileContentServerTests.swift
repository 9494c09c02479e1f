import Foundation
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

    @Test(arguments: Attack.allCases) func thePhoneRefusesTheLieAndKeepsWhatItHad(attack: Attack) async throws {
        let setup = try await HostileKeyServerTests.Setup()
        defer { setup.tearDown() }
        let (laptop, phone, relay) = (setup.laptop, setup.phone, setup.phoneRelay)
        // Both agents seal; each looks at its container every second (the relay carries no
        // pushes: the phone learns of changes by asking).
        for device in [laptop, phone] { try Self.seal(device) }
        let laptopAgent = try Agent(laptop, in: setup.dir), phoneAgent = try Agent(phone, in: setup.dir)
        defer { laptopAgent.stop(); phoneAgent.stop() }
        // (Asked of the agents on a thread of its own: never one of the two the in-process tests share.)
        let (onLaptop, onPhone) = try await onOwnThread {
            (try Self.documents(of: laptop).appendingPathComponent("Data.bin"), try Self.documents(of: phone).appendingPathComponent("Data.bin"))
        }
        let first = randomBytes(200_000)
        try FileManager.default.createDirectory(at: onLaptop.deletingLastPathComponent(), withIntermediateDirectories: true)
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
        try await laptopAgent.stopped() // before the server and the relays go
        try await phoneAgent.stopped()
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
        let setup = try await HostileKeyServerTests.Setup()
        defer { setup.tearDown() }
        let (laptop, phone, relay) = (setup.laptop, setup.phone, setup.phoneRelay)
        for device in [laptop, phone] { try Self.seal(device) }
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
}
