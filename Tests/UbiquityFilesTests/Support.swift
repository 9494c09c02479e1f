import Foundation
@testable import UbiquityFiles

/// A fresh temporary directory for one test.
struct Scratch {
    let url: URL
    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("ubiquity-files-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    func file(_ name: String) -> URL { url.appendingPathComponent(name) }
    func remove() { try? FileManager.default.removeItem(at: url) }
}

func inode(_ url: URL) throws -> UInt64 { try #require(try POSIX.status(url.path)).inode }

import Testing
