import Foundation
import Testing
import UbiquityTestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `ubiquity account create` and `ubiquity serve`, run as an operator would: a real process on
/// a loopback port, a real HTTP client, SIGTERM to stop.
@Suite struct ServeCommandTests {
    func binary() -> URL {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("ubiquity")
    }

    func request(_ url: URL, method: String = "GET", json: String? = nil) async throws -> (Int, String) {
        var request = URLRequest(url: url)
        request.httpMethod = method
        if let json {
            request.httpBody = Data(json.utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    @Test func serveStartsWithEmbeddedStorageAndStopsGracefully() async throws {
        let dir = try TemporaryDirectory("serve"); defer { dir.remove() }
        let data = dir.file("data").path

        let create = Process()
        create.executableURL = binary()
        create.arguments = ["account", "create", "ada", "--data", data, "--password-stdin"]
        let input = Pipe()
        create.standardInput = input
        create.standardOutput = FileHandle.nullDevice
        try create.run()
        input.fileHandleForWriting.write(Data("correct horse\n".utf8))
        try input.fileHandleForWriting.close()
        create.waitUntilExit()
        #expect(create.terminationStatus == 0)

        let server = Process()
        server.executableURL = binary()
        server.arguments = ["serve", "--data", data, "--port", "0", "--log-level", "warning"]
        let output = Pipe()
        server.standardOutput = output
        try server.run()
        defer { if server.isRunning { server.terminate() } }
        var text = ""
        while !text.contains("listening on") {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        let base = try #require(text.split(separator: " ").first { $0.hasPrefix("http://") }.map { URL(string: String($0))! })

        #expect(try await request(base.appendingPathComponent("health")) == (200, #"{"status":"ok"}"#))
        let (status, body) = try await request(base.appendingPathComponent("v1/sign-in"), method: "POST",
                                               json: #"{"account":"ada","password":"correct horse","deviceName":"test"}"#)
        #expect(status == 200 && body.contains("\"token\""))
        #expect(FileManager.default.fileExists(atPath: data + "/ubiquity.sqlite"))

        server.terminate() // SIGTERM
        server.waitUntilExit()
        #expect(server.terminationReason == .exit && server.terminationStatus == 0, "a graceful shutdown")
    }
}
