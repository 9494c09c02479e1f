import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Temporaries that a program killed mid-save leaves beside the item it was saving: a safe
/// save's (`.NAME.ubiquity-save-PID-…`), a database log segment or baseline being published
/// (`.ubiquity-segment-PID-….tmp`, `.ubiquity-baseline-PID-….tmp`), and Foundation's atomic
/// writes (`Data.write(to:options: .atomic)`: `.dat.nosync…`). None of them syncs; left alone
/// they would take space for ever. The sync agent removes those that are abandoned when it
/// looks at their folder.
///
/// A temporary named after its process (this library's) is abandoned as soon as that process
/// is gone, or once it is a day old (the number may have been reused). One that names no
/// process (Foundation's) is abandoned when no process holds it open and nothing in it changed
/// for ``unownedQuietSeconds`` — a live atomic write keeps its file open until it renames it.
public enum Leftovers {
    /// How long a temporary that names no process must be untouched (and held open by none)
    /// before it counts as abandoned.
    public static let unownedQuietSeconds: Double = 10

    /// How old a temporary whose process still runs must be to count as abandoned anyway (its
    /// process number was reused).
    public static let ownedMaximumAgeSeconds: Double = 86_400

    /// The markers of this library's temporaries that name their process.
    static let ownedMarkers = [SafeSave.temporaryMarker, ".ubiquity-segment-", ".ubiquity-baseline-"]

    /// A unique suffix naming this process: `PID-` and 16 hexadecimal digits.
    public static func ownedSuffix() -> String {
        "\(getpid())-" + SafeSave.randomSuffix()
    }

    /// Whether `name` is a temporary of a kind that a killed program leaves behind.
    public static func isTemporary(_ name: String) -> Bool {
        name.hasPrefix(".dat.nosync") || (name.hasPrefix(".") && ownedMarkers.contains { name.contains($0) })
    }

    /// The process that made the temporary `name`, if its name says.
    public static func owner(of name: String) -> pid_t? {
        for marker in ownedMarkers {
            guard let range = name.range(of: marker) else { continue }
            let rest = name[range.upperBound...]
            guard let dash = rest.firstIndex(of: "-"), let pid = pid_t(rest[..<dash]), pid > 0 else { return nil }
            return pid
        }
        return nil
    }

    /// Whether the temporary at `path` (named `name`) is abandoned (see the type's description).
    /// - Parameter now: The current time.
    public static func isAbandoned(at path: String, now: Date = Date()) -> Bool {
        let name = (path as NSString).lastPathComponent
        guard isTemporary(name), let newest = newestChange(under: path) else { return false }
        let age = now.timeIntervalSince1970 - Double(newest) / 1e9
        if let owner = owner(of: name) {
            if owner != getpid(), kill(owner, 0) != 0, errno == ESRCH { return true }
            return age >= ownedMaximumAgeSeconds
        }
        return age >= unownedQuietSeconds && !isHeldOpen(path)
    }

    /// Removes the temporary at `path` if it is abandoned.
    /// - Returns: Whether it was removed.
    /// - Throws: ``FileAccessError`` when it is abandoned but cannot be removed.
    @discardableResult
    public static func removeIfAbandoned(at path: String, now: Date = Date()) throws -> Bool {
        guard isAbandoned(at: path, now: now) else { return false }
        try POSIX.removeTree(path)
        return true
    }

    /// The newest modification time (nanoseconds) of `path` and, for a folder, of what is in it;
    /// nil when it is gone.
    static func newestChange(under path: String) -> Int64? {
        guard let status = try? POSIX.status(path) else { return nil } // gone, or unreadable: not ours to judge
        var newest = status.modificationNanoseconds
        if status.kind == .directory {
            for entry in (try? POSIX.directoryEntries(path)) ?? [] { // an unreadable folder is judged by what can be read
                if let inner = newestChange(under: path + "/" + entry) { newest = max(newest, inner) }
            }
        }
        return newest
    }

    /// Whether any process this one can see holds `path` (or something in it) open.
    static func isHeldOpen(_ path: String) -> Bool {
        guard let processes = try? POSIX.directoryEntries("/proc") else { return true } // cannot tell: assume it is
        let prefix = path + "/"
        for process in processes where process.first?.isNumber == true {
            let folder = "/proc/\(process)/fd"
            guard let descriptors = try? POSIX.directoryEntries(folder) else { continue } // another user's, or gone
            for descriptor in descriptors {
                var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let count = readlink(folder + "/" + descriptor, &buffer, buffer.count - 1)
                guard count > 0 else { continue }
                let target = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if target == path || target.hasPrefix(prefix) { return true }
            }
        }
        return false
    }
}
