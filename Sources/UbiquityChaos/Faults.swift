import Foundation
import UbiquityTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The faults that need the system: small filesystems that fill up, a flood of file events.
enum Faults {
    /// libfaketime, which makes a process see a skewed clock (Debian's `faketime` package).
    static let fakeTimeLibrary = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

    /// Whether a skewed clock can be given to a device's processes.
    static var canSkewClocks: Bool { FileManager.default.fileExists(atPath: fakeTimeLibrary) }

    /// Mounts a tmpfs of `megabytes` at `folder` (made if missing), so that what is in it can
    /// run out of space on its own; false when this process may not mount (not root, or no
    /// `CAP_SYS_ADMIN` in a container) — the disk-full faults are then left out, and said so.
    static func mountSmallDisk(at folder: URL, megabytes: Int) -> Bool {
        try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true) // (mount reports a missing folder)
        return mount("tmpfs", folder.path, "tmpfs", 0, "size=\(megabytes)m,mode=0755") == 0
    }

    /// Detaches the filesystem at `folder` (lazily: a process still in it keeps it until it leaves).
    static func unmount(_ folder: URL) {
        _ = umount2(folder.path, Int32(MNT_DETACH))
    }

    /// Fills the filesystem of `folder` with one file (all but `leaving` bytes of its free
    /// space); returns the file, to remove when the fault ends.
    static func fill(_ folder: URL, leaving: Int64 = 0) throws -> URL {
        var stats = statvfs()
        guard statvfs(folder.path, &stats) == 0 else { throw ChaosError("statvfs \(folder.path): errno \(errno)") }
        let free = Int64(stats.f_bavail) * Int64(stats.f_frsize)
        let ballast = folder.appendingPathComponent(".chaos-ballast-\(UUID().uuidString.prefix(6))")
        let fd = open(ballast.path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ChaosError("cannot make \(ballast.path): errno \(errno)") }
        defer { close(fd) }
        let size = max(0, free - leaving)
        if size > 0, posix_fallocate(fd, 0, off_t(size)) != 0 {
            // Whatever could be had is taken: fill block by block until the disk says no.
            var block = [UInt8](repeating: 0, count: 1 << 20)
            while write(fd, &block, block.count) > 0 {}
        }
        return ballast
    }

    /// Makes and removes `count` files in a new folder inside `folder` as fast as it can —
    /// three events each, more than the kernel queues for a watcher (16,384 by default), so
    /// the agent must notice the overflow and look again for itself.
    static func flood(in folder: URL, count: Int) throws {
        let burst = folder.appendingPathComponent("flood-\(UUID().uuidString.prefix(6))")
        try FileManager.default.createDirectory(at: burst, withIntermediateDirectories: true)
        for index in 0..<count {
            let fd = open(burst.appendingPathComponent("f\(index)").path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
            if fd >= 0 { close(fd) }
        }
        try FileManager.default.removeItem(at: burst)
    }

    /// Runs `ubiquity seal-in-place` on `storage` (every revision, however young) and SIGKILLs it
    /// after `killedAfter` unless it ended first; what it printed goes to `log`.
    static func sealInPlace(storage: [String], killedAfter: Duration, log: URL) async throws {
        let process = ChildProcess()
        process.executableURL = Binaries.ubiquity
        process.arguments = ["seal-in-place"] + storage + ["--settle-minutes", "0"]
        if !FileManager.default.fileExists(atPath: log.path) { _ = FileManager.default.createFile(atPath: log.path, contents: nil) }
        let handle = try FileHandle(forWritingTo: log)
        defer { try? handle.close() }
        handle.seekToEndOfFile()
        (process.standardOutput, process.standardError) = (handle, handle)
        try process.run()
        try? await Task.sleep(for: killedAfter) // (a cancelled sleep only shortens the run)
        if process.isRunning { process.signal(SIGKILL) }
        _ = try? await blocking { process.waitUntilExit() } // (cannot fail: the thread always resumes)
    }
}
