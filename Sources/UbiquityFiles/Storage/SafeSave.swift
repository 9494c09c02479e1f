import Foundation
import Logging

/// Crash-safe replacement of a file or package.
///
/// Every save goes the same way: the new item is written in full to a hidden temporary sibling
/// (same directory, so same file system), its files and directories are `fsync`ed, and then it
/// takes the old item's place in one atomic step — `rename(2)` for a flat file, an atomic
/// exchange (`renameat2(RENAME_EXCHANGE)`) when a directory is involved — after which the
/// parent directory is `fsync`ed. A crash at any instant leaves either the old item or the new
/// one at the path, never a mixture; a failure before the switch leaves the old item untouched
/// and removes the temporary.
public enum SafeSave {
    /// The prefix-and-infix that marks this library's temporary siblings: `.NAME.ubiquity-save-PID-…`
    /// (the process that writes it: see ``Leftovers``).
    static let temporaryMarker = ".ubiquity-save-"

    /// Replaces (or creates) the item at `destination` with one that `write` produces.
    ///
    /// - Parameters:
    ///   - destination: The file or package to replace. Its parent directory must exist.
    ///   - preservingPermissions: Give the new item the old item's permission bits.
    ///   - logger: Where to report cleanup problems that do not fail the save.
    ///   - write: Writes the new item (a file or a directory) at the URL it is given, which does
    ///     not exist yet. Everything it writes must already be durable (`fsync`ed) when it
    ///     returns, except directories, which this method syncs.
    /// - Returns: The temporary URL the item was written at before it was moved into place.
    /// - Throws: ``FileAccessError`` or whatever `write` throws; the item at `destination` is
    ///   then unchanged.
    @discardableResult
    public static func replaceItem(
        at destination: URL,
        preservingPermissions: Bool = true,
        logger: Logger? = nil,
        _ write: (URL) throws -> Void
    ) throws -> URL {
        let destinationPath = destination.standardizedFileURL.path
        let parent = (destinationPath as NSString).deletingLastPathComponent
        let name = (destinationPath as NSString).lastPathComponent
        removeStaleTemporaries(named: name, in: parent, logger: logger)
        let temporary = parent + "/." + name + temporaryMarker + Leftovers.ownedSuffix()
        do {
            try write(URL(fileURLWithPath: temporary))
            guard let written = try POSIX.status(temporary) else {
                throw FileAccessError(.ioFailure, "the writer produced nothing", path: temporary)
            }
            let old = try POSIX.status(destinationPath)
            if preservingPermissions, let old, old.kind == written.kind, old.kind != .symbolicLink {
                try POSIX.setPermissions(temporary, old.permissions)
            }
            if written.kind == .directory { try syncDirectories(under: temporary) }
            if let old, old.kind == .directory || written.kind == .directory {
                try POSIX.exchange(temporary, destinationPath)
                try POSIX.sync(parent, directory: true)
                do { try POSIX.removeTree(temporary) } catch {
                    logger?.warning("could not remove the replaced item", metadata: ["path": "\(temporary)", "error": "\(error)"])
                }
            } else {
                try POSIX.rename(temporary, destinationPath)
                try POSIX.sync(parent, directory: true)
            }
        } catch {
            try? POSIX.removeTree(temporary) // the save's own error matters; a temporary left is removed by the next save
            throw error
        }
        return URL(fileURLWithPath: temporary)
    }

    /// Writes `data` as the whole new contents of the file at `url`, crash-safely.
    /// - Parameters:
    ///   - data: The bytes to write.
    ///   - url: The file to create or replace.
    /// - Throws: ``FileAccessError``; the old file is then untouched.
    public static func write(_ data: Data, to url: URL) throws {
        try replaceItem(at: url) { temporary in
            try POSIX.createFile(temporary.path, contents: data)
        }
    }

    /// Whether a file name is one of this library's temporary siblings (hidden from listings).
    /// - Parameter name: A file name (last path component).
    public static func isTemporaryName(_ name: String) -> Bool {
        name.hasPrefix(".") && name.contains(temporaryMarker)
    }

    /// Removes temporaries that an interrupted save of `name` left in `directory`: those whose
    /// process is gone (a save another process is making now is left alone), and those of
    /// earlier versions, which named no process.
    static func removeStaleTemporaries(named name: String, in directory: String, logger: Logger?) {
        let prefix = "." + name + temporaryMarker
        guard let entries = try? POSIX.directoryEntries(directory) else { return } // best effort: the save itself reports real trouble
        for entry in entries where entry.hasPrefix(prefix) {
            let unowned = entry.count == prefix.count + 16
            guard unowned || Leftovers.isAbandoned(at: directory + "/" + entry) else { continue }
            do { try POSIX.removeTree(directory + "/" + entry) } catch {
                logger?.warning("could not remove a stale temporary", metadata: ["path": "\(directory)/\(entry)", "error": "\(error)"])
            }
        }
    }

    static func syncDirectories(under path: String) throws {
        for name in try POSIX.directoryEntries(path) {
            let child = path + "/" + name
            if try POSIX.status(child)?.kind == .directory { try syncDirectories(under: child) }
        }
        try POSIX.sync(path, directory: true)
    }

    static func randomSuffix() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(format: "%016llx", generator.next() as UInt64)
    }
}
