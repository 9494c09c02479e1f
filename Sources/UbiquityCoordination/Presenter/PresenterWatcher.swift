import Foundation
import Logging
import CUbiquitySystem
import Synchronization
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// Tells presenters about changes nobody coordinated — another program writing the file,
/// `echo >> file` — by watching their items with inotify.
///
/// One thread per process (started with the first presenter) watches the parent directory of
/// every presented item and, for presented directories (packages, folders), the directory and
/// every directory inside it. A path's events are gathered until it has been quiet for
/// ``quiet`` — and, if it was written, closed by its writer — (or busy for ``longest``), then
/// delivered once: `presentedItemDidChange` to its
/// presenters, `presentedItemDidMove(to:)` when it was renamed within watched directories, and
/// `presentedSubitemDidAppear/DidChange/…DidMoveTo` to presenters of directories above it.
///
/// Coordinated writes are not reported twice: from the moment a write is prepared (here or in
/// another process) until the watcher has read every event queued before it finished, events
/// at or under its items are held back; then they are dropped if the accessor ran (the
/// coordinator already told the presenters) and delivered if it did not.
final class PresenterWatcher: Sendable {
    static let shared = PresenterWatcher()

    /// How long a path must be quiet before its change is delivered.
    static let quiet: Duration = .milliseconds(4)
    /// The longest a path that keeps changing (or stays open for writing) waits for its notice.
    static let longest: Duration = .milliseconds(100)
    /// How long a presented item that vanished may take to come back (an editor renaming it to
    /// a backup, then writing a new file) before it counts as moved or deleted.
    static let settle: Duration = .milliseconds(300)
    /// The most directories one process watches.
    static let maximumWatches = 8192

    /// What happened to one path since its last notice.
    struct Change {
        var first: ContinuousClock.Instant
        var last: ContinuousClock.Instant
        /// It appeared where nothing of that name was before.
        var created = false
        /// It was renamed to this path (within watched directories).
        var movedTo: String?
        /// Written, and not closed by its writer yet.
        var awaitingClose = false
        /// Not to be delivered before this (an item that vanished, waiting to see if it returns).
        var notBefore: ContinuousClock.Instant?
        /// How many marks the watcher had read when it read this change's latest event: only
        /// presenters added before then hear of it.
        var mark: UInt64 = 0

        /// When it is due: quiet (and closed), or busy for too long; not before ``notBefore``.
        var due: ContinuousClock.Instant {
            let ready = awaitingClose ? first + PresenterWatcher.longest : min(last + PresenterWatcher.quiet, first + PresenterWatcher.longest)
            return max(ready, notBefore ?? ready)
        }

        init(_ now: ContinuousClock.Instant) {
            first = now
            last = now
        }

        mutating func merge(_ other: Change) {
            first = min(first, other.first)
            last = max(last, other.last)
            created = created || other.created
            movedTo = other.movedTo ?? movedTo
            awaitingClose = other.last >= last ? other.awaitingClose : awaitingClose
            notBefore = other.notBefore ?? notBefore
            mark = max(mark, other.mark)
        }
    }

    /// A coordinated write in progress: its items, and the events held back meanwhile.
    struct Write {
        var paths: [String]
        var held: [String: Change] = [:]
        /// Over, to be released by the watcher's next pass (when there is no marker).
        var finished = false
        var changed = false

        func covers(_ path: String) -> Bool {
            paths.contains { path == $0 || path.hasPrefix($0 == "/" ? "/" : $0 + "/") }
        }
    }

    struct State {
        var running = false
        var inotify: Int32 = -1
        var wakeRead: Int32 = -1
        var wakeWrite: Int32 = -1
        /// Watch descriptor → directory, and back.
        var directories: [Int32: String] = [:]
        var watches: [String: Int32] = [:]
        /// Names known in each watched directory (to tell "appeared" from "replaced").
        var names: [String: Set<String>] = [:]
        /// Presented items being watched (canonical path → is a directory).
        var presented: [String: Bool] = [:]
        var pending: [String: Change] = [:]
        var writes: [UInt64: Write] = [:]
        var nextWrite: UInt64 = 0
        /// `IN_MOVED_FROM` cookies → the path that moved.
        var cookies: [UInt32: String] = [:]
        var resyncNeeded = true
        /// The private marker file and its watch (-1: none).
        var marker: Int32 = -1
        var markerWatch: Int32 = -1
        var markerToggle = false
        /// What the marks in the event queue stand for, oldest first: a finished write (its
        /// token) or a presenter added (nil).
        var marks: [UInt64?] = []
        /// Marks made, and marks read from the event queue.
        var marksMade: UInt64 = 0
        var marksRead: UInt64 = 0
        /// How many times inotify's queue overflowed (events lost: every presenter told).
        var overflows: UInt64 = 0
        /// Presented items known to have moved (old → new path) while their presenters have
        /// not updated their URLs yet.
        var aliases: [String: String] = [:]
        /// Directories that appeared inside presented directories since the last resync.
        var appearedDirectories: [String] = []
        var limitLogged = false
        /// Items whose version stores changed since the last look.
        var versionChecks: Set<String> = []
        /// The versions each watched item was last known to have (by identifier).
        var versions: [String: [String: VersionRecord]] = [:]
        /// Store roots seen appearing: every version in them is news.
        var freshStoreRoots: Set<String> = []
    }

    let state = Mutex(State())
    /// One resync at a time (the watching thread's, or a registering thread's).
    private let resyncing = Mutex(())
    private let logger = Logger(label: "ubiquity.coordination.watcher")

    // MARK: Control

    /// Starts the watching thread (once per process) and brings the watches in line with the
    /// registered presenters before returning, so a change made right after
    /// ``NSFileCoordinator/addFilePresenter(_:)`` returns is seen.
    /// - Parameter marking: A presenter was added: mark this moment in the event queue.
    /// - Returns: The mark (a presenter added now hears the changes read after it), or 0 when
    ///   nothing could be marked (it hears every change delivered from now on).
    @discardableResult
    func presentersChanged(marking: Bool = false) -> UInt64 {
        startIfNeeded()
        resync()
        guard marking else { return 0 }
        return state.withLock { state in touchMarker(for: nil, in: &state) ? state.marksMade : 0 }
    }

    /// Puts a mark in the event queue, standing for `write` (nil: a presenter added); false if
    /// there is no marker or it could not be touched.
    ///
    /// The marker (an unnamed `O_TMPFILE` the watcher watches) is alternately written and
    /// `fchmod`ed so that two marks never merge into one event: the n-th mark the watcher reads
    /// is the n-th made.
    private func touchMarker(for write: UInt64?, in state: inout State) -> Bool {
        guard state.marker >= 0 else { return false }
        state.markerToggle.toggle()
        var byte: UInt8 = 1
        guard state.markerToggle ? pwrite(state.marker, &byte, 1, 0) == 1 : fchmod(state.marker, 0o600) == 0 else { return false }
        state.marks.append(write)
        state.marksMade += 1
        return true
    }

    private func startIfNeeded() {
        let start = state.withLock { state -> Bool in
            state.resyncNeeded = true
            guard !state.running else { return false }
            let inotify = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
            var pipe: [Int32] = [-1, -1]
            guard inotify >= 0, ubq_wake_pipe(&pipe) == 0 else {
                if inotify >= 0 { close(inotify) }
                return false
            }
            state.inotify = inotify
            state.wakeRead = pipe[0]
            state.wakeWrite = pipe[1]
            state.running = true
            // The marker lives in the per-user runtime directory (or /tmp), unnamed.
            let runtime = (FileCoordinationLocks.shared.directory as NSString).deletingLastPathComponent
            for directory in [runtime, NSTemporaryDirectory()] {
                let marker = ubq_open_marker(directory)
                guard marker >= 0 else { continue }
                let watch = inotify_add_watch(inotify, "/proc/self/fd/\(marker)", UInt32(IN_MODIFY | IN_ATTRIB))
                if watch >= 0 {
                    state.marker = marker
                    state.markerWatch = watch
                    break
                }
                close(marker)
            }
            return true
        }
        guard start else { return }
        let thread = Thread { [self] in
            _ = ubq_name_this_thread("ubq-presenters") // for `top -H` (see ubq_name_this_thread)
            run()
        }
        thread.start()
    }

    /// A coordinated write of `paths` is about to happen: hold back their events.
    /// - Returns: A token for ``finishWrite(_:changed:)``, or nil if nothing is watched.
    func beginWrite(_ paths: [String]) -> UInt64? {
        guard !paths.isEmpty else { return nil }
        return state.withLock { state in
            guard state.running else { return nil }
            state.nextWrite += 1
            state.writes[state.nextWrite] = Write(paths: paths)
            return state.nextWrite
        }
    }

    /// The write is over. Once every event queued before now has been read, its held-back
    /// events are dropped (`changed`: the coordinator told presenters) or delivered.
    ///
    /// "Before now" is marked in the event queue itself (``touchMarker(for:in:)``): the mark
    /// the watcher reads releases the write. Events queued after the mark — someone else's
    /// change right after the write — are not held back. Without a marker (no `O_TMPFILE`),
    /// the watcher's next pass releases it instead.
    func finishWrite(_ token: UInt64, changed: Bool) {
        let marked = state.withLock { state -> Bool in
            guard state.writes[token] != nil else { return true }
            state.writes[token]?.changed = changed
            guard touchMarker(for: token, in: &state) else {
                state.writes[token]?.finished = true
                return false
            }
            return true
        }
        if !marked { wake() }
    }

    /// The watcher read the oldest mark: if it stands for a write, that write is over and every
    /// event it caused has been read; if for a presenter added, what is read from now on is news
    /// to it.
    private func readMark(in state: inout State) {
        guard !state.marks.isEmpty else { return }
        state.marksRead += 1
        guard let token = state.marks.removeFirst(), let write = state.writes.removeValue(forKey: token), !write.changed else { return }
        for (path, change) in write.held { state.pending[path, default: change].merge(change) }
    }

    /// A presented item moved from `from` to `to`: watch it there from now on, even before its
    /// presenter (told on its own queue) updates ``NSFilePresenter/presentedItemURL``.
    func noteMove(from: String, to: String) {
        let running = state.withLock { state -> Bool in
            guard state.running else { return false }
            state.aliases[from] = to
            if let isDirectory = state.presented.removeValue(forKey: from) { state.presented[to] = isDirectory }
            state.resyncNeeded = true
            return true
        }
        if running { wake() }
    }

    private func wake() {
        let fd = state.withLock { $0.wakeWrite }
        guard fd >= 0 else { return }
        var byte: UInt8 = 1
        _ = write(fd, &byte, 1)
    }

    // MARK: The watching thread

    private func run() {
        let (inotify, wakeRead) = state.withLock { ($0.inotify, $0.wakeRead) }
        var lastResync = ContinuousClock.now
        while true {
            var descriptors = [pollfd(fd: inotify, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
            _ = poll(&descriptors, 2, timeoutMilliseconds())
            var scratch = [UInt8](repeating: 0, count: 64)
            while read(wakeRead, &scratch, scratch.count) > 0 {}

            // Writes finished (without a marker) before this point: their events are queued by now.
            let finished = state.withLock { $0.writes.filter { $0.value.finished }.map(\.key) }
            readEvents(inotify)
            state.withLock { state in
                for token in finished {
                    guard let write = state.writes.removeValue(forKey: token), !write.changed else { continue }
                    for (path, change) in write.held { state.pending[path, default: change].merge(change) }
                }
            }

            let now = ContinuousClock.now
            if state.withLock({ $0.resyncNeeded }) || now - lastResync > .seconds(1) {
                resync()
                lastResync = now
            }
            checkVersions()
            deliverDue()
        }
    }

    private func timeoutMilliseconds() -> Int32 {
        state.withLock { state in
            guard let earliest = state.pending.values.map(\.due).min() else { return 1_000 }
            let wait = earliest - .now
            return wait <= .zero ? 0 : Int32(min(1_000, wait.components.seconds * 1_000 + wait.components.attoseconds / 1_000_000_000_000_000 + 1))
        }
    }

    private func readEvents(_ inotify: Int32) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { SystemCall.read(inotify, into: $0) }
            guard count > 0 else { return }
            var offset = 0
            let header = MemoryLayout<inotify_event>.size
            while offset + header <= count {
                let (descriptor, mask, cookie, length) = buffer.withUnsafeBytes { raw in
                    let event = raw.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
                    return (event.wd, event.mask, event.cookie, Int(event.len))
                }
                let nameBytes = buffer[(offset + header)..<min(count, offset + header + length)].prefix { $0 != 0 }
                record(descriptor: descriptor, mask: mask, cookie: cookie, name: String(decoding: nameBytes, as: UTF8.self))
                offset += header + length
            }
        }
    }

    private func record(descriptor: Int32, mask: UInt32, cookie: UInt32, name: String) {
        let now = ContinuousClock.now
        state.withLock { state in
            if descriptor == state.markerWatch && state.markerWatch >= 0 {
                return readMark(in: &state)
            }
            if mask & UInt32(IN_Q_OVERFLOW) != 0 {
                // Events (and marks) were lost: release every marked write, look at everything
                // (every presenter hears it).
                while !state.marks.isEmpty { readMark(in: &state) }
                state.marksRead = state.marksMade
                state.overflows += 1
                logger.notice("inotify's event queue overflowed; every presenter is told its items may have changed", metadata: ["overflows": "\(state.overflows)"])
                for path in state.presented.keys {
                    state.pending[path, default: Change(now)].last = now
                    state.pending[path]?.mark = state.marksRead
                }
                return
            }
            guard let directory = state.directories[descriptor] else { return }
            if mask & UInt32(IN_IGNORED) != 0 || mask & UInt32(IN_MOVE_SELF) != 0 {
                state.directories[descriptor] = nil
                if mask & UInt32(IN_MOVE_SELF) != 0 {
                    // Renamed or swapped (a package save): what is watched under this path is stale.
                    inotify_rm_watch(state.inotify, descriptor)
                    Self.unwatch(under: directory, in: &state)
                } else if state.watches[directory] == descriptor {
                    state.watches[directory] = nil
                    state.names[directory] = nil
                }
                state.resyncNeeded = true
                return
            }
            guard !name.isEmpty, !SafeSave.isTemporaryName(name) else { return }
            let path = directory == "/" ? "/" + name : directory + "/" + name
            if name == VersionStore.directoryName || VersionStore.isInsideStore(path) {
                return Self.recordVersionStoreEvent(directory: directory, name: name, mask: mask, in: &state)
            }
            let isDirectory = mask & UInt32(IN_ISDIR) != 0
            let appeared = mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0
            let vanished = mask & UInt32(IN_DELETE | IN_MOVED_FROM) != 0

            var change = Change(now)
            change.mark = state.marksRead
            if mask & UInt32(IN_MODIFY) != 0 { change.awaitingClose = true }
            if appeared {
                change.created = state.names[directory]?.contains(name) != true
                state.names[directory, default: []].insert(name)
                if isDirectory, state.presented.contains(where: { $0.value && (path.hasPrefix($0.key + "/") || $0.key == path) }) {
                    state.appearedDirectories.append(path) // a directory inside a presented one: watch it
                    state.resyncNeeded = true
                }
            }
            if vanished {
                state.names[directory]?.remove(name)
                if isDirectory { Self.unwatch(under: path, in: &state) }
            }
            if mask & UInt32(IN_MOVED_FROM) != 0 { state.cookies[cookie] = path }
            if mask & UInt32(IN_MOVED_TO) != 0, let from = state.cookies.removeValue(forKey: cookie) {
                var moved = Change(now)
                moved.mark = state.marksRead
                moved.movedTo = path
                note(from, moved, in: &state)
            }
            if state.cookies.count > 256 { state.cookies.removeAll() }
            note(path, change, in: &state)
        }
    }

    /// Files a change, held back if a coordinated write covers it and ignored if no presenter cares.
    private func note(_ path: String, _ change: Change, in state: inout State) {
        let relevant = state.presented.contains { presented, isDirectory in
            presented == path || (isDirectory && path.hasPrefix(presented + "/")) || presented.hasPrefix(path + "/")
        }
        guard relevant else { return }
        if let token = state.writes.first(where: { $0.value.covers(path) })?.key {
            state.writes[token]?.held[path, default: change].merge(change)
        } else {
            state.pending[path, default: change].merge(change)
        }
    }

    private static func unwatch(under path: String, in state: inout State) {
        for (directory, descriptor) in state.watches where directory == path || directory.hasPrefix(path + "/") {
            inotify_rm_watch(state.inotify, descriptor)
            state.watches[directory] = nil
            state.directories[descriptor] = nil
            state.names[directory] = nil
        }
    }

    // MARK: Which directories are watched

    /// Brings the watched directories in line with the registered presenters' items. A
    /// presented directory's tree is listed once, when it is first watched; directories that
    /// appear in it later are added as they appear.
    private func resync() {
        resyncing.withLock { _ in resyncNow() }
    }

    private func resyncNow() {
        guard state.withLock({ $0.running }) else { return }
        var presented: [String: Bool] = [:]
        let aliases = state.withLock { $0.aliases }
        var used: [String: String] = [:]
        for presenter in PresenterRegistry.shared.all {
            guard let url = presenter.presentedItemURL else { continue }
            var path = FileCoordinationLocks.canonicalPath(url)
            var status = try? POSIX.status(path) // unreadable: looked for where it moved, like one gone
            var hops = 0
            while status == nil, let moved = aliases[path], hops < 8 {
                used[path] = moved
                path = moved
                status = try? POSIX.status(path) // unreadable as gone: the next alias, or the item is gone
                hops += 1
            }
            presented[path] = status?.kind == .directory
        }
        let (watched, appeared, known) = state.withLock { state in
            defer { state.appearedDirectories = [] }
            return (Set(state.watches.keys), state.appearedDirectories, Set(state.presented.keys))
        }
        // An item's versions are news from the moment it is presented: note what it has now.
        var baselines: [String: [String: VersionRecord]] = [:]
        for path in presented.keys where !known.contains(path) && !VersionStore.isInsideStore(path) {
            baselines[path] = Self.currentVersions(of: path)
        }
        var wanted: [String] = []
        var fresh: Set<String> = [] // appeared since the last resync: what is inside is news too
        for (path, isDirectory) in presented {
            wanted.append((path as NSString).deletingLastPathComponent)
            wanted.append(contentsOf: Self.versionStoreDirectories(for: path))
            guard isDirectory else { continue }
            if watched.contains(path) {
                wanted.append(contentsOf: watched.filter { $0 == path || $0.hasPrefix(path + "/") })
                for directory in appeared where directory.hasPrefix(path + "/") {
                    let tree = Self.directories(under: directory)
                    wanted.append(contentsOf: tree)
                    fresh.formUnion(tree)
                }
            } else {
                wanted.append(contentsOf: Self.directories(under: path))
            }
        }
        var snapshots: [String] = []
        state.withLock { state in
            state.resyncNeeded = false
            state.presented = presented
            for (path, versions) in baselines { state.versions[path] = versions }
            // Aliases no presenter needs any more (it caught up) are forgotten; new ones kept.
            state.aliases = state.aliases.filter { used[$0.key] != nil || aliases[$0.key] == nil }
            let keep = Set(wanted)
            for (directory, descriptor) in state.watches where !keep.contains(directory) {
                inotify_rm_watch(state.inotify, descriptor)
                state.watches[directory] = nil
                state.directories[descriptor] = nil
                state.names[directory] = nil
            }
            for directory in wanted where state.watches[directory] == nil {
                guard state.watches.count < Self.maximumWatches else { return logLimit(&state, directory) }
                let mask = UInt32(IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
                let descriptor = inotify_add_watch(state.inotify, directory, mask)
                if descriptor < 0 {
                    if errno == ENOSPC { logLimit(&state, directory) }
                    continue
                }
                // A directory replaced (by a package save) keeps its path but not its descriptor.
                if let stale = state.directories.first(where: { $0.value == directory && $0.key != descriptor })?.key {
                    state.directories[stale] = nil
                }
                state.watches[directory] = descriptor
                state.directories[descriptor] = directory
                if let item = Self.itemOfVersionFolder(directory) {
                    // Look at it once the watch is in place: what happened before is not missed.
                    state.versionChecks.insert(item)
                    if state.versions[item] == nil {
                        let root = (directory as NSString).deletingLastPathComponent
                        if state.freshStoreRoots.contains(root) { state.versions[item] = [:] } else { snapshots.append(item) }
                    }
                }
                let names = Set((try? POSIX.directoryEntries(directory)) ?? []) // unreadable: its next event lists it again
                state.names[directory] = names
                if fresh.contains(directory) {
                    // Made before the watch was in place: report what is already there.
                    var change = Change(.now)
                    change.created = true
                    change.mark = state.marksRead
                    for name in names where !SafeSave.isTemporaryName(name) && name != VersionStore.directoryName {
                        note(directory + "/" + name, change, in: &state)
                    }
                }
            }
        }
        state.withLock { state in state.freshStoreRoots = state.freshStoreRoots.filter { state.watches[$0] == nil } }
        takeVersionSnapshots(snapshots)
    }

    private func logLimit(_ state: inout State, _ directory: String) {
        guard !state.limitLogged else { return }
        state.limitLogged = true
        logger.warning("too many directories to watch; changes made there without file coordination will not reach presenters", metadata: [
            "directory": "\(directory)", "limit": "\(Self.maximumWatches) (and fs.inotify.max_user_watches)",
        ])
    }

    /// `path` and every directory inside it (symbolic links are not followed).
    private static func directories(under path: String) -> [String] {
        var found: [String] = []
        var queue = [path]
        while let directory = queue.popLast(), found.count < maximumWatches {
            found.append(directory)
            // A folder that cannot be read is watched but not entered (what is in it cannot be presented either).
            for name in (try? POSIX.directoryEntries(directory)) ?? [] where !SafeSave.isTemporaryName(name) {
                let child = directory + "/" + name
                guard (try? POSIX.status(child))??.kind == .directory else { continue }
                if name == VersionStore.directoryName {
                    found.append(contentsOf: versionStoreDirectories(in: directory))
                } else {
                    queue.append(child)
                }
            }
        }
        return found
    }
}
