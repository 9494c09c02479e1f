import Foundation
import Synchronization
import Testing
import UbiquityClient
@testable import UbiquityQuery
import UbiquityTestSupport

/// What a test sees of a query: its notifications in order, with their items' names.
final class QueryRecorder: Sendable {
    struct Event: Sendable, Equatable {
        var name: String
        var added: [String]
        var changed: [String]
        var removed: [String]
    }

    let events = Mutex<[Event]>([])
    let observers = Mutex<[ObserverToken]>([])

    init(_ query: NSMetadataQuery) {
        for name in [Notification.Name.NSMetadataQueryDidStartGathering, .NSMetadataQueryGatheringProgress, .NSMetadataQueryDidFinishGathering, .NSMetadataQueryDidUpdate] {
            let observer = NotificationCenter.default.addObserver(forName: name, object: query, queue: nil) { [weak self] notification in
                func names(_ key: String) -> [String] {
                    ((notification.userInfo?[key] as? [NSMetadataItem]) ?? []).map { $0.value(forAttribute: NSMetadataItemFSNameKey) as? String ?? "?" }.sorted()
                }
                let event = Event(name: notification.name.rawValue.replacingOccurrences(of: "NSMetadataQuery", with: "").replacingOccurrences(of: "Notification", with: ""),
                                  added: names(NSMetadataQueryUpdateAddedItemsKey), changed: names(NSMetadataQueryUpdateChangedItemsKey),
                                  removed: names(NSMetadataQueryUpdateRemovedItemsKey))
                self?.events.withLock { $0.append(event) }
            }
            observers.withLock { $0.append(ObserverToken(observer)) }
        }
    }

    func remove() {
        for observer in observers.withLock({ $0 }) { NotificationCenter.default.removeObserver(observer.token) }
    }

    var names: [String] { events.withLock { $0.map(\.name) } }
    var updates: [Event] { events.withLock { $0.filter { $0.name == "DidUpdate" } } }

    /// Waits (up to `seconds`) until `condition` holds for the events.
    func wait(_ seconds: Double = 10, until condition: ([Event]) -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if events.withLock({ condition($0) }) { return true }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return events.withLock { condition($0) }
    }

    /// Waits (up to `seconds`) until `condition` holds for the updates posted after the first
    /// `mark` (``updates``' count when the change was made).
    func waitForUpdates(after mark: Int, _ seconds: Double = 10, until condition: ([Event]) -> Bool) async -> Bool {
        await wait(seconds) { events in condition(Array(events.filter { $0.name == "DidUpdate" }.dropFirst(mark))) }
    }
}

func names(_ query: NSMetadataQuery) -> [String] {
    query.results.compactMap { ($0 as? NSMetadataItem)?.value(forAttribute: NSMetadataItemFSNameKey) as? String }
}

@Suite struct MetadataQueryTests {
    let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ubiquity-query-\(UUID().uuidString.prefix(8))")

    func write(_ relative: String, _ text: String = "x") throws {
        let url = folder.appendingPathComponent(relative)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(text.utf8).write(to: url)
    }

    @Test func aLocalFolderIsSearchedThenFollowedLive() async throws {
        defer { try? FileManager.default.removeItem(at: folder) }
        try write("a.txt", "alpha")
        try write("b.txt")
        try write("c.md")
        try write("sub/d.txt")
        try write("Notes.rtfd/TXT.rtf") // a package: one item, its members are not results
        try write(".hidden.txt")

        let query = NSMetadataQuery(containers: UbiquityContainers(paths: temporaryPaths(), entitlements: UbiquityEntitlements(containers: [])))
        query.searchScopes = [folder]
        query.predicate = NSPredicate(format: "%K LIKE '*.txt' OR %K ENDSWITH '.rtfd'", NSMetadataItemFSNameKey, NSMetadataItemFSNameKey)
        query.sortDescriptors = [NSSortDescriptor(key: NSMetadataItemFSNameKey, ascending: true)]
        query.notificationBatchingInterval = 0.01
        let recorder = QueryRecorder(query)
        defer { recorder.remove(); query.stop() }
        #expect(query.start())
        #expect(query.isStarted && !query.start(), "a running query does not start again")
        #expect(await recorder.wait { $0.contains { $0.name == "DidFinishGathering" } })
        #expect(recorder.names.first == "DidStartGathering" && recorder.names.contains("GatheringProgress"))
        #expect(recorder.names.firstIndex(of: "GatheringProgress")! < recorder.names.firstIndex(of: "DidFinishGathering")!)
        #expect(names(query) == ["Notes.rtfd", "a.txt", "b.txt", "d.txt"])
        #expect(!query.isGathering && query.resultCount == 4)

        let a = try #require(query.result(at: query.index(ofResult: query.results[1])) as? NSMetadataItem)
        #expect(a.value(forAttribute: NSMetadataItemFSSizeKey) as? Int64 == 5)
        #expect(a.value(forAttribute: NSMetadataItemIsUbiquitousKey) as? Bool == false)
        // Numbers and Booleans bridge as on Apple's platforms.
        #expect(a.value(forAttribute: NSMetadataItemFSSizeKey) as? Int == 5 && a.value(forAttribute: NSMetadataItemFSSizeKey) as? Double == 5)
        #expect((a.value(forAttribute: NSMetadataItemFSSizeKey) as? NSNumber)?.intValue == 5)
        #expect((a.value(forAttribute: NSMetadataItemIsUbiquitousKey) as? NSNumber)?.boolValue == false)
        #expect(a.values(forAttributes: [NSMetadataItemFSSizeKey])?[NSMetadataItemFSSizeKey] as? Int == 5)
        #expect(a.value(forAttribute: NSMetadataItemURLKey) as? URL == folder.appendingPathComponent("a.txt"))
        #expect(a.value(forAttribute: NSMetadataItemContentTypeKey) as? String == "public.plain-text")
        #expect((a.value(forAttribute: NSMetadataItemContentTypeTreeKey) as? [String])?.contains("public.data") == true)
        #expect(a.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) == nil, "local items have no sync status")
        #expect(a.attributes.contains(NSMetadataItemFSContentChangeDateKey) && !a.attributes.contains(NSMetadataUbiquitousItemIsUploadedKey))
        #expect(query.value(ofAttribute: NSMetadataItemFSNameKey, forResultAt: 0) as? String == "Notes.rtfd")

        // Created, changed, renamed, deleted — each an update with just that. A file's events
        // may be read in two batches (created, then written; truncated, then written): an
        // update may come twice, never with anything else.
        var mark = recorder.updates.count
        try write("e.txt")
        #expect(await recorder.waitForUpdates(after: mark) { $0.flatMap(\.added) == ["e.txt"] })
        #expect(recorder.updates.dropFirst(mark).allSatisfy { ($0.changed + $0.removed).allSatisfy { $0 == "e.txt" } }, "\(recorder.updates)")
        mark = recorder.updates.count
        try write("a.txt", "alpha, longer")
        #expect(await recorder.waitForUpdates(after: mark) { $0.flatMap(\.changed).contains("a.txt") && a.value(forAttribute: NSMetadataItemFSSizeKey) as? Int64 == 13 },
                "the same item object, updated: \(recorder.updates)")
        #expect(recorder.updates.dropFirst(mark).allSatisfy { $0.added.isEmpty && $0.removed.isEmpty && $0.changed.allSatisfy { ["a.txt", "e.txt"].contains($0) } })
        try FileManager.default.moveItem(at: folder.appendingPathComponent("b.txt"), to: folder.appendingPathComponent("b2.txt"))
        #expect(await recorder.wait { events in events.flatMap(\.added).contains("b2.txt") && events.flatMap(\.removed).contains("b.txt") })
        try FileManager.default.removeItem(at: folder.appendingPathComponent("sub"))
        #expect(await recorder.wait { $0.flatMap(\.removed).contains("d.txt") })
        mark = recorder.updates.count
        try write("Notes.rtfd/TXT.rtf", "a longer member")
        #expect(await recorder.waitForUpdates(after: mark) { $0.flatMap(\.changed).contains("Notes.rtfd") }, "a package member's change is the package's: \(recorder.updates)")
        #expect(await recorder.wait { _ in names(query) == ["Notes.rtfd", "a.txt", "b2.txt", "e.txt"] })
        #expect(!recorder.updates.contains { $0.added.contains("c.md") || $0.added.contains(".hidden.txt") }, "what does not match never shows")

        query.stop()
        #expect(query.isStopped && query.resultCount == 4, "results stay after stop")
        try write("f.txt")
        try await Task.sleep(for: .milliseconds(100))
        #expect(!recorder.updates.contains { $0.added.contains("f.txt") }, "no updates after stop")
    }

    @Test func updatesCanBeHeldBackAndComeAsOne() async throws {
        defer { try? FileManager.default.removeItem(at: folder) }
        try write("one.txt")
        let query = NSMetadataQuery(containers: UbiquityContainers(paths: temporaryPaths(), entitlements: UbiquityEntitlements(containers: [])))
        query.searchScopes = [folder.path]
        query.predicate = NSPredicate(format: "kMDItemFSName ENDSWITH '.txt'")
        query.notificationBatchingInterval = 0
        let recorder = QueryRecorder(query)
        defer { recorder.remove(); query.stop() }
        query.start()
        #expect(await recorder.wait { $0.contains { $0.name == "DidFinishGathering" } })
        query.disableUpdates()
        query.disableUpdates()
        // Each written whole under its name (one event each), then seen by the query before
        // updates are enabled again: what is held back comes as one update.
        try Data("x".utf8).write(to: folder.appendingPathComponent("two.txt"), options: .atomic)
        try Data("x".utf8).write(to: folder.appendingPathComponent("three.txt"), options: .atomic)
        #expect(await recorder.wait { _ in query.state.withLock { $0.pending.added.count } == 2 })
        #expect(recorder.updates.isEmpty && query.resultCount == 1, "nothing while held back")
        query.enableUpdates()
        try await Task.sleep(for: .milliseconds(50))
        #expect(recorder.updates.isEmpty, "still held by the outer call")
        query.enableUpdates()
        #expect(await recorder.wait { $0.contains { $0.name == "DidUpdate" } })
        #expect(recorder.updates.count == 1 && recorder.updates[0].added == ["three.txt", "two.txt"])
        #expect(query.resultCount == 3)
    }

    @Test func startNeedsAPredicateAndKnownScopes() {
        let query = NSMetadataQuery(containers: UbiquityContainers(paths: temporaryPaths(), entitlements: UbiquityEntitlements(containers: [])))
        query.searchScopes = [NSMetadataQueryUbiquitousDocumentsScope]
        #expect(!query.start(), "no predicate")
        query.predicate = NSPredicate(value: true)
        query.searchScopes = ["NotAScope"]
        #expect(!query.start(), "an unknown scope")
        #expect(query.searchScopes.first as? String == "NotAScope")
        query.searchScopes = [NSMetadataQueryUbiquitousDocumentsScope, URL(fileURLWithPath: "/tmp/x/../y")]
        #expect(query.searchScopes.last as? URL == URL(fileURLWithPath: "/tmp/y", isDirectory: true))
        #expect(!query.isStarted && !query.isGathering && !query.isStopped)
    }

    /// The guide's document browser (Listings 4-3 and 4-4): `*.txt` documents in the app's
    /// ubiquity container — downloaded or not — and in its local Documents folder, live.
    @Test func theDocumentBrowserListsLocalAndCloudDocumentsLive() async throws {
        defer { try? FileManager.default.removeItem(at: folder) }
        let paths = temporaryPaths()
        defer { try? FileManager.default.removeItem(at: paths.configuration.deletingLastPathComponent().deletingLastPathComponent()) }
        try credentials().save(to: paths)
        let identifier = "ABCDE12345.com.example.notes"
        let containers = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [identifier]))
        let cloud = try #require(containers.url(forContainer: identifier)).appendingPathComponent("Documents")
        try Data("on this device".utf8).write(to: cloud.appendingPathComponent("Trip.txt"))
        try UbiquityPlaceholder(name: "Remote.txt", item: "i1", size: 4_096, modificationDate: 1_800_000_000).write(in: cloud)
        try UbiquityPlaceholder(name: "Photo.jpg", item: "i2", size: 9).write(in: cloud)
        try write("Local.txt")

        let query = NSMetadataQuery(containers: containers)
        query.searchScopes = [NSMetadataQueryUbiquitousDocumentsScope, folder]
        query.predicate = NSPredicate(format: "%K LIKE '*.txt'", NSMetadataItemFSNameKey)
        query.sortDescriptors = [NSSortDescriptor(key: NSMetadataItemFSNameKey, ascending: true)]
        query.valueListAttributes = [NSMetadataItemIsUbiquitousKey]
        query.groupingAttributes = [NSMetadataUbiquitousItemDownloadingStatusKey]
        query.notificationBatchingInterval = 0.01
        let recorder = QueryRecorder(query)
        defer { recorder.remove(); query.stop() }
        query.start()
        #expect(await recorder.wait { $0.contains { $0.name == "DidFinishGathering" } })
        #expect(names(query) == ["Local.txt", "Remote.txt", "Trip.txt"])

        // Listing 4-4: name and URL of each.
        var listed: [String: URL] = [:]
        for case let item as NSMetadataItem in query.results {
            listed[item.value(forAttribute: NSMetadataItemFSNameKey) as! String] = item.value(forAttribute: NSMetadataItemURLKey) as? URL
        }
        #expect(listed["Remote.txt"] == cloud.appendingPathComponent("Remote.txt"), "the item's own URL, not its placeholder's")
        let remote = try #require(query.results.compactMap { $0 as? NSMetadataItem }.first { $0.value(forAttribute: NSMetadataItemFSNameKey) as? String == "Remote.txt" })
        #expect(remote.value(forAttribute: NSMetadataItemIsUbiquitousKey) as? Bool == true)
        #expect(remote.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String == NSMetadataUbiquitousItemDownloadingStatusNotDownloaded)
        #expect(remote.value(forAttribute: NSMetadataItemFSSizeKey) as? Int64 == 4_096)
        #expect(remote.value(forAttribute: NSMetadataItemFSContentChangeDateKey) as? Date == Date(timeIntervalSince1970: 1_800_000_000))
        #expect(remote.value(forAttribute: NSMetadataUbiquitousItemIsUploadedKey) as? Bool == true)
        #expect(remote.value(forAttribute: NSMetadataUbiquitousItemContainerDisplayNameKey) as? String == "notes")
        #expect(remote.value(forAttribute: NSMetadataUbiquitousItemIsDownloadedKey) as? Bool == false)
        #expect(remote.value(forAttribute: NSMetadataUbiquitousItemURLInLocalContainerKey) as? URL == cloud.appendingPathComponent("Remote.txt"))
        #expect(remote.value(forAttribute: NSMetadataUbiquitousItemIsExternalDocumentKey) as? Bool == false, "the app's own container")
        let trip = try #require(query.results.compactMap { $0 as? NSMetadataItem }.first { $0.value(forAttribute: NSMetadataItemFSNameKey) as? String == "Trip.txt" })
        #expect(trip.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String == NSMetadataUbiquitousItemDownloadingStatusCurrent)
        #expect(trip.value(forAttribute: NSMetadataUbiquitousItemIsDownloadedKey) as? Bool == true)
        #expect(trip.value(forAttribute: NSMetadataUbiquitousItemUploadingErrorKey) is CocoaError, "the agent is not running: uploads wait")

        let lists = try #require(query.valueLists[NSMetadataItemIsUbiquitousKey])
        #expect(lists.map { "\(($0.value as? Bool).map(String.init) ?? "nil")×\($0.count)" } == ["true×2", "false×1"], "Booleans as NSNumber, as on Apple's")
        let groups = query.groupedResults
        #expect(groups.count == 3 && groups.map(\.resultCount).reduce(0, +) == 3, "not downloaded, downloaded, local (no status)")

        // The item comes down: the placeholder goes, the file arrives — the same result changes.
        try Data("from the other device".utf8).write(to: cloud.appendingPathComponent("Remote.txt"))
        try FileManager.default.removeItem(at: UbiquityPlaceholder.url(for: cloud.appendingPathComponent("Remote.txt")))
        #expect(await recorder.wait { _ in remote.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String == NSMetadataUbiquitousItemDownloadingStatusCurrent })
        #expect(!recorder.updates.contains { $0.removed.contains("Remote.txt") }, "never gone on the way")
        // A new item from elsewhere (a placeholder), and a local document.
        try UbiquityPlaceholder(name: "New.txt", item: "i3", size: 1).write(in: cloud)
        try write("Second.txt")
        #expect(await recorder.wait { events in Set(events.flatMap(\.added)).isSuperset(of: ["New.txt", "Second.txt"]) })
        #expect(await recorder.wait { _ in names(query) == ["Local.txt", "New.txt", "Remote.txt", "Second.txt", "Trip.txt"] })
    }

    @Test func snapshotsArriveAsAnAsyncSequence() async throws {
        defer { try? FileManager.default.removeItem(at: folder) }
        try write("first.txt")
        let query = NSMetadataQuery(containers: UbiquityContainers(paths: temporaryPaths(), entitlements: UbiquityEntitlements(containers: [])))
        query.searchScopes = [folder]
        query.predicate = NSPredicate(format: "kMDItemFSName LIKE '*.txt'")
        query.notificationBatchingInterval = 0.005
        let snapshots = query.snapshots
        query.start()
        var iterator = snapshots.makeAsyncIterator()
        let initial = try #require(await iterator.next())
        #expect(initial.isInitial && initial.results.count == 1)
        try write("second.txt")
        let update = try #require(await iterator.next())
        #expect(!update.isInitial && update.added.map { $0.value(forAttribute: NSMetadataItemFSNameKey) as? String } == ["second.txt"] && update.results.count == 2)
        query.stop()
        // A change the watcher reported in two parts may have left a second update buffered
        // (seen under load); after what was buffered, the sequence ends.
        var buffered = 0
        while await iterator.next() != nil, buffered < 10 { buffered += 1 }
        #expect(buffered < 10, "the sequence ends when the query stops")
    }

    @Test func enumerationAndOrder() async throws {
        defer { try? FileManager.default.removeItem(at: folder) }
        for (name, size) in [("small.txt", 1), ("large.txt", 300), ("medium.txt", 20)] { try write(name, String(repeating: "x", count: size)) }
        let query = NSMetadataQuery(containers: UbiquityContainers(paths: temporaryPaths(), entitlements: UbiquityEntitlements(containers: [])))
        query.searchScopes = [folder]
        query.predicate = NSPredicate(format: "kMDItemFSSize > 0")
        query.sortDescriptors = [NSSortDescriptor(key: NSMetadataItemFSSizeKey, ascending: false)]
        let recorder = QueryRecorder(query)
        defer { recorder.remove(); query.stop() }
        query.start()
        #expect(await recorder.wait { $0.contains { $0.name == "DidFinishGathering" } })
        #expect(names(query) == ["large.txt", "medium.txt", "small.txt"])
        var seen: [Int] = []
        query.enumerateResults { _, index, stop in
            seen.append(index)
            if index == 1 { stop.pointee = true }
        }
        #expect(seen == [0, 1])
        seen = []
        query.enumerateResults(options: .reverse) { _, index, _ in seen.append(index) }
        #expect(seen == [2, 1, 0])
        query.sortDescriptors = [NSSortDescriptor(key: NSMetadataItemFSNameKey, ascending: true)]
        #expect(names(query) == ["large.txt", "medium.txt", "small.txt"])
        query.sortDescriptors = [NSSortDescriptor(key: NSMetadataItemFSSizeKey, ascending: true)]
        #expect(names(query) == ["small.txt", "medium.txt", "large.txt"])
        #expect(query.index(ofResult: "not an item") == NSNotFound)
    }

    @Test func dataAndExternalScopesAndAnOperationQueue() async throws {
        let paths = temporaryPaths()
        defer { try? FileManager.default.removeItem(at: paths.configuration.deletingLastPathComponent().deletingLastPathComponent()) }
        try credentials().save(to: paths)
        let mine = "ABCDE12345.com.example.notes", other = "ABCDE12345.com.example.other"
        let containers = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [mine]))
        let root = try #require(containers.url(forContainer: mine))
        try Data("doc".utf8).write(to: root.appendingPathComponent("Documents/Doc.txt"))
        try FileManager.default.createDirectory(at: root.appendingPathComponent("Library"), withIntermediateDirectories: true)
        try Data("cache".utf8).write(to: root.appendingPathComponent("Library/cache.txt"))
        let otherDocuments = paths.container(other, account: "identity-ada").appendingPathComponent("Documents")
        try FileManager.default.createDirectory(at: otherDocuments, withIntermediateDirectories: true)
        try Data("theirs".utf8).write(to: otherDocuments.appendingPathComponent("Shared.txt"))

        // The main queue, known by a mark of its own (on Linux its blocks may run on a worker
        // thread once the main thread parks in dispatch_main, as under the test runner).
        let mainQueueKey = DispatchSpecificKey<Bool>()
        DispatchQueue.main.setSpecific(key: mainQueueKey, value: true)
        func run(_ scope: String, queue: OperationQueue? = nil) async throws -> [String] {
            let query = NSMetadataQuery(containers: containers)
            query.searchScopes = [scope]
            query.predicate = NSPredicate(format: "kMDItemFSName LIKE '*.txt'")
            query.operationQueue = queue
            let onQueue = Mutex<Bool?>(nil)
            let observer = NotificationCenter.default.addObserver(forName: .NSMetadataQueryDidFinishGathering, object: query, queue: nil) { _ in
                onQueue.withLock { $0 = queue.map { OperationQueue.current === $0 } ?? (DispatchQueue.getSpecific(key: mainQueueKey) == true) }
            }
            defer { NotificationCenter.default.removeObserver(observer); query.stop() }
            #expect(query.start())
            let deadline = Date().addingTimeInterval(10)
            while onQueue.withLock({ $0 }) == nil && Date() < deadline { try await Task.sleep(for: .milliseconds(2)) }
            #expect(onQueue.withLock { $0 } == true, "posted on the operation queue when one is set, else on the main thread (as Apple's)")
            let external = query.results.compactMap { ($0 as? NSMetadataItem)?.value(forAttribute: NSMetadataUbiquitousItemIsExternalDocumentKey) as? Bool }
            #expect(external.allSatisfy { $0 == (scope == NSMetadataQueryAccessibleUbiquitousExternalDocumentsScope) }, "\(scope): \(external)")
            return names(query).sorted()
        }
        #expect(try await run(NSMetadataQueryUbiquitousDocumentsScope) == ["Doc.txt"])
        #expect(try await run(NSMetadataQueryUbiquitousDataScope) == ["cache.txt"], "the container outside Documents")
        #expect(try await run(NSMetadataQueryAccessibleUbiquitousExternalDocumentsScope) == ["Shared.txt"], "the account's other containers")
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        #expect(try await run(NSMetadataQueryUbiquitousDocumentsScope, queue: queue) == ["Doc.txt"])
    }
}

/// An app's model object for a result, and a delegate written as for Apple's SDK.
final class Note: NSObject {
    let item: NSMetadataItem
    init(_ item: NSMetadataItem) { self.item = item }
    var name: String { item.value(forAttribute: NSMetadataItemFSNameKey) as? String ?? "?" }
}

final class Library: NSObject, NSMetadataQueryDelegate {
    func metadataQuery(_ query: NSMetadataQuery, replacementObjectForResultObject result: NSMetadataItem) -> Any {
        Note(result)
    }

    func metadataQuery(_ query: NSMetadataQuery, replacementValueForAttribute attrName: String, value attrValue: Any) -> Any {
        attrName == NSMetadataItemFSNameKey ? (attrValue as? String ?? "").uppercased() : attrValue
    }
}

@Suite struct MetadataQueryDelegateTests {
    let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ubiquity-query-\(UUID().uuidString.prefix(8))")

    func write(_ relative: String) throws {
        let url = folder.appendingPathComponent(relative)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data("x".utf8).write(to: url)
    }

    func query(_ configure: (NSMetadataQuery) -> Void) async throws -> NSMetadataQuery {
        let query = NSMetadataQuery(containers: UbiquityContainers(paths: temporaryPaths(), entitlements: UbiquityEntitlements(containers: [])))
        query.predicate = NSPredicate(format: "%K LIKE '*.txt'", NSMetadataItemFSNameKey)
        query.sortDescriptors = [NSSortDescriptor(key: NSMetadataItemFSNameKey, ascending: true)]
        configure(query)
        let recorder = QueryRecorder(query)
        defer { recorder.remove() }
        #expect(query.start())
        #expect(await recorder.wait { $0.contains { $0.name == "DidFinishGathering" } })
        return query
    }

    @Test func theDelegateGivesResultsAndValuesOfItsOwn() async throws {
        defer { try? FileManager.default.removeItem(at: folder) }
        for name in ["a.txt", "b.txt"] { try write(name) }
        let library = Library()
        let query = try await query { query in
            query.searchScopes = [folder]
            query.valueListAttributes = [NSMetadataItemFSNameKey]
            query.delegate = library
        }
        defer { query.stop() }
        let notes = query.results.compactMap { $0 as? Note }
        #expect(notes.map(\.name) == ["a.txt", "b.txt"], "the delegate's objects, in order")
        #expect(query.results.first as AnyObject === notes.first, "asked once per result: the same object each time")
        #expect(query.result(at: 1) as AnyObject === notes[1] && query.index(ofResult: notes[1]) == 1)
        #expect(query.index(ofResult: notes[0].item) == 0 && query.index(ofResult: Note(notes[0].item)) == NSNotFound)
        var enumerated: [String] = []
        query.enumerateResults { result, _, _ in enumerated.append((result as? Note)?.name ?? "?") }
        #expect(enumerated == ["a.txt", "b.txt"])
        #expect(query.value(ofAttribute: NSMetadataItemFSNameKey, forResultAt: 0) as? String == "A.TXT", "the delegate's value")
        #expect(query.valueLists[NSMetadataItemFSNameKey]?.compactMap { $0.value as? String }.sorted() == ["A.TXT", "B.TXT"])
        #expect(query.delegate === library)
        query.delegate = nil
        #expect(query.results.first is NSMetadataItem, "without a delegate, the items")
    }

    @Test func searchItemsLimitWhatCanBeAResult() async throws {
        defer { try? FileManager.default.removeItem(at: folder) }
        for name in ["a.txt", "b.txt", "sub/c.txt", "sub/deeper/d.txt", "other/e.txt"] { try write(name) }
        let scoped = try await query { query in
            query.searchScopes = [folder]
            query.searchItems = [folder.appendingPathComponent("a.txt"), folder.appendingPathComponent("sub")]
        }
        defer { scoped.stop() }
        #expect(names(scoped) == ["a.txt", "c.txt", "d.txt"], "the items, and what is under a folder among them")
        #expect((scoped.searchItems as? [URL])?.count == 2)
        // Without search scopes, the items' own folders are searched.
        let alone = try await query { $0.searchItems = [folder.appendingPathComponent("b.txt")] }
        defer { alone.stop() }
        #expect(names(alone) == ["b.txt"] && alone.searchScopes.isEmpty)
    }
}
