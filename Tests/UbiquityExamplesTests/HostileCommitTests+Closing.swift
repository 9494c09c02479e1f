import Foundation
import Testing
import Ubiquity
import UbiquityKeys
import UbiquityProtocol
import UbiquityTestSupport

extension HostileCommitTests {
    /// The server keeps its escrow key's file after the switch to Advanced. The roster alone
    /// takes a commit that key signs naming an entry from before the switch (what the escrow
    /// signed then stays good). So once a device has read a container's commits after the
    /// switch, it signs a closing commit there naming how far the escrow's chain went; the
    /// phone, served afterwards a commit the escrow "signed before the switch", refuses the
    /// page (nothing of it taken, logged), and takes everything once the truth is told.
    @Test func aCommitTheEscrowSignsAfterTheSwitchIsRefusedWhereTheDevicesClosedItsChain() async throws {
        let setup = try await HostileContentServerTests.sealedSetup()
        defer { setup.tearDown() }
        let laptopAgent = try Agent(setup.laptop, in: setup.dir), phoneAgent = try Agent(setup.phone, in: setup.dir)
        defer { laptopAgent.stop(); phoneAgent.stop() }
        let (laptop, phone) = (setup.laptop, setup.phone)
        let (onLaptop, onPhone) = try await onOwnThread { (try HostileContentServerTests.documents(of: laptop), try HostileContentServerTests.documents(of: phone)) }
        try FileManager.default.createDirectory(at: onLaptop, withIntermediateDirectories: true)
        try Data("first".utf8).write(to: onLaptop.appendingPathComponent("First.txt"))
        #expect(await hasArrived(onPhone, "First.txt"), "\(phoneAgent.logged.suffix(2000))")

        let switched = try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"])
        #expect(switched.status == 0, "\(switched.output)")
        // A device closes the escrow's chain in the container (the server keeps the commit).
        let closed = await eventuallyValue(seconds: 60) {
            (setup.laptopRelay.exchanges.withLock { $0 } + setup.phoneRelay.exchanges.withLock { $0 })
                .first { $0.method == "POST" && $0.path.contains("/signed-commits") && $0.status == 200
                    && ((try? JSONDecoder().decode(SignedCommitsRequest.self, from: $0.requestBody))?.commits
                        .contains { (try? SignedCommit(encoded: [UInt8]($0.commit)))?.isClosing == true } ?? false) }
        }
        let path = try #require(closed?.path, "a device signs a closing commit after the switch")
        let container = try #require(path.split(separator: "/").dropFirst(2).first.map(String.init))

        // The server signs with its escrow key a commit naming the roster entry before the switch.
        // (The longest roster either relay carried: the laptop's switch, or the phone's reading since.)
        let entries = try #require([setup.phoneRelay.lastDirectory, setup.laptopRelay.lastDirectory].compactMap { $0?.roster }.max { $0.count < $1.count })
            .map { try RosterEntry(encoded: $0) }
        let roster = try Roster.verify(entries)
        #expect(roster.custody == .advanced)
        let escrow = try DeviceKeys(contentsOf: setup.dir.file("data/escrow.key"))
        let term = try #require(roster.escrowTerms[escrow.publicKeys.deviceIdentifier]?.first)
        let before = RosterHead(index: term.from, hash: entries[Int(term.from)].hash)
        let content = CommitContent(outcomes: [CommitContent.Outcome(item: "forged", folder: nil, recordHash: Array(repeating: 7, count: 32), revision: "r-forged",
                                                                    base: nil, deleted: true, sequence: 0)])
        let forged = try SignedCommit(container: container, contentHash: content.hash, after: nil, rosterHead: before, seen: [:], signedBy: escrow)
        try forged.verify(container: container, roster: roster) // (the roster alone takes it)

        // The phone is served it after everything kept.
        let told = Told()
        setup.phoneRelay.tamper.withLock {
            $0 = { exchange in
                guard exchange.method == "GET", exchange.path.contains("/\(container)/signed-commits"), var page = exchange.decoded(SignedCommitsPage.self), !page.more else { return exchange }
                let after = URLComponents(string: exchange.path)?.queryItems?.first { $0.name == "after" }?.value.flatMap { Int64($0) } ?? 0
                page.commits.append(StoredSignedCommit(position: (page.commits.last?.position ?? after) + 1, commit: Data(forged.encoded), content: content.encoded))
                told.count.withLock { $0 += 1 }
                var served = exchange
                served.encode(page)
                return served
            }
        }
        try Data("second".utf8).write(to: onLaptop.appendingPathComponent("Second.txt"))
        #expect(try await HostileKeyValueServerTests.until(phoneAgent, logs: "where the account's devices closed its chain"), "\(phoneAgent.logged.suffix(3000))")
        #expect(told.count.withLock { $0 } > 0, "the lie was told")
        #expect(!FileManager.default.fileExists(atPath: onPhone.appendingPathComponent("Second.txt").path), "nothing of the refused page is taken")

        // The truth: everything arrives.
        setup.phoneRelay.tamper.withLock { $0 = nil }
        #expect(await hasArrived(onPhone, "Second.txt"), "\(phoneAgent.logged.suffix(2000))")
        try await laptopAgent.stopped()
        try await phoneAgent.stopped()
    }
}
