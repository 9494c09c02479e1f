import Foundation
import UbiquityClient
import Logging
import Synchronization
import UbiquityFiles

/// A live search for files: Apple's `NSMetadataQuery`, over the app's ubiquity containers
/// (including items known only by their metadata, not downloaded) and local folders.
///
/// Give it search scopes and a predicate, observe its notifications, and start it:
///
/// ```swift
/// let query = NSMetadataQuery()
/// query.searchScopes = [NSMetadataQueryUbiquitousDocumentsScope]
/// query.predicate = NSPredicate(format: "%K LIKE '*.txt'", NSMetadataItemFSNameKey)
/// NotificationCenter.default.addObserver(forName: .NSMetadataQueryDidFinishGathering, object: query, queue: nil) { _ in … }
/// query.start()
/// ```
///
/// The first gathering reads the disk (and asks the agent for the items' sync status, when it
/// runs); from then on inotify reports every creation, change, rename and deletion, and each
/// becomes an update: ``Foundation/Notification/Name/NSMetadataQueryDidUpdate`` with the items
/// added, changed and removed, batched over ``notificationBatchingInterval``. Notifications
/// are posted in order on ``operationQueue`` when it is set (give it one operation at a time),
/// else on the main queue, as Apple's are on the main thread (so the process's main thread must
/// be free to run it: an async `main`, `dispatchMain()` or the main run loop, as in an app).
/// Swift concurrency users can iterate ``snapshots``.
public final class NSMetadataQuery: NSObject, @unchecked Sendable { // unchecked: its state is behind a Mutex, the rest constants
    /// A search scope.
    enum Scope: Sendable, Hashable {
        case documents, data, external
        case folder(String)
        case invalid(String)
    }

    enum Phase: Sendable {
        case idle, gathering, live, stopped
    }

    /// What changed since the last update, in the order it was found.
    struct Changes: Sendable {
        /// Items new to the results, found together by a walk (in its order; none of them in
        /// the other lists): a gathering adds thousands at once without a map of them.
        var gathered: [NSMetadataItem] = []
        var added: [ObjectIdentifier: Entry] = [:]
        var changed: [ObjectIdentifier: Entry] = [:]
        var removed: [ObjectIdentifier: Entry] = [:]
        var counter = 0
        var isEmpty: Bool { gathered.isEmpty && added.isEmpty && changed.isEmpty && removed.isEmpty }

        /// Every item added, in the order they were found.
        var addedItems: [NSMetadataItem] { gathered + Self.ordered(added) }

        struct Entry: Sendable {
            var order: Int
            var item: NSMetadataItem
        }

        mutating func entry(_ item: NSMetadataItem) -> Entry {
            counter += 1
            return Entry(order: counter, item: item)
        }

        mutating func add(_ item: NSMetadataItem) {
            let id = ObjectIdentifier(item)
            if removed.removeValue(forKey: id) != nil { changed[id] = entry(item) } else { added[id] = entry(item) }
        }

        mutating func change(_ item: NSMetadataItem) {
            let id = ObjectIdentifier(item)
            if added[id] == nil && changed[id] == nil { changed[id] = entry(item) }
        }

        mutating func remove(_ item: NSMetadataItem) {
            let id = ObjectIdentifier(item)
            changed[id] = nil
            if added.removeValue(forKey: id) == nil { removed[id] = entry(item) }
        }

        /// Items in the order they were found.
        static func ordered(_ entries: [ObjectIdentifier: Entry]) -> [NSMetadataItem] {
            entries.values.sorted { $0.order < $1.order }.map(\.item)
        }
    }

    struct State: Sendable {
        var predicate: UncheckedSendable<NSPredicate>?
        /// What the running query evaluates (set by ``start()``).
        var matcher: PredicateMatcher?
        var scopes: [Scope] = []
        /// Foundation's descriptors are immutable once made.
        var descriptors = UncheckedSendable<[NSSortDescriptor]>([])
        var sortDescriptors: [NSSortDescriptor] { descriptors.value }
        var valueListAttributes: [String] = []
        var groupingAttributes: [String]?
        var batchingInterval: TimeInterval = 0.02
        var operationQueue: OperationQueue?
        var phase = Phase.idle
        var started = false
        var disabled = 0
        /// Every matching item, by path (what the results will be after the next update).
        var items = MetadataItemIndex()
        /// What has changed since the last update.
        var pending = Changes()
        var flushScheduled = false
        /// The results as last published.
        var results: [NSMetadataItem] = []
        var positions: [ObjectIdentifier: Int]?
        var sources: [any MetadataSource] = []
        var watchers: [DirectoryWatcher] = []
        /// The agent's status streams for the containers searched.
        var statusStreams: [AgentStatusStream] = []
        var generation = 0
        var continuations: [UUID: AsyncStream<Snapshot>.Continuation] = [:]
        var delegate = WeakQueryDelegate()
        /// ``searchItems`` as paths.
        var searchItems: [String]?
        /// The scopes the running query searches (``searchScopes``, or those ``searchItems`` imply).
        var activeScopes: [Scope] = []
        /// The delegate's replacements of results, by result.
        var replacements: [ObjectIdentifier: QueryReplacement] = [:]
        /// The results replaced by objects, by replacement.
        var replaced: [ObjectIdentifier: ObjectIdentifier] = [:]
    }

    let state = Mutex(State())
    let work = DispatchQueue(label: "ubiquity.metadata-query")
    let containers: UbiquityContainers
    let logger = Logger(label: "ubiquity.metadata-query")

    /// A query over the containers of this process's user and app (``UbiquityContainers/shared``).
    override public convenience init() {
        self.init(containers: .shared)
    }

    /// A query over the containers of `containers` (other paths or entitlements: for tests and tools).
    public init(containers: UbiquityContainers) {
        self.containers = containers
        super.init()
    }

    deinit {
        for watcher in state.withLock({ $0.watchers }) { watcher.stop() }
        for stream in state.withLock({ $0.statusStreams }) { stream.close() }
    }

    // MARK: Configuring

    /// Which items qualify. Required: ``start()`` returns false without one.
    public var predicate: NSPredicate? {
        get { state.withLock { $0.predicate }?.value }
        set {
            let boxed = newValue.map(UncheckedSendable.init)
            state.withLock { $0.predicate = boxed }
        }
    }

    /// Where to search: `NSMetadataQueryUbiquitousDocumentsScope`, `…UbiquitousDataScope`,
    /// `…AccessibleUbiquitousExternalDocumentsScope`, and local folders as `URL`s or paths.
    /// Anything else makes ``start()`` return false.
    public var searchScopes: [Any] {
        get {
            state.withLock { $0.scopes }.map { scope -> Any in
                switch scope {
                case .documents: return NSMetadataQueryUbiquitousDocumentsScope
                case .data: return NSMetadataQueryUbiquitousDataScope
                case .external: return NSMetadataQueryAccessibleUbiquitousExternalDocumentsScope
                case .folder(let path): return URL(fileURLWithPath: path, isDirectory: true)
                case .invalid(let text): return text
                }
            }
        }
        set {
            let scopes = newValue.map { scope -> Scope in
                switch scope {
                case let text as String where text == NSMetadataQueryUbiquitousDocumentsScope: return .documents
                case let text as String where text == NSMetadataQueryUbiquitousDataScope: return .data
                case let text as String where text == NSMetadataQueryAccessibleUbiquitousExternalDocumentsScope: return .external
                case let text as String where text.hasPrefix("/"): return .folder(URL(fileURLWithPath: text).standardizedFileURL.path)
                case let url as URL where url.isFileURL: return .folder(url.standardizedFileURL.path)
                default: return .invalid("\(scope)")
                }
            }
            state.withLock { $0.scopes = scopes }
        }
    }

    /// The items the query is limited to (`URL`s and ``NSMetadataItem``s): only they, and what
    /// is under those that are folders, can be results — within ``searchScopes``, or, when
    /// there are none, within the app's containers and the items' own folders. Nil: no limit.
    /// (Apple's: "scope the metadata query to a collection of existing URLs and/or metadata items".)
    public var searchItems: [Any]? {
        get { state.withLock { $0.searchItems }?.map { URL(fileURLWithPath: $0) } }
        set {
            let paths = newValue?.compactMap { item -> String? in
                if let url = item as? URL, url.isFileURL { return url.standardizedFileURL.path }
                if let item = item as? NSMetadataItem { return item.path }
                if let path = item as? String, path.hasPrefix("/") { return URL(fileURLWithPath: path).standardizedFileURL.path }
                return nil
            }
            state.withLock { $0.searchItems = paths }
        }
    }

    /// How results are ordered (by attribute); none: in the order they were found.
    public var sortDescriptors: [NSSortDescriptor] {
        get { state.withLock { $0.descriptors }.value }
        set {
            let descriptors = UncheckedSendable(newValue)
            state.withLock { state in
                state.descriptors = descriptors
                if !newValue.isEmpty { state.results.sort { descriptors.value.orders($0, before: $1, tie: false) } }
                state.positions = nil
            }
        }
    }

    /// The attributes whose distinct values ``valueLists`` counts.
    public var valueListAttributes: [String] {
        get { state.withLock { $0.valueListAttributes } }
        set { state.withLock { $0.valueListAttributes = newValue } }
    }

    /// The attributes ``groupedResults`` groups by, outermost first.
    public var groupingAttributes: [String]? {
        get { state.withLock { $0.groupingAttributes } }
        set { state.withLock { $0.groupingAttributes = newValue } }
    }

    /// How long changes gather before an update is posted, in seconds (default 0.02).
    public var notificationBatchingInterval: TimeInterval {
        get { state.withLock { $0.batchingInterval } }
        set { state.withLock { $0.batchingInterval = max(0, newValue) } }
    }

    /// Where notifications are posted (and results change); nil: the query's own serial queue.
    public var operationQueue: OperationQueue? {
        get { state.withLock { $0.operationQueue } }
        set { state.withLock { $0.operationQueue = newValue } }
    }

    // MARK: Running

    /// Starts gathering; false if the query has no predicate (or one that uses what is not
    /// supported: ``Foundation/NSPredicate/unsupportedReason``), has a search scope it does not
    /// know, or is already running. The results arrive with the notifications.
    @discardableResult
    public func start() -> Bool {
        let generation: Int? = state.withLock { state in
            var scopes = state.scopes
            if scopes.isEmpty, let items = state.searchItems, !items.isEmpty {
                // Search items alone: the app's containers, and the folders of items outside them.
                let roots = containers.entitlements.containerIdentifiers.compactMap { containers.url(forContainer: $0)?.standardizedFileURL.path }
                scopes = [.documents, .data] + Set(items.filter { item in !roots.contains { item == $0 || item.hasPrefix($0 + "/") } }
                    .map { ($0 as NSString).deletingLastPathComponent }).sorted().map(Scope.folder)
            }
            guard let predicate = state.predicate, predicate.value.unsupportedReason == nil, !scopes.isEmpty, !scopes.contains(where: { if case .invalid = $0 { return true } else { return false } }),
                  state.phase == .idle || state.phase == .stopped else { return nil }
            state.phase = .gathering
            state.started = true
            state.matcher = PredicateMatcher(predicate.value, items: state.searchItems.map(Set.init))
            state.activeScopes = scopes
            state.generation += 1
            return state.generation
        }
        guard let generation else {
            if let unsupported = predicate?.unsupportedReason {
                logger.error("metadata query not started: its predicate uses what is not supported", metadata: ["reason": "\(unsupported)"])
            } else {
                logger.warning("metadata query not started: it needs a predicate and known search scopes, and must not be running")
            }
            return false
        }
        work.async { self.gather(generation) }
        return true
    }

    /// Stops gathering and watching; the results stay as they are.
    public func stop() {
        let (watchers, streams) = state.withLock { state -> ([DirectoryWatcher], [AgentStatusStream]) in
            guard state.phase == .gathering || state.phase == .live else { return ([], []) }
            state.phase = .stopped
            state.generation += 1
            defer { state.watchers = []; state.statusStreams = [] }
            return (state.watchers, state.statusStreams)
        }
        for watcher in watchers { watcher.stop() }
        for stream in streams { stream.close() }
        let continuations = state.withLock { state in
            defer { state.continuations = [:] }
            return state.continuations.values
        }
        for continuation in continuations { continuation.finish() }
    }

    /// Whether ``start()`` was called successfully.
    public var isStarted: Bool { state.withLock { $0.started } }
    /// Whether the first gathering is under way.
    public var isGathering: Bool { state.withLock { $0.phase == .gathering } }
    /// Whether ``stop()`` was called.
    public var isStopped: Bool { state.withLock { $0.phase == .stopped } }

    /// Holds updates back (the results stay as they are) until ``enableUpdates()``; calls nest.
    public func disableUpdates() {
        state.withLock { $0.disabled += 1 }
    }

    /// Lets updates through again; what changed meanwhile comes as one update.
    public func enableUpdates() {
        let flush = state.withLock { state -> Bool in
            state.disabled = max(0, state.disabled - 1)
            return state.disabled == 0 && !state.pending.isEmpty
        }
        if flush { work.async { self.flush() } }
    }

    // MARK: Results

    /// The results, in order (the delegate's replacements of them, if it gives any).
    public var results: [Any] {
        let items: [NSMetadataItem] = state.withLock { $0.results }
        guard state.withLock({ $0.delegate.value != nil }) else { return items }
        return items.map(replacement(for:))
    }

    /// How many results there are.
    public var resultCount: Int { state.withLock { $0.results.count } }

    /// The result at `index` (the delegate's replacement of it, if it gives one).
    public func result(at index: Int) -> Any {
        let item: NSMetadataItem = state.withLock { $0.results[index] }
        return replacement(for: item)
    }

    /// Where `result` (a result, or the delegate's replacement of one) is in the results, or
    /// `NSNotFound`.
    public func index(ofResult result: Any) -> Int {
        let replaced: ObjectIdentifier? = type(of: result) is AnyClass ? state.withLock { $0.replaced[ObjectIdentifier(result as AnyObject)] } : nil
        guard replaced != nil || result is NSMetadataItem else { return NSNotFound }
        let id = replaced ?? ObjectIdentifier(result as AnyObject)
        return state.withLock { state in
            if state.positions == nil {
                var positions: [ObjectIdentifier: Int] = [:]
                positions.reserveCapacity(state.results.count)
                for (index, item) in state.results.enumerated() { positions[ObjectIdentifier(item)] = index }
                state.positions = positions
            }
            return state.positions?[id] ?? NSNotFound
        }
    }

    /// The value of an attribute of the result at `index` (the delegate's replacement of it, if
    /// it gives one).
    public func value(ofAttribute attribute: String, forResultAt index: Int) -> Any? {
        let item: NSMetadataItem = state.withLock { $0.results[index] }
        return replacement(for: item.value(forAttribute: attribute), of: attribute)
    }

    /// Calls `block` with each result and its index until it sets its last argument to true.
    public func enumerateResults(_ block: (Any, Int, UnsafeMutablePointer<ObjCBool>) -> Void) {
        enumerateResults(options: [], using: block)
    }

    /// Calls `block` with each result and its index (from the end with `.reverse`) until it sets
    /// its last argument to true.
    public func enumerateResults(options: NSEnumerationOptions = [], using block: (Any, Int, UnsafeMutablePointer<ObjCBool>) -> Void) {
        let results = state.withLock { $0.results }
        var stop = ObjCBool(false)
        let indices = options.contains(.reverse) ? Array(results.indices.reversed()) : Array(results.indices)
        for index in indices {
            block(replacement(for: results[index]), index, &stop)
            if stop.boolValue { return }
        }
    }

    /// For each of ``valueListAttributes``, its distinct values among the results with how many
    /// results have each (most frequent first).
    public var valueLists: [String: [NSMetadataQueryAttributeValueTuple]] {
        let (results, attributes) = state.withLock { ($0.results, $0.valueListAttributes) }
        var lists: [String: [NSMetadataQueryAttributeValueTuple]] = [:]
        for attribute in attributes {
            var counts: [(value: Any?, key: PredicateValue, count: Int)] = []
            var index: [String: Int] = [:]
            for item in results {
                let value = item.value(forAttribute: attribute)
                let key = PredicateValue(item.predicateValue(forKey: attribute))
                let hashKey = key.format
                if let at = index[hashKey] { counts[at].count += 1 } else {
                    index[hashKey] = counts.count
                    counts.append((value, key, 1))
                }
            }
            lists[attribute] = counts.sorted { $0.count > $1.count }.map {
                NSMetadataQueryAttributeValueTuple(attribute: attribute, value: replacement(for: $0.value, of: attribute), count: $0.count)
            }
        }
        return lists
    }

    /// The results grouped by the first of ``groupingAttributes``, each group by the next.
    public var groupedResults: [NSMetadataQueryResultGroup] {
        let (results, attributes) = state.withLock { ($0.results, $0.groupingAttributes ?? []) }
        return NSMetadataQueryResultGroup.groups(of: results, by: attributes[...])
    }

    // MARK: Swift concurrency

    /// The results and what changed, once per gathering and update.
    public struct Snapshot: Sendable {
        /// All results, in order.
        public let results: [NSMetadataItem]
        /// Items that became results.
        public let added: [NSMetadataItem]
        /// Results whose attributes changed.
        public let changed: [NSMetadataItem]
        /// Items that are no longer results.
        public let removed: [NSMetadataItem]
        /// Whether this is the end of the first gathering (not an update).
        public let isInitial: Bool
    }

    /// A sequence of snapshots: the current results at once if the first gathering is over,
    /// then one per update, until the query stops.
    public var snapshots: AsyncStream<Snapshot> {
        AsyncStream { continuation in
            let id = UUID()
            let current: Snapshot? = state.withLock { state in
                state.continuations[id] = continuation
                return state.phase == .live ? Snapshot(results: state.results, added: state.results, changed: [], removed: [], isInitial: true) : nil
            }
            if let current { continuation.yield(current) }
            if state.withLock({ $0.phase == .stopped }) { continuation.finish() }
            continuation.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.continuations.removeValue(forKey: id) } }
        }
    }
}
