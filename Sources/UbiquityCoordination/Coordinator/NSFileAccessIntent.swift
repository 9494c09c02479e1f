import Foundation

/// One item to read or write in ``NSFileCoordinator/coordinate(with:queue:byAccessor:)``.
public final class NSFileAccessIntent: Sendable {
    enum Kind: Sendable {
        case reading(NSFileCoordinator.ReadingOptions)
        case writing(NSFileCoordinator.WritingOptions)
    }

    let kind: Kind
    /// The item. Use this URL inside the accessor.
    public let url: URL

    init(url: URL, kind: Kind) {
        self.url = url
        self.kind = kind
    }

    /// An intent to read `url`.
    /// - Parameters:
    ///   - url: The item.
    ///   - options: Reading options.
    public static func readingIntent(with url: URL, options: NSFileCoordinator.ReadingOptions = []) -> NSFileAccessIntent {
        NSFileAccessIntent(url: url, kind: .reading(options))
    }

    /// An intent to write `url`.
    /// - Parameters:
    ///   - url: The item.
    ///   - options: Writing options.
    public static func writingIntent(with url: URL, options: NSFileCoordinator.WritingOptions = []) -> NSFileAccessIntent {
        NSFileAccessIntent(url: url, kind: .writing(options))
    }
}

extension NSFileCoordinator {
    /// Waits for access to every intent without blocking the caller, then runs `accessor` on
    /// `queue` while holding it; access ends when `accessor` returns. On failure `accessor`
    /// gets the error and no access is held.
    /// - Parameters:
    ///   - intents: The items and how they will be accessed.
    ///   - queue: Where to run the accessor.
    ///   - accessor: The access, given nil or the error.
    public func coordinate(with intents: [NSFileAccessIntent], queue: OperationQueue, byAccessor accessor: @escaping @Sendable ((any Error)?) -> Void) {
        DispatchQueue.global().async { [self] in
            var reading: [(URL, ReadingOptions)] = []
            var writing: [(URL, WritingOptions)] = []
            for intent in intents {
                switch intent.kind {
                case .reading(let options): reading.append((intent.url, options))
                case .writing(let options): writing.append((intent.url, options))
                }
            }
            do {
                try access(reading: reading, writing: writing) { _, _ in
                    let operation = BlockOperation { accessor(nil) }
                    queue.addOperations([operation], waitUntilFinished: true)
                }
            } catch {
                queue.addOperation { accessor(error) }
            }
        }
    }

    /// Reads an item under coordination without blocking a Swift-concurrency thread: waiting
    /// and reading happen on a dispatch queue.
    /// - Parameters:
    ///   - url: The item.
    ///   - options: Reading options.
    ///   - reader: Reads the item at the URL it is given.
    /// - Returns: The reader's result.
    /// - Throws: ``FileCoordinationError`` or what `reader` throws.
    public func read<T: Sendable>(itemAt url: URL, options: ReadingOptions = [], _ reader: @escaping @Sendable (URL) throws -> T) async throws -> T {
        try await offPool { try self.coordinate(readingItemAt: url, options: options, byAccessor: reader) }
    }

    /// Writes an item under coordination without blocking a Swift-concurrency thread.
    /// - Parameters:
    ///   - url: The item.
    ///   - options: Writing options.
    ///   - writer: Writes the item at the URL it is given.
    /// - Returns: The writer's result.
    /// - Throws: ``FileCoordinationError`` or what `writer` throws.
    public func write<T: Sendable>(itemAt url: URL, options: WritingOptions = [], _ writer: @escaping @Sendable (URL) throws -> T) async throws -> T {
        try await offPool { try self.coordinate(writingItemAt: url, options: options, byAccessor: writer) }
    }

    func offPool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try work() }) }
        }
    }
}
