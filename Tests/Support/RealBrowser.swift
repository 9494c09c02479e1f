import Foundation

/// Chromium driven by Selenium, as the browser tests use it (`Tests/Browser/*.py`): whether it is
/// installed, and a script run to its end.
public enum RealBrowser {
    /// The browser and its driver (Debian's `chromium` and `chromium-driver`).
    public static let browser = "/usr/bin/chromium", driver = "/usr/bin/chromedriver"

    /// Whether Chromium, its driver and Selenium are installed (`.ci/run` installs them).
    public static var available: Bool {
        guard FileManager.default.isExecutableFile(atPath: browser), FileManager.default.isExecutableFile(atPath: driver) else { return false }
        let check = ChildProcess()
        check.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        check.arguments = ["python3", "-c", "import selenium"] // the python3 that `.ci/run` installs Selenium for
        check.standardError = FileHandle.nullDevice
        guard (try? check.run()) != nil else { return false }
        check.waitUntilExit()
        return check.terminationStatus == 0
    }

    /// Runs a program to its end (killed after `timeout`): its status and its output and errors
    /// together. One browser at a time in this test process (each is a few processes busy on
    /// both cores: side by side, with the rest of the suite, they starved the timing of others);
    /// `timeout` counts from its turn.
    public static func run(_ command: [String], timeout: Duration) async throws -> (Int32, String) {
        await turns.take()
        defer { turns.give() }
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let killer = Task {
            try await Task.sleep(for: timeout)
            process.terminate()
        }
        defer { killer.cancel() }
        let output = try await onOwnThread { pipe.fileHandleForReading.readDataToEndOfFile() }
        try await onOwnThread { process.waitUntilExit() }
        return (process.terminationStatus, String(decoding: output, as: UTF8.self))
    }
}


/// Whose turn it is to run a browser.
private let turns = TestTurns()
