import Foundation
import UbiquityClient
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// What the agent knows of one file in a container without reading it: enough to tell whether
/// it changed since the last look (size, modification time, inode) and to follow it when it is
/// renamed (the inode stays).
public struct LocalFingerprint: Sendable, Equatable, Codable {
    /// The file's inode (the same after a rename within the container).
    public var inode: UInt64
    /// Its size in bytes.
    public var size: Int64
    /// Its modification time, in nanoseconds since 1970.
    public var modified: Int64
    /// Its status change time, in nanoseconds (a rewrite in place changes it even when the
    /// size and modification time are set back).
    public var changed: Int64
}

/// The files of a container's folder, by path relative to it.
public typealias LocalTree = [String: LocalFingerprint]

/// What changed between two looks at a container's folder.
public struct LocalChanges: Sendable, Equatable {
    /// New files.
    public var added: [String] = []
    /// Files whose contents may have changed (their fingerprints differ).
    public var modified: [String] = []
    /// Files that moved: from one path to another, contents unchanged.
    public var moved: [(from: String, to: String)] = []
    /// Files that are gone.
    public var removed: [String] = []

    /// Whether nothing changed.
    public var isEmpty: Bool { added.isEmpty && modified.isEmpty && moved.isEmpty && removed.isEmpty }

    public static func == (a: LocalChanges, b: LocalChanges) -> Bool {
        a.added == b.added && a.modified == b.modified && a.removed == b.removed
            && a.moved.map { "\($0.from)\u{0}\($0.to)" } == b.moved.map { "\($0.from)\u{0}\($0.to)" }
    }
}

/// Walks a container's folder and compares it with the last walk: the agent's way of never
/// missing a change (after an inotify overflow, at start, after a crash), and of recognising
/// renames. Only regular files are synced: symbolic links, sockets and devices are skipped, and
/// so is what must stay local — names ending in `.nosync` (and everything under such a
/// folder), the version stores (`.ubiquity-versions`, and any `.ubiquity-…` name), and safe
/// save's and Foundation's temporary siblings (`.NAME.ubiquity-save-…`, `.dat.nosync…`) — and the agent's placeholders for items
/// not downloaded (`.NAME.icloud`).
public struct LocalScanner: Sendable {
    /// The folder scanned.
    public let root: URL

    /// A scanner of `root`.
    public init(root: URL) {
        self.root = root
    }

    /// Whether a file or folder named `name` stays out of sync.
    public static func isExcluded(_ name: String) -> Bool {
        name.hasSuffix(".nosync") || name.hasPrefix(".ubiquity-") || SafeSave.isTemporaryName(name) || name.hasPrefix(".dat.nosync")
            || UbiquityPlaceholder.itemName(ofPlaceholder: name) != nil
    }

    /// Every synced file under the root, with its fingerprint. Unreadable folders are reported,
    /// not skipped silently.
    /// - Throws: ``ScanError`` when the root or a folder in it cannot be read.
    public func scan() throws -> LocalTree {
        var tree: LocalTree = [:]
        try walk("", into: &tree)
        return tree
    }

    private func walk(_ relative: String, into tree: inout LocalTree) throws {
        let path = relative.isEmpty ? root.path : root.path + "/" + relative
        guard let directory = opendir(path) else {
            if relative.isEmpty && errno == ENOENT { return } // no folder yet: nothing to sync
            throw ScanError(path: path, reason: String(cString: strerror(errno)))
        }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name == "." || name == ".." || Self.isExcluded(name) { continue }
            names.append(name)
        }
        for name in names.sorted() {
            let child = relative.isEmpty ? name : relative + "/" + name
            var info = stat()
            guard lstat(root.path + "/" + child, &info) == 0 else {
                if errno == ENOENT { continue } // gone since the listing: the next scan sees it
                throw ScanError(path: root.path + "/" + child, reason: String(cString: strerror(errno)))
            }
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                try walk(child, into: &tree)
            case S_IFREG:
                tree[child] = Self.fingerprint(info)
            default:
                continue // links, sockets, devices: not synced
            }
        }
    }

    /// The fingerprint of the regular file at `relative`, or nil if there is none.
    public func fingerprint(of relative: String) -> LocalFingerprint? {
        var info = stat()
        guard lstat(root.path + "/" + relative, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        return Self.fingerprint(info)
    }

    static func fingerprint(_ info: stat) -> LocalFingerprint {
        LocalFingerprint(
            inode: UInt64(info.st_ino), size: Int64(info.st_size),
            modified: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec),
            changed: Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec))
    }

    /// What changed from `old` to `new`. A file found at another path with the same inode, size
    /// and modification time is a move (even when a new file took its old path); a file moved
    /// and edited between two looks is a removal and an addition (nothing is lost, only the
    /// item's identity). A path whose fingerprint differs is a modification (a save that
    /// renames a new file over the old one included).
    public static func changes(from old: LocalTree, to new: LocalTree) -> LocalChanges {
        var changes = LocalChanges()
        var newByInode: [UInt64: String] = [:]
        for path in new.keys.sorted() where newByInode[new[path]!.inode] == nil { newByInode[new[path]!.inode] = path }
        var explained = Set<String>()
        for path in old.keys.sorted() {
            let before = old[path]!
            if let after = new[path], after.inode == before.inode {
                if after != before { changes.modified.append(path) }
                explained.insert(path)
            } else if let to = newByInode[before.inode], to != path, old[to]?.inode != before.inode,
                      new[to]!.size == before.size, new[to]!.modified == before.modified {
                // A rename keeps the inode, size and modification time. (An inode alone is not
                // enough: a deleted file's inode is reused at once by the next file created.)
                changes.moved.append((path, to))
                explained.insert(to)
            } else if new[path] != nil {
                changes.modified.append(path)
                explained.insert(path)
            } else {
                changes.removed.append(path)
            }
        }
        changes.added = new.keys.filter { !explained.contains($0) }.sorted()
        changes.modified.sort()
        return changes
    }
}

/// A folder that could not be read.
public struct ScanError: Error, CustomStringConvertible, Equatable {
    /// The folder or file.
    public var path: String
    /// Why.
    public var reason: String

    /// A sentence saying so.
    public var description: String { "cannot read \(path): \(reason)" }
}
