import Foundation
import Synchronization

extension NSFileCoordinator {
    /// What a coordinated read does first when its item is not on disk: the ubiquity client
    /// installs a function here that, for an item of a ubiquity container that is not
    /// downloaded, asks the agent to download it and returns when it is (or throws why it
    /// cannot be). So a coordinated read of a not-yet-downloaded document waits for its download,
    /// as on iOS. Nil (the default) does nothing; the function is called before any lock is taken.
    public static var ubiquitousItemDownloader: (@Sendable (URL) throws -> Void)? {
        get { downloader.withLock { $0 } }
        set { downloader.withLock { $0 = newValue } }
    }

    private static let downloader = Mutex<(@Sendable (URL) throws -> Void)?>(nil)

    /// Runs the downloader for every item to be read that is not on disk.
    func downloadMissingItems(_ reading: [(URL, ReadingOptions)]) throws {
        guard let download = Self.ubiquitousItemDownloader else { return }
        for (url, _) in reading where !FileManager.default.fileExists(atPath: url.path) {
            try download(url)
        }
    }
}
