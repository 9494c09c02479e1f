import Foundation

/// An error from coordinating access to a file.
public struct FileCoordinationError: Error, Sendable, CustomStringConvertible {
    /// A kind of failure. Extensible.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// ``NSFileCoordinator/cancel()`` was called before access was granted.
        public static let cancelled = Code(name: "cancelled")
        /// Access was not granted before the deadline.
        public static let timedOut = Code(name: "timedOut")
        /// The per-user lock directory is not safe to use (wrong owner, permissions or a link).
        public static let unsafeLockDirectory = Code(name: "unsafeLockDirectory")
        /// A system call failed.
        public static let ioFailure = Code(name: "ioFailure")
        /// A file presenter refused the access (an eviction it does not accommodate).
        public static let refusedByPresenter = Code(name: "refusedByPresenter")
        /// A textual name of the code.
        public var description: String { name }
    }

    /// What kind of failure this is.
    public var code: Code
    /// What failed.
    public var message: String
    /// The path involved, if any.
    public var path: String?

    /// Creates an error.
    /// - Parameters:
    ///   - code: The kind of failure.
    ///   - message: What failed.
    ///   - path: The path involved.
    public init(_ code: Code, _ message: String, path: String? = nil) {
        self.code = code
        self.message = message
        self.path = path
    }

    /// A one-line description.
    public var description: String { path.map { "\(message) (\($0))" } ?? message }
}

extension FileCoordinationError: LocalizedError {
    /// The same text as ``description``.
    public var errorDescription: String? { description }
}
