import Crypto
import Foundation

/// One thing a writer saw succeed, appended to its device's ledger (JSON lines) as soon as it
/// did. The ledger is what the checks hold the devices to: every edit in it must survive.
struct LedgerEntry: Codable, Sendable, Equatable {
    /// What was done.
    enum Operation: String, Codable, Sendable {
        /// `path` now holds contents hashing to `sha256` (`via` says how they were written).
        case write
        /// `path` (a file, a package or a folder, with what is inside) is now at `to`.
        case move
        /// `path` (and what is inside) is gone.
        case delete
        /// After an operation that failed part way, `path` was found holding `sha256` (nil:
        /// nothing) — what the writer's model of its files follows from then on.
        case observe
        /// The key-value pair `path` = `value` was set.
        case keyValue
        /// The unresolved conflicts of `path` were resolved by keeping the current version.
        case resolve
        /// Written ahead of a step: what it is about to do (`via` names the step; `sha256` the
        /// contents it writes, `value` the value it sets). A writer killed mid-step finds it last
        /// in its ledger when it starts again, and records what the step left (see
        /// `Writer.recover(_:)`).
        case intent
        /// A row of the device's `UbiquitousDatabase` committed: `path` is `TABLE/ID`, `value`
        /// its value (nil: the row deleted).
        case row
        /// An atomic save was killed part way and left at `path` contents that are neither the
        /// old ones nor the new (`sha256`): a torn save, a broken promise of its own.
        case torn
    }

    /// The device's name.
    var device: String
    /// The writer's step (counted across rounds).
    var step: Int
    var operation: Operation
    /// A path relative to the container (or a key).
    var path: String
    /// Where a move went.
    var to: String?
    /// The contents' SHA-256 (hex).
    var sha256: String?
    /// A key-value pair's value.
    var value: String?
    /// How the contents were written: `coordinated`, `plain`, `inPlace`, `document`, `package`.
    var via: String?
    /// When (seconds since 1970).
    var time: Double

    /// Every entry in `url` (none if there is no file); a last line cut short by a kill is left out.
    static func read(_ url: URL) throws -> [LedgerEntry] {
        guard let data = FileManager.default.contents(atPath: url.path) else { return [] }
        let decoder = JSONDecoder()
        return data.split(separator: UInt8(ascii: "\n")).compactMap { try? decoder.decode(LedgerEntry.self, from: Data($0)) }
    }
}

/// Appends entries to a ledger file, each written whole and flushed to disk before the writer
/// goes on (a writer killed later leaves every entry it reported).
final class LedgerFile {
    private let handle: FileHandle
    private let encoder = JSONEncoder()

    init(_ url: URL) throws {
        if !FileManager.default.fileExists(atPath: url.path) { _ = FileManager.default.createFile(atPath: url.path, contents: nil) }
        handle = try FileHandle(forWritingTo: url)
        try handle.seekToEnd()
        encoder.outputFormatting = [.sortedKeys]
    }

    func append(_ entry: LedgerEntry) throws {
        try handle.write(contentsOf: encoder.encode(entry) + Data("\n".utf8))
        try handle.synchronize()
    }

    deinit { try? handle.close() }
}

/// A writer's files as its ledger says they are: relative path → SHA-256 of the contents.
struct LedgerModel: Sendable, Equatable {
    var files: [String: String] = [:]
    /// The last key-value pair set per key.
    var values: [String: (value: String, time: Double)] = [:]
    /// Per shared path, the last contents this device wrote there.
    var lastShared: [String: String] = [:]
    /// Saves that a kill left torn (path and what was found).
    var torn: [String] = []
    /// The device's own database rows (`note/ID` → value) as it last committed them.
    var rows: [String: String] = [:]
    /// Its own rows it deleted (and did not make again).
    var deletedRows: Set<String> = []
    /// Every value it committed to a row every device writes (`tally/ID`).
    var sharedRowValues: [String: Set<String>] = [:]
    /// Steps taken.
    var steps = 0

    static func == (a: LedgerModel, b: LedgerModel) -> Bool { a.files == b.files && a.lastShared == b.lastShared && a.steps == b.steps }

    init() {}

    /// The model after `entries`, in order.
    init(_ entries: [LedgerEntry]) {
        for entry in entries { apply(entry) }
    }

    mutating func apply(_ entry: LedgerEntry) {
        steps = max(steps, entry.step + 1)
        switch entry.operation {
        case .write, .observe:
            if Layout.isShared(entry.path) {
                if let sha = entry.sha256 { lastShared[entry.path] = sha }
            } else if let sha = entry.sha256 {
                files[entry.path] = sha
            } else {
                remove(entry.path)
            }
        case .move:
            guard let to = entry.to else { return }
            for (path, sha) in files where path == entry.path || path.hasPrefix(entry.path + "/") {
                files[path] = nil
                files[to + path.dropFirst(entry.path.count)] = sha
            }
        case .delete:
            remove(entry.path)
        case .keyValue:
            values[entry.path] = (entry.value ?? "", entry.time)
        case .row:
            if entry.path.hasPrefix(ChaosDatabase.sharedTable + "/") {
                if let value = entry.value { sharedRowValues[entry.path, default: []].insert(value) }
            } else if let value = entry.value {
                rows[entry.path] = value
                deletedRows.remove(entry.path)
            } else {
                rows[entry.path] = nil
                deletedRows.insert(entry.path)
            }
        case .torn:
            torn.append("\(entry.path) (\(entry.via ?? "a save") left \(entry.sha256.map { String($0.prefix(12)) } ?? "nothing"))")
        case .resolve, .intent:
            break
        }
    }

    private mutating func remove(_ path: String) {
        for key in files.keys where key == path || key.hasPrefix(path + "/") { files[key] = nil }
    }
}

/// Where the writers put things in the container.
enum Layout {
    /// The folder every device writes into (conflicts happen there).
    static let shared = "Documents/shared"
    /// The folder only `device` writes into.
    static func owned(by device: String) -> String { "Documents/\(device)" }
    static func isShared(_ path: String) -> Bool { path.hasPrefix(shared + "/") }
    /// The key-value store's key only `device` sets.
    static func ownKey(_ device: String) -> String { "own-\(device)" }
    /// The key every device sets.
    static let sharedKey = "shared"
}

/// SHA-256 of `data`, in hex.
func sha256(_ data: Data) -> String {
    SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
}
