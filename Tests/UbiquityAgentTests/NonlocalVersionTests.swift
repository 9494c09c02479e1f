import Foundation
import UbiquityTestSupport
import Testing
import UbiquityClient
import UbiquityCoordination
@testable import UbiquityAgent

/// A document's earlier revisions, kept by the server, are its nonlocal versions on every device
/// (Apple's `NSFileVersion.getNonlocalVersionsOfItem(at:completionHandler:)`): listed newest
/// first with the device that saved each, not on the device until a coordinated read of the
/// version's URL downloads it, then readable, restorable, and found again by its persistent
/// identifier — real server, two real agents.
@Suite struct NonlocalVersionTests {
    @Test(.timeLimit(.minutes(4))) func earlierRevisionsAreNonlocalVersionsThatDownloadWhenRead() async throws {
        let notes = "ABCDE12345.com.example.notes"
        let dir = NSTemporaryDirectory() + "nonlocal-versions-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let running = try await RunningAgents.start(["laptop", "phone"], containers: [notes], in: dir)
        defer { running.stop() }
        let laptopDevice = UbiquityContainers(paths: running.paths[0], entitlements: UbiquityEntitlements(containers: [notes]))
        let phoneDevice = UbiquityContainers(paths: running.paths[1], entitlements: UbiquityEntitlements(containers: [notes]))
        let laptop = try #require(try await onOwnThread { laptopDevice.url(forContainer: notes) }).appendingPathComponent("Documents")
        let phone = try #require(try await onOwnThread { phoneDevice.url(forContainer: notes) }).appendingPathComponent("Documents")
        let onLaptop = laptop.appendingPathComponent("Plan.txt"), onPhone = phone.appendingPathComponent("Plan.txt")

        // The laptop saves three revisions, each on the phone before the next is made.
        for text in ["first draft", "second draft", "third draft"] {
            try Data(text.utf8).write(to: onLaptop, options: .atomic)
            // (60 s: the whole suite's load has starved two agents for tens of seconds in CI.)
            let arrived = await eventually(60) {
                if (try? phoneDevice.startDownloading(at: onPhone)) == nil { return false }
                return (try? String(contentsOf: onPhone, encoding: .utf8)) == text
            }
            #expect(arrived, "\(text) did not reach the phone")
            guard arrived else { return }
        }

        // The phone lists the two earlier revisions, newest first, saved by the laptop, not here.
        let versions = try await NSFileVersion.nonlocalVersionsOfItem(at: onPhone)
        #expect(versions.map(\.size) == [12, 11])
        #expect(versions.allSatisfy { $0.localizedNameOfSavingComputer == "laptop" && !$0.hasLocalContents && !$0.isConflict })
        #expect(versions.allSatisfy { $0.localizedName == "Plan.txt" && $0.url.path.contains("/.ubiquity-versions/") })
        let second = try #require(versions.first)
        #expect(NSFileVersion.otherVersionsOfItem(at: onPhone)?.isEmpty == true, "nonlocal versions are not other versions")

        // A coordinated read of the version's URL downloads it (as on Apple's platforms).
        let read = try await onOwnThread { () -> String in
            var text = ""
            try NSFileCoordinator(filePresenter: nil).coordinate(readingItemAt: second.url) { url in
                text = try String(contentsOf: url, encoding: .utf8)
            }
            return text
        }
        #expect(read == "second draft")
        #expect(second.hasLocalContents)

        // Found again by its persistent identifier, archived and unarchived (another launch).
        let archived = try NSKeyedArchiver.archivedData(withRootObject: second.persistentIdentifier, requiringSecureCoding: true)
        let identifier = try #require(try NSKeyedUnarchiver.unarchivedObject(ofClass: NSString.self, from: archived))
        let again = try #require(NSFileVersion.version(itemAt: onPhone, forPersistentIdentifier: identifier))
        #expect(again.hasLocalContents && again.localizedNameOfSavingComputer == "laptop")

        // Restoring it is the phone's change: it reaches the laptop.
        try await onOwnThread {
            try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: onPhone, options: .forReplacing) { url in
                _ = try second.replaceItem(at: url)
            }
        }
        #expect(await eventually(60) { (try? String(contentsOf: onLaptop, encoding: .utf8)) == "second draft" })

        // The first draft (the oldest: third, second, first) is restored without a coordinated
        // read first: replaceItem downloads it.
        let laptopVersions = try await NSFileVersion.nonlocalVersionsOfItem(at: onLaptop)
        #expect(laptopVersions.map(\.size) == [11, 12, 11])
        let first = try #require(laptopVersions.last)
        #expect(!first.hasLocalContents)
        try await onOwnThread {
            try NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: onLaptop, options: .forReplacing) { url in
                _ = try first.replaceItem(at: url)
            }
        }
        #expect(try String(contentsOf: onLaptop, encoding: .utf8) == "first draft")

        // Its downloaded copy can be removed; the server keeps the revision.
        try first.remove()
        #expect(!first.hasLocalContents)
        #expect(try await NSFileVersion.nonlocalVersionsOfItem(at: onLaptop).contains { $0.versionIdentifier == first.versionIdentifier })

        // A document made here and not synced yet has none; no such file is an error.
        let fresh = laptop.appendingPathComponent("Fresh.txt")
        try Data("new".utf8).write(to: fresh)
        let freshVersions = try await NSFileVersion.nonlocalVersionsOfItem(at: fresh)
        #expect(freshVersions.isEmpty)
        await #expect(throws: CocoaError.self) { try await NSFileVersion.nonlocalVersionsOfItem(at: laptop.appendingPathComponent("Missing.txt")) }
        // Outside the containers: none.
        let outside = URL(fileURLWithPath: dir).appendingPathComponent("outside.txt")
        try Data("x".utf8).write(to: outside)
        #expect(try await NSFileVersion.nonlocalVersionsOfItem(at: outside).isEmpty)
    }
}
