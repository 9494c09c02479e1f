import Dispatch
import Foundation

// Swift concurrency forms of coordinated access. A coordinated access may wait — for another
// process's lock, for presenters to save (up to their time limit) — and the synchronous forms
// wait on the calling thread. From async code (an actor, a task) that would park one of the few
// cooperative threads every task shares, so these forms wait on a thread of their own and the
// caller is suspended meanwhile; the accessor runs on that thread too, so it must not touch the
// caller's isolated state (hand it what it needs, use what it returns). Apple's own asynchronous
// form is `coordinate(with:queue:byAccessor:)`; these are its shape for `async`/`await`, named
// apart from Apple's synchronous methods so that code written against Apple's SDK resolves to
// the same methods here, in async functions too.
extension NSFileCoordinator {
    /// Where coordinated accesses made from async code wait.
    private static let waiting = DispatchQueue(label: "ubiquity.coordination.waiting", attributes: .concurrent)

    /// Reads an item once no one is writing it, without blocking the caller's thread.
    /// - Parameters:
    ///   - url: The item.
    ///   - options: Reading options.
    ///   - reader: Reads the item at the URL it is given (on a thread of its own).
    /// - Returns: The reader's result.
    /// - Throws: ``FileCoordinationError`` when access could not be granted, or what `reader` throws.
    public func coordinatedRead<T: Sendable>(at url: URL, options: ReadingOptions = [],
                                             _ reader: @escaping @Sendable (URL) throws -> T) async throws -> T {
        try await Self.wait { try self.coordinate(readingItemAt: url, options: options, byAccessor: reader) }
    }

    /// Writes an item once no one else is reading or writing it, without blocking the caller's thread.
    /// - Parameters:
    ///   - url: The item.
    ///   - options: Writing options.
    ///   - writer: Writes the item at the URL it is given (on a thread of its own).
    /// - Returns: The writer's result.
    /// - Throws: ``FileCoordinationError`` when access could not be granted, or what `writer` throws.
    public func coordinatedWrite<T: Sendable>(at url: URL, options: WritingOptions = [],
                                              _ writer: @escaping @Sendable (URL) throws -> T) async throws -> T {
        try await Self.wait { try self.coordinate(writingItemAt: url, options: options, byAccessor: writer) }
    }

    private static func wait<T: Sendable>(_ access: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            waiting.async { continuation.resume(with: Result { try access() }) }
        }
    }
}
