import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// An error from reading or writing files: what failed, on which path, and why.
///
/// The file layer throws this for every failure that reaches the disk, so a caller can tell
/// a missing file from a full disk or a permission problem without parsing messages.
public struct FileAccessError: Error, Sendable, CustomStringConvertible {
    /// A kind of file-access failure. Extensible: new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// The file or directory does not exist.
        public static let notFound = Code(name: "notFound")
        /// The process may not read, write or traverse the path.
        public static let permissionDenied = Code(name: "permissionDenied")
        /// The file system has no space (or quota) left.
        public static let noSpace = Code(name: "noSpace")
        /// Something already exists where a new item was to be created.
        public static let alreadyExists = Code(name: "alreadyExists")
        /// The path or name is not acceptable (empty, `..`, contains `/` or NUL, too long).
        public static let invalidName = Code(name: "invalidName")
        /// The data on disk or in a serialized form is malformed.
        public static let corrupt = Code(name: "corrupt")
        /// The item is of a kind this operation cannot handle (for example a socket or device).
        public static let unsupportedItem = Code(name: "unsupportedItem")
        /// The file system is read-only.
        public static let readOnlyFileSystem = Code(name: "readOnlyFileSystem")
        /// Any other input/output failure.
        public static let ioFailure = Code(name: "ioFailure")
        /// A textual name of the code.
        public var description: String { name }
    }

    /// What kind of failure this is.
    public var code: Code
    /// A sentence saying what was being done.
    public var message: String
    /// The path involved, when there is one.
    public var path: String?
    /// The `errno` value reported by the system, when the failure came from a system call.
    public var errno: Int32?
    /// A lower-level error that caused this one, if any.
    public var underlying: (any Error)?

    /// Creates an error.
    /// - Parameters:
    ///   - code: The kind of failure.
    ///   - message: A sentence saying what was being done.
    ///   - path: The path involved.
    ///   - errno: The system's error number, if any.
    ///   - underlying: A lower-level cause.
    public init(_ code: Code, _ message: String, path: String? = nil, errno: Int32? = nil, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.path = path
        self.errno = errno
        self.underlying = underlying
    }

    /// Creates an error from a failed system call, choosing the code from `errno`.
    /// - Parameters:
    ///   - operation: What was being done, e.g. "open for writing".
    ///   - path: The path the call was made on.
    ///   - errno: The value of `errno` after the call.
    public init(operation: String, path: String, errno: Int32) {
        let code: Code
        switch errno {
        case ENOENT, ENOTDIR: code = .notFound
        case EACCES, EPERM: code = .permissionDenied
        case ENOSPC, EDQUOT: code = .noSpace
        case EEXIST, ENOTEMPTY: code = .alreadyExists
        case ENAMETOOLONG, EINVAL: code = .invalidName
        case EROFS: code = .readOnlyFileSystem
        default: code = .ioFailure
        }
        let reason = String(cString: strerror(errno))
        self.init(code, "\(operation) failed: \(reason)", path: path, errno: errno)
    }

    /// A one-line description naming the path and the cause.
    public var description: String {
        var text = message
        if let path { text += " (\(path))" }
        if let underlying { text += ": \(underlying)" }
        return text
    }
}

extension FileAccessError: LocalizedError {
    /// The same text as ``description``.
    public var errorDescription: String? { description }
}
