import Foundation
import Testing
import UbiquityTestSupport

/// The web under Advanced Data Protection, end to end with real processes: two devices' agents
/// sealing, the account switched to Advanced (the server then holds no key), and Chromium
/// (Selenium, Tests/Browser/advanced_web.py) signed in by password. The page asks the devices
/// for the keys and shows a code; typed on the laptop (`ubiquity devices approve CODE`), the
/// laptop seals the containers' keys to the browser; the page lists the folder with the names it
/// opened itself — of a file written before the switch and of one after — and downloads the
/// older one — changed in place since, a sealed patch — opening its chunks and applying the patch
/// itself, to its very bytes; it shares that file as a device does (the link's manifest sealed in
/// the page), and the link downloads the same bytes; it lists the file's versions (their records
/// opened in the page), downloads the earlier one and restores it, which both devices take; it
/// resolves a conflict (a file changed on both devices), keeping the conflict version and signing
/// the resolution, which both devices take. Another chunk list served for the file is refused (not the one its
/// record names), and the grant changed by the server (one byte) is refused by the page, which
/// then opens nothing.
@Suite(.serialized) struct AdvancedWebTests {
    typealias Agent = HostileKeyValueServerTests.Agent

    @Test(.enabled(if: RealBrowser.available, "no browser here: install Debian's chromium and chromium-driver and Selenium from PyPI (.ci/run does)"),
          .timeLimit(.minutes(8)))
    func aDeviceLetsABrowserInByACodeAndThePageOpensWhatTheServerCannot() async throws {
        let setup = try await HostileContentServerTests.sealedSetup()
        defer { setup.tearDown() }
        let laptopAgent = try Agent(setup.laptop, in: setup.dir)
        var phoneAgent = try Agent(setup.phone, in: setup.dir)
        defer { laptopAgent.stop(); phoneAgent.stop() }
        let (laptop, edited, onLaptop) = try await Self.patchedFileUnderAdvanced(setup, laptopAgent, phoneAgent)
        let container = try #require(onLaptop.deletingLastPathComponent().lastPathComponent as String?)
        // A conflict for the page to resolve: "Both.txt" changed on both devices, the phone's
        // agent stopped meanwhile (its edit goes up from the base the laptop's replaced).
        try Data("Both, as it was".utf8).write(to: onLaptop.appendingPathComponent("Both.txt"))
        let onPhoneFirst = try await onOwnThread { try HostileContentServerTests.documents(of: setup.phone) }
        #expect(await hasArrived(onPhoneFirst, "Both.txt"), "\(phoneAgent.logged.suffix(2000))")
        let bothBytes = ["laptop": Data("Both, as the laptop wrote it".utf8), "phone": Data("Both, as the phone wrote it".utf8)]
        phoneAgent = try await Self.conflict(on: "Both.txt", setup, laptopAgent, phoneAgent, writing: bothBytes)

        // The browser, signed in by password, straight to the server.
        let codeFile = setup.dir.file("browser-code").path, downloads = setup.dir.file("downloads").path
        try FileManager.default.createDirectory(atPath: downloads, withIntermediateDirectories: true)
        // A file the page uploads: three chunks as it cuts (512 KiB each, the last shorter).
        let uploaded = randomBytes(1_300_000), upload = setup.dir.file("Uploaded in the page.bin")
        try uploaded.write(to: upload)
        // And a folder it uploads: a file in it, and one in a folder inside it.
        let tree = setup.dir.file("Tree")
        try FileManager.default.createDirectory(at: tree.appendingPathComponent("Inner"), withIntermediateDirectories: true)
        try Data("at the top of the tree".utf8).write(to: tree.appendingPathComponent("a.txt"))
        try Data("inside".utf8).write(to: tree.appendingPathComponent("Inner/b.txt"))
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Browser/advanced_web.py").path
        let arguments = String(decoding: try JSONSerialization.data(withJSONObject: [
            "url": setup.server.base.absoluteString.trimmingCharacters(in: CharacterSet(charactersIn: "/")), "account": "ada", "password": "correct horse",
            "container": container, "code": codeFile, "downloads": downloads, "file": "Plan ☕.txt",
            "rename": "After.txt", "renamed": "Renamed in the page.txt", "upload": upload.path, "tree": tree.path, "conflicted": "Both.txt",
        ]), as: UTF8.self)
        let browser = Task { try await RealBrowser.run(["/usr/bin/env", "python3", script, arguments], timeout: .seconds(420)) }

        // The laptop answers the browser's request (as a running agent does when it hears of one),
        // then the person types the code the page shows.
        var code: String?
        let deadline = ContinuousClock.now + .seconds(300) // (the browser may wait for another test's to end first)
        while code == nil, ContinuousClock.now < deadline {
            _ = try await laptop.running(["devices", "approve"])
            code = (try? String(contentsOfFile: codeFile, encoding: .utf8)).flatMap { $0.isEmpty ? nil : $0 }
            if code == nil { try await Task.sleep(for: .seconds(1)) }
        }
        let typed = try #require(code, "the page shows a code")
        let approved = try await laptop.running(["devices", "approve", typed])
        #expect(approved.status == 0 && approved.output.contains("web browser"), "\(approved.output)")
        // A wrong code approves nothing.
        #expect(try await laptop.running(["devices", "approve", "0000 0000"]).status != 0)

        let (status, output) = try await browser.value
        let line = try #require(output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(status): \(output)")
        let result = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(result["error"] == nil, "\(line)")
        #expect(result["code"] as? String == typed && result["device"] as? String == "laptop", "\(line)")
        #expect(Set(result["names"] as? [String] ?? []) == ["Plan ☕.txt", "After.txt", "Both.txt"], "\(line)")
        #expect((result["downloaded"] as? String).flatMap { Data(base64Encoded: $0) } == edited, "the page opened the file's chunks, the patch applied, to its very bytes")
        // Shared from the page: a link whose key rides after "#", opened by the link's page.
        #expect((result["link"] as? String)?.contains("/l/") == true && (result["link"] as? String)?.contains("#k=") == true, "\(line)")
        #expect((result["shared"] as? String).flatMap { Data(base64Encoded: $0) } == edited, "the link the page made downloads the file's very bytes")
        // Its versions, listed by the page (their records opened there): the earlier one
        // downloaded, then restored — a change the page sealed and signed, which both devices take.
        let original = { var bytes = edited; bytes[4_500_000] ^= 0xff; return bytes }()
        #expect((result["versions"] as? Int ?? 0) >= 2, "\(line)")
        #expect((result["earlier"] as? String).flatMap { Data(base64Encoded: $0) } == original, "the earlier version, opened in the page, to its very bytes")
        let onPhonePlan = try await onOwnThread { try HostileContentServerTests.documents(of: setup.phone) }.appendingPathComponent("Plan ☕.txt")
        let restored = await eventuallyValue(seconds: 60) {
            (try? Data(contentsOf: onLaptop.appendingPathComponent("Plan ☕.txt"))) == original && (try? Data(contentsOf: onPhonePlan)) == original ? true : nil
        }
        #expect(restored == true, "both devices take the version the page restored: \(phoneAgent.logged.suffix(3000))")
        // Another chunk list served for the file: refused (not the one its record names), nothing saved.
        #expect((result["swapped"] as? String)?.contains("not the one its record names") == true && result["savedSwapped"] as? Bool == false, "\(line)")
        // The page's own changes, signed with its key: both devices take them as another device's.
        #expect(result["changed"] as? [String] == ["Both.txt", "Made in the page", "Plan ☕.txt", "Tree", "Uploaded in the page.bin"], "\(line)")
        // The conflict, resolved in the page (the conflict version kept — the device it names
        // had lost — the resolution signed with the page's key): both devices take that version.
        let keptFrom = try #require(result["keptFrom"] as? String, "\(line)"), kept = try #require(bothBytes[keptFrom], "\(line)")
        let onPhone = try await onOwnThread { try HostileContentServerTests.documents(of: setup.phone) }
        let resolved = await eventuallyValue(seconds: 60) {
            (try? Data(contentsOf: onLaptop.appendingPathComponent("Both.txt"))) == kept && (try? Data(contentsOf: onPhone.appendingPathComponent("Both.txt"))) == kept ? true : nil
        }
        #expect(resolved == true, "both devices take the version the page kept (\(keptFrom)'s): \(phoneAgent.logged.suffix(3000))")
        let moved = onLaptop.appendingPathComponent("Made in the page/Renamed in the page.txt")
        let arrived = await eventuallyValue(seconds: 60) { (try? Data(contentsOf: moved)) == Data("written after the switch".utf8) ? true : nil }
        #expect(arrived == true, "the laptop takes the page's folder, rename and move: \(laptopAgent.logged.suffix(3000))")
        // (What each shows: the version stores of the conflict stay local, and hidden.)
        @Sendable func shown(_ folder: URL) -> Set<String> {
            Set(((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).filter { !$0.hasPrefix(".") })
        }
        let settled = await eventuallyValue(seconds: 60) {
            shown(onLaptop) == ["Both.txt", "Made in the page", "Plan ☕.txt", "Tree", "Uploaded in the page.bin"] && shown(onPhone) == shown(onLaptop)
                && FileManager.default.fileExists(atPath: onPhone.appendingPathComponent("Made in the page/Renamed in the page.txt").path) ? true : nil
        }
        #expect(settled == true, "both devices: the folder made and the file moved into it, the deleted folder gone (laptop \(shown(onLaptop)), phone \(shown(onPhone))): \(phoneAgent.logged.suffix(3000))")
        // The upload, sealed in the page: its very bytes on both devices.
        let took = await eventuallyValue(seconds: 60) {
            (try? Data(contentsOf: onLaptop.appendingPathComponent("Uploaded in the page.bin"))) == uploaded
                && (try? Data(contentsOf: onPhone.appendingPathComponent("Uploaded in the page.bin"))) == uploaded ? true : nil
        }
        #expect(took == true, "the page's upload reaches both devices to its very bytes: \(laptopAgent.logged.suffix(3000))")
        let treeArrived = await eventuallyValue(seconds: 60) {
            (try? String(contentsOf: onLaptop.appendingPathComponent("Tree/a.txt"), encoding: .utf8)) == "at the top of the tree"
                && (try? String(contentsOf: onLaptop.appendingPathComponent("Tree/Inner/b.txt"), encoding: .utf8)) == "inside" ? true : nil
        }
        #expect(treeArrived == true, "the folder the page uploaded, its folders made by the page: \(laptopAgent.logged.suffix(3000))")
        // The server's roster lets the browser's key in (an entry the laptop signed) until the grant ends.
        let roster = try await laptop.running(["devices", "list"])
        #expect(roster.output.contains("web browser"), "\(roster.output)")
        // The grant the server keeps, changed by one byte: the page refuses it and opens nothing.
        #expect((result["refused"] as? String)?.contains("not signed by the device that approved it") == true && result["openedAfterChange"] as? Bool == false, "\(line)")
        try await laptopAgent.stopped()
        try await phoneAgent.stopped()
    }

    /// Makes a conflict on `name` (a file both devices hold): the phone's agent stopped, each
    /// device writes its bytes (`writing`, by device name), the laptop's go up, then the phone's
    /// agent starts again and sends its own from the base the laptop's replaced. Returns the
    /// phone's new agent, once its edit is committed.
    static func conflict(on name: String, _ setup: HostileKeyServerTests.Setup, _ laptopAgent: Agent, _ phoneAgent: Agent,
                         writing bytes: [String: Data]) async throws -> Agent {
        let (onLaptop, onPhone) = try await onOwnThread { (try HostileContentServerTests.documents(of: setup.laptop), try HostileContentServerTests.documents(of: setup.phone)) }
        try await phoneAgent.stopped()
        @Sendable func committed(_ relay: HostileRelay, after mark: Int) -> Bool {
            relay.exchanges.withLock { $0.dropFirst(mark).contains { $0.method == "POST" && $0.path.split(separator: "?")[0].hasSuffix("/commits") && $0.status == 200 } }
        }
        let laptopMark = setup.laptopRelay.exchanges.withLock { $0.count }, phoneMark = setup.phoneRelay.exchanges.withLock { $0.count }
        try #require(bytes["laptop"]).write(to: onLaptop.appendingPathComponent(name))
        try #require(bytes["phone"]).write(to: onPhone.appendingPathComponent(name))
        #expect(await eventuallyValue(seconds: 60) { committed(setup.laptopRelay, after: laptopMark) ? true : nil } == true, "\(laptopAgent.logged.suffix(2000))")
        let again = try Agent(setup.phone, in: setup.dir)
        #expect(await eventuallyValue(seconds: 60) { committed(setup.phoneRelay, after: phoneMark) ? true : nil } == true, "\(again.logged.suffix(2000))")
        return again
    }

    /// What the browser tests under Advanced start from, with both devices' agents running:
    /// "Plan ☕.txt" (9 MiB, cut in a large file's chunks of 128 KiB on average) written on the
    /// laptop, then one byte of it changed in place — it goes up as a sealed patch of the chunk it
    /// changes, which a page must fetch, open and apply — before the laptop switches the account
    /// to Advanced (after it, the new epoch's keyed chunker cuts the file elsewhere and an edit
    /// sends its chunks whole); then "After.txt" written on the phone. Returns the laptop, the
    /// file's bytes as edited and the laptop's Documents folder.
    static func patchedFileUnderAdvanced(_ setup: HostileKeyServerTests.Setup, _ laptopAgent: Agent,
                                         _ phoneAgent: Agent) async throws -> (laptop: HostileKeyServerTests.Device, plan: Data, onLaptop: URL) {
        let (laptop, phone) = (setup.laptop, setup.phone)
        let (onLaptop, onPhone) = try await onOwnThread { (try HostileContentServerTests.documents(of: laptop), try HostileContentServerTests.documents(of: phone)) }
        try FileManager.default.createDirectory(at: onLaptop, withIntermediateDirectories: true)
        var plan = randomBytes(9 << 20)
        try plan.write(to: onLaptop.appendingPathComponent("Plan ☕.txt"))
        #expect(await hasArrived(onPhone, "Plan ☕.txt"), "\(phoneAgent.logged.suffix(2000))")
        plan[4_500_000] ^= 0xff
        let handle = try FileHandle(forWritingTo: onLaptop.appendingPathComponent("Plan ☕.txt"))
        try handle.seek(toOffset: 4_500_000)
        try handle.write(contentsOf: Data([plan[4_500_000]]))
        try handle.close()
        let onPhonePlan = onPhone.appendingPathComponent("Plan ☕.txt"), expected = plan
        #expect(await eventuallyValue(seconds: 60) { (try? Data(contentsOf: onPhonePlan)) == expected ? true : nil } == true, "\(phoneAgent.logged.suffix(2000))")
        let patched = setup.laptopRelay.exchanges.withLock { $0 }.contains { $0.method == "POST" && $0.path.hasPrefix("/v1/chunks/patches?") && $0.status == 201 }
        #expect(patched, "the edit went up as a sealed patch")
        let switched = try await laptop.running(["protection", "advanced", "--yes", "--without-recovery-key"])
        #expect(switched.status == 0, "\(switched.output)")
        try Data("written after the switch".utf8).write(to: onPhone.appendingPathComponent("After.txt"))
        #expect(await hasArrived(onLaptop, "After.txt"), "\(laptopAgent.logged.suffix(2000))")
        return (laptop, plan, onLaptop)
    }
}
