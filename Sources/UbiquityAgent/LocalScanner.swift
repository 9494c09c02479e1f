import Foundation
import Logging
import UbiquityClient
import UbiquityFiles
import UbiquityProtocol

#if canImport(Glibc)
import Glibc
#endif

/// What the agent knows of one item in a container without reading it: enough to tell whether
/// it changed since the last look (size, modification time, inode) and to follow it when it is
/// renamed (the inode stays).
///
/// A folder's fingerprint is its inode alone (what is in it are items of their own). A
/// package's sums up its members: the total size, the newest modification time, and a hash of
/// every member's path and fingerprint (so an edit of any member changes it).
package struct LocalFingerprint: Sendable, Equatable, Codable {
    /// The file's inode (the same after a rename within the container).
    package var inode: UInt64
    /// Its size in bytes.
    package var size: Int64
    /// Its modification time, in nanoseconds since 1970.
    package var modified: Int64
    /// Its status change time, in nanoseconds (a rewrite in place changes it even when the
    /// size and modification time are set back).
    package var changed: Int64
    /// File, package or folder.
    package var kind: ItemKind

    /// A fingerprint.
    package init(inode: UInt64, size: Int64, modified: Int64, changed: Int64, kind: ItemKind = .file) {
        self.inode = inode
        self.size = size
        self.modified = modified
        self.changed = changed
        self.kind = kind
    }
}

/// The files of a container's folder, by path relative to it.
package typealias LocalTree = [String: LocalFingerprint]

/// What changed between two looks at a container's folder.
package struct LocalChanges: Sendable, Equatable {
    /// New files.
    package var added: [String] = []
    /// Files whose contents may have changed (their fingerprints differ).
    package var modified: [String] = []
    /// Files that moved: from one path to another, contents unchanged.
    package var moved: [(from: String, to: String)] = []
    /// Files that are gone.
    package var removed: [String] = []

    /// Whether nothing changed.
    package var isEmpty: Bool { added.isEmpty && modified.isEmpty && moved.isEmpty && removed.isEmpty }

    package static func == (a: LocalChanges, b: LocalChanges) -> Bool {
        a.added == b.added && a.modified == b.modified && a.removed == b.removed
            && a.moved.map { "\($0.from)\u{0}\($0.to)" } == b.moved.map { "\($0.from)\u{0}\($0.to)" }
    }
}

/// Walks a container's folder and compares it with the last walk: the agent's way of never
/// missing a change (after an inotify overflow, at start, after a crash), and of recognising
/// renames. Files, folders and packages are synced — a folder whose extension is one of
/// ``packageExtensions`` is a package, one item whose members are not listed on their own.
/// Symbolic links, sockets and devices are skipped, and
/// so is what must stay local — names ending in `.nosync` (and everything under such a
/// folder), the version stores (`.ubiquity-versions`, and any `.ubiquity-…` name), and safe
/// save's and Foundation's temporary siblings (`.NAME.ubiquity-save-…`, `.dat.nosync…`) — and the agent's placeholders for items
/// not downloaded (`.NAME.icloud`).
package struct LocalScanner: Sendable {
    /// The folder scanned.
    package let root: URL
    /// The extensions (lowercased, without the dot) that make a folder a package.
    package let packageExtensions: Set<String>
    /// Folders at the top level that are walked but are not items themselves (a container's
    /// `Documents`: what is in it syncs, the folder itself is always there).
    package let transparent: Set<String>

    /// What part of the folder is walked (all of it, but what the border passes over).
    package var border = SyncBorder()

    /// Package extensions known without being told: Apple's common package formats and those
    /// of this repository's example apps.
    package static let standardPackageExtensions: Set<String> = ["rtfd", "pages", "numbers", "key", "bundle", "package", "note", "mystuff"]

    /// A scanner of `root`, taking folders with `packageExtensions` for packages and walking
    /// through the top-level folders named in `transparent` without listing them.
    package init(root: URL, packageExtensions: Set<String> = LocalScanner.standardPackageExtensions, transparent: Set<String> = []) {
        self.root = root
        self.packageExtensions = Set(packageExtensions.map { $0.lowercased() })
        self.transparent = transparent
    }

    /// Whether a folder named `name` is a package.
    package func isPackage(_ name: String) -> Bool {
        let ext = (name as NSString).pathExtension.lowercased()
        return !ext.isEmpty && packageExtensions.contains(ext)
    }

    /// Whether a file or folder named `name` stays out of sync.
    package static func isExcluded(_ name: String) -> Bool {
        name.hasSuffix(".nosync") || name.hasPrefix(".ubiquity-") || SafeSave.isTemporaryName(name) || name.hasPrefix(".dat.nosync")
            || UbiquityPlaceholder.itemName(ofPlaceholder: name) != nil
    }

    /// Every synced file, folder and package under the root, with its fingerprint (package
    /// members are not listed: see ``members(of:)``). Unreadable folders are reported, not
    /// skipped silently.
    /// - Throws: ``ScanError`` when the root or a folder in it cannot be read.
    package func scan() throws -> LocalTree {
        var tree: LocalTree = [:]
        try walk("", into: &tree)
        return tree
    }

    /// What is in the folder at `relative` (and, if `recursive`, in its folders), added to
    /// `tree`. A folder that is not there (any more) holds nothing.
    /// - Throws: ``ScanError`` when a folder cannot be read.
    package func walk(_ relative: String, into tree: inout LocalTree, recursive: Bool = true) throws {
        let path = relative.isEmpty ? root.path : root.path + "/" + relative
        guard let directory = opendir(path) else {
            if errno == ENOENT || errno == ENOTDIR { return } // gone (or never there): nothing in it
            throw ScanError(path: path, reason: String(cString: strerror(errno)))
        }
        defer { closedir(directory) }
        var names: [String] = []
        var temporaries: [String] = []
        while let entry = readdir(directory) {
            let name = POSIX.entryName(entry)
            if name == "." || name == ".." { continue }
            if Self.isExcluded(name) {
                if Leftovers.isTemporary(name) { temporaries.append(name) }
                continue
            }
            names.append(name)
        }
        for name in temporaries { Self.removeIfAbandoned(path + "/" + name) }
        for name in names.sorted() {
            let child = relative.isEmpty ? name : relative + "/" + name
            guard border.includes(child) else { continue } // another engine's (a share's folder, or the container's)
            var info = stat()
            guard lstat(root.path + "/" + child, &info) == 0 else {
                if errno == ENOENT { continue } // gone since the listing: the next scan sees it
                throw ScanError(path: root.path + "/" + child, reason: String(cString: strerror(errno)))
            }
            switch info.st_mode & S_IFMT {
            case S_IFDIR where relative.isEmpty && transparent.contains(name):
                if recursive { try walk(child, into: &tree) }
            case S_IFDIR where isPackage(name):
                tree[child] = try packageFingerprint(child, info)
            case S_IFDIR:
                tree[child] = LocalFingerprint(inode: UInt64(info.st_ino), size: 0, modified: 0, changed: 0, kind: .directory)
                if recursive { try walk(child, into: &tree) }
            case S_IFREG:
                tree[child] = Self.fingerprint(info)
            default:
                continue // links, sockets, devices: not synced
            }
        }
    }

    /// Removes a temporary that a program killed mid-save left (see ``Leftovers``): it would
    /// never sync, and take space for ever. Logged, as is a failure to remove it.
    static func removeIfAbandoned(_ path: String) {
        do {
            if try Leftovers.removeIfAbandoned(at: path) {
                logger.notice("removed a temporary left by a program that stopped mid-save", metadata: ["path": "\(path)"])
            }
        } catch {
            logger.warning("cannot remove a temporary left by a program that stopped mid-save", metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    static let logger = Logger(label: "ubiquity.agent.scanner")

    /// The fingerprint of the file, folder or package at `relative`, or nil if there is none. A
    /// package a member of which cannot be read is there with contents unknown: its fingerprint
    /// matches no recorded one (so nothing takes it for gone, or for unchanged), and the next
    /// scan reports the error.
    package func fingerprint(of relative: String) -> LocalFingerprint? {
        var info = stat()
        guard lstat(root.path + "/" + relative, &info) == 0 else { return nil }
        switch info.st_mode & S_IFMT {
        case S_IFREG: return Self.fingerprint(info)
        case S_IFDIR where isPackage((relative as NSString).lastPathComponent):
            do { return try packageFingerprint(relative, info) } catch {
                return LocalFingerprint(inode: UInt64(info.st_ino), size: 0, modified: 0, changed: Int64.min, kind: .package)
            }
        case S_IFDIR: return LocalFingerprint(inode: UInt64(info.st_ino), size: 0, modified: 0, changed: 0, kind: .directory)
        default: return nil
        }
    }

    /// The files of the package at `relative`, by path inside it (sorted), with their
    /// fingerprints, and its folders that hold nothing (as `PATH/`); excluded names are left out
    /// as everywhere.
    /// - Throws: ``ScanError`` when a folder of it cannot be read.
    package func members(of relative: String) throws -> [(path: String, fingerprint: LocalFingerprint)] {
        var tree: LocalTree = [:]
        try LocalScanner(root: root.appendingPathComponent(relative), packageExtensions: []).walk("", into: &tree)
        // Files, and folders with nothing in them (as `PATH/`): an empty folder an app made in
        // its package is part of the document.
        let parents = Set(tree.keys.map { ($0 as NSString).deletingLastPathComponent })
        var members: [(path: String, fingerprint: LocalFingerprint)] = []
        for (path, print) in tree {
            switch print.kind {
            case .file: members.append((path, print))
            case .directory where !parents.contains(path): members.append((path + "/", print))
            default: continue
            }
        }
        return members.sorted { $0.path < $1.path }
    }

    func packageFingerprint(_ relative: String, _ info: stat) throws -> LocalFingerprint {
        var size: Int64 = 0, newest: Int64 = 0
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325 // FNV-1a over every member's path and fingerprint
        func mix(_ bytes: some Sequence<UInt8>) {
            for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        }
        for (path, print) in try members(of: relative) {
            size += print.size
            newest = max(newest, print.modified)
            mix(path.utf8)
            for value in [Int64(bitPattern: print.inode), print.size, print.modified, print.changed] { withUnsafeBytes(of: value) { mix($0) } }
        }
        return LocalFingerprint(inode: UInt64(info.st_ino), size: size, modified: newest, changed: Int64(bitPattern: hash), kind: .package)
    }

    /// The fingerprint of the open file `descriptor` (nil if it cannot be had).
    static func fingerprint(descriptor: Int32) -> LocalFingerprint? {
        var info = stat()
        return fstat(descriptor, &info) == 0 ? fingerprint(info) : nil
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
    package static func changes(from old: LocalTree, to new: LocalTree) -> LocalChanges {
        var changes = LocalChanges()
        var newByInode: [UInt64: String] = [:]
        for path in new.keys.sorted() where newByInode[new[path]!.inode] == nil { newByInode[new[path]!.inode] = path }
        var explained = Set<String>()
        for path in old.keys.sorted() {
            let before = old[path]!
            if let after = new[path], after.kind != before.kind {
                changes.removed.append(path) // a file replaced by a folder, or the other way round: another item
            } else if let after = new[path], after.inode == before.inode {
                if after != before { changes.modified.append(path) }
                explained.insert(path)
            } else if let to = newByInode[before.inode], to != path, old[to]?.inode != before.inode, new[to]!.kind == before.kind,
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
package struct ScanError: Error, CustomStringConvertible, Equatable {
    /// The folder or file.
    package var path: String
    /// Why.
    package var reason: String

    /// A sentence saying so.
    package var description: String { "cannot read \(path): \(reason)" }
}

/// What part of a container's folder one of the agent's engines keeps in step: the container's
/// own engine keeps all of it but the folders of the shares it joined (each kept by a share's
/// engine); a share's engine keeps only its share's folder (docs/Sharing.md, "On a participant's
/// devices"). Paths are relative to the container's folder.
package struct SyncBorder: Sendable, Equatable {
    /// What is passed over, with everything under it.
    package var skipped: Set<String> = []
    /// The one path kept, with everything under it (nil: everything but ``skipped``).
    package var only: String?

    /// A border; by default, none.
    package init(skipped: Set<String> = [], only: String? = nil) {
        self.skipped = skipped
        self.only = only
    }

    /// Whether `path` is kept: it is not (under) what is passed over, and it is (under, or on
    /// the way to) ``only``.
    package func includes(_ path: String) -> Bool {
        if !skipped.isEmpty, skipped.contains(where: { path == $0 || path.hasPrefix($0 + "/") }) { return false }
        guard let only else { return true }
        return path == only || path.hasPrefix(only + "/") || only.hasPrefix(path + "/")
    }
}
