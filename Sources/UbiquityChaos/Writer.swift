import ArgumentParser
import Foundation
import Ubiquity
import UbiquityDatabase
import UbiquityTestSupport

/// A flat text document as an app keeps one: its bytes.
final class ChaosDocument: Document, @unchecked Sendable {
    /// The contents (main queue).
    var data = Data()

    override func contents(forType typeName: String) throws -> Any { data }

    override func load(fromContents contents: Any, ofType typeName: String?) throws {
        guard let contents = contents as? Data else { throw CocoaError(.fileReadCorruptFile) }
        data = contents
    }
}

/// `ubiquity-chaos write`: one device's apps and users, run by the harness in a process of its
/// own with the device's environment (so that its coordinated access meets its agent's). Acts
/// through the public API until the stop file appears, appending what it saw succeed to the
/// ledger.
struct WriteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "write",
        abstract: "One device's writer (run by the harness in the device's environment).",
        shouldDisplay: false)

    @Option(help: "The container.") var container: String
    @Option(help: "The key-value store.") var keyValueStore: String
    @Option(help: "This device's name (its own folder is Documents/NAME).") var device: String
    @Option(help: "The seed of this writer's choices.") var seed: UInt64
    @Option(help: "The ledger (JSON lines), appended to.") var ledger: String
    @Option(help: "Stop when this file exists.") var stopFile: String
    @Option(help: "Milliseconds between steps (at most).") var paceMilliseconds = 200
    @Option(help: "How many files every device writes to.") var sharedFiles = 3
    @Flag(help: "The shared folder is another account's, shared with this one: never made here (while it is not here, shared writes fail and are not recorded).")
    var participant = false

    @MainActor func run() async throws {
        // Launched again (after `appKill`) while its device is signed out: an app then has no
        // container; this one waits for one (or for the stop file) before it writes.
        let containers = UbiquityContainers(paths: UbiquityPaths(), entitlements: UbiquityEntitlements(containers: [container], keyValueStore: keyValueStore))
        while containers.url(forContainer: container) == nil {
            if FileManager.default.fileExists(atPath: stopFile) { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        var writer = try Writer(command: self)
        try await writer.run()
    }
}

/// The writer's state: its model of its own files (from its ledger), its random choices.
@MainActor struct Writer {
    let command: WriteCommand
    let containers: UbiquityContainers
    let root: URL
    let ledger: LedgerFile
    let store: NSUbiquitousKeyValueStore
    /// Whether (and as whom) the device is signed in.
    let identity = UbiquityIdentity(paths: UbiquityPaths())
    var model: LedgerModel
    var random: SeededGenerator
    /// Key-value pairs set but not yet written to the device's store, and the account they were set under.
    /// (Each value with when it was set: the store's timestamp, which decides which value wins.)
    var unwritten: (account: String?, values: [String: (value: String, time: Double)]) = (nil, [:])
    let coordinator = NSFileCoordinator(filePresenter: nil)
    /// The step a kill cut short in an earlier run of this writer (its ledger's last entry is
    /// its intent), to recover from before anything else.
    var pendingIntent: LedgerEntry?
    /// The device's database in iCloud (opened when signed in).
    var database: UbiquitousDatabase?

    init(command: WriteCommand) throws {
        self.command = command
        containers = UbiquityContainers(paths: UbiquityPaths(), entitlements: UbiquityEntitlements(containers: [command.container], keyValueStore: command.keyValueStore))
        guard let root = containers.url(forContainer: command.container) else { throw ValidationError("not signed in: no container \(command.container)") }
        self.root = root
        let url = URL(fileURLWithPath: command.ledger)
        let entries = try LedgerEntry.read(url)
        model = LedgerModel(entries)
        ledger = try LedgerFile(url)
        pendingIntent = entries.last.flatMap { $0.operation == .intent ? $0 : nil }
        store = NSUbiquitousKeyValueStore(identifier: command.keyValueStore, containers: containers)
        random = SeededGenerator(seed: command.seed)
        try FileManager.default.createDirectory(at: root.appendingPathComponent(Layout.owned(by: command.device) + "/sub"), withIntermediateDirectories: true)
        if !command.participant { try FileManager.default.createDirectory(at: root.appendingPathComponent(Layout.shared), withIntermediateDirectories: true) }
    }

    mutating func run() async throws {
        // A harness that died (killed with the test that ran it) leaves no stop file: a writer
        // whose parent is gone stops rather than write on for ever.
        let harness = getppid()
        _ = openDatabase() // as an app opens its store at launch: what a killed run captured is published now
        if let intent = pendingIntent {
            try recover(intent)
            pendingIntent = nil
        }
        while !FileManager.default.fileExists(atPath: command.stopFile) {
            guard getppid() == harness else {
                FileHandle.standardError.write(Data("writer \(command.device): the harness is gone; stopping\n".utf8))
                return
            }
            try await step()
            try await Task.sleep(for: .milliseconds(Int.random(in: 0...command.paceMilliseconds, using: &random)))
        }
        await closeDatabase()
        try synchronize()
    }

    // MARK: Steps

    private var own: String { Layout.owned(by: command.device) }
    private var ownFiles: [String] { model.files.keys.filter { !$0.contains(".package/") }.sorted() }
    private var ownPackages: [String] {
        Set(model.files.keys.compactMap { path in path.range(of: ".package/").map { String(path[..<$0.lowerBound]) + ".package" } }).sorted()
    }

    mutating func step() async throws {
        let roll = Int.random(in: 0..<110, using: &random)
        let files = ownFiles
        switch roll {
        case 0..<18: try create()
        case 18..<36 where !files.isEmpty: try edit(files.randomElement(using: &random)!, coordinated: true)
        case 36..<42 where !files.isEmpty: try edit(files.randomElement(using: &random)!, coordinated: false)
        case 42..<47 where !files.isEmpty: try editInPlace(files.randomElement(using: &random)!)
        case 47..<55: try await saveDocument(files.filter { $0.hasSuffix(".txt") }.randomElement(using: &random))
        case 55..<60: try writePackage(ownPackages.randomElement(using: &random))
        case 60..<68 where !files.isEmpty || !ownPackages.isEmpty: try move((files + ownPackages).randomElement(using: &random)!)
        case 68..<73 where !files.isEmpty || !ownPackages.isEmpty: try delete((files + ownPackages).randomElement(using: &random)!)
        case 73..<88: try writeShared()
        case 88..<92: try resolveShared()
        case 92..<100: try setValues()
        case 100..<110: try await writeDatabase()
        default: try create()
        }
    }

    /// Contents naming who wrote them when (so a version found later says whose it is), mostly
    /// small, now and then large enough to take a while to upload.
    private mutating func contents() -> Data {
        let size: Int
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<70: size = Int.random(in: 16...4_096, using: &random)
        case 70..<95: size = Int.random(in: 4_096...131_072, using: &random)
        default: size = Int.random(in: 262_144...2_097_152, using: &random)
        }
        var data = Data("\(command.device) step \(model.steps)\n".utf8)
        var bytes = [UInt8](repeating: 0, count: max(0, size - data.count))
        for index in stride(from: 0, to: bytes.count, by: 8) {
            let word = random.next()
            for offset in 0..<min(8, bytes.count - index) { bytes[index + offset] = UInt8(truncatingIfNeeded: word >> (offset * 8)) }
        }
        data.append(contentsOf: bytes)
        return data
    }

    private func url(_ path: String) -> URL { root.appendingPathComponent(path) }

    mutating func record(_ operation: LedgerEntry.Operation, _ path: String, to: String? = nil, sha256: String? = nil, value: String? = nil, via: String? = nil,
                                 step: Int? = nil, time: Double? = nil) throws {
        let entry = LedgerEntry(device: command.device, step: step ?? model.steps, operation: operation, path: path, to: to, sha256: sha256, value: value, via: via,
                                time: time ?? Date().timeIntervalSince1970)
        try ledger.append(entry)
        model.apply(entry)
    }

    /// Writes ahead what the step is about to do (see ``LedgerEntry/Operation/intent``).
    func intend(_ via: String, _ path: String, to: String? = nil, sha256: String? = nil, value: String? = nil) throws {
        try ledger.append(LedgerEntry(device: command.device, step: model.steps, operation: .intent, path: path, to: to, sha256: sha256, value: value, via: via,
                                      time: Date().timeIntervalSince1970))
    }

    /// After a kill (the harness's `appKill`) cut `intent`'s step short: records what the step
    /// left, as an app that starts again finds it. An atomic save left the old contents or the
    /// new ones — anything else is a torn save, recorded as such (the checks report it); an
    /// in-place write, a move or a delete left whatever is there (a package member's folder the
    /// step had just made may be left empty: it syncs with the package).
    mutating func recover(_ intent: LedgerEntry) throws {
        let path = intent.path
        FileHandle.standardError.write(Data("writer \(command.device): recovering from step \(intent.step) (\(intent.via ?? "?") \(path)), cut short by a kill\n".utf8))
        func onDisk(_ path: String) -> String? { FileManager.default.contents(atPath: url(path).path).map(sha256) }
        switch intent.via {
        case "coordinated", "plain", "document", "package", "shared":
            let found = onDisk(path)
            let old = Layout.isShared(path) ? nil : model.files[path]
            if found == intent.sha256 {
                try record(.write, path, sha256: found, via: intent.via, step: intent.step, time: intent.time)
            } else if Layout.isShared(path) {
                break // another device's contents may be there now: what this one wrote last stands
            } else if found != old {
                try record(.torn, path, sha256: found, via: intent.via, step: intent.step)
                try record(.observe, path, sha256: found, step: intent.step)
            }
        case "inPlace":
            try record(.observe, path, sha256: onDisk(path), step: intent.step)
        case "move":
            try observe([path] + (intent.to.map { [$0] } ?? []), after: CocoaError(.userCancelled))
        case "delete":
            try observe([path], after: CocoaError(.userCancelled))
        case "database":
            try recoverDatabase(intent)
        case "keyValue":
            if let value = intent.value, identity.token != nil, store.string(forKey: Layout.ownKey(command.device)) == value {
                for key in [Layout.ownKey(command.device), Layout.sharedKey] { try record(.keyValue, key, value: value, step: intent.step, time: intent.time) }
            }
        default:
            break
        }
    }

    /// After a failed step: records what is there now (a file's hash, or nothing), so the
    /// model follows the disk from then on; the failure is reported, never hidden.
    private mutating func observe(_ paths: [String], after error: any Error) throws {
        FileHandle.standardError.write(Data("writer \(command.device): step \(model.steps) failed: \(error)\n".utf8))
        for path in paths {
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: url(path).path, isDirectory: &isFolder), isFolder.boolValue {
                let inside = (try? FileManager.default.subpathsOfDirectory(atPath: url(path).path)) ?? []
                try record(.delete, path)
                for sub in inside {
                    if let data = FileManager.default.contents(atPath: url(path + "/" + sub).path) { try record(.observe, path + "/" + sub, sha256: sha256(data)) }
                }
            } else {
                try record(.observe, path, sha256: FileManager.default.contents(atPath: url(path).path).map(sha256))
            }
        }
    }

    private mutating func newName(_ ext: String) -> String {
        let folder = Bool.random(using: &random) ? own : own + "/sub"
        return "\(folder)/n\(model.steps)-\(random.next() % 1000).\(ext)"
    }

    mutating func create() throws {
        let path = newName("txt")
        let data = contents()
        try intend("coordinated", path, sha256: sha256(data))
        do {
            try coordinator.coordinate(writingItemAt: url(path), options: .forReplacing) { try data.write(to: $0, options: .atomic) }
            try record(.write, path, sha256: sha256(data), via: "coordinated")
        } catch { try observe([path], after: error) }
    }

    /// Replaces a file's contents, through coordination as apps do or plainly as other programs do.
    mutating func edit(_ path: String, coordinated: Bool) throws {
        let data = contents()
        try intend(coordinated ? "coordinated" : "plain", path, sha256: sha256(data))
        do {
            if coordinated {
                try coordinator.coordinate(writingItemAt: url(path), options: .forReplacing) { try data.write(to: $0, options: .atomic) }
            } else {
                try data.write(to: url(path), options: .atomic)
            }
            try record(.write, path, sha256: sha256(data), via: coordinated ? "coordinated" : "plain")
        } catch { try observe([path], after: error) }
    }

    /// Overwrites a few bytes inside the file, in place, without coordination (a log appender,
    /// a database without its journal).
    mutating func editInPlace(_ path: String) throws {
        try intend("inPlace", path)
        do {
            let handle = try FileHandle(forUpdating: url(path))
            defer { try? handle.close() }
            let size = try handle.seekToEnd()
            let offset = size == 0 ? 0 : UInt64.random(in: 0..<size, using: &random)
            try handle.seek(toOffset: offset)
            try handle.write(contentsOf: Data("\(command.device)@\(model.steps)".utf8))
            try handle.synchronize()
            try handle.seek(toOffset: 0)
            let data = try handle.readToEnd() ?? Data()
            try record(.write, path, sha256: sha256(data), via: "inPlace")
        } catch { try observe([path], after: error) }
    }

    /// Opens (or makes) a text document, changes it and saves it as `UIDocument` does.
    mutating func saveDocument(_ existing: String?) async throws {
        let path = existing ?? newName("txt")
        let document = ChaosDocument(fileURL: url(path))
        let data = contents()
        if existing != nil {
            guard await document.open() else { return try observe([path], after: CocoaError(.fileReadUnknown)) }
        }
        document.data = data
        try intend("document", path, sha256: sha256(data))
        let saved = await document.save(to: url(path), for: existing == nil ? .forCreating : .forOverwriting)
        _ = await document.close()
        if saved {
            try record(.write, path, sha256: sha256(data), via: "document")
        } else {
            try observe([path], after: CocoaError(.fileWriteUnknown))
        }
    }

    /// Makes a package (a folder that is one document) or rewrites one of its files, with one
    /// coordinated write of the whole package.
    mutating func writePackage(_ existing: String?) throws {
        let path = existing ?? newName("package")
        let files = ["Info.txt", "Data/body.bin", "Data/notes.txt"]
        let name = files.randomElement(using: &random)!
        let data = contents()
        try intend("package", path + "/" + name, sha256: sha256(data))
        do {
            try coordinator.coordinate(writingItemAt: url(path), options: .forReplacing) { target in
                let file = target.appendingPathComponent(name)
                let folder = file.deletingLastPathComponent()
                let made = !FileManager.default.fileExists(atPath: folder.path)
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                do {
                    try data.write(to: file, options: .atomic)
                } catch {
                    // A careful app leaves no empty folder behind (one killed here does: the
                    // empty folder syncs as part of the package).
                    if made { try? FileManager.default.removeItem(at: folder) } // (best effort; the failure is what is reported)
                    throw error
                }
            }
            try record(.write, path + "/" + name, sha256: sha256(data), via: "package")
        } catch { try observe([path], after: error) }
    }

    /// Renames an item, or moves it between the own folder and its subfolder.
    mutating func move(_ path: String) throws {
        let name = (path as NSString).lastPathComponent
        let ext = (name as NSString).pathExtension
        let folder = path.hasPrefix(own + "/sub/") ? own : own + "/sub"
        let to = Bool.random(using: &random) ? "\(folder)/\(name)" : "\((path as NSString).deletingLastPathComponent)/m\(model.steps).\(ext)"
        guard to != path, !FileManager.default.fileExists(atPath: url(to).path) else { return }
        try intend("move", path, to: to)
        var failure: NSError?
        var moved: (any Error)?
        coordinator.coordinate(writingItemAt: url(path), options: .forMoving, writingItemAt: url(to), options: .forReplacing, error: &failure) { source, destination in
            do {
                try FileManager.default.moveItem(at: source, to: destination)
                coordinator.item(at: source, didMoveTo: destination)
            } catch { moved = error }
        }
        if let error = failure ?? moved {
            try observe([path, to], after: error)
        } else {
            try record(.move, path, to: to)
        }
    }

    mutating func delete(_ path: String) throws {
        try intend("delete", path)
        do {
            try coordinator.coordinate(writingItemAt: url(path), options: .forDeleting) { try FileManager.default.removeItem(at: $0) }
            try record(.delete, path)
        } catch { try observe([path], after: error) }
    }

    /// Writes one of the files every device writes (a coordinated save): where conflicts come from.
    mutating func writeShared() throws {
        let path = "\(Layout.shared)/note-\(Int.random(in: 0..<command.sharedFiles, using: &random)).txt"
        let data = contents()
        try intend("shared", path, sha256: sha256(data))
        do {
            try coordinator.coordinate(writingItemAt: url(path), options: .forReplacing) { try data.write(to: $0, options: .atomic) }
            try record(.write, path, sha256: sha256(data), via: "coordinated")
        } catch {
            FileHandle.standardError.write(Data("writer \(command.device): shared write failed: \(error)\n".utf8))
        }
    }

    /// Resolves a shared file's conflicts as an app that keeps the current version does.
    mutating func resolveShared() throws {
        let path = "\(Layout.shared)/note-\(Int.random(in: 0..<command.sharedFiles, using: &random)).txt"
        guard let versions = NSFileVersion.unresolvedConflictVersionsOfItem(at: url(path)), !versions.isEmpty else { return }
        do {
            try coordinator.coordinate(writingItemAt: url(path), options: .forDeleting) { target in
                for version in versions { version.isResolved = true }
                try NSFileVersion.removeOtherVersionsOfItem(at: target)
            }
            try record(.resolve, path)
        } catch {
            FileHandle.standardError.write(Data("writer \(command.device): resolving \(path) failed: \(error)\n".utf8))
        }
    }

    /// Sets this device's own key and the key every device sets. Values set while the device
    /// is signed out stay in its signed-out store — at sign-in the account's values replace
    /// them (Apple's `NSUbiquitousKeyValueStoreAccountChange`) — so only values set and
    /// written while one account stayed signed in are recorded as edits that must survive.
    /// A value the store could not write yet (a full disk) is recorded once a later
    /// `synchronize()` writes it under the same account — unless a newer value replaced it.
    mutating func setValues() throws {
        let value = "\(command.device)-\(model.steps)"
        let keys = [Layout.ownKey(command.device), Layout.sharedKey]
        let account = identity.token
        if account == nil || account != unwritten.account { unwritten = (account, [:]) }
        try intend("keyValue", keys[0], value: value)
        for key in keys {
            store.set(value, forKey: key)
            unwritten.values[key] = (value, Date().timeIntervalSince1970)
        }
        try synchronize()
    }

    /// Writes the store and records the values it wrote while one account stayed signed in.
    mutating func synchronize() throws {
        let account = unwritten.account
        let written = store.synchronize()
        guard account != nil, identity.token == account else {
            if !unwritten.values.isEmpty {
                FileHandle.standardError.write(Data("writer \(command.device): step \(model.steps): values set while signed out (not recorded)\n".utf8))
            }
            unwritten = (identity.token, [:])
            return
        }
        guard written else {
            FileHandle.standardError.write(Data("writer \(command.device): step \(model.steps): values not written yet (recorded once they are)\n".utf8))
            return
        }
        // Recorded at the time each was set (a value written late, after a full disk, still
        // competes with the others by when it was set: found by `ubiquity-chaos --share`).
        for (key, set) in unwritten.values.sorted(by: { $0.key < $1.key }) { try record(.keyValue, key, value: set.value, time: set.time) }
        unwritten.values = [:]
    }
}
