import Foundation
import UbiquityTestSupport
import Testing
@testable import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// What a program killed mid-save leaves, and when it counts as abandoned.
@Suite struct LeftoversTests {
    /// The number of a process that ran and is gone.
    private func deadProcess() throws -> pid_t {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/true")
        try process.run()
        process.waitUntilExit()
        return process.processIdentifier
    }

    /// Sets the modification time of `url` `seconds` into the past.
    private func age(_ url: URL, by seconds: Double) throws {
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-seconds)], ofItemAtPath: url.path)
    }

    @Test func aSavesTemporaryNamesItsProcess() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let url = scratch.file("a.txt")
        let temporary = try SafeSave.replaceItem(at: url) { try Data("x".utf8).write(to: $0) }
        #expect(Leftovers.owner(of: temporary.lastPathComponent) == getpid())
        #expect(Leftovers.isTemporary(temporary.lastPathComponent))
        #expect(!Leftovers.isTemporary("a.txt"))
        #expect(!Leftovers.isTemporary(".ubiquity-download-1234"), "the agent's own staging is the agent's to clean")
    }

    @Test func aTemporaryOfAProcessThatIsGoneIsAbandonedAtOnce() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let dead = scratch.file(".a.txt.ubiquity-save-\(try deadProcess())-0123456789abcdef")
        try Data("half".utf8).write(to: dead)
        let alive = scratch.file(".b.txt.ubiquity-save-\(getppid())-0123456789abcdef")
        try Data("half".utf8).write(to: alive)
        let segment = scratch.file(".ubiquity-segment-\(try deadProcess())-0123456789abcdef.tmp")
        try Data("half".utf8).write(to: segment)
        #expect(Leftovers.isAbandoned(at: dead.path))
        #expect(Leftovers.isAbandoned(at: segment.path))
        #expect(!Leftovers.isAbandoned(at: alive.path), "its process may still be writing it")
        try age(alive, by: Leftovers.ownedMaximumAgeSeconds + 60)
        #expect(Leftovers.isAbandoned(at: alive.path), "a day old: the number was reused")
        #expect(try Leftovers.removeIfAbandoned(at: dead.path))
        #expect(!FileManager.default.fileExists(atPath: dead.path))
    }

    @Test func aTemporaryThatNamesNoProcessIsAbandonedWhenQuietAndClosed() async throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let foundation = scratch.file(".dat.nosyncab12.Xy9z")
        try Data("half".utf8).write(to: foundation)
        #expect(!Leftovers.isAbandoned(at: foundation.path), "just written: a save may be about to rename it")
        try age(foundation, by: Leftovers.unownedQuietSeconds + 5)
        // Opened close-on-exec: a process another test starts meanwhile must not inherit it (it
        // would hold the file open, as far as /proc tells, for as long as it runs).
        let descriptor = open(foundation.path, O_RDWR | O_CLOEXEC)
        #expect(descriptor >= 0)
        #expect(!Leftovers.isAbandoned(at: foundation.path), "held open: a save is writing it")
        close(descriptor)
        // (A process started by another test in the instant between its fork and its exec still
        // shares the descriptor: that instant passes.)
        var abandoned = Leftovers.isAbandoned(at: foundation.path)
        for _ in 0..<50 where !abandoned {
            try await Task.sleep(for: .milliseconds(100))
            abandoned = Leftovers.isAbandoned(at: foundation.path)
        }
        #expect(abandoned)
    }

    @Test func aFolderIsAsRecentAsWhatIsInIt() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let package = scratch.file(".doc.package.ubiquity-save-\(getpid())-0123456789abcdef")
        try FileManager.default.createDirectory(at: package, withIntermediateDirectories: true)
        try Data("m".utf8).write(to: package.appendingPathComponent("member"))
        try age(package, by: Leftovers.ownedMaximumAgeSeconds + 60)
        #expect(!Leftovers.isAbandoned(at: package.path), "a member written just now")
    }

    @Test func aSaveLeavesAnotherLiveProcessesTemporaryAlone() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let url = scratch.file("a.txt")
        let other = scratch.file(".a.txt.ubiquity-save-\(getppid())-0123456789abcdef")
        try Data("another save".utf8).write(to: other)
        let gone = scratch.file(".a.txt.ubiquity-save-\(try deadProcess())-fedcba9876543210")
        try Data("killed".utf8).write(to: gone)
        try SafeSave.write(Data("new".utf8), to: url)
        #expect(FileManager.default.fileExists(atPath: other.path))
        #expect(!FileManager.default.fileExists(atPath: gone.path))
    }
}
