import Foundation
import Testing
import UbiquityTestSupport

/// Public links under Advanced Data Protection, end to end with real processes: two sealing
/// devices' agents, the account switched to Advanced (the server then holds no key), the laptop
/// publishing two files (`ubiquity publish`: its agent seals each link's manifest, the key in the
/// link's fragment), and Chromium (Selenium, Tests/Browser/advanced_link.py) opening the links
/// through a relay that stands for a lying server. The first downloads to its very bytes — a
/// 9 MiB file changed in place before the switch, so one of its chunks is a sealed patch the page
/// applies; the second's chunk, swapped by the server for one of the first file's, is refused and
/// nothing is saved; the key changed by one character, or left off, opens nothing. The key never
/// reaches the server: not in any request, not in its database.
@Suite(.serialized) struct AdvancedLinkTests {
    typealias Agent = HostileKeyValueServerTests.Agent

    @Test(.enabled(if: RealBrowser.available, "no browser here: install Debian's chromium and chromium-driver and Selenium from PyPI (.ci/run does)"),
          .timeLimit(.minutes(8)))
    func aLinkOpensInTheBrowserWithTheKeyTheServerNeverSees() async throws {
        let setup = try await HostileContentServerTests.sealedSetup()
        defer { setup.tearDown() }
        let laptopAgent = try Agent(setup.laptop, in: setup.dir), phoneAgent = try Agent(setup.phone, in: setup.dir)
        defer { laptopAgent.stop(); phoneAgent.stop() }
        let (laptop, plan, onLaptop) = try await AdvancedWebTests.patchedFileUnderAdvanced(setup, laptopAgent, phoneAgent)

        // The laptop publishes both: each link ends in its key.
        let good = try await publish(onLaptop.appendingPathComponent("Plan ☕.txt"), on: laptop, agent: laptopAgent)
        let changed = try await publish(onLaptop.appendingPathComponent("After.txt"), on: laptop, agent: laptopAgent)
        #expect(setup.laptopRelay.exchanges.withLock { $0 }.contains { $0.path == "/v1/chunks/bases" && $0.status == 200 }, "the laptop asked which chunks are patches")

        // The browser goes through a relay of its own: the second link's chunk comes swapped for
        // the first chunk the first link's page fetched.
        let browserRelay = try await HostileRelay.start(to: setup.server.base)
        defer { browserRelay.stop() }
        let changedToken = try #require(URL(string: changed.url)?.pathComponents.dropFirst(2).first)
        browserRelay.tamper.withLock {
            $0 = { [browserRelay] exchange in
                guard exchange.path.hasPrefix("/l/\(changedToken)/chunks/") else { return exchange }
                var swapped = exchange
                swapped.body = browserRelay.exchanges.withLock { $0 }.first { $0.path.contains("/chunks/") && !$0.path.contains(changedToken) }?.body ?? Data([1])
                return swapped
            }
        }
        // (The links name the laptop's relay, which the laptop knows as its server.)
        func throughRelay(_ link: String) -> String {
            let address = URL(string: link)
            return browserRelay.base.absoluteString.trimmingCharacters(in: CharacterSet(charactersIn: "/")) + (address?.path ?? "") + "#" + (address?.fragment ?? "")
        }
        let downloads = setup.dir.file("downloads").path
        try FileManager.default.createDirectory(atPath: downloads, withIntermediateDirectories: true)
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Browser/advanced_link.py").path
        let arguments = String(decoding: try JSONSerialization.data(withJSONObject: [
            "good": throughRelay(good.url), "changed": throughRelay(changed.url), "downloads": downloads,
        ]), as: UTF8.self)
        let (status, output) = try await RealBrowser.run(["/usr/bin/env", "python3", script, arguments], timeout: .seconds(300))
        let line = try #require(output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(status): \(output)")
        let result = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(result["error"] == nil, "\(line)")
        #expect(result["name"] as? String == "Plan ☕.txt", "the page shows the name it opened: \(line)")
        #expect((result["downloaded"] as? String).flatMap { Data(base64Encoded: $0) } == plan, "the page opened the chunks and applied the patch, to the file's very bytes")
        #expect((result["changed"] as? String)?.contains("does not open") == true && result["savedChanged"] as? Bool == false, "\(line)")
        #expect((result["wrongKey"] as? String)?.contains("does not open") == true, "\(line)")
        #expect((result["noKey"] as? String)?.contains("incomplete") == true, "\(line)")

        // The keys never reached the server: not in what the laptop or the browser sent, not in its files.
        let keys = [good.key, changed.key]
        let sent = (setup.laptopRelay.exchanges.withLock { $0 } + browserRelay.exchanges.withLock { $0 }).map { $0.path + String(decoding: $0.requestBody, as: UTF8.self) }
        #expect(!sent.contains { text in keys.contains { text.contains($0) } }, "a link's key went to the server")
        #expect(browserRelay.exchanges.withLock { $0 }.contains { $0.path.contains("/chunks/") && $0.headers.contains { $0.name.lowercased() == "x-ubiquity-patch-of" } },
                "the page met a chunk kept as a sealed patch")
        #expect(browserRelay.exchanges.withLock { $0 }.contains { $0.path.hasSuffix("/manifest") && $0.status == 200 },
                "\(browserRelay.exchanges.withLock { $0 }.map { "\($0.method) \($0.path) \($0.status)" })")
        let stored = try FileManager.default.subpathsOfDirectory(atPath: setup.dir.file("data").path).compactMap { try? Data(contentsOf: setup.dir.file("data").appendingPathComponent($0)) }
        for key in keys {
            let bytes = try #require(Data(base64Encoded: key.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/") + "="))
            #expect(!stored.contains { $0.range(of: bytes) != nil }, "a link's key is in the server's files")
        }
        try await laptopAgent.stopped()
        try await phoneAgent.stopped()
    }

    /// `ubiquity publish` on `device`: the link and the key in its fragment.
    private func publish(_ file: URL, on device: HostileKeyServerTests.Device, agent: Agent) async throws -> (url: String, key: String) {
        let published = try await device.running(["publish", file.path])
        #expect(published.status == 0, "\(published.output)\n\(agent.logged.suffix(2000))")
        let url = try #require(published.output.split(separator: "\n").first { $0.hasPrefix("http") }.map(String.init), "\(published.output)")
        let key = try #require(url.components(separatedBy: "#k=").dropFirst().first, "a link under Advanced carries its key: \(url)")
        return (url, key)
    }
}
