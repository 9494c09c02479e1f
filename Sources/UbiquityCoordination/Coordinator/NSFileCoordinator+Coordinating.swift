import Foundation

extension NSFileCoordinator {
    // MARK: Apple's forms (errors through an NSErrorPointer)

    /// Reads an item once no one is writing it.
    /// - Parameters:
    ///   - url: The item.
    ///   - options: Reading options.
    ///   - outError: Receives the error when access could not be granted; `reader` is then not called.
    ///   - reader: Reads the item at the URL it is given.
    public func coordinate(readingItemAt url: URL, options: ReadingOptions = [], error outError: NSErrorPointer, byAccessor reader: (URL) -> Void) {
        report(outError) { try access(reading: [(url, options)], writing: []) { urls, _ in reader(urls[0]) } }
    }

    /// Writes an item once no one else is reading or writing it.
    /// - Parameters:
    ///   - url: The item.
    ///   - options: Writing options.
    ///   - outError: Receives the error when access could not be granted.
    ///   - writer: Writes the item at the URL it is given.
    public func coordinate(writingItemAt url: URL, options: WritingOptions = [], error outError: NSErrorPointer, byAccessor writer: (URL) -> Void) {
        report(outError) { try access(reading: [], writing: [(url, options)]) { _, urls in writer(urls[0]) } }
    }

    /// Reads one item and writes another as one coordinated access.
    /// - Parameters:
    ///   - readingURL: The item to read.
    ///   - readingOptions: Reading options.
    ///   - writingURL: The item to write.
    ///   - writingOptions: Writing options.
    ///   - outError: Receives the error when access could not be granted.
    ///   - readerWriter: Gets the reading and writing URLs.
    public func coordinate(
        readingItemAt readingURL: URL, options readingOptions: ReadingOptions = [],
        writingItemAt writingURL: URL, options writingOptions: WritingOptions = [],
        error outError: NSErrorPointer, byAccessor readerWriter: (URL, URL) -> Void
    ) {
        report(outError) {
            try access(reading: [(readingURL, readingOptions)], writing: [(writingURL, writingOptions)]) { r, w in readerWriter(r[0], w[0]) }
        }
    }

    /// Writes two items as one coordinated access (for example, moving one to the other).
    /// - Parameters:
    ///   - url1: The first item.
    ///   - options1: Its writing options.
    ///   - url2: The second item.
    ///   - options2: Its writing options.
    ///   - outError: Receives the error when access could not be granted.
    ///   - writer: Gets both URLs.
    public func coordinate(
        writingItemAt url1: URL, options options1: WritingOptions = [],
        writingItemAt url2: URL, options options2: WritingOptions = [],
        error outError: NSErrorPointer, byAccessor writer: (URL, URL) -> Void
    ) {
        report(outError) { try access(reading: [], writing: [(url1, options1), (url2, options2)]) { _, w in writer(w[0], w[1]) } }
    }

    /// Coordinates a batch: presenters of all the items save and relinquish once, and the
    /// accessor then makes individual coordinated calls (which do not wait for the batch's own
    /// locks), calling the completion handler it is given when done.
    /// - Parameters:
    ///   - readingURLs: Items to be read.
    ///   - readingOptions: Their reading options.
    ///   - writingURLs: Items to be written.
    ///   - writingOptions: Their writing options.
    ///   - outError: Receives the error when access could not be granted.
    ///   - batchAccessor: Runs the batch; must call the block it is given when finished.
    public func prepare(
        forReadingItemsAt readingURLs: [URL], options readingOptions: ReadingOptions = [],
        writingItemsAt writingURLs: [URL], options writingOptions: WritingOptions = [],
        error outError: NSErrorPointer, byAccessor batchAccessor: (@escaping @Sendable () -> Void) -> Void
    ) {
        report(outError) {
            try access(reading: readingURLs.map { ($0, readingOptions) }, writing: writingURLs.map { ($0, writingOptions) }) { _, _ in
                batchAccessor({})
            }
        }
    }

    func report(_ outError: NSErrorPointer, _ body: () throws -> Void) {
        do { try body() } catch { outError?.pointee = error as NSError }
    }

    // MARK: Swift forms (throwing, returning the accessor's result)

    /// Reads an item once no one is writing it, returning what the accessor returns.
    /// - Parameters:
    ///   - url: The item.
    ///   - options: Reading options.
    ///   - reader: Reads the item at the URL it is given.
    /// - Returns: The reader's result.
    /// - Throws: ``FileCoordinationError`` when access could not be granted, or what `reader` throws.
    public func coordinate<T>(readingItemAt url: URL, options: ReadingOptions = [], byAccessor reader: (URL) throws -> T) throws -> T {
        try access(reading: [(url, options)], writing: []) { urls, _ in try reader(urls[0]) }
    }

    /// Writes an item once no one else is reading or writing it, returning what the accessor returns.
    /// - Parameters:
    ///   - url: The item.
    ///   - options: Writing options.
    ///   - writer: Writes the item at the URL it is given.
    /// - Returns: The writer's result.
    /// - Throws: ``FileCoordinationError`` when access could not be granted, or what `writer` throws.
    public func coordinate<T>(writingItemAt url: URL, options: WritingOptions = [], byAccessor writer: (URL) throws -> T) throws -> T {
        try access(reading: [], writing: [(url, options)]) { _, urls in try writer(urls[0]) }
    }

    /// Reads and writes several items as one coordinated access.
    /// - Parameters:
    ///   - reading: Items to read, with their options.
    ///   - writing: Items to write, with their options.
    ///   - accessor: Gets the reading and writing URLs, in order.
    /// - Returns: The accessor's result.
    /// - Throws: ``FileCoordinationError`` when access could not be granted, or what `accessor` throws.
    public func coordinate<T>(reading: [(URL, ReadingOptions)], writing: [(URL, WritingOptions)], byAccessor accessor: ([URL], [URL]) throws -> T) throws -> T {
        try access(reading: reading, writing: writing, accessor)
    }

    // MARK: Moves

    /// Announces, from inside a `.forMoving` write, that an item is about to move.
    /// - Parameters:
    ///   - oldURL: Where it is.
    ///   - newURL: Where it will be.
    public func item(at oldURL: URL, willMoveTo newURL: URL) {}

    /// Announces that ubiquity attributes of the item at `url` changed (it was downloaded,
    /// uploaded, gained a conflict…): presenters of it — in this process and in the user's
    /// other processes — that observe some of them hear of those
    /// (``NSFilePresenter/presentedItemDidChangeUbiquityAttributes(_:)``). The sync agent
    /// announces its items' changes this way.
    public func item(at url: URL, didChangeUbiquityAttributes attributes: Set<URLResourceKey>) {
        Self.items(didChangeUbiquityAttributes: [url: attributes])
    }

    /// Announces the ubiquity attributes that changed of many items at once (Ubiquity's, for
    /// the sync agent, which announces a round's downloads, uploads and conflicts together):
    /// as ``item(at:didChangeUbiquityAttributes:)`` for each, with one message to each other
    /// process that has presenters.
    /// - Parameter changes: The attributes that changed, by item.
    package static func items(didChangeUbiquityAttributes changes: [URL: Set<URLResourceKey>]) {
        let byPath = changes.filter { !$0.value.isEmpty }.map { (FileCoordinationLocks.canonicalPath($0.key), $0.value) }
        guard !byPath.isEmpty else { return }
        for (path, attributes) in byPath { PresenterSession.deliverUbiquityAttributes(attributes, of: path) }
        PresenterChannel.shared.announceUbiquityAttributes(byPath.map { [$0.0] + $0.1.map(\.rawValue).sorted() }, timeout: .seconds(5))
    }

    /// Announces, from inside a `.forMoving` write, that an item moved: its presenters get
    /// `presentedItemDidMove(to:)` (presenters of items inside it get their new URLs), and
    /// presenters of the directory it left get `presentedSubitem(at:didMoveTo:)`. The item's
    /// versions (``NSFileVersion``) move with it.
    /// - Parameters:
    ///   - oldURL: Where it was.
    ///   - newURL: Where it is now.
    public func item(at oldURL: URL, didMoveTo newURL: URL) {
        let oldPath = FileCoordinationLocks.canonicalPath(oldURL)
        state.withLock { $0.moves.append([oldPath, oldURL.path, newURL.path]) }
        do {
            let store = try VersionStore(item: oldURL)
            try store.move(to: VersionStore(item: newURL))
        } catch {
            logger.warning("could not carry an item's versions to its new place", metadata: ["from": "\(oldURL.path)", "to": "\(newURL.path)", "error": "\(error)"])
        }
        PresenterSession.deliverMove(from: oldPath, oldURL: oldURL, to: newURL, excluding: filePresenter)
    }
}
