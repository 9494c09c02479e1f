import Foundation
import Testing
import UbiquityTestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Runs `ubiquity ARGUMENTS` with `environment` added and `input` on standard input: its exit
/// status and what it printed (output and errors).
func runUbiquity(_ arguments: [String], environment: [String: String], input: String = "") throws -> (status: Int32, output: String) {
    let process = ChildProcess()
    process.executableURL = RunningServer.binary
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    let output = Pipe(), stdin = Pipe()
    process.standardOutput = output
    process.standardError = output
    process.standardInput = stdin
    try process.run()
    stdin.fileHandleForWriting.write(Data(input.utf8))
    try stdin.fileHandleForWriting.close()
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    return (process.terminationStatus, text)
}

/// `ubiquity login`, `status` and `logout` as a user runs them, against a real server process.
@Suite(.serialized) struct LoginCommandTests {
    @Test func loginStoresAPrivateTokenAndLogoutRevokesIt() async throws {
        let dir = try TemporaryDirectory("login"); defer { dir.remove() }
        let server = try await RunningServer.start(data: dir.file("data").path)
        defer { server.stop() }
        let home = ["XDG_CONFIG_HOME": dir.file("config").path, "XDG_DATA_HOME": dir.file("share").path]
        let credentials = dir.file("config/ubiquity/credentials.json").path

        let wrong = try runUbiquity(["login", "--server", server.base.absoluteString, "--account", "ada", "--password-stdin"], environment: home, input: "wrong password\n")
        #expect(wrong.status != 0 && wrong.output.contains("signInFailed"), "\(wrong.output)")
        #expect(!FileManager.default.fileExists(atPath: credentials))

        let login = try runUbiquity(["login", "--server", server.base.absoluteString, "--account", "ada", "--device-name", "laptop", "--password-stdin"],
                                    environment: home, input: "correct horse\n")
        #expect(login.status == 0 && login.output.contains("signed in to ada"), "\(login.output)")
        let mode = try FileManager.default.attributesOfItem(atPath: credentials)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let stored = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: credentials))) as? [String: Any]
        let token = try #require(stored?["token"] as? String)
        #expect(token.count == 64 && stored?["deviceName"] as? String == "laptop")

        let status = try runUbiquity(["status"], environment: home)
        #expect(status.status == 0 && status.output.contains("account:  ada") && status.output.contains("bytes used")
                    && status.output.contains("keys:     Standard Data Protection, this device holds the current key"), "\(status.output)")

        let logout = try runUbiquity(["logout"], environment: home)
        #expect(logout.status == 0 && logout.output.contains("signed out of ada") && !logout.output.contains("this device only"), "\(logout.output)")
        #expect(!FileManager.default.fileExists(atPath: credentials))
        #expect(try await server.request("v1/account", token: token).0 == 401, "the token was revoked on the server")
        #expect(try runUbiquity(["status"], environment: home).output.contains("not signed in"))

        let nowhere = try runUbiquity(["login", "--server", "http://127.0.0.1:1", "--account", "ada", "--password-stdin"], environment: home, input: "correct horse\n")
        #expect(nowhere.status != 0 && nowhere.output.contains("unreachable"), "\(nowhere.output)")
    }
}
