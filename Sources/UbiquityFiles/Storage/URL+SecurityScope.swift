import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Balanced start and stop calls of security-scoped access, per path (for diagnosis: no
/// sandbox grants or takes anything away on Linux).
package enum SecurityScope {
    private static let open = Mutex<[String: Int]>([:])

    /// How many starts of `path` are not stopped yet.
    package static func accessCount(_ path: String) -> Int { open.withLock { $0[path] ?? 0 } }

    static func start(_ url: URL) -> Bool {
        guard url.isFileURL else { return false }
        let path = url.standardizedFileURL.path
        // What the process may use: an item it can read, or a new one it can make.
        let usable = access(path, F_OK) == 0
            ? access(path, R_OK) == 0
            : access(url.standardizedFileURL.deletingLastPathComponent().path, W_OK | X_OK) == 0
        if usable { open.withLock { $0[path, default: 0] += 1 } }
        return usable
    }

    static func stop(_ url: URL) {
        let path = url.standardizedFileURL.path
        open.withLock { counts in
            guard let count = counts[path] else { return }
            counts[path] = count > 1 ? count - 1 : nil
        }
    }
}

extension URL {
    /// Makes the file the URL points to available to the process, as Apple's does for a
    /// security-scoped URL (from a document picker or a security-scoped bookmark).
    ///
    /// Linux has no app sandbox: every file the process's user may use is available already.
    /// So this answers what Apple's does for a URL the process may use — `true` for a file URL
    /// whose item the process can read (or, for an item not there yet, whose folder it can
    /// write) — and `false` for any other URL; like Apple's, each `true` is to be balanced by
    /// ``stopAccessingSecurityScopedResource()``.
    /// - Returns: Whether the process may use the resource.
    public func startAccessingSecurityScopedResource() -> Bool {
        SecurityScope.start(self)
    }

    /// Ends the access ``startAccessingSecurityScopedResource()`` began (nothing to give back
    /// on Linux; an unbalanced call does nothing).
    public func stopAccessingSecurityScopedResource() {
        SecurityScope.stop(self)
    }
}

extension NSURL {
    /// See `URL.startAccessingSecurityScopedResource()`.
    /// - Returns: Whether the process may use the resource.
    public func startAccessingSecurityScopedResource() -> Bool {
        SecurityScope.start(self as URL)
    }

    /// See `URL.stopAccessingSecurityScopedResource()`.
    public func stopAccessingSecurityScopedResource() {
        SecurityScope.stop(self as URL)
    }
}
