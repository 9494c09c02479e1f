import Foundation

/// An error from opening, saving, reverting or closing a ``Document``.
///
/// It names the document's file and the operation, and carries the cause — usually a
/// `FileAccessError` from the file layer, or whatever a subclass's `load(fromContents:ofType:)`
/// or `contents(forType:)` threw.
public struct DocumentError: Error, Sendable, CustomStringConvertible {
    /// A kind of failure. Extensible: new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// Reading the file, or interpreting its contents, failed.
        public static let readFailed = Code(name: "readFailed")
        /// Writing the file failed; the file on disk is unchanged.
        public static let saveFailed = Code(name: "saveFailed")
        /// `contents(forType:)` returned something that is neither `Data` nor `FileWrapper`.
        public static let unsupportedContents = Code(name: "unsupportedContents")
        /// A save for creating found a file already at the URL; nothing was overwritten.
        public static let fileExists = Code(name: "fileExists")
        /// The operation is not valid in the document's current state (e.g. saving a closed document).
        public static let invalidState = Code(name: "invalidState")
        /// A textual name of the code.
        public var description: String { name }
    }

    /// What kind of failure this is.
    public var code: Code
    /// A sentence saying what failed.
    public var message: String
    /// The document's file.
    public var url: URL?
    /// The cause.
    public var underlying: (any Error)?

    /// Creates an error.
    /// - Parameters:
    ///   - code: The kind of failure.
    ///   - message: A sentence saying what failed.
    ///   - url: The document's file.
    ///   - underlying: The cause.
    public init(_ code: Code, _ message: String, url: URL? = nil, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.url = url
        self.underlying = underlying
    }

    /// A one-line description naming the file and the cause.
    public var description: String {
        var text = message
        if let url { text += " (\(url.path))" }
        if let underlying { text += ": \(underlying)" }
        return text
    }
}

extension DocumentError: LocalizedError {
    /// The same text as ``description``.
    public var errorDescription: String? { description }
}

