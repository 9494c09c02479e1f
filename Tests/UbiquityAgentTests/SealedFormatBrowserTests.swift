import Crypto
import Foundation
import Logging
import Testing
import UbiquityKeys
import UbiquityTestSupport
@testable import UbiquityServer

/// The encrypted format in a real browser: the web page's `sealed.js` (WebCrypto) derives a
/// container's chunk keys from the account's root key and opens chunks sealed by `UbiquityKeys`
/// exactly as a device does, refuses a changed one, and seals chunks a device opens — one format,
/// two implementations, checked against each other. Also prints how fast Chromium opens them
/// (the figure; never a pass/fail).
@Suite struct SealedFormatBrowserTests {
    @Test(.enabled(if: WebBrowserTests.available, "no browser here: install Debian's chromium and chromium-driver and Selenium from PyPI (.ci/run does)"),
          .timeLimit(.minutes(5)))
    func thePageOpensWhatADeviceSealedAndADeviceOpensWhatThePageSealed() async throws {
        let dir = NSTemporaryDirectory() + "sealed-browser-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let server = try await EmbeddedServer.start(dataDirectory: dir + "/server", account: "ada", password: "correct horse", logger: logger)
        defer { server.cancel() }
        let container = "ABCDE12345.com.example.notes"
        let root = AccountRootKey(epoch: 2)
        let keys = root.chunkKeys(container: container)
        let plaintexts = [1, 1_000, 100_000, 131_072, 600_000].map { randomBytes($0) }
        var chunks: [[String: String]] = []
        for plaintext in plaintexts {
            let (id, body) = try keys.seal(plaintext)
            chunks.append(["id": Data(id.bytes).base64EncodedString(), "body": body.base64EncodedString()])
        }
        let fixture: [String: Any] = ["root": root.withUnsafeBytes { Data($0) }.base64EncodedString(), "epoch": 2, "container": container, "chunks": chunks]
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try JSONSerialization.data(withJSONObject: fixture).write(to: URL(fileURLWithPath: dir + "/fixture.json"))

        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let arguments = String(decoding: try JSONSerialization.data(withJSONObject: ["url": server.url.absoluteString, "fixture": dir + "/fixture.json", "mib": 16]), as: UTF8.self)
        let (status, output) = try await WebBrowserTests.run(["/usr/bin/env", "python3", repository.appendingPathComponent("Tests/Browser/sealed_format.py").path, arguments],
                                                            timeout: .seconds(240))
        #expect(status == 0, "\(output)")
        let line = try #require(output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(output)")
        let result = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(result["error"] == nil, "\(result)")

        // The page opened each chunk to the very bytes sealed, and refused the changed one.
        let expected = plaintexts.map { SHA256.hash(data: $0).map { String(format: "%02x", $0) }.joined() }
        #expect(result["opened"] as? [String] == expected)
        #expect((result["refused"] as? String)?.hasPrefix("authenticationFailed") == true, "\(result["refused"] ?? "")")

        // What the page sealed, a device opens (and a changed one it refuses).
        let mine = try #require(result["mine"] as? [[String: String]])
        #expect(mine.count == 4)
        for sealed in mine {
            let id = try ChunkIdentifier(bytes: Array(try #require(Data(base64Encoded: sealed["id"] ?? ""))))
            let body = try #require(Data(base64Encoded: sealed["body"] ?? ""))
            let plaintext = try keys.open(body, as: id)
            #expect(SHA256.hash(data: plaintext).map { String(format: "%02x", $0) }.joined() == sealed["sha256"])
            var changed = body
            changed[changed.count / 2] ^= 1
            #expect(throws: EncryptionError.self) { try keys.open(changed, as: id) }
            // Sealing is deterministic: the device seals what the page sealed to the very same bytes.
            #expect(try keys.seal(plaintext).body == body, "the page and the device seal alike")
        }
        if let sequential = result["sequentialMs"] as? Double, let parallel = result["parallelMs"] as? Double {
            print("Chromium opened 16 MiB of 128 KiB chunks at \(Int(16 * 1.048576 / sequential * 1000)) MB/s one at a time, \(Int(16 * 1.048576 / parallel * 1000)) MB/s eight at a time")
        }
    }
}
