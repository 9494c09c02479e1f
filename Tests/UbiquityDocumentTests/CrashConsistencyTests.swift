import Foundation
import Testing
import Ubiquity
import UbiquityTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Kills a child process that saves a document in a loop with SIGKILL at random moments, and
/// checks after every kill that the document on disk is exactly the last save or the one in
/// flight — never a mixture, never unreadable.
@MainActor
@Suite(.serialized) struct CrashConsistencyTests {
    static let kills = 200

    static var helper: URL {
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        return executable.deletingLastPathComponent().appendingPathComponent("UbiquitySaveLoop")
    }

    @Test(.timeLimit(.minutes(4)), arguments: ["crashflat", "crashpkg"]) // a guard against hangs: ~10 s alone, slower beside the server fuzzing
    func killedWhileSavingLeavesOldOrNew(_ pathExtension: String) async throws {
        CrashTestDocument.registerTypes()
        #expect(FileManager.default.isExecutableFile(atPath: Self.helper.path), "missing helper \(Self.helper.path)")
        let dir = try TemporaryDirectory("crash"); defer { dir.remove() }
        let url = dir.file("doc.\(pathExtension)")
        var generator = SystemRandomNumberGenerator()
        var sawNew = 0
        var sawOld = 0
        for round in 0..<Self.kills {
            let (lastReported, startedFrom) = try await runAndKill(url: url, delayMicroseconds: UInt32.random(in: 0...20_000, using: &generator))
            let document = CrashTestDocument(fileURL: url)
            let opened = await document.open()
            #expect(opened, "round \(round): the document did not open after a kill")
            guard opened else { return }
            let last = max(lastReported, startedFrom)
            #expect(document.generation == last || document.generation == last + 1,
                    "round \(round): found generation \(document.generation), last reported \(last)")
            if document.generation == last { sawOld += 1 } else { sawNew += 1 }
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.url.path).filter { !$0.hasPrefix(".") }
            #expect(leftovers == [url.lastPathComponent])
        }
        print("crash test \(pathExtension): \(Self.kills) kills; last reported save on disk \(sawOld)×, the save in flight \(sawNew)×")
    }

    /// Starts the helper, waits until it has started saving, sleeps a random moment, kills it.
    /// Returns the last generation it reported saved and the one it started from.
    func runAndKill(url: URL, delayMicroseconds: UInt32) async throws -> (Int, Int) {
        let helper = Self.helper
        // The waits (for the helper to start, the random moment, the kill) are made on a thread
        // of its own: on one of the two the tests' tasks share they would starve every other test.
        let text = try await onOwnThread {
            let process = ChildProcess()
            process.executableURL = helper
            process.arguments = [url.path]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            let handle = output.fileHandleForReading
            var text = ""
            // Wait for the first line ("ready N"): the loop is running from then on.
            while !text.contains("\n") {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
            usleep(delayMicroseconds)
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return text + String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
        }
        var last = 0
        var start = 0
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 2, let n = Int(parts[1]) else { continue }
            if parts[0] == "saved" { last = n } else if parts[0] == "ready" { start = n }
        }
        #expect(text.hasPrefix("ready"), "the helper did not start: \(text)")
        return (last, start)
    }
}
