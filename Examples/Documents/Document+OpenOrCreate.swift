import Foundation
import Ubiquity

extension Document {
    /// Opens the document if its file exists, else creates it — the guide's "open or create"
    /// step — and prints to standard output why it could not.
    /// - Parameter program: The name to print before a failure.
    /// - Returns: Whether the document is now open.
    package func openOrCreate(program: String) async -> Bool {
        let exists = FileManager.default.fileExists(atPath: fileURL.path)
        let ready = await (exists ? open() : save(to: fileURL, for: .forCreating))
        if !ready { print("\(program): could not \(exists ? "open" : "create") \(fileURL.path)") }
        return ready
    }
}
