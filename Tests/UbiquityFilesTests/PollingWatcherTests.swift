import Foundation
import Synchronization
import Testing
import UbiquityTestSupport
@testable import UbiquityFiles

/// A watcher where inotify cannot be had (the user's 128 inotify instances all in use — a full
/// test run came within six of it — or no watch left): it looks at the tree itself and still
/// hears every change, slower.
@Suite(.serialized) struct PollingWatcherTests { // (one at a time: each looks for polling threads by name)
    final class Heard: Sendable {
        let overflows = Mutex(0)
        var count: Int { overflows.withLock { $0 } }
    }

    /// Waits up to `seconds` for the count to pass `count`.
    func changed(after count: Int, _ heard: Heard, seconds: Double = 15) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while heard.count <= count && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        return heard.count > count
    }

    @Test func aWatcherWithoutInotifyLooksAtTheTreeAndHearsEveryKindOfChange() throws {
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("polling-\(UUID().uuidString.prefix(8))")
        let inner = folder.appendingPathComponent("Inner/Deeper")
        try FileManager.default.createDirectory(at: inner, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let heard = Heard()
        let watcher = try DirectoryWatcher(root: folder, polling: true) { event in
            if event == .overflow { heard.overflows.withLock { $0 += 1 } }
        }
        defer { watcher.stop() }
        #expect(watcher.isPolling)
        // (The thread names itself as it starts.)
        let started = Date().addingTimeInterval(10)
        while !threadNames().contains("ubq-watch-poll") && Date() < started { Thread.sleep(forTimeInterval: 0.01) }
        #expect(threadNames().contains("ubq-watch-poll"))

        // Nothing changed: nothing said (two looks).
        Thread.sleep(forTimeInterval: 4.5)
        #expect(heard.count == 0)
        let file = inner.appendingPathComponent("Note.txt")
        var count = heard.count
        try Data("one".utf8).write(to: file)
        #expect(changed(after: count, heard), "a file made deep in the tree")
        count = heard.count
        try Data("two".utf8).write(to: file) // the same size: its modification time says it
        #expect(changed(after: count, heard), "a file rewritten")
        count = heard.count
        try FileManager.default.moveItem(at: file, to: folder.appendingPathComponent("Moved.txt"))
        #expect(changed(after: count, heard), "a file moved")
        count = heard.count
        try FileManager.default.removeItem(at: folder.appendingPathComponent("Inner"))
        #expect(changed(after: count, heard), "a folder deleted")

        // Stopped: its thread ends.
        watcher.stop()
        let deadline = Date().addingTimeInterval(10)
        while threadNames().contains("ubq-watch-poll") && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        #expect(!threadNames().contains("ubq-watch-poll"))
    }

    /// A change made as soon as the watcher is returned — before its thread got to run — is
    /// heard: its first look is taken before it is returned (found under load: a query's first
    /// update never came, its file written before the look it was compared with).
    @Test func aChangeMadeAsSoonAsTheWatcherIsMadeIsHeard() throws {
        for attempt in 0..<4 {
            let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("polling-first-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            let heard = Heard()
            let watcher = try DirectoryWatcher(root: folder, polling: true) { event in
                if event == .overflow { heard.overflows.withLock { $0 += 1 } }
            }
            defer { watcher.stop() }
            try Data("at once".utf8).write(to: folder.appendingPathComponent("First.txt"))
            #expect(changed(after: 0, heard, seconds: 10), "attempt \(attempt)")
        }
    }

    /// A watcher gone leaves no descriptor open (its wake pipe's writing end was once left
    /// behind: an app that opens and closes queries ran out of them). Each end is known by its
    /// number and its inode, so a number another test's file took meanwhile is not counted.
    @Test(arguments: [false, true]) func aWatcherGoneLeavesNoDescriptorOpen(polling: Bool) throws {
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("fds-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: folder) }
        func inode(_ descriptor: Int32) -> UInt64? {
            var info = stat()
            return fstat(descriptor, &info) == 0 ? UInt64(info.st_ino) : nil
        }
        var ends: [(descriptor: Int32, inode: UInt64)] = []
        for _ in 0..<20 {
            let watcher = try DirectoryWatcher(root: folder, polling: polling) { _ in }
            ends += watcher.wakeDescriptors.compactMap { descriptor in inode(descriptor).map { (descriptor, $0) } }
            watcher.stop()
        }
        #expect(ends.count == 40)
        func open() -> Int { ends.filter { inode($0.descriptor) == $0.inode }.count }
        // (The threads close their ends as they end.)
        let deadline = Date().addingTimeInterval(20)
        while open() > 0 && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        #expect(open() == 0, "\(open()) of the watchers' descriptors still open")
    }

    /// Only inotify's limits send a watcher to looking: a folder it may not read is an error.
    @Test func theLimitsOfInotifyAndNothingElseLeaveLookingAtTheTree() {
        for code in [EMFILE, ENFILE, ENOSPC, ENOMEM] { #expect(DirectoryWatcher.pollsInstead(failing: code), "\(code)") }
        for code in [EACCES, ENOENT, ENOTDIR, EINVAL] { #expect(!DirectoryWatcher.pollsInstead(failing: code), "\(code)") }
    }
}
