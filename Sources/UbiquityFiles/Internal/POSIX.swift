import CUbiquitySystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What `lstat` says about a file-system node, reduced to what the file layer needs.
package struct NodeStatus: Equatable, Sendable {
    /// The kind of node.
    package enum Kind: Sendable { case regular, directory, symbolicLink, other }
    package var kind: Kind
    package var device: UInt64
    package var inode: UInt64
    package var size: Int64
    package var modificationNanoseconds: Int64
    package var changeNanoseconds: Int64
    package var permissions: UInt32
    package var linkCount: UInt64

    /// The identity of the node's contents: the same file, unchanged since this status was taken.
    package func sameContents(as other: NodeStatus) -> Bool {
        device == other.device && inode == other.inode && size == other.size
            && modificationNanoseconds == other.modificationNanoseconds
    }

    /// The modification date.
    package var modificationDate: Date {
        Date(timeIntervalSince1970: Double(modificationNanoseconds) / 1_000_000_000)
    }
}

/// Thin, throwing wrappers over the system calls the file layer needs.
package enum POSIX {
    /// `lstat`s a path; returns nil when nothing is there.
    /// - Throws: ``FileAccessError`` for any failure other than the path not existing.
    package static func status(_ path: String) throws -> NodeStatus? {
        var st = stat()
        guard lstat(path, &st) == 0 else {
            let e = errno
            if e == ENOENT || e == ENOTDIR { return nil }
            throw FileAccessError(operation: "lstat", path: path, errno: e)
        }
        let kind: NodeStatus.Kind
        switch st.st_mode & S_IFMT {
        case S_IFREG: kind = .regular
        case S_IFDIR: kind = .directory
        case S_IFLNK: kind = .symbolicLink
        default: kind = .other
        }
        return NodeStatus(
            kind: kind,
            device: UInt64(st.st_dev),
            inode: UInt64(st.st_ino),
            size: Int64(st.st_size),
            modificationNanoseconds: Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec),
            changeNanoseconds: Int64(st.st_ctim.tv_sec) * 1_000_000_000 + Int64(st.st_ctim.tv_nsec),
            permissions: UInt32(st.st_mode & 0o7777),
            linkCount: UInt64(st.st_nlink)
        )
    }

    /// Reads a whole regular file (what `fstat` says it holds, then whatever it grew by).
    /// - Throws: ``FileAccessError`` naming the path and cause.
    package static func readFile(_ path: String) throws -> Data {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw FileAccessError(operation: "open for reading", path: path, errno: errno) }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw FileAccessError(operation: "fstat", path: path, errno: errno) }
        guard st.st_mode & S_IFMT == S_IFREG else {
            throw FileAccessError(.unsupportedItem, "not a regular file", path: path)
        }
        var data = Data(count: Int(st.st_size))
        var total = 0
        try data.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) in
            total = SystemCall.readFully(fd, into: buffer, at: 0)
            if total < 0 { throw FileAccessError(operation: "read", path: path, errno: errno) }
        }
        if total < data.count { data.removeSubrange(total...) }
        // The file may have grown since fstat: read what follows.
        var chunk = [UInt8](repeating: 0, count: 65536)
        if lseek(fd, off_t(total), SEEK_SET) < 0 { throw FileAccessError(operation: "seek", path: path, errno: errno) }
        while true {
            let n = chunk.withUnsafeMutableBytes { SystemCall.read(fd, into: $0) }
            if n < 0 { throw FileAccessError(operation: "read", path: path, errno: errno) }
            if n == 0 { break }
            data.append(contentsOf: chunk[0..<n])
        }
        return data
    }

    /// Creates a new file (failing if one exists), writes `data`, optionally `fsync`s it, and closes it.
    /// On failure the partial file is removed.
    /// - Throws: ``FileAccessError`` naming the path and cause (for example `.noSpace`).
    package static func createFile(_ path: String, contents data: Data, permissions: UInt32 = 0o666, sync: Bool = true) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode_t(permissions))
        guard fd >= 0 else { throw FileAccessError(operation: "create", path: path, errno: errno) }
        var closed = false
        do {
            try writeAll(fd, data, path: path)
            if sync, fsync(fd) != 0 { throw FileAccessError(operation: "fsync", path: path, errno: errno) }
            closed = true
            if close(fd) != 0 { throw FileAccessError(operation: "close", path: path, errno: errno) }
        } catch {
            if !closed { close(fd) }
            unlink(path)
            throw error
        }
    }

    /// Writes all of `data` to `fd`, retrying short writes.
    package static func writeAll(_ fd: Int32, _ data: Data, path: String) throws {
        let written = data.withUnsafeBytes { SystemCall.writeAll(fd, $0) }
        if written < 0 { throw FileAccessError(operation: "write", path: path, errno: errno) }
    }

    /// `fsync`s a file or directory by path.
    package static func sync(_ path: String, directory: Bool) throws {
        let fd = open(path, (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC)
        guard fd >= 0 else { throw FileAccessError(operation: "open for fsync", path: path, errno: errno) }
        defer { close(fd) }
        if fsync(fd) != 0 { throw FileAccessError(operation: "fsync", path: path, errno: errno) }
    }

    /// Creates a directory.
    package static func makeDirectory(_ path: String, permissions: UInt32 = 0o777) throws {
        if mkdir(path, mode_t(permissions)) != 0 {
            throw FileAccessError(operation: "mkdir", path: path, errno: errno)
        }
    }

    /// Creates a symbolic link at `path` pointing to `destination`.
    package static func makeSymbolicLink(_ path: String, destination: String) throws {
        if symlink(destination, path) != 0 {
            throw FileAccessError(operation: "symlink", path: path, errno: errno)
        }
    }

    /// Reads a symbolic link's destination.
    package static func linkDestination(_ path: String) throws -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink(path, &buffer, buffer.count - 1)
        guard n >= 0 else { throw FileAccessError(operation: "readlink", path: path, errno: errno) }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Renames `from` to `to`, replacing a file at `to`.
    package static func rename(_ from: String, _ to: String) throws {
        if Glibc.rename(from, to) != 0 { throw FileAccessError(operation: "rename to \(to)", path: from, errno: errno) }
    }

    /// Atomically exchanges two existing paths.
    package static func exchange(_ first: String, _ second: String) throws {
        if ubq_rename_exchange(first, second) != 0 {
            throw FileAccessError(operation: "exchange with \(second)", path: first, errno: errno)
        }
    }

    /// The name of a directory entry that `readdir` returned (invalid UTF-8 replaced), read in
    /// place. glibc sizes each record to its name (`d_reclen`), so copying the whole 256-byte
    /// `d_name` field — which `entry.pointee.d_name` does — may read past the end of its buffer
    /// and crash the process (the bug swift-corelibs-foundation fixed in `Process.run()`, #5472).
    /// - Parameter entry: What `readdir` returned.
    package static func entryName(_ entry: UnsafeMutablePointer<dirent>) -> String {
        let field = UnsafeRawPointer(entry) + MemoryLayout<dirent>.offset(of: \dirent.d_name)!
        let length = strlen(field.assumingMemoryBound(to: CChar.self))
        return String(decoding: UnsafeRawBufferPointer(start: field, count: length), as: UTF8.self)
    }

    /// Names of the entries of a directory, without `.` and `..`, sorted.
    package static func directoryEntries(_ path: String) throws -> [String] {
        guard let dir = opendir(path) else { throw FileAccessError(operation: "opendir", path: path, errno: errno) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = entryName(entry)
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// Makes `destination` a new name for the unchanged file at `source`: a hard link, else a
    /// reflink, else a copy (across file systems). Returns how it was done.
    /// With `allowLink` false, a reflink or a copy: for sources their owner may still change in place.
    package static func reuse(_ source: String, at destination: String, permissions: UInt32, allowLink: Bool = true) throws -> ReuseMethod {
        if allowLink {
            if link(source, destination) == 0 { return .hardLink }
            let linkErrno = errno
            guard linkErrno == EXDEV || linkErrno == EPERM || linkErrno == EMLINK || linkErrno == ENOTSUP else {
                throw FileAccessError(operation: "link from \(source)", path: destination, errno: linkErrno)
            }
        }
        let src = open(source, O_RDONLY | O_CLOEXEC)
        guard src >= 0 else { throw FileAccessError(operation: "open for reading", path: source, errno: errno) }
        defer { close(src) }
        let dst = open(destination, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode_t(permissions))
        guard dst >= 0 else { throw FileAccessError(operation: "create", path: destination, errno: errno) }
        var ok = false
        defer {
            close(dst)
            if !ok { unlink(destination) }
        }
        if ubq_clone_file(dst, src) == 0 {
            if fsync(dst) != 0 { throw FileAccessError(operation: "fsync", path: destination, errno: errno) }
            ok = true
            return .reflink
        }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = buffer.withUnsafeMutableBytes { SystemCall.read(src, into: $0) }
            if n < 0 { throw FileAccessError(operation: "read", path: source, errno: errno) }
            if n == 0 { break }
            try writeAll(dst, Data(buffer[0..<n]), path: destination)
        }
        if fsync(dst) != 0 { throw FileAccessError(operation: "fsync", path: destination, errno: errno) }
        ok = true
        return .copy
    }

    /// Copies the file, directory tree or symbolic link at `source` to `destination` (which must
    /// not exist): files by ``reuse(_:at:permissions:allowLink:)``, so unchanged files can be
    /// shared rather than copied when `allowLink` is true; written files are `fsync`ed, and so
    /// is every directory created.
    package static func copyTree(_ source: String, to destination: String, allowLink: Bool) throws {
        guard let st = try status(source) else { throw FileAccessError(.notFound, "nothing to copy", path: source, errno: ENOENT) }
        switch st.kind {
        case .directory:
            try makeDirectory(destination, permissions: st.permissions | 0o700)
            for name in try directoryEntries(source) { try copyTree(source + "/" + name, to: destination + "/" + name, allowLink: allowLink) }
            try sync(destination, directory: true)
        case .symbolicLink:
            try makeSymbolicLink(destination, destination: try linkDestination(source))
        case .regular:
            _ = try reuse(source, at: destination, permissions: st.permissions, allowLink: allowLink)
        case .other:
            throw FileAccessError(.unsupportedItem, "only files, directories and symbolic links can be copied", path: source)
        }
    }

    /// The bytes the files under `path` hold, each file (inode) counted once, and how many of
    /// those bytes are in files also linked from elsewhere (link count above the links seen).
    package static func treeUsage(_ path: String) throws -> (bytes: Int64, sharedBytes: Int64) {
        try treeUsage([path])
    }

    /// ``treeUsage(_:)-(String)`` over several trees, a file linked from more than one counted once.
    package static func treeUsage(_ paths: [String]) throws -> (bytes: Int64, sharedBytes: Int64) {
        var seen: [UInt64: (size: Int64, links: UInt64, found: UInt64)] = [:]
        func walk(_ path: String) throws {
            guard let st = try status(path) else { return }
            if st.kind == .directory {
                for name in try directoryEntries(path) { try walk(path + "/" + name) }
            } else if st.kind == .regular {
                seen[st.inode, default: (st.size, st.linkCount, 0)].found += 1
            }
        }
        for path in paths { try walk(path) }
        var bytes: Int64 = 0, shared: Int64 = 0
        for file in seen.values {
            bytes += file.size
            if file.links > file.found { shared += file.size }
        }
        return (bytes, shared)
    }

    /// How an unchanged file was carried into a new write.
    package enum ReuseMethod: Sendable { case hardLink, reflink, copy }

    /// Sets permission bits.
    package static func setPermissions(_ path: String, _ permissions: UInt32) throws {
        if chmod(path, mode_t(permissions)) != 0 {
            throw FileAccessError(operation: "chmod", path: path, errno: errno)
        }
    }

    /// Removes a file, symbolic link or whole directory tree; nothing there is not an error.
    package static func removeTree(_ path: String) throws {
        guard let st = try status(path) else { return }
        if st.kind == .directory {
            for name in try directoryEntries(path) { try removeTree(path + "/" + name) }
            if rmdir(path) != 0 { throw FileAccessError(operation: "rmdir", path: path, errno: errno) }
        } else if unlink(path) != 0, errno != ENOENT {
            throw FileAccessError(operation: "unlink", path: path, errno: errno)
        }
    }

    /// The current process's — or, with `thisThread`, the calling thread's — cumulative read
    /// and written bytes from `/proc/self/io` or `/proc/thread-self/io` (`rchar`, `wchar`:
    /// bytes passed to read- and write-like system calls). A thread's counts leave out what other
    /// threads of the process read meanwhile (other tests running at the same time).
    package static func ioCounters(thisThread: Bool = false) -> (read: Int64, written: Int64)? {
        let file = thisThread ? "/proc/thread-self/io" : "/proc/self/io"
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { return nil } // measurements only: nil says unknown
        var read: Int64?
        var written: Int64?
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2 else { continue }
            if parts[0] == "rchar" { read = Int64(parts[1]) }
            if parts[0] == "wchar" { written = Int64(parts[1]) }
        }
        guard let read, let written else { return nil }
        return (read, written)
    }
}
