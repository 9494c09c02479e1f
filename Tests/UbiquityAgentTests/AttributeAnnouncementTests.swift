import Foundation
import Synchronization
import Testing
import UbiquityCoordination
@testable import UbiquityAgent

/// The agent tells presenters of its items what changed of their ubiquity attributes, as
/// iCloud does on Apple's platforms: an upload done, a download done, an eviction, a conflict
/// version gained or resolved — each to presenters that observe that attribute, and only those.
extension ContainerSyncTests {
    /// A plain presenter (not `Sendable`, as Apple's are not) that observes some attributes.
    final class AttributeListener: NSFilePresenter, @unchecked Sendable {
        let presentedItemURL: URL?
        let presentedItemOperationQueue = OperationQueue()
        let observedPresentedItemUbiquityAttributes: Set<URLResourceKey>
        private let heard = Mutex<[Set<URLResourceKey>]>([])
        /// Whether it lets its item's local copy be evicted (Apple's default: no).
        let acceptsEviction = Mutex(false)

        init(_ url: URL, observing attributes: Set<URLResourceKey>) {
            presentedItemURL = url
            observedPresentedItemUbiquityAttributes = attributes
            presentedItemOperationQueue.maxConcurrentOperationCount = 1
        }

        func presentedItemDidChangeUbiquityAttributes(_ attributes: Set<URLResourceKey>) { heard.withLock { $0.append(attributes) } }

        func accommodatePresentedItemEviction(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
            completionHandler(acceptsEviction.withLock { $0 } ? nil : CocoaError(.userCancelled))
        }

        /// Every attribute heard so far.
        var changes: Set<URLResourceKey> { heard.withLock { $0.reduce([], { $0.union($1) }) } }

        /// Waits (at most 10 s) until `attribute` has been heard of.
        func waitFor(_ attribute: URLResourceKey) async -> Bool {
            let deadline = ContinuousClock.now + .seconds(10)
            while !changes.contains(attribute) {
                if ContinuousClock.now > deadline { return false }
                try? await Task.sleep(for: .milliseconds(5))
            }
            return true
        }
    }

    @Test func presentersHearOfUploadsDownloadsEvictionsAndConflicts() async throws {
        try await withServer { base, dir in
            let laptop = try await device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await device("phone", base: base, dir: dir, greedy: false)
            try laptop.write("Plan.txt", Data("first".utf8))
            let uploads = AttributeListener(laptop.documents.appendingPathComponent("Plan.txt"), observing: [.ubiquitousItemIsUploadedKey])
            NSFileCoordinator.addFilePresenter(uploads)
            defer { NSFileCoordinator.removeFilePresenter(uploads) }
            try await laptop.sync.syncOnce()
            #expect(await uploads.waitFor(.ubiquitousItemIsUploadedKey), "the laptop's presenter heard of the upload")
            #expect(uploads.changes == [.ubiquitousItemIsUploadedKey], "only what it observes: \(uploads.changes)")

            // On the phone (on demand): listed, then downloaded when asked.
            let downloads = AttributeListener(phone.documents.appendingPathComponent("Plan.txt"),
                                              observing: [.ubiquitousItemDownloadingStatusKey, .ubiquitousItemHasUnresolvedConflictsKey])
            NSFileCoordinator.addFilePresenter(downloads)
            defer { NSFileCoordinator.removeFilePresenter(downloads) }
            try await phone.sync.syncOnce()
            _ = try await phone.sync.requestDownload("Documents/Plan.txt")
            try await phone.sync.syncOnce()
            #expect(await downloads.waitFor(.ubiquitousItemDownloadingStatusKey), "the phone's presenter heard of the download")
            #expect(phone.read("Plan.txt") == "first")

            // A conflict: both edit; the phone gets a conflict version, and its presenter hears.
            try laptop.write("Plan.txt", Data("from the laptop".utf8))
            try phone.write("Plan.txt", Data("from the phone".utf8))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            for _ in 0..<3 where !downloads.changes.contains(.ubiquitousItemHasUnresolvedConflictsKey) { try await phone.sync.syncOnce() }
            #expect(await downloads.waitFor(.ubiquitousItemHasUnresolvedConflictsKey), "heard: \(downloads.changes)")

            // Evicting on the laptop asks its presenters: one that does not accommodate it keeps
            // the copy; once all agree, it goes, and the presenter of downloading status hears.
            let evictions = AttributeListener(laptop.documents.appendingPathComponent("Plan.txt"), observing: [.ubiquitousItemDownloadingStatusKey])
            NSFileCoordinator.addFilePresenter(evictions)
            defer { NSFileCoordinator.removeFilePresenter(evictions) }
            try await laptop.sync.syncOnce()
            evictions.acceptsEviction.withLock { $0 = true }
            await #expect(throws: ContainerSyncError.self, "the uploads presenter refuses") { try await laptop.sync.evict("Documents/Plan.txt") }
            #expect(laptop.read("Plan.txt") != nil, "kept")
            uploads.acceptsEviction.withLock { $0 = true }
            try await laptop.sync.evict("Documents/Plan.txt")
            #expect(laptop.read("Plan.txt") == nil)
            #expect(await evictions.waitFor(.ubiquitousItemDownloadingStatusKey))
        }
    }
}
