import ArgumentParser
import Foundation
import Synchronization
import Ubiquity

/// `ubiquity versions PATH`: the item's current version, other versions and conflict versions.
struct VersionsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "versions",
        abstract: "List a file's current, other and conflict versions with date, computer and size."
    )

    @Argument(help: "The file or package.")
    var path: String

    @Flag(name: .long, help: "Print JSON instead of a table.")
    var json = false

    @Flag(name: .long, help: "Also list the versions the server keeps that are not on this device (earlier revisions, for 30 days), newest first.")
    var server = false

    func run() throws {
        let url = URL(fileURLWithPath: path)
        guard let current = NSFileVersion.currentVersionOfItem(at: url) else {
            throw ValidationError("no such file: \(path)")
        }
        var others = try NSFileVersion.versions(ofItemAt: url)
        if server { others += try Self.nonlocalVersions(of: url) }
        let usage = try NSFileVersion.storageUsage(ofItemAt: url)
        if json {
            let rows = ([current] + others).map { version -> [String: Any] in
                [
                    "id": version.versionIdentifier.rawValue, "kind": Self.kind(version),
                    "date": version.modificationDate.map { ISO8601DateFormatter().string(from: $0) } ?? "",
                    "computer": version.localizedNameOfSavingComputer ?? "", "bytes": version.size, "path": version.url.path,
                ]
            }
            let report: [String: Any] = ["versions": rows, "storage": ["versions": usage.versions, "bytes": usage.bytes, "sharedBytes": usage.sharedBytes, "limit": usage.limit]]
            let data = try JSONSerialization.data(withJSONObject: report, options: [.prettyPrinted, .sortedKeys])
            print(String(decoding: data, as: UTF8.self))
            return
        }
        print("KIND                 ID                                    DATE                  COMPUTER          BYTES")
        for version in [current] + others {
            print([
                Self.kind(version).padding(toLength: 20, withPad: " ", startingAt: 0),
                version.versionIdentifier.rawValue.padding(toLength: 37, withPad: " ", startingAt: 0),
                Self.date(version.modificationDate).padding(toLength: 21, withPad: " ", startingAt: 0),
                (version.localizedNameOfSavingComputer ?? "?").padding(toLength: 17, withPad: " ", startingAt: 0),
                String(version.size),
            ].joined(separator: " "))
        }
        print("store: \(usage.versions) version(s), \(usage.bytes) bytes (\(usage.sharedBytes) shared with the file), limit \(usage.limit) bytes")
    }

    /// The item's nonlocal versions (asked of the agent, which asks the server).
    static func nonlocalVersions(of url: URL) throws -> [NSFileVersion] {
        UbiquityContainers.shared.installDownloader() // what lists them
        let answer = Mutex<Result<[NSFileVersion], any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        NSFileVersion.getNonlocalVersionsOfItem(at: url) { versions, error in
            answer.withLock { $0 = versions.map { .success($0) } ?? .failure(error ?? CocoaError(.fileReadUnknown)) }
            done.signal()
        }
        done.wait() // a command's main thread: nothing else to run meanwhile
        return try answer.withLock { $0! }.get()
    }

    static func kind(_ version: NSFileVersion) -> String {
        if version.versionIdentifier == .current { return "current" }
        if version.versionIdentifier.rawValue.hasPrefix("nonlocal-") { return version.hasLocalContents ? "server (downloaded)" : "server" }
        if version.isConflict { return version.isResolved ? "conflict (resolved)" : "conflict" }
        return version.isDiscardable ? "history" : "other"
    }

    static func date(_ date: Date?) -> String {
        guard let date else { return "?" }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss'Z'"
        return formatter.string(from: date)
    }
}

/// `ubiquity resolve PATH --keep current|ID`: resolves a version conflict as the guide does.
struct ResolveCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resolve",
        abstract: "Resolve a file's version conflict by keeping the current version or one conflict version.",
        discussion: """
            With an ID, that conflict version replaces the file (a coordinated write, so open \
            documents revert to it). Then every conflict version is removed and marked resolved. \
            Local-history versions are kept.
            """
    )

    @Argument(help: "The file or package in conflict.")
    var path: String

    @Option(name: .long, help: "'current', or the ID of a conflict version (see `ubiquity versions`).")
    var keep: String

    func run() throws {
        let url = URL(fileURLWithPath: path)
        guard NSFileVersion.currentVersionOfItem(at: url) != nil else { throw ValidationError("no such file: \(path)") }
        let conflicts = try NSFileVersion.versions(ofItemAt: url).filter { $0.isConflict }
        let unresolved = conflicts.filter { !$0.isResolved }
        if keep != "current" {
            guard let chosen = conflicts.first(where: { $0.versionIdentifier.rawValue == keep }) else {
                throw ValidationError("\(keep) is not a conflict version of \(path); see `ubiquity versions \(path)`")
            }
            _ = try NSFileCoordinator().coordinate(writingItemAt: url, options: .forReplacing) { try chosen.replaceItem(at: $0) }
        } else if unresolved.isEmpty {
            print("\(path): no unresolved conflict versions")
        }
        for conflict in conflicts {
            try conflict.setResolved(true)
            try conflict.remove()
        }
        if !conflicts.isEmpty {
            print("\(path): kept \(keep == "current" ? "the current version" : keep); \(conflicts.count) conflict version(s) resolved and removed")
        }
    }
}
