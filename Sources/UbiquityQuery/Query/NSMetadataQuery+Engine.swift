import CUbiquitySystem
import Foundation
import UbiquityClient
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// The distinct value of an attribute among a query's results, and how many have it.
public final class NSMetadataQueryAttributeValueTuple: Sendable {
    /// The attribute.
    public let attribute: String
    private let original: ValueBox
    /// How many results have this value.
    public let count: Int

    init(attribute: String, value: Any?, count: Int) {
        self.attribute = attribute
        self.original = ValueBox(value)
        self.count = count
    }

    /// The value (nil: the results without the attribute).
    public var value: Any? { original.value }
}

/// A value of any type, kept as it was given (attribute values are immutable).
final class ValueBox: @unchecked Sendable {
    let value: Any?
    init(_ value: Any?) { self.value = value }
}

/// The results that share a value of a grouping attribute, with their subgroups.
public final class NSMetadataQueryResultGroup: Sendable {
    /// The grouping attribute.
    public let attribute: String
    private let original: ValueBox
    /// The groups within this one, by the next grouping attribute (empty for the last).
    public let subgroups: [NSMetadataQueryResultGroup]?
    private let items: [NSMetadataItem]

    init(attribute: String, value: Any?, subgroups: [NSMetadataQueryResultGroup]?, items: [NSMetadataItem]) {
        self.attribute = attribute
        self.original = ValueBox(value)
        self.subgroups = subgroups
        self.items = items
    }

    /// The value the group's results share.
    public var value: Any? { original.value }
    /// How many results are in the group.
    public var resultCount: Int { items.count }
    /// The group's result at `index`.
    public func result(at index: Int) -> Any { items[index] }
    /// The group's results.
    public var results: [Any] { items }

    static func groups(of items: [NSMetadataItem], by attributes: ArraySlice<String>) -> [NSMetadataQueryResultGroup] {
        guard let attribute = attributes.first else { return [] }
        var order: [String] = []
        var members: [String: (value: Any?, items: [NSMetadataItem])] = [:]
        for item in items {
            let value = item.value(forAttribute: attribute)
            let key = PredicateValue(item.predicateValue(forKey: attribute)).format
            if members[key] == nil { order.append(key); members[key] = (value, []) }
            members[key]?.items.append(item)
        }
        let rest = attributes.dropFirst()
        return order.map { key in
            let group = members[key]!
            return NSMetadataQueryResultGroup(attribute: attribute, value: group.value, subgroups: rest.isEmpty ? nil : groups(of: group.items, by: rest), items: group.items)
        }
    }
}

extension MetadataRecord: PredicateKeyValueReading, PredicateDirectReading {
    func predicateValue(forKey key: String) -> Any? { value(forAttribute: key) }
}

extension NSMetadataItem: PredicateDirectReading {
    func predicateValueDirect(forKey key: String) -> PredicateValue? {
        record.withLock { $0.predicateValueDirect(forKey: key) }
    }
}

extension NSMetadataItem {
    /// Takes the record's values; whether anything changed.
    func update(_ new: MetadataRecord) -> Bool {
        record.withLock { record in
            guard record != new else { return false }
            record = new
            return true
        }
    }
}

extension NSMetadataQuery.State {
    /// Brings the item at `path` in line with what is there now (`record`, nil if nothing):
    /// added, changed or removed as the predicate says, the change noted for the next update.
    mutating func settle(path: String, _ record: MetadataRecord?, matching predicate: PredicateMatcher) {
        let existing = items[path: path]
        if let record, predicate.evaluate(record: record) {
            if let existing {
                if existing.update(record) { pending.change(existing) }
            } else {
                let item = NSMetadataItem(record)
                items.insert(item, for: record)
                pending.add(item)
            }
        } else if let existing {
            items.remove(path: path)
            pending.remove(existing)
        }
    }

    /// The published results after `changes`.
    mutating func apply(_ changes: NSMetadataQuery.Changes) {
        let sorted = !sortDescriptors.isEmpty
        var gone = Set(changes.removed.keys)
        if sorted { gone.formUnion(changes.changed.keys) }
        if !gone.isEmpty { results.removeAll { gone.contains(ObjectIdentifier($0)) } }
        // What the delegate gave for results that are gone is forgotten.
        for id in changes.removed.keys {
            if let object = replacements.removeValue(forKey: id)?.object { replaced[object] = nil }
        }
        var entries = Array(changes.added.values)
        if sorted { entries += changes.changed.values }
        let incoming = changes.gathered + entries.sorted { $0.order < $1.order }.map(\.item)
        if !sorted {
            results += incoming
        } else if incoming.count > max(8, results.count / 8) {
            results += incoming
            let descriptors = sortDescriptors
            results.sort { descriptors.orders($0, before: $1, tie: false) }
        } else {
            let descriptors = sortDescriptors
            for item in incoming {
                var low = 0, high = results.count
                while low < high {
                    let middle = (low + high) / 2
                    if descriptors.orders(item, before: results[middle], tie: false) { high = middle } else { low = middle + 1 }
                }
                results.insert(item, at: low)
            }
        }
        positions = nil
    }
}

extension NSMetadataQuery {
    // MARK: Gathering (on the work queue)

    func gather(_ generation: Int) {
        guard let predicate = state.withLock({ $0.generation == generation ? $0.matcher : nil }) else { return }
        deliver(.NSMetadataQueryDidStartGathering, changes: nil, snapshot: false)
        let sources = makeSources(state.withLock { $0.activeScopes })
        // Watch first: a change made during the scan is seen (and settled by the next update).
        var watchers: [DirectoryWatcher] = []
        for (index, source) in sources.enumerated() where FileManager.default.fileExists(atPath: source.base) {
            do {
                watchers.append(try DirectoryWatcher(root: URL(fileURLWithPath: source.base), logger: logger) { [weak self] event in
                    guard let self else { return }
                    self.work.async { self.handle(event, sourceIndex: index, generation: generation) }
                })
            } catch {
                logger.warning("cannot watch a search scope; its changes are not seen", metadata: ["folder": "\(source.base)", "error": "\(error)"])
            }
        }
        // The agent's status changes (uploads, downloads, conflicts, errors: no file changes).
        var streams: [AgentStatusStream] = []
        for (index, source) in sources.enumerated() {
            guard let stream = (source as? ContainerSource)?.statusStream else { continue }
            streams.append(stream)
            let thread = Thread { [weak self] in
                _ = ubq_name_this_thread("ubq-query-stat") // for `top -H` (see ubq_name_this_thread)
                while let items = stream.next() {
                    guard let self else { return }
                    self.work.async { self.statusesChanged(items, sourceIndex: index, generation: generation) }
                }
            }
            thread.start()
        }
        let current = state.withLock { state -> Bool in
            guard state.generation == generation else { return false }
            state.sources = sources
            state.statusStreams = streams
            state.watchers = watchers
            state.items = MetadataItemIndex()
            state.results = []
            state.pending = Changes()
            return true
        }
        guard current else {
            for watcher in watchers { watcher.stop() }
            for stream in streams { stream.close() }
            return
        }
        for source in sources {
            let records = source.scan(under: source.base)
            var found = Changes()
            state.withLock { state in
                guard state.generation == generation else { return }
                found.gathered = state.items.insertNew(records) { predicate.evaluate(record: $0) }
            }
            deliver(.NSMetadataQueryGatheringProgress, changes: found, snapshot: false)
        }
        let finished = state.withLock { state -> Bool in
            guard state.generation == generation, state.phase == .gathering else { return false }
            state.phase = .live
            return true
        }
        if finished { deliver(.NSMetadataQueryDidFinishGathering, changes: nil, snapshot: true) }
    }

    /// The sources for the search scopes.
    func makeSources(_ scopes: [Scope]) -> [any MetadataSource] {
        var sources: [any MetadataSource] = []
        let token = containers.identityToken
        func container(_ identifier: String, _ part: ContainerSource.Part) -> ContainerSource? {
            guard let token, UbiquityEntitlements.isValidIdentifier(identifier) else { return nil }
            let root = containers.paths.container(identifier, account: token)
            // Failing, the scope is watched from nearer the top (the watcher says so if it cannot).
            if part == .documents { try? FileManager.default.createDirectory(at: root.appendingPathComponent("Documents"), withIntermediateDirectories: true) }
            var source = ContainerSource(identifier: identifier, root: root, part: part)
            // The agent's statuses: every item's first, then what changes. A busy agent (a long
            // round, a loaded machine) may take a while to answer: the gathering waits a little,
            // then goes on with the disk's view, and the statuses follow when they come — a slow
            // answer is not a stopped agent (once, taken for one, a query never showed a
            // download completing).
            do {
                let stream = try containers.agent.watch(container: identifier)
                source.statusStream = stream
                if stream.isReady(within: .seconds(2)) {
                    guard let statuses = stream.next() else { throw AgentError(.noAnswer, "the agent ended the connection") }
                    for status in statuses { source.statuses[URL(fileURLWithPath: status.path).standardizedFileURL.path] = status }
                } else {
                    logger.notice("the agent is slow to list the container's statuses; they follow when it does",
                                  metadata: ["container": "\(identifier)"])
                }
            } catch {
                source.statusStream?.close()
                source.statusStream = nil
                source.agentProblem = "the agent does not answer: \(error)"
                logger.warning("cannot follow the agent's item statuses; they change in the results only with the files",
                               metadata: ["container": "\(identifier)", "error": "\(error)"])
            }
            return source
        }
        for scope in scopes {
            switch scope {
            case .documents:
                sources += containers.entitlements.containerIdentifiers.compactMap { container($0, .documents) }
            case .data:
                sources += containers.entitlements.containerIdentifiers.compactMap { container($0, .data) }
            case .external:
                guard let token else { continue }
                let folder = containers.paths.account(token).appendingPathComponent("containers").path
                let others: [String]
                do {
                    others = try FileManager.default.contentsOfDirectory(atPath: folder).filter { !containers.entitlements.containerIdentifiers.contains($0) }
                } catch let error as CocoaError where error.code == .fileReadNoSuchFile {
                    others = [] // no container on this device yet
                } catch {
                    logger.error("cannot list the account's containers: the external documents scope finds nothing", metadata: ["folder": "\(folder)", "error": "\(error)"])
                    others = []
                }
                for other in others { MetadataRecord.markExternal(other) }
                sources += others.sorted().compactMap { container($0, .documents) }
            case .folder(let path):
                sources.append(FolderSource(base: path))
            case .invalid:
                continue
            }
        }
        return sources
    }

    // MARK: Live updates (on the work queue)

    func handle(_ event: DirectoryWatcher.Event, sourceIndex: Int, generation: Int) {
        let (source, predicate) = state.withLock { state -> ((any MetadataSource)?, PredicateMatcher?) in
            guard state.generation == generation, state.phase == .live || state.phase == .gathering, sourceIndex < state.sources.count else { return (nil, nil) }
            return (state.sources[sourceIndex], state.matcher)
        }
        guard let source, let predicate else { return }
        switch event {
        case .overflow:
            rescan(source, predicate: predicate)
        case .changed(let path):
            guard let itemPath = source.itemPath(forEvent: path) else { break }
            refresh(owningPackage(of: itemPath, under: source.base) ?? itemPath, in: source, predicate: predicate)
        case .moved:
            break // each end came as `changed`
        }
        scheduleFlush()
    }

    /// The agent says these items' statuses changed: their records change with them.
    func statusesChanged(_ items: [UbiquityItemStatus], sourceIndex: Int, generation: Int) {
        let found = state.withLock { state -> (ContainerSource, PredicateMatcher)? in
            guard state.generation == generation, state.phase == .live || state.phase == .gathering, sourceIndex < state.sources.count,
                  var source = state.sources[sourceIndex] as? ContainerSource, let matcher = state.matcher else { return nil }
            for status in items { source.statuses[URL(fileURLWithPath: status.path).standardizedFileURL.path] = status }
            state.sources[sourceIndex] = source
            return (source, matcher)
        }
        guard let (source, predicate) = found else { return }
        for status in items {
            let path = URL(fileURLWithPath: status.path).standardizedFileURL.path
            guard let itemPath = source.itemPath(forEvent: path) else { continue }
            refresh(itemPath, in: source, predicate: predicate, askingAgent: false)
        }
        scheduleFlush()
    }

    /// The package `path` is inside, if any (a package is one item; its members are not).
    func owningPackage(of path: String, under base: String) -> String? {
        var components = path.dropFirst(base.count + 1).split(separator: "/")
        components.removeLast()
        var current = base
        for component in components {
            current += "/" + component
            let type = MetadataRecord.contentType(name: String(component), isDirectory: true)
            if type != "public.folder", DocumentTypeRegistry.shared.isPackage(type) { return current }
        }
        return nil
    }

    /// Looks again at one item (and, for a folder, what is under it).
    func refresh(_ path: String, in source: any MetadataSource, predicate: PredicateMatcher, askingAgent: Bool = true) {
        let record = askingAgent ? source.current(at: path, agent: containers.agent) : source.record(at: path)
        state.withLock { state in
            state.settle(path: path, record, matching: predicate)
            // A folder gone (or moved away): what was in it goes too.
            if record == nil || record?.isDirectory == false {
                for item in state.items.removeAll(under: path) { state.pending.remove(item) }
            }
        }
        // A folder that appeared (or moved here): what is in it.
        if let record, record.isDirectory, !DocumentTypeRegistry.shared.isPackage(record.contentType) {
            merge(source.scan(under: path), under: path, predicate: predicate, removingMissing: false)
        }
    }

    /// Everything under a source again (after inotify lost events).
    func rescan(_ source: any MetadataSource, predicate: PredicateMatcher) {
        merge(source.scan(under: source.base), under: source.base, predicate: predicate, removingMissing: true)
    }

    func merge(_ records: [MetadataRecord], under base: String, predicate: PredicateMatcher, removingMissing: Bool) {
        state.withLock { state in
            var seen = Set<FolderAndName>()
            for record in records {
                if removingMissing { seen.insert(FolderAndName(folder: record.folder.path, name: record.name)) }
                state.settle(path: record.path, record, matching: predicate)
            }
            guard removingMissing else { return }
            let gone = state.items.removeAll(under: base) { !seen.contains(FolderAndName(folder: $0, name: $1)) }
            for item in gone { state.pending.remove(item) }
        }
    }

    func scheduleFlush() {
        let interval = state.withLock { state -> TimeInterval? in
            guard !state.flushScheduled, state.disabled == 0, !state.pending.isEmpty else { return nil }
            state.flushScheduled = true
            return state.batchingInterval
        }
        guard let interval else { return }
        work.asyncAfter(deadline: .now() + interval) { [weak self] in self?.flush() }
    }

    /// Posts what changed since the last update, unless updates are held back.
    func flush() {
        let changes = state.withLock { state -> Changes? in
            state.flushScheduled = false
            guard state.disabled == 0, state.phase == .live, !state.pending.isEmpty else { return nil }
            defer { state.pending = Changes() }
            return state.pending
        }
        if let changes { deliver(.NSMetadataQueryDidUpdate, changes: changes, snapshot: true) }
    }

    // MARK: Delivering

    /// Applies `changes` to the results and posts `name` — on the operation queue if there is
    /// one, else on the main queue (as Apple's query does: on the main thread) — then gives
    /// snapshot iterators the news.
    func deliver(_ name: Notification.Name, changes: Changes?, snapshot: Bool) {
        let queue = state.withLock { $0.operationQueue }
        let operation: @Sendable () -> Void = { [self] in
            let (results, continuations) = state.withLock { state in
                if let changes { state.apply(changes) }
                return (state.results, Array(state.continuations.values))
            }
            var userInfo: [AnyHashable: Any]?
            if let changes {
                userInfo = [NSMetadataQueryUpdateAddedItemsKey: changes.addedItems, NSMetadataQueryUpdateChangedItemsKey: Self.ordered(changes.changed),
                            NSMetadataQueryUpdateRemovedItemsKey: Self.ordered(changes.removed)]
            }
            NotificationCenter.default.post(name: name, object: self, userInfo: userInfo)
            guard snapshot else { return }
            let initial = name == .NSMetadataQueryDidFinishGathering
            let shot = Snapshot(results: results, added: initial ? results : changes?.addedItems ?? [],
                                changed: Self.ordered(changes?.changed ?? [:]), removed: Self.ordered(changes?.removed ?? [:]), isInitial: initial)
            for continuation in continuations { continuation.yield(shot) }
        }
        if let queue { queue.addOperation(operation) } else { MainQueue.async(operation) }
    }

    static func ordered(_ entries: [ObjectIdentifier: Changes.Entry]) -> [NSMetadataItem] {
        Changes.ordered(entries)
    }
}

extension MetadataSource {
    /// The item's record now; a container's item with the agent's status for it, when it runs.
    func current(at path: String, agent: AgentConnection) -> MetadataRecord? {
        guard var container = self as? ContainerSource else { return record(at: path) }
        if container.agentProblem == nil {
            do {
                container.statuses[path] = try agent.send(AgentRequest(.item, path: path), timeout: .seconds(1)).items?.first
            } catch let error as AgentError where error.code == .unknownItem {
                container.statuses[path] = nil // not an item the agent keeps (yet): the disk's view
            } catch {
                // No answer in time (a busy agent) or none at all (it stopped meanwhile): what
                // its status stream said last, which it corrects when it next speaks.
            }
        }
        return container.record(at: path)
    }
}
