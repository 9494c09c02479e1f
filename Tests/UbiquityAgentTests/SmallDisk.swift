import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A small filesystem of a test's own — a tmpfs, which needs root to mount — that the test fills
/// to the last byte and empties again: what a full disk does to the agent's writes.
struct SmallDisk {
    /// Where it is mounted.
    let folder: URL
    private var ballast: URL { folder.appendingPathComponent("ballast") }

    /// Mounts `megabytes` of tmpfs at `folder` (made first); nil, said on standard output, where
    /// it cannot be mounted (not root): the test then checks nothing.
    init?(at folder: URL, megabytes: Int) throws {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        guard mount("tmpfs", folder.path, "tmpfs", 0, "size=\(megabytes)m") == 0 else {
            print("skipped: cannot mount a tmpfs (errno \(errno)): needs root")
            return nil
        }
        self.folder = folder
    }

    /// Fills it to the last byte.
    func fill() {
        let fd = open(ballast.path, O_CREAT | O_WRONLY, 0o600)
        var block = [UInt8](repeating: 0, count: 64 << 10)
        while write(fd, &block, block.count) > 0 {}
        block = [0]
        while write(fd, &block, 1) > 0 {}
        close(fd)
    }

    /// Gives back what ``fill()`` took.
    func empty() throws {
        try FileManager.default.removeItem(at: ballast)
    }

    /// Unmounts it (lazily: files still open go when closed).
    func unmount() {
        _ = umount2(folder.path, Int32(MNT_DETACH))
    }
}
