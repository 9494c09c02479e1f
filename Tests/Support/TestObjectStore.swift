import Foundation

/// The real S3-compatible store (SeaweedFS) that `.ci/seaweedfs start` runs for the tests:
/// `eval "$(.ci/seaweedfs start)"` before `swift test` exports where it is. Each test works
/// under a prefix of its own in its one bucket.
public enum TestObjectStore {
    /// Whether a store was started for the tests (under CI always: a missing one fails there).
    public static var configured: Bool {
        let environment = ProcessInfo.processInfo.environment
        return environment["UBIQUITY_TEST_S3"] != nil || environment["CI"] != nil
    }

    /// The store's URL with a fresh key prefix (`http://127.0.0.1:PORT/BUCKET/PREFIX`), and its
    /// credentials file.
    public static func fresh() throws -> (url: String, credentialsFile: String, prefix: String) {
        let environment = ProcessInfo.processInfo.environment
        guard let url = environment["UBIQUITY_TEST_S3"], let file = environment["UBIQUITY_TEST_S3_CREDENTIALS"] else {
            throw TestObjectStoreMissing()
        }
        let prefix = "test-\(UUID().uuidString.prefix(8).lowercased())"
        return (url + "/" + prefix, file, prefix)
    }
}

/// No test store: say how to start one.
public struct TestObjectStoreMissing: Error, CustomStringConvertible {
    public var description: String { "set UBIQUITY_TEST_S3 (eval \"$(.ci/seaweedfs start)\") to test against SeaweedFS" }
}
