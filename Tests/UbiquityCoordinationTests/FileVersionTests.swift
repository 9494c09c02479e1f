import Foundation
import UbiquityTestSupport
import Synchronization
import Testing
@testable import UbiquityCoordination
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

@Suite(.serialized) struct FileVersionTests {
    func text(_ url: URL) throws -> String { try String(contentsOf: url, encoding: .utf8) }

    /// A file with the given text at `name` in `scratch`.
    func item(_ scratch: Scratch, _ name: String = "note.txt", _ contents: String = "current") throws -> URL {
        let url = scratch.file(name)
        try Data(contents.utf8).write(to: url)
        return url
    }

    func conflict(_ item: URL, _ contents: String, from computer: String, at date: Date, in scratch: Scratch) throws -> NSFileVersion {
        let incoming = scratch.file("incoming-\(UUID().uuidString.prefix(6))")
        try Data(contents.utf8).write(to: incoming)
        return try NSFileVersion.addConflictVersion(ofItemAt: item, withContentsOf: incoming, savingComputer: computer, modificationDate: date, byMoving: true)
    }

    /// A process killed while it prepared a version leaves its staging folder: the next one
    /// made beside the item (or the agent's sweep) removes it at once, not a day later (found
    /// by `ubiquity-chaos`: an agent killed while adding a conflict version); a living
    /// process's folder stays.
    @Test func aDeadProcessesStagingFolderGoesAtOnce() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = try item(scratch)
        let first = NSFileVersion.temporaryDirectoryURLForNewVersionOfItem(at: item)
        let staging = first.deletingLastPathComponent()
        #expect(first.lastPathComponent.hasPrefix("\(getpid())-"))
        let exited = ChildProcess()
        exited.executableURL = URL(fileURLWithPath: "/bin/true")
        try exited.run()
        try await onOwnThread { exited.waitUntilExit() }
        let dead = staging.appendingPathComponent("\(exited.processIdentifier)-\(UUID().uuidString)")
        let living = staging.appendingPathComponent("1-\(UUID().uuidString)") // init never exits
        for folder in [dead, living] {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            try Data("half a version".utf8).write(to: folder.appendingPathComponent("note.txt"))
        }
        NSFileVersion.removeAbandonedStaging(nearItemAt: item)
        #expect(!FileManager.default.fileExists(atPath: dead.path))
        #expect(FileManager.default.fileExists(atPath: living.path) && FileManager.default.fileExists(atPath: first.path))
        try FileManager.default.createDirectory(at: dead, withIntermediateDirectories: true)
        _ = NSFileVersion.temporaryDirectoryURLForNewVersionOfItem(at: item)
        #expect(!FileManager.default.fileExists(atPath: dead.path))
    }

    /// A folder the agent moved away while it prepared a version inside: what this process
    /// staged anywhere in it goes (its writer then worked on the old path and could not remove
    /// it — found by `ubiquity-chaos --sealed-share`, seed 12); another living process's stays.
    @Test func thisProcessesStagingInAMovedFolderGoes() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        try FileManager.default.createDirectory(at: scratch.file("shared/sub"), withIntermediateDirectories: true)
        let top = try item(scratch, "shared/note.txt"), deep = try item(scratch, "shared/sub/deep.txt")
        let mine = [NSFileVersion.temporaryDirectoryURLForNewVersionOfItem(at: top), NSFileVersion.temporaryDirectoryURLForNewVersionOfItem(at: deep)]
        let theirs = mine[0].deletingLastPathComponent().appendingPathComponent("1-\(UUID().uuidString)") // init never exits
        try FileManager.default.createDirectory(at: theirs, withIntermediateDirectories: true)
        let moved = scratch.file("shared (not shared)")
        try FileManager.default.moveItem(at: scratch.file("shared"), to: moved)
        NSFileVersion.removeThisProcessStaging(under: moved)
        let left = try FileManager.default.subpathsOfDirectory(atPath: moved.path).filter { $0.contains(".staging/") }
        #expect(left == [".ubiquity-versions/.staging/" + theirs.lastPathComponent], "\(left)")
    }

    @Test func addingListingAndFindingVersions() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = try item(scratch)
        let current = try #require(NSFileVersion.currentVersionOfItem(at: item))
        #expect(current.url == item && !current.isConflict && current.versionIdentifier == .current)
        #expect(current.localizedNameOfSavingComputer == NSFileVersion.thisComputer && current.size == 7)
        #expect(NSFileVersion.otherVersionsOfItem(at: item)?.isEmpty == true)

        // By copying: the source stays.
        let earlier = scratch.file("earlier.txt")
        try Data("earlier".utf8).write(to: earlier)
        let copied = try NSFileVersion.addOfItem(at: item, withContentsOf: earlier)
        #expect(FileManager.default.fileExists(atPath: earlier.path))
        // By moving, prepared in the store's staging directory.
        let staging = NSFileVersion.temporaryDirectoryURLForNewVersionOfItem(at: item)
        #expect(staging.path.hasPrefix(scratch.url.path + "/.ubiquity-versions/"))
        let prepared = staging.appendingPathComponent("note.txt")
        try Data("prepared".utf8).write(to: prepared)
        let moved = try NSFileVersion.addOfItem(at: item, withContentsOf: prepared, options: .byMoving)
        #expect(!FileManager.default.fileExists(atPath: prepared.path))

        let others = try #require(NSFileVersion.otherVersionsOfItem(at: item))
        #expect(Set(others.map(\.versionIdentifier)) == [copied.versionIdentifier, moved.versionIdentifier])
        #expect(try text(copied.url) == "earlier" && copied.url.lastPathComponent == "note.txt")
        #expect(try text(moved.url) == "prepared")
        #expect(others.allSatisfy { !$0.isConflict && $0.hasLocalContents && $0.localizedName == "note.txt" && $0.modificationDate != nil })
        #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: item)?.isEmpty == true)

        // The identifier survives encoding, and finds the version again (as after a restart).
        let encoded = try JSONEncoder().encode(moved.versionIdentifier)
        let decoded = try JSONDecoder().decode(NSFileVersion.PersistentIdentifier.self, from: encoded)
        let found = try #require(NSFileVersion.version(itemAt: item, forPersistentIdentifier: decoded))
        #expect(found.url == moved.url && found.size == 8)
        #expect(NSFileVersion.version(itemAt: item, forPersistentIdentifier: "no-such-version") == nil)
        #expect(!found.isDiscardable)
        found.isDiscardable = true
        #expect(NSFileVersion.version(itemAt: item, forPersistentIdentifier: decoded)?.isDiscardable == true, "persisted")
        #expect(NSFileVersion.version(itemAt: item, forPersistentIdentifier: NSFileVersion.PersistentIdentifier.current)?.url == item)

        // Not a document: the store is hidden beside the item.
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.url.path).sorted() == [".ubiquity-versions", "earlier.txt", "note.txt"])
        let usage = try NSFileVersion.storageUsage(ofItemAt: item)
        #expect(usage.versions == 2 && usage.bytes == 15 && usage.limit == NSFileVersion.maximumStorageBytesPerItem)
    }

    @Test func conflictVersionsAreResolvedAndRemoved() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = try item(scratch)
        let date = Date(timeIntervalSince1970: 1_800_000_000)
        let first = try conflict(item, "from the laptop", from: "laptop", at: date, in: scratch)
        _ = try conflict(item, "from the phone", from: "phone", at: date.addingTimeInterval(60), in: scratch)

        let unresolved = try #require(NSFileVersion.unresolvedConflictVersionsOfItem(at: item))
        #expect(unresolved.map(\.localizedNameOfSavingComputer) == ["laptop", "phone"], "oldest first")
        #expect(unresolved.allSatisfy { $0.isConflict && !$0.isResolved && $0.modificationDate != nil })
        #expect(unresolved[0].modificationDate == date)

        // Resolving persists.
        first.isResolved = true
        #expect(NSFileVersion.version(itemAt: item, forPersistentIdentifier: first.persistentIdentifier)?.isResolved == true)
        #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: item)?.map(\.localizedNameOfSavingComputer) == ["phone"])

        // Replace the item with the other conflict version, then clean up as the guide does.
        let chosen = unresolved[1]
        _ = try NSFileCoordinator().coordinate(writingItemAt: item) { try chosen.replaceItem(at: $0) }
        #expect(try text(item) == "from the phone")
        try NSFileVersion.removeOtherVersionsOfItem(at: item)
        for version in unresolved { try version.setResolved(true) } // removed already: still fine
        #expect(NSFileVersion.otherVersionsOfItem(at: item)?.isEmpty == true)
        #expect(try NSFileVersion.storageUsage(ofItemAt: item).versions == 0)
    }

    @Test func replacingByMovingTakesTheVersionOutOfTheStore() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = try item(scratch)
        let version = try conflict(item, "theirs", from: "desktop", at: Date(), in: scratch)
        try version.replaceItem(at: item, options: .byMoving)
        #expect(try text(item) == "theirs")
        #expect(NSFileVersion.otherVersionsOfItem(at: item)?.isEmpty == true)
    }

    @Test func missingItemsAndVanishedVersionsGiveClearErrors() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let missing = scratch.file("missing.txt")
        #expect(NSFileVersion.currentVersionOfItem(at: missing) == nil)
        #expect(NSFileVersion.otherVersionsOfItem(at: missing) == nil)
        #expect(throws: FileAccessError.self) { try NSFileVersion.versions(ofItemAt: missing) }

        let item = try item(scratch)
        let error = #expect(throws: FileAccessError.self) {
            try NSFileVersion.addOfItem(at: item, withContentsOf: scratch.file("nothing-here"))
        }
        #expect(error?.code == .notFound)
        #expect(NSFileVersion.otherVersionsOfItem(at: item)?.isEmpty == true)

        // Another party (another NSFileVersion, as another process would hold) removes a version.
        let version = try conflict(item, "theirs", from: "desktop", at: Date(), in: scratch)
        let other = try #require(NSFileVersion.version(itemAt: item, forPersistentIdentifier: version.persistentIdentifier))
        try other.remove()
        #expect((#expect(throws: FileAccessError.self) { try version.remove() })?.code == .notFound)
        #expect((#expect(throws: FileAccessError.self) { try version.replaceItem(at: item) })?.code == .notFound)
        #expect(try text(item) == "current", "the item is untouched")
        #expect(throws: FileAccessError.self) { try NSFileVersion.currentVersionOfItem(at: item)!.remove() }
    }

    @Test func aCorruptRecordIsSkippedNotDeleted() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = try item(scratch)
        let good = try conflict(item, "good", from: "a", at: Date(), in: scratch)
        let bad = try conflict(item, "bad", from: "b", at: Date(), in: scratch)
        let record = bad.url.deletingLastPathComponent().appendingPathComponent("record.json")
        try Data("{ not json".utf8).write(to: record)
        #expect(NSFileVersion.otherVersionsOfItem(at: item)?.map(\.versionIdentifier) == [good.versionIdentifier])
        #expect(FileManager.default.fileExists(atPath: bad.url.path), "its contents are kept for a person to rescue")
        #expect((#expect(throws: FileAccessError.self) { try bad.setResolved(true) })?.code == .corrupt)
    }

    @Test(.enabled(if: geteuid() == 0, "needs to mount a small tmpfs"))
    func aFullDiskWhileAddingAVersionLosesNothing() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let mount = scratch.file("small")
        try FileManager.default.createDirectory(at: mount, withIntermediateDirectories: true)
        try await shell("mount -t tmpfs -o size=256k tmpfs '\(mount.path)'")
        defer {
            // (A defer cannot wait for a task: `umount` of a small tmpfs takes milliseconds.)
            let unmount = ChildProcess()
            unmount.executableURL = URL(fileURLWithPath: "/bin/umount")
            unmount.arguments = [mount.path]
            if (try? unmount.run()) != nil { unmount.waitUntilExit() }
        }
        let item = mount.appendingPathComponent("big.bin")
        try Data(repeating: 1, count: 100 * 1024).write(to: item)
        let contents = scratch.file("huge.bin") // on the big file system
        try Data(repeating: 2, count: 400 * 1024).write(to: contents)

        let error = #expect(throws: FileAccessError.self) { try NSFileVersion.addOfItem(at: item, withContentsOf: contents) }
        #expect(error?.code == .noSpace)
        #expect(NSFileVersion.otherVersionsOfItem(at: item)?.isEmpty == true)
        #expect(try Data(contentsOf: item) == Data(repeating: 1, count: 100 * 1024))
        #expect(try Data(contentsOf: contents).count == 400 * 1024)
        let store = mount.appendingPathComponent(".ubiquity-versions/big.bin").path
        #expect(try FileManager.default.contentsOfDirectory(atPath: store).filter { $0.hasPrefix(".adding") }.isEmpty, "no half-added version is left")
        // And once there is room, it works.
        try Data(repeating: 3, count: 50 * 1024).write(to: contents)
        #expect(try NSFileVersion.addOfItem(at: item, withContentsOf: contents).size == 50 * 1024)
    }

    @Test func theStoreIsBoundedByRemovingWhatMayGo() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = try item(scratch)
        let saved = NSFileVersion.maximumStorageBytesPerItem
        NSFileVersion.maximumStorageBytesPerItem = 25
        defer { NSFileVersion.maximumStorageBytesPerItem = saved }
        let keep = try conflict(item, "unresolved-conflict", from: "a", at: Date(), in: scratch) // 19 bytes
        let source = scratch.file("old.txt")
        try Data("history".utf8).write(to: source) // 7 bytes
        let old = try NSFileVersion.add(ofItemAt: item, contents: source, conflict: false, savingComputer: nil, modificationDate: nil, byMoving: false, discardable: true)
        #expect(NSFileVersion.version(itemAt: item, forPersistentIdentifier: old.persistentIdentifier) == nil, "26 > 25 bytes: the discardable version went")
        #expect(NSFileVersion.version(itemAt: item, forPersistentIdentifier: keep.persistentIdentifier) != nil, "an unresolved conflict never goes")
        #expect(try NSFileVersion.storageUsage(ofItemAt: item).bytes == 19)
    }

    @Test func versionsFollowCoordinatedMovesAndGoWithDeletedItems() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = try item(scratch)
        let version = try conflict(item, "theirs", from: "desktop", at: Date(), in: scratch)
        try FileManager.default.createDirectory(at: scratch.file("folder"), withIntermediateDirectories: true)
        let moved = scratch.file("folder/renamed.txt")
        let coordinator = NSFileCoordinator()
        try coordinator.coordinate(reading: [], writing: [(item, .forMoving), (moved, .forReplacing)]) { _, urls in
            try FileManager.default.moveItem(at: urls[0], to: urls[1])
            coordinator.item(at: urls[0], didMoveTo: urls[1])
        }
        #expect(NSFileVersion.otherVersionsOfItem(at: item) == nil)
        let followed = try #require(NSFileVersion.version(itemAt: moved, forPersistentIdentifier: version.persistentIdentifier))
        #expect(try text(followed.url) == "theirs" && followed.url.lastPathComponent == "renamed.txt")

        try NSFileCoordinator().coordinate(writingItemAt: moved, options: .forDeleting) { try FileManager.default.removeItem(at: $0) }
        #expect(!FileManager.default.fileExists(atPath: scratch.file("folder/.ubiquity-versions/renamed.txt").path))
    }

    /// A downloaded nonlocal version follows its item to a new name, found there by its
    /// revision (found by `ubiquity-chaos --share`: left under the old name, it was never found
    /// again, and each download of it was lost).
    @Test func aDownloadedNonlocalVersionFollowsAMove() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = try item(scratch)
        let downloaded = scratch.file("download")
        try Data("earlier".utf8).write(to: downloaded)
        try NSFileVersion.storeNonlocalVersion(ofItemAt: item, contentsAt: downloaded,
                                               record: NonlocalVersionRecord(revision: "rev1", name: item.lastPathComponent, savingComputer: "desktop",
                                                                             modificationDate: Date(), size: 7))
        let moved = scratch.file("renamed.txt")
        try FileManager.default.moveItem(at: item, to: moved) // a program that does not coordinate
        try NSFileVersion.carryVersions(ofItemMovedFrom: item, to: moved) // what the agent does when it sees the move
        let version = try #require(NSFileVersion.downloadedNonlocalVersion(ofItemAt: moved, revision: "rev1"), "the version is found at the new name")
        #expect(try text(version.url) == "earlier" && version.url.lastPathComponent == "renamed.txt")
    }

    @Test func presentersHearAboutVersionsAddedResolvedAndRemovedByAnotherProcess() async throws {
        await TestTurns.presenterProcesses.take(); defer { TestTurns.presenterProcesses.give() }
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = try item(scratch)
        let incoming = scratch.file("incoming.txt")
        try Data("theirs".utf8).write(to: incoming)
        let presenter = VersionPresenter(item)
        let folder = VersionPresenter(scratch.url)
        NSFileCoordinator.addFilePresenter(presenter)
        NSFileCoordinator.addFilePresenter(folder)
        defer { NSFileCoordinator.removeFilePresenter(presenter); NSFileCoordinator.removeFilePresenter(folder) }

        try await helper(["add-conflict", item.path, incoming.path, "tablet"])
        #expect(await eventually { presenter.events.withLock { $0 } == ["gain:tablet"] })
        // (The item's own creation, just before, may still be heard as a change.)
        let folderHeard = await eventually { folder.events.withLock { $0 }.filter { !$0.hasPrefix("change:") } == ["subitem gain:note.txt"] }
        #expect(folderHeard, "the folder's presenter heard \(folder.events.withLock { $0 })")
        try await helper(["resolve-all", item.path])
        #expect(await eventually { presenter.events.withLock { $0 }.last == "resolve:tablet" })
        try await helper(["remove-all", item.path])
        #expect(await eventually { presenter.events.withLock { $0 }.last == "lose:tablet" })
        #expect(presenter.events.withLock { $0 } == ["gain:tablet", "resolve:tablet", "lose:tablet"])
        #expect(!folder.events.withLock { $0 }.contains { $0.contains("ubiquity-versions") }, "the store is not a subitem")
    }

    /// Apple's way to remember a version across launches: archive its persistent identifier,
    /// unarchive it later (here in another process) and look the version up with it.
    @Test func aPersistentIdentifierIsArchivedAndFoundAgainInAnotherProcess() async throws {
        await TestTurns.presenterProcesses.take(); defer { TestTurns.presenterProcesses.give() }
        let scratch = try Scratch(); defer { scratch.remove() }
        let item = scratch.file("note.txt")
        try Data("mine".utf8).write(to: item)
        let incoming = scratch.file("incoming.txt")
        try Data("theirs".utf8).write(to: incoming)
        let conflict = try NSFileVersion.addConflictVersion(ofItemAt: item, withContentsOf: incoming, savingComputer: "tablet", modificationDate: Date())
        let archived = try NSKeyedArchiver.archivedData(withRootObject: conflict.persistentIdentifier, requiringSecureCoding: true)
        let again = try #require(try NSKeyedUnarchiver.unarchivedObject(ofClass: NSString.self, from: archived))
        #expect(NSFileVersion.version(itemAt: item, forPersistentIdentifier: again)?.url == conflict.url)
        #expect(try await helper(["find-archived", item.path, archived.base64EncodedString()]) == "tablet\n")
        let current = try #require(NSFileVersion.currentVersionOfItem(at: item))
        let currentArchived = try NSKeyedArchiver.archivedData(withRootObject: current.persistentIdentifier, requiringSecureCoding: false)
        let unarchived = try #require(try NSKeyedUnarchiver.unarchivedObject(ofClass: NSString.self, from: currentArchived))
        #expect(NSFileVersion.version(itemAt: item, forPersistentIdentifier: unarchived)?.url == current.url, "the current version too")
        #expect(!conflict.hasThumbnail && conflict.originatorNameComponents == nil, "no thumbnails, no shared documents")
    }

    /// Runs the coordinator helper's version commands in another process; returns what it printed.
    @discardableResult
    func helper(_ arguments: [String]) async throws -> String {
        let (printed, status) = try await onOwnThread {
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
                .appendingPathComponent("UbiquityCoordinatorHelper")
            process.arguments = arguments
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            let printed = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (printed, process.terminationStatus)
        }
        #expect(status == 0, "\(arguments)")
        return String(decoding: printed, as: UTF8.self)
    }
}

/// A presenter that records version callbacks.
final class VersionPresenter: NSFilePresenter, @unchecked Sendable {
    let url: URL
    let queue: OperationQueue = {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        return queue
    }()
    let events = Mutex<[String]>([])
    init(_ url: URL) { self.url = url }
    var presentedItemURL: URL? { url }
    var presentedItemOperationQueue: OperationQueue { queue }
    func presentedItemDidGain(_ version: NSFileVersion) { events.withLock { $0.append("gain:\(version.localizedNameOfSavingComputer ?? "")") } }
    func presentedItemDidLose(_ version: NSFileVersion) { events.withLock { $0.append("lose:\(version.localizedNameOfSavingComputer ?? "")") } }
    func presentedItemDidResolveConflict(_ version: NSFileVersion) { events.withLock { $0.append("resolve:\(version.localizedNameOfSavingComputer ?? "")") } }
    func presentedSubitem(at url: URL, didGain version: NSFileVersion) { events.withLock { $0.append("subitem gain:\(url.lastPathComponent)") } }
    func presentedSubitemDidAppear(at url: URL) { events.withLock { $0.append("appear:\(url.path)") } }
    func presentedSubitemDidChange(at url: URL) { events.withLock { $0.append("change:\(url.path)") } }
}
