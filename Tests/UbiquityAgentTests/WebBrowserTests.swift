import Foundation
import GRDB
import UbiquityTestSupport
import Synchronization
import Testing
import UbiquityClient
import UbiquityCoordination
import UbiquityServer
@testable import UbiquityAgent

/// The web interface in a real browser — Chromium driven by Selenium (Tests/Browser/web_flow.py)
/// — against a real server and two real agents' devices, sealing as they do under Standard by
/// default: sign in, browse, upload a file and a folder that reach the device, see the device's
/// edits appear in the open page, download, hostile names, forged requests, phone width and dark
/// mode, signing out; then the second device holds what the first does, byte for byte. Its
/// screenshots go to docs/screenshots/.
@Suite struct WebBrowserTests {
    /// Whether Chromium, its driver and Selenium are installed (`.ci/run` installs them).
    static var available: Bool { RealBrowser.available }

    @Test(.enabled(if: available, "no browser here: install Debian's chromium and chromium-driver and Selenium from PyPI (.ci/run does)"),
          .timeLimit(.minutes(8)))
    func theWebInterfaceWorksInARealBrowser() async throws {
        let notes = "ABCDE12345.com.example.notes"
        let dir = NSTemporaryDirectory() + "web-browser-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // Two devices whose agents seal (Standard's default); the tablet joins by the escrow.
        let running = try await RunningAgents.start(["laptop", "tablet"], containers: [notes], in: dir, sealedContents: true)
        defer { running.stop() }
        // The laptop sets the account's keys up (as `ubiquity login` does): the Devices page shows them.
        let credentials = try #require(try UbiquityCredentials.load(from: running.paths[0]))
        _ = try await AccountKeys(credentials: credentials, paths: running.paths[0]).setUp(deviceName: "laptop")
        // The account is the server's operator too (what `ubiquity account admin ada` does).
        let administration = try await ServerAdministration(dataDirectory: dir + "/server", bcryptCost: 4)
        #expect(try await administration.setAdmin(ofAccount: "ada", admin: true))
        await administration.close()
        let device = UbiquityContainers(paths: running.paths[0], entitlements: UbiquityEntitlements(containers: [notes]))
        let documents = try #require(try await onOwnThread { device.url(forContainer: notes) }).appendingPathComponent("Documents")
        let tablet = UbiquityContainers(paths: running.paths[1], entitlements: UbiquityEntitlements(containers: [notes]))
        let onTablet = try #require(try await onOwnThread { tablet.url(forContainer: notes) }).appendingPathComponent("Documents")
        // A first document, so that the container and its Documents folder are on the server.
        try FileManager.default.createDirectory(at: documents, withIntermediateDirectories: true)
        try Data("hello".utf8).write(to: documents.appendingPathComponent("Welcome.txt"))
        // The laptop's app sets a key-value pair: its agent seals it; the page (Standard) shows it
        // opened by the server's escrow.
        let values = NSUbiquitousKeyValueStore(identifier: notes, containers: UbiquityContainers(paths: running.paths[0],
                                                                                               entitlements: UbiquityEntitlements(containers: [notes], keyValueStore: notes)))
        values.set(["dark": true], forKey: "theme <b>")
        #expect(values.synchronize())

        // The device's user opens what arrives (the agent brings metadata first, contents on demand).
        let stop = Mutex(false)
        let opener = Thread {
            while !stop.withLock({ $0 }) {
                for (containers, folder) in [(device, documents), (tablet, onTablet)] {
                    let walker = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil)
                    while let url = walker?.nextObject() as? URL {
                        let name = url.lastPathComponent
                        guard name.hasPrefix("."), name.hasSuffix(".icloud") else { continue }
                        let item = url.deletingLastPathComponent().appendingPathComponent(String(name.dropFirst().dropLast(".icloud".count)))
                        try? containers.startDownloading(at: item)
                    }
                }
                // The browser script asks how many unresolved conflict versions the device lists.
                let ask = URL(fileURLWithPath: dir + "/browser/ask-conflicts")
                if let name = try? String(contentsOf: ask, encoding: .utf8) {
                    try? FileManager.default.removeItem(at: ask)
                    let count = NSFileVersion.unresolvedConflictVersionsOfItem(at: documents.appendingPathComponent(name))?.count ?? -1
                    try? Data("\(count)".utf8).write(to: URL(fileURLWithPath: dir + "/browser/ask-conflicts.answer"), options: .atomic)
                }
                // … and asks the device to publish a file (FileManager.url(forPublishingUbiquitousItemAt:expiration:)).
                let publish = URL(fileURLWithPath: dir + "/browser/ask-publish")
                if let name = try? String(contentsOf: publish, encoding: .utf8) {
                    try? FileManager.default.removeItem(at: publish)
                    var answer: [String: String] = [:]
                    do {
                        let (link, expires) = try device.publish(at: documents.appendingPathComponent(name))
                        answer = ["url": link.absoluteString, "expires": "\(expires.timeIntervalSince1970)"]
                    } catch {
                        answer = ["error": "\(error)"]
                    }
                    try? JSONSerialization.data(withJSONObject: answer).write(to: URL(fileURLWithPath: dir + "/browser/ask-publish.answer"), options: .atomic)
                }
                usleep(200_000)
            }
        }
        opener.start()
        defer { stop.withLock { $0 = true } }

        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let arguments: [String: Any] = [
            "url": running.server.url.absoluteString, "account": "ada", "password": "correct horse", "container": notes,
            "device": documents.path, "work": dir + "/browser", "screenshots": repository.appendingPathComponent("docs/screenshots").path,
            "others": ["tablet"],
        ]
        let json = String(decoding: try JSONSerialization.data(withJSONObject: arguments), as: UTF8.self)
        let (status, output) = try await Self.run(["/usr/bin/env", "python3", repository.appendingPathComponent("Tests/Browser/web_flow.py").path, json],
                                                  timeout: .seconds(420))
        print(output)
        #expect(status == 0, "\(output)")
        #expect(output.contains("all steps held"))
        // The tablet holds what the laptop does after everything the page did (its changes
        // sealed and signed by the escrow under Standard), file for file and byte for byte.
        func tree(_ folder: URL) -> [String: Data] {
            var files: [String: Data] = [:]
            let walker = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: [.isRegularFileKey], options: [.skipsHiddenFiles])
            while let url = walker?.nextObject() as? URL {
                guard (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true else { continue }
                files[String(url.path.dropFirst(folder.path.count))] = try? Data(contentsOf: url)
            }
            return files
        }
        var alike = false
        let deadline = ContinuousClock.now + .seconds(90)
        while !alike, ContinuousClock.now < deadline {
            let laptop = tree(documents)
            alike = !laptop.isEmpty && laptop == tree(onTablet)
            if !alike { try await Task.sleep(for: .milliseconds(300)) }
        }
        #expect(alike, "laptop: \(tree(documents).keys.sorted()); tablet: \(tree(onTablet).keys.sorted())")
        // What the page showed, the server keeps sealed: no key name, no value.
        let database = try DatabaseQueue(path: dir + "/server/ubiquity.sqlite")
        let kept = try database.read { db in try Row.fetchAll(db, sql: "SELECT key, value, sealed FROM kv") }
        #expect(!kept.isEmpty && kept.allSatisfy { ($0["sealed"] as Data?) != nil && ($0["key"] as String) != "theme <b>" }, "\(kept)")
        try database.close()
    }

    /// Runs a program to its end (killed after `timeout`): its status and its output and errors together.
    static func run(_ command: [String], timeout: Duration) async throws -> (Int32, String) { try await RealBrowser.run(command, timeout: timeout) }
}
