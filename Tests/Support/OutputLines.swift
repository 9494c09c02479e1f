import Dispatch
import Foundation
import Synchronization

/// A child process's standard output, read line by line on a thread of its own as it comes.
public final class OutputLines: @unchecked Sendable {
    private let lines = Mutex<[String]>([])
    private let arrived = DispatchSemaphore(value: 0)

    /// Starts reading `pipe` until its writers close it.
    /// - Parameter pipe: The child's standard output.
    public init(_ pipe: Pipe) {
        let handle = pipe.fileHandleForReading
        Thread.detachNewThread { [self] in
            var buffer = ""
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                buffer += String(decoding: chunk, as: UTF8.self)
                while let newline = buffer.firstIndex(of: "\n") {
                    lines.withLock { $0.append(String(buffer[..<newline])) }
                    buffer.removeSubrange(...newline)
                    arrived.signal()
                }
            }
            arrived.signal()
        }
    }

    /// The lines so far.
    public var all: [String] { lines.withLock { $0 } }

    /// Waits (at most `timeout` seconds, on a thread of its own, not one of the two the whole
    /// suite's tasks share) for a line satisfying `match`, counting from line `after`.
    /// - Returns: The line, or nil if none came in time.
    public func waitFor(after: Int = 0, timeout: Double = 10, _ match: @escaping @Sendable (String) -> Bool) async -> String? {
        (try? await onOwnThread {
            let deadline = DispatchTime.now() + timeout
            while true {
                if let line = self.lines.withLock({ $0.dropFirst(after).first(where: match) }) { return line }
                if self.arrived.wait(timeout: deadline) == .timedOut { return nil }
            }
        }) ?? nil
    }
}

/// What the sync agent does for a database in iCloud: each log file one container has and the
/// other lacks, copied whole (appearing under its name at once).
/// - Parameters:
///   - source: The container the logs come from.
///   - destination: The container they go to.
///   - name: The database's name.
public func copyDatabaseLogs(from source: URL, to destination: URL, name: String = "Recipes") throws {
    let manager = FileManager.default
    let from = source.appendingPathComponent("Databases/\(name)/logs"), to = destination.appendingPathComponent("Databases/\(name)/logs")
    for device in (try? manager.contentsOfDirectory(atPath: from.path)) ?? [] {
        try manager.createDirectory(at: to.appendingPathComponent(device), withIntermediateDirectories: true)
        for file in try manager.contentsOfDirectory(atPath: from.appendingPathComponent(device).path) where file.hasSuffix(".ubqlog") {
            let target = to.appendingPathComponent(device).appendingPathComponent(file)
            guard !manager.fileExists(atPath: target.path) else { continue }
            let staged = to.appendingPathComponent(device).appendingPathComponent(".incoming-\(file)")
            try manager.copyItem(at: from.appendingPathComponent(device).appendingPathComponent(file), to: staged)
            try manager.moveItem(at: staged, to: target)
        }
    }
}
