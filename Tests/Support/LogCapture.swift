import Logging
import Synchronization

/// What a log handler received, for tests that read the log.
public final class LogCapture: Sendable {
    /// Every line logged so far, in order.
    public let lines = Mutex<[(level: Logger.Level, message: String, metadata: Logger.Metadata)]>([])
    /// The lowest level kept.
    public let level: Logger.Level

    /// A capture of lines at `level` and above.
    public init(level: Logger.Level = .info) {
        self.level = level
    }

    struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            capture.lines.withLock { $0.append((event.level, event.message.description, metadata.merging(event.metadata ?? [:]) { $1 })) }
        }
    }

    /// A logger whose lines end up here.
    public func logger(label: String = "ubiquity.server") -> Logger {
        Logger(label: label) { _ in Handler(capture: self, logLevel: self.level) }
    }
}
