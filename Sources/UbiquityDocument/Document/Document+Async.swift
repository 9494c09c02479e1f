import Foundation

/// The `async` forms run on the caller's executor (`nonisolated(nonsending)`): a document kept
/// by main-actor code is awaited there without leaving it, as Apple's imported `async` forms are.
extension Document {
    /// Opens the document. See ``open(completionHandler:)``.
    /// - Returns: Whether it opened.
    @discardableResult
    nonisolated(nonsending) public func open() async -> Bool {
        await withCheckedContinuation { continuation in open { continuation.resume(returning: $0) } }
    }

    /// Saves the document. See ``save(to:for:completionHandler:)``.
    /// - Parameters:
    ///   - url: Where to save.
    ///   - saveOperation: Create or overwrite.
    /// - Returns: Whether the save succeeded.
    @discardableResult
    nonisolated(nonsending) public func save(to url: URL, for saveOperation: SaveOperation) async -> Bool {
        await withCheckedContinuation { continuation in
            save(to: url, for: saveOperation) { continuation.resume(returning: $0) }
        }
    }

    /// Saves if there are unsaved changes. See ``autosave(completionHandler:)``.
    /// - Returns: Whether the save (if any) succeeded.
    @discardableResult
    nonisolated(nonsending) public func autosave() async -> Bool {
        await withCheckedContinuation { continuation in autosave { continuation.resume(returning: $0) } }
    }

    /// Saves unsaved changes and closes. See ``close(completionHandler:)``.
    /// - Returns: Whether the document closed cleanly.
    @discardableResult
    nonisolated(nonsending) public func close() async -> Bool {
        await withCheckedContinuation { continuation in close { continuation.resume(returning: $0) } }
    }

    /// Reloads from `url`. See ``revert(toContentsOf:completionHandler:)``.
    /// - Parameter url: The file to read.
    /// - Returns: Whether the revert succeeded.
    @discardableResult
    nonisolated(nonsending) public func revert(toContentsOf url: URL) async -> Bool {
        await withCheckedContinuation { continuation in
            revert(toContentsOf: url) { continuation.resume(returning: $0) }
        }
    }
}
