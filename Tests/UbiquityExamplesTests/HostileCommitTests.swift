import Foundation
import Testing
import Ubiquity
import UbiquityKeys
import UbiquityProtocol
import UbiquityTestSupport

/// A commit withheld from one device (issue 45's attack list), with three real sealing agents:
/// the server hides the laptop's newer commits from the phone while a tablet that was shown them
/// commits — naming, as every commit does, the heads of the other devices it has seen. The
/// phone, shown the tablet's commit but not the laptop's it names, refuses the page (nothing of
/// it taken, logged), and takes everything once the truth is told — though it had read, past
/// the hidden commit's place, a commit of its own.
@Suite(.serialized) struct HostileCommitTests {
    typealias Device = DataProtectionCommandTests.Device
    typealias Agent = HostileKeyValueServerTests.Agent

    /// The commits `relay` carried up from its devices (their bytes, decoded), oldest first.
    static func sent(through relay: HostileRelay) -> [SignedCommit] {
        relay.exchanges.withLock { $0 }.filter { $0.method == "POST" && $0.path.contains("/signed-commits") }
            .compactMap { try? JSONDecoder().decode(SignedCommitsRequest.self, from: $0.requestBody) }
            .flatMap { $0.commits.compactMap { try? SignedCommit(encoded: [UInt8]($0.commit)) } }
    }

    @Test func aCommitHiddenFromThePhoneIsFoundWhenAnotherDevicesCommitSawIt() async throws {
        let setup = try await HostileContentServerTests.sealedSetup()
        defer { setup.tearDown() }
        // The tablet reaches the server as the laptop does (through the laptop's relay, which tells the truth).
        let tablet = Device("tablet", in: setup.dir)
        let joined = try await tablet.loggingIn(setup.laptopRelay.base)
        #expect(joined.status == 0, "\(joined.output)")
        try HostileContentServerTests.seal(tablet)
        let laptopAgent = try Agent(setup.laptop, in: setup.dir), phoneAgent = try Agent(setup.phone, in: setup.dir), tabletAgent = try Agent(tablet, in: setup.dir)
        defer { laptopAgent.stop(); phoneAgent.stop(); tabletAgent.stop() }
        let (laptop, phone) = (setup.laptop, setup.phone)
        let (onLaptop, onPhone, onTablet) = try await onOwnThread {
            (try HostileContentServerTests.documents(of: laptop), try HostileContentServerTests.documents(of: phone), try HostileContentServerTests.documents(of: tablet))
        }
        try FileManager.default.createDirectory(at: onLaptop, withIntermediateDirectories: true)

        // All three in step, the laptop's first commit sent.
        try Data("first".utf8).write(to: onLaptop.appendingPathComponent("First.txt"))
        #expect(await hasArrived(onPhone, "First.txt"), "\(phoneAgent.logged.suffix(2000))")
        #expect(await hasArrived(onTablet, "First.txt"), "\(tabletAgent.logged.suffix(2000))")
        let first = await eventuallyValue(seconds: 30) { Self.sent(through: setup.laptopRelay).first }
        let laptopDevice = try #require(first?.device, "the laptop signs its commits")
        let shown = Self.sent(through: setup.laptopRelay).filter { $0.device == laptopDevice }.map(\.sequence).max() ?? 0

        // From now on the phone is not shown the laptop's newer commits.
        let told = Told()
        setup.phoneRelay.tamper.withLock {
            $0 = { exchange in
                guard exchange.path.contains("/signed-commits"), var page = exchange.decoded(SignedCommitsPage.self) else { return exchange }
                let kept = page.commits.filter { stored in
                    guard let commit = try? SignedCommit(encoded: [UInt8](stored.commit)) else { return true }
                    return commit.device != laptopDevice || commit.sequence <= shown
                }
                guard kept.count < page.commits.count else { return exchange }
                told.count.withLock { $0 += 1 }
                page.commits = kept
                var served = exchange
                served.encode(page)
                return served
            }
        }
        // The laptop writes; the tablet is shown that (and its commit), then writes itself.
        try Data("second".utf8).write(to: onLaptop.appendingPathComponent("Second.txt"))
        #expect(await hasArrived(onTablet, "Second.txt"), "\(tabletAgent.logged.suffix(2000))")
        let laptopNewer = await eventuallyValue(seconds: 30) {
            Self.sent(through: setup.laptopRelay).first { $0.device == laptopDevice && $0.sequence > shown }
        }
        #expect(laptopNewer != nil, "the laptop signed what it wrote")
        // The phone writes too: the commits it reads next (its own) lie past the hidden one's place.
        try Data("phone".utf8).write(to: onPhone.appendingPathComponent("Phone.txt"))
        #expect(await hasArrived(onTablet, "Phone.txt"), "\(tabletAgent.logged.suffix(2000))")
        try await Task.sleep(for: .seconds(2)) // (the phone reads the commits every round: each second)
        // (The tablet reads the commits every round, each second: an edit made before it read the
        // laptop's names the head it had; the next one names the newer.)
        var tabletSaw: SignedCommit?, third = Data()
        for edit in 0..<5 where tabletSaw == nil {
            third = Data("third, edit \(edit)".utf8)
            try third.write(to: onTablet.appendingPathComponent("Third.txt"))
            tabletSaw = await eventuallyValue(seconds: 10) {
                Self.sent(through: setup.laptopRelay).first { $0.device != laptopDevice && ($0.seen[laptopDevice]?.sequence ?? 0) > shown }
            }
        }
        #expect(tabletSaw != nil, "the tablet's commit names the laptop's newer head it saw")

        // The phone is shown the tablet's commit, which saw what the phone was not shown.
        #expect(try await HostileKeyValueServerTests.until(phoneAgent, logs: "had seen commit"), "\(phoneAgent.logged.suffix(3000))")
        #expect(told.count.withLock { $0 } > 0, "the lie was told")
        // (An edit the tablet made before it had read the laptop's commit named no newer head: the
        // phone may have taken that one. Not the edit whose commit named it.)
        // Known race under Standard custody (this account's): a device takes a state without
        // waiting for the commit that covers it (under Advanced it waits), so under load the phone
        // may have brought the tablet's genuine edit down before it read the page that shows the
        // lie. Nothing is lost or forged by it; seen in about one full run in three on two cores.
        withKnownIssue("Standard custody: a state may be taken before the commit page that reveals the lie is read", isIntermittent: true) {
            #expect((try? Data(contentsOf: onPhone.appendingPathComponent("Third.txt"))) != third, "nothing of the refused page is taken")
        }

        // The truth: everything arrives.
        setup.phoneRelay.tamper.withLock { $0 = nil }
        #expect(await hasArrived(onPhone, "Second.txt"), "\(phoneAgent.logged.suffix(2000))")
        let thirdOnPhone = onPhone.appendingPathComponent("Third.txt"), latest = third
        #expect(await eventuallyValue(seconds: 60) { (try? Data(contentsOf: thirdOnPhone)) == latest ? true : nil } == true, "\(phoneAgent.logged.suffix(2000))")
        try await laptopAgent.stopped()
        try await phoneAgent.stopped()
        try await tabletAgent.stopped()
    }
}
