import Foundation
import Testing
import UbiquityAgentProtocol
import UbiquityClient
import UbiquityKeys
import UbiquityProtocol
import UbiquityTestSupport
@testable import UbiquityAgent

/// The keys of sharing between real agents (issue 46, docs/Sharing.md "Keys"): each account's
/// devices publish one sharing identity; the owner's device seals the share's key to each
/// participant who accepted, whose devices open it; both people see the same code; a key the
/// server swaps in is refused until the people compare codes again; a new epoch when someone
/// is removed.
@Suite struct SharingKeysTests {
    let notes = "ABCDE12345.com.example.notes"

    /// What `device`'s agent says of the share `id` (`ubiquity shares list`).
    static func summary(_ device: UbiquityContainers, _ id: String) async throws -> ShareSummary? {
        try await onOwnThread { try device.agent.send(AgentRequest(.shares), timeout: .seconds(60)).shares?.first { $0.id == id } }
    }

    /// Waits up to a minute until `device` says of share `id` what `condition` wants; the last
    /// summary seen.
    static func awaitSummary(_ device: UbiquityContainers, _ id: String, _ condition: (ShareSummary) -> Bool) async throws -> ShareSummary? {
        var last: ShareSummary?
        for _ in 0..<120 {
            last = try await summary(device, id)
            if let last, condition(last) { return last }
            try await Task.sleep(for: .milliseconds(500))
        }
        return last
    }

    /// New random public keys (what a server would put in someone's name).
    static func newKeys() -> (signing: Data, agreement: Data) {
        let keys = DeviceKeys().publicKeys
        return (Data(keys.signing), Data(keys.agreement))
    }

    static func verify(_ device: UbiquityContainers, _ name: String, confirm: Bool = false) async throws -> SharingCodeSummary {
        try #require(try await onOwnThread { try device.agent.send(AgentRequest(.verifySharing, participant: name, accept: confirm), timeout: .seconds(60)).sharingCode })
    }

    @Test(.timeLimit(.minutes(5))) func aSharesKeyReachesEveryMembersDevicesAndASwappedKeyIsRefused() async throws {
        let dir = NSTemporaryDirectory() + "sharing-keys-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let running = try await RunningAgents.start(["ada-laptop", "ada-phone", "bob-laptop", "bob-phone", "cy-laptop"], containers: [notes], in: dir, greedy: true,
                                                    accounts: ["bob-laptop": "bob", "bob-phone": "bob", "cy-laptop": "cy"])
        defer { running.stop() }
        let (devices, documents) = try await running.connectedDevices(containers: [notes])
        let (adaLaptop, adaPhone, bobLaptop, bobPhone, cyLaptop) = (devices[0], devices[1], devices[2], devices[3], devices[4])
        let ada = try SharedFolderSyncTests.client(of: running.paths[0]), bob = try SharedFolderSyncTests.client(of: running.paths[2])

        // Each account's devices publish one identity (the first to hold the keys; the others open it).
        var identities: [String: SharingIdentityRecord] = [:]
        for (name, client) in [("ada", ada), ("bob", bob)] {
            for _ in 0..<120 where identities[name] == nil {
                identities[name] = try? await client.sharingIdentity()
                if identities[name] == nil { try await Task.sleep(for: .milliseconds(500)) }
            }
        }
        let adaIdentity = try #require(identities["ada"]), bobIdentity = try #require(identities["bob"])

        // Ada shares Trip with Bob and Cy; both accept.
        try SharedFolderSyncTests.write("dig, sow, water", to: documents[0].appendingPathComponent("Trip/plan.txt"))
        #expect(await eventually(60) { SharedFolderSyncTests.read(documents[1].appendingPathComponent("Trip/plan.txt")) != nil })
        let trip = documents[0].appendingPathComponent("Trip").path
        let share = try #require(try await onOwnThread { try adaLaptop.agent.send(AgentRequest(.share, path: trip, participant: "bob"), timeout: .seconds(60)).shares?.first })
        _ = try await onOwnThread { try adaLaptop.agent.send(AgentRequest(.share, path: trip, participant: "cy"), timeout: .seconds(60)) }
        for device in [bobLaptop, cyLaptop] {
            _ = try await onOwnThread { try device.agent.send(AgentRequest(.answerInvitation, share: share.id, accept: true), timeout: .seconds(60)) }
        }

        // The owner's device seals the key of epoch 1 to both; every member's devices open it.
        let owned = try await Self.awaitSummary(adaPhone, share.id) { $0.key?.held == [1] && $0.key?.waiting == [] }
        #expect(owned?.key?.held == [1] && owned?.key?.waiting == [] && owned?.key?.problem == nil, "\(String(describing: owned))")
        for device in [bobLaptop, bobPhone, cyLaptop] {
            let joined = try await Self.awaitSummary(device, share.id) { $0.key?.held == [1] }
            #expect(joined?.standing == .joined && joined?.key?.held == [1] && joined?.key?.problem == nil, "\(String(describing: joined))")
        }

        // Ada and Bob see the same code on each of their devices; Ada and Cy another.
        let code = try await Self.verify(adaLaptop, "bob")
        #expect(code.code.count == 14 && !code.confirmed && [SharingCodeSummary.Standing.new, .pinned].contains(code.standing), "\(code)")
        #expect(try await Self.verify(adaPhone, "bob").code == code.code)
        #expect(try await Self.verify(bobPhone, "ada").code == code.code)
        #expect(try await Self.verify(bobLaptop, "ada").code == code.code)
        #expect(try await Self.verify(adaLaptop, "cy").code != code.code)
        // They compared: Ada confirms on her laptop.
        let confirmed = try await Self.verify(adaLaptop, "bob", confirm: true)
        #expect(confirmed.confirmed && confirmed.code == code.code)
        #expect(try await Self.verify(adaLaptop, "bob").standing == .confirmed)
        // No code with an account this one shares nothing with.
        await #expect {
            try await onOwnThread { try cyLaptop.agent.send(AgentRequest(.verifySharing, participant: "nobody"), timeout: .seconds(60)) }
        } throws: { ($0 as? AgentError)?.code == .unknownItem }

        // The server puts a key of its own in Bob's name (here through Bob's token: what a
        // lying server would publish).
        let swapped = Self.newKeys()
        _ = try await bob.publishSharingIdentity(SharingIdentityPublishRequest(signing: swapped.signing, agreement: swapped.agreement,
                                                                                sealed: Data(repeating: 1, count: 97), replacing: bobIdentity.signing))
        // Cy is removed: a new epoch, whose key Ada's devices refuse to seal to the swapped key.
        _ = try await onOwnThread { try adaLaptop.agent.send(AgentRequest(.removeParticipant, path: trip, participant: "cy"), timeout: .seconds(60)) }
        let refused = try await Self.awaitSummary(adaLaptop, share.id) { $0.key?.epoch == 2 && $0.key?.held == [1, 2] }
        #expect(refused?.key?.epoch == 2 && refused?.key?.waiting == ["bob"], "\(String(describing: refused))")
        #expect(refused?.key?.problem?.contains("bob's sharing key is not the one pinned") == true, "\(String(describing: refused))")
        let changed = try await Self.verify(adaLaptop, "bob")
        #expect(changed.standing == .changed && !changed.confirmed && changed.code != code.code, "\(changed)")
        #expect(try await Self.verify(adaPhone, "bob").standing == .changed, "her phone pinned Bob's key too")
        // Bob's devices hold nothing of epoch 2.
        #expect(try await Self.summary(bobPhone, share.id)?.key?.held == [1])

        // The same the other way: a key in Ada's name that Bob's devices pinned another of —
        // nothing sealed "by Ada" is opened on them.
        let inAdasName = Self.newKeys()
        _ = try await ada.publishSharingIdentity(SharingIdentityPublishRequest(signing: inAdasName.signing, agreement: inAdasName.agreement,
                                                                                sealed: Data(repeating: 2, count: 97), replacing: adaIdentity.signing))
        let bobs = try await Self.summary(bobLaptop, share.id)
        #expect(bobs?.key?.held.isEmpty == true && bobs?.key?.problem?.contains("ada's sharing key is not the one pinned") == true, "\(String(describing: bobs))")
    }

    @Test(.timeLimit(.minutes(5))) func aSealedFolderIsSealedAgainWithTheSharesKeysAndEditsGoBothWays() async throws {
        let dir = NSTemporaryDirectory() + "sealed-share-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let running = try await RunningAgents.start(["ada-laptop", "ada-phone", "bob-laptop", "bob-phone"], containers: [notes], in: dir, greedy: true,
                                                    sealedContents: true, accounts: ["bob-laptop": "bob", "bob-phone": "bob"],
                                                    sealedShares: true)
        defer { running.stop() }
        let (devices, documents) = try await running.connectedDevices(containers: [notes])
        let bob = try SharedFolderSyncTests.client(of: running.paths[2])
        func read(_ device: Int, _ path: String) -> String? { SharedFolderSyncTests.read(documents[device].appendingPathComponent(path)) }

        // Ada's sealed folder, and a file of hers beside it.
        try SharedFolderSyncTests.write("dig, sow, water", to: documents[0].appendingPathComponent("Trip/plan.txt"))
        try SharedFolderSyncTests.write("a long list of things to pack", to: documents[0].appendingPathComponent("Trip/Lists/packing.txt"))
        try SharedFolderSyncTests.write("mine alone", to: documents[0].appendingPathComponent("Private.txt"))
        #expect(await eventually(60) { read(1, "Trip/Lists/packing.txt") != nil && read(1, "Private.txt") != nil })

        // Shared with Bob, who accepts: the owner's device seals the folder again with the
        // share's keys, and Bob's devices open it.
        let trip = documents[0].appendingPathComponent("Trip").path
        let share = try #require(try await onOwnThread { try devices[0].agent.send(AgentRequest(.share, path: trip, participant: "bob"), timeout: .seconds(60)).shares?.first })
        _ = try await onOwnThread { try devices[2].agent.send(AgentRequest(.answerInvitation, share: share.id, accept: true), timeout: .seconds(60)) }
        for device in [2, 3] {
            #expect(await eventually(60) { read(device, "Trip/plan.txt") == "dig, sow, water" && read(device, "Trip/Lists/packing.txt") == "a long list of things to pack" },
                    "device \(device): \(String(describing: read(device, "Trip/plan.txt")))")
            #expect(read(device, "Private.txt") == nil)
        }
        // What the server holds of it names nothing: every name a tag, every record sealed.
        let listed = try await bob.through(ShareScope(id: share.id, root: "", name: "Trip", owner: "ada")).changes(container: notes, since: 0)
        #expect(!listed.items.isEmpty && listed.items.allSatisfy { $0.record != nil && $0.name.count == 32 && $0.name.allSatisfy(\.isHexDigit) }, "\(listed.items.map(\.name))")
        // Both of Ada's devices sealed it again, alike: no conflict came of it.
        #expect(listed.items.allSatisfy { $0.conflicts.isEmpty }, "\(listed.items.map { ($0.id, $0.conflicts.count) })")

        // Edits both ways, and new files.
        try SharedFolderSyncTests.write("dig, sow, water, wait", to: documents[3].appendingPathComponent("Trip/plan.txt"))
        #expect(await eventually(60) { read(1, "Trip/plan.txt") == "dig, sow, water, wait" && read(0, "Trip/plan.txt") == "dig, sow, water, wait" })
        try SharedFolderSyncTests.write("bring boots", to: documents[1].appendingPathComponent("Trip/Lists/more.txt"))
        #expect(await eventually(60) { read(2, "Trip/Lists/more.txt") == "bring boots" && read(3, "Trip/Lists/more.txt") == "bring boots" })
        try SharedFolderSyncTests.write("from bob", to: documents[2].appendingPathComponent("Trip/bob.txt"))
        #expect(await eventually(60) { read(0, "Trip/bob.txt") == "from bob" && read(1, "Trip/bob.txt") == "from bob" })
        // Ada moves a file of hers into the shared folder: it is sealed again for Bob too.
        try FileManager.default.moveItem(at: documents[0].appendingPathComponent("Private.txt"), to: documents[0].appendingPathComponent("Trip/Private.txt"))
        #expect(await eventually(90) { read(3, "Trip/Private.txt") == "mine alone" }, "\(String(describing: read(3, "Trip/Private.txt")))")
        let after = try await bob.through(ShareScope(id: share.id, root: "", name: "Trip", owner: "ada")).changes(container: notes, since: 0)
        #expect(after.items.count == 7 && after.items.allSatisfy { $0.record != nil && $0.conflicts.isEmpty }, "\(after.items.map { ($0.id, $0.conflicts.count) })")
    }
}
