import Foundation
import Testing
import UbiquityCoordination
@testable import UbiquityClient
import UbiquityTestSupport

/// Coordinated reads download through the containers that hold the item, whoever installed last
/// (a process serving two users' containers — the end-to-end tests' laptop and phone — lost the
/// first one's downloads when the second asked for its container).
@Suite(.serialized) struct DownloaderTests {
    @Test func eachItemDownloadsThroughTheContainersThatHoldIt() throws {
        let container = "ABCDE12345.com.example.notes"
        func device(_ identity: String) throws -> UbiquityContainers {
            let paths = temporaryPaths()
            try credentials(identity: identity).save(to: paths)
            return UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [container]))
        }
        let first = try device("identity-first"), second = try device("identity-second")
        defer {
            for device in [first, second] {
                try? FileManager.default.removeItem(at: device.paths.configuration.deletingLastPathComponent().deletingLastPathComponent())
            }
        }
        let documents = try #require(first.url(forContainer: container)).appendingPathComponent("Documents")
        _ = second.url(forContainer: container) // installs the second's after the first's
        let item = documents.appendingPathComponent("Trip.txt")
        try UbiquityPlaceholder(name: "Trip.txt", item: "item-1", size: 13).write(in: documents)
        // The first device's agent is asked (and is not running: the read says so); the second's
        // containers, installed last, do not hold the item and used to let the read go on unwaited.
        let downloader = try #require(NSFileCoordinator.ubiquitousItemDownloader)
        #expect(throws: CocoaError.self) { try downloader(item) }
        #expect(UbiquityContainers.serving(item)?.paths == first.paths)
    }
}
