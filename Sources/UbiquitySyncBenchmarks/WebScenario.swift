import AsyncHTTPClient
import Foundation
import NIOCore
import UbiquityKeys
import UbiquityProtocol
import UbiquitySync
import UbiquityTestSupport

/// The web interface's figures (issue 21), measured against the same server the agents use, in
/// the same run:
/// - a folder of `items` items opened in the page: its first page (what the page asks for:
///   sorted by name, 200 rows), timed from the request to the last byte of the answer, beside
///   the first page of a folder of ten in the same container and beside reading the whole
///   container the way a device lists it (`/v1/…/changes`, page by page);
/// - a new file of the large size uploaded the way the page uploads it (`upload.js`: parts of
///   4 MiB one after the other, then the file committed from their chunk lists) beside the same
///   size written into device A's container and uploaded by its agent, each through a
///   counting relay of its own, timed until the server has every byte.
struct WebFigures: Encodable {
    var folderItems: Int
    /// Whether the items' names, sizes and dates are sealed records (issue 45), which the
    /// server opens with the escrow's keys (Standard) to sort the folder.
    var sealedRecords: Bool
    /// The big folder's first page the first time it is asked for, in ms.
    var firstPageFirstTimeMs: Double
    /// The big folder's first page: median and 99th percentile over the runs, in ms.
    var firstPageP50Ms: Double
    var firstPageP99Ms: Double
    /// The same for a folder of ten items.
    var smallFolderFirstPageP50Ms: Double
    /// The whole container read as a device lists it (median, ms).
    var wholeContainerListingP50Ms: Double
    var runs: Int
    var uploadMiB: Int
    /// Through the page's protocol.
    var webUploadMs: Double
    var webUploadMiBPerSecond: Double
    var webUploadBytesOnWire: Int64
    /// Through the agent (written into the container's `Documents`).
    var agentUploadMs: Double
    var agentUploadMiBPerSecond: Double
    /// Through the page in a real browser (Chromium driven by Selenium, `Tests/Browser/web_upload_bench.py`):
    /// from the file chosen in the upload button to the file whole on the server; nil where no
    /// browser is installed (`browser` says why).
    var browserUploadMs: Double?
    var browserUploadMiBPerSecond: Double?
    var browser: String
    var notes: String
}

/// The web interface's figures on `peer`'s server; `sealed`: the folders' items committed with
/// sealed records (with device A's keys), as a device of an account with keys commits them.
func webFigures(_ peer: UbiquityPeer, items: Int, uploadMiB: Int, runs: Int = 30, sealed: Bool = false) async throws -> WebFigures {
    log("ubiquity: the web interface — a folder of \(items) items\(sealed ? " with sealed records" : ""), a \(uploadMiB) MiB upload through the page and through the agent")
    let web = try await WebSession.signIn(port: peer.serverPort)
    let listed = "BENCH12345.com.example.web" // a container no agent syncs: only the listing is measured
    // Sealed: the folders' records sealed as device A seals them, and the devices' own
    // container's records opened (the agents seal their names, sizes and dates).
    var records: ItemRecords?, benchRecords: ItemRecords?
    if sealed {
        let keyring = try Keyring(contentsOf: peer.keyringA)
        let rootKeys = keyring.epochs.compactMap(keyring.rootKey(epoch:))
        records = ItemRecords.keyed(container: listed, rootKeys: rootKeys, sealing: true)
        benchRecords = ItemRecords.keyed(container: container, rootKeys: rootKeys, sealing: false)
        guard records != nil else { throw BenchError("device A's keyring holds no key of the account") }
    }

    // The folders: one of `items`, one of ten, filled through the sync API in batches.
    let big = try await web.json("POST", "/web/api/containers/\(listed)/folders", body: ["name": "big"])["id"] as? String ?? ""
    let small = try await web.json("POST", "/web/api/containers/\(listed)/folders", body: ["name": "small"])["id"] as? String ?? ""
    let device = try await web.deviceToken()
    for (folder, count) in [(big, items), (small, 10)] {
        for start in stride(from: 0, to: count, by: CommitBatchRequest.maximumCount) {
            let commits = try (start..<min(count, start + CommitBatchRequest.maximumCount)).map { index in
                let update = ItemUpdate(baseRevision: nil, name: "Photo \(index).jpg", parent: folder, kind: .file,
                                        modificationDate: 1_800_000_000 + Double(index), manifest: Manifest(chunks: []))
                let item = "\(folder)-\(index)"
                return ItemCommit(item: item, update: try records?.sealed(update, item: item, manifest: update.manifest) ?? update)
            }
            let answer = try await web.send("POST", "/v1/containers/\(listed)/commits", body: try JSONEncoder().encode(CommitBatchRequest(commits: commits)), bearer: device)
            guard answer.status == 200 else { throw BenchError("the batch commit was answered \(answer.status): \(String(decoding: answer.body.prefix(300), as: UTF8.self))") }
        }
    }

    func firstPage(_ folder: String, expecting count: Int) async throws {
        let page = try await web.json("GET", "/web/api/containers/\(listed)/folder?parent=\(folder)&sort=name&limit=200")
        guard page["total"] as? Int == count, (page["items"] as? [Any])?.count == min(200, count) else { throw BenchError("a first page of the wrong size") }
    }
    let firstTime = ContinuousClock.now
    try await firstPage(big, expecting: items)
    let firstTimeMs = (ContinuousClock.now - firstTime).inMilliseconds
    func timed(_ body: () async throws -> Void) async throws -> [Double] {
        try await body() // warm: the first request of each kind is not counted
        var times: [Double] = []
        for _ in 0..<runs {
            let start = ContinuousClock.now
            try await body()
            times.append((ContinuousClock.now - start).inMilliseconds)
        }
        return times
    }
    let bigPages = try await timed { try await firstPage(big, expecting: items) }
    let smallPages = try await timed { try await firstPage(small, expecting: 10) }
    let whole = try await timed {
        var since: Int64 = 0, seen = 0
        while true {
            let page = try await web.json("GET", "/v1/containers/\(listed)/changes?since=\(since)", bearer: device)
            let listed = page["items"] as? [[String: Any]] ?? []
            seen += listed.count
            guard page["more"] as? Bool == true, let last = listed.last?["sequence"] as? Int else { break }
            since = Int64(last)
        }
        guard seen >= items else { throw BenchError("the whole listing had \(seen) items") }
    }

    // The upload: the page's protocol through a relay of its own, then the agent's.
    let bytes = uploadMiB << 20
    let relay = try RelayProxy.start(to: peer.serverPort)
    defer { relay.stop() }
    let viaRelay = try await WebSession.signIn(port: relay.port)
    let webBytes = noise(bytes, seed: 21_000)
    // Each upload starts on a quiet system: the devices done with what came before (each
    // uploaded file comes down to both of them) and every written page on the disk.
    try await quiet(peer)
    let webStart = ContinuousClock.now
    // As upload.js sends them: parts of 4 MiB, four on the way at once, their lists kept in order.
    let starts = Array(stride(from: 0, to: bytes, by: 4 << 20))
    var lists = [Data](repeating: Data(), count: starts.count)
    try await withThrowingTaskGroup(of: (Int, Data).self) { group in
        func send(_ index: Int) {
            let part = Data(webBytes[starts[index]..<min(bytes, starts[index] + (4 << 20))])
            group.addTask {
                let answer = try await viaRelay.send("POST", "/web/api/parts?fileSize=\(bytes)&container=\(container)", body: part, contentType: "application/octet-stream")
                guard answer.status == 200 else { throw BenchError("a part was answered \(answer.status)") }
                return (index, answer.body)
            }
        }
        var next = 0
        while next < min(4, starts.count) { send(next); next += 1 }
        while let (index, body) = try await group.next() {
            lists[index] = body
            if next < starts.count { send(next); next += 1 }
        }
    }
    var chunks: [[String: Any]] = []
    for body in lists {
        guard let json = try JSONSerialization.jsonObject(with: body) as? [String: Any], let list = json["chunks"] as? [[String: Any]] else {
            throw BenchError("a part's answer holds no chunks")
        }
        chunks += list
    }
    let file = try await viaRelay.json("POST", "/web/api/containers/\(container)/files", body: ["name": "web-upload.bin", "chunks": chunks])
    let webTook = (ContinuousClock.now - webStart).inMilliseconds
    guard file["uploaded"] as? Bool == true, file["size"] as? Int == bytes else { throw BenchError("the page's upload did not arrive whole: \(file)") }
    let webWire = relay.bytes

    try await quiet(peer)
    let (browserMs, browser) = try browserUpload(port: peer.serverPort, bytes: bytes)

    try await quiet(peer)
    let sequence = try await web.json("GET", "/v1/containers/\(container)/changes?since=\(Int64.max / 2)", bearer: device)["sequence"] as? Int ?? 0
    let agentFile = peer.sideA.appendingPathComponent("agent-upload.bin")
    try noise(bytes, seed: 22_000).write(to: agentFile, options: .atomic)
    let agentStart = ContinuousClock.now
    var agentTook: Double?
    while agentTook == nil {
        guard ContinuousClock.now - agentStart < .seconds(300) else { throw BenchError("the agent's upload did not reach the server in 300 s") }
        let answer = try await web.send("GET", "/v1/containers/\(container)/changes?since=\(sequence)", bearer: device)
        guard answer.status == 200 else { throw BenchError("the changes were answered \(answer.status)") }
        let changes = try JSONDecoder().decode(ChangesResponse.self, from: answer.body)
        for item in try changes.items.map({ try benchRecords?.opened($0) ?? $0 }) where item.name == "agent-upload.bin" {
            if item.uploaded, item.size == Int64(bytes) { agentTook = (ContinuousClock.now - agentStart).inMilliseconds }
        }
        if agentTook == nil { try await Task.sleep(for: .milliseconds(10)) }
    }
    let agentMs = agentTook ?? 0
    let mib = Double(uploadMiB)
    return WebFigures(
        folderItems: items, sealedRecords: sealed, firstPageFirstTimeMs: firstTimeMs.rounded(toPlaces: 2), firstPageP50Ms: percentile(bigPages, 0.5).rounded(toPlaces: 2), firstPageP99Ms: percentile(bigPages, 0.99).rounded(toPlaces: 2),
        smallFolderFirstPageP50Ms: percentile(smallPages, 0.5).rounded(toPlaces: 2), wholeContainerListingP50Ms: percentile(whole, 0.5).rounded(toPlaces: 1),
        runs: runs, uploadMiB: uploadMiB, webUploadMs: webTook.rounded(toPlaces: 1), webUploadMiBPerSecond: (mib / (webTook / 1000)).rounded(toPlaces: 1),
        webUploadBytesOnWire: webWire, agentUploadMs: agentMs.rounded(toPlaces: 1), agentUploadMiBPerSecond: (mib / (agentMs / 1000)).rounded(toPlaces: 1),
        browserUploadMs: browserMs.map { $0.rounded(toPlaces: 1) }, browserUploadMiBPerSecond: browserMs.map { (mib / ($0 / 1000)).rounded(toPlaces: 1) },
        browser: browser,
        notes: "page figures from an HTTP client speaking the page's requests (the same headers, cookie and CSRF token; parts of 4 MiB, four on the way at once, as upload.js sends them); first pages sorted by name, 200 rows")
}

/// Waits until both devices are done (after a moment for the push of what came before to reach
/// them: an agent that has not heard of it yet looks idle) and every written page is on the
/// disk (`sync(2)`).
private func quiet(_ peer: UbiquityPeer) async throws {
    try await Task.sleep(for: .milliseconds(300))
    try await peer.settle()
    sync()
}

/// A new file of `bytes` uploaded through the page in Chromium, through a counting relay of its
/// own: the time, or nil and why not.
func browserUpload(port: Int, bytes: Int) throws -> (Double?, String) {
    let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let script = repository.appendingPathComponent("Tests/Browser/web_upload_bench.py")
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium"), FileManager.default.isExecutableFile(atPath: "/usr/bin/chromedriver") else {
        return (nil, "skipped: no /usr/bin/chromium or /usr/bin/chromedriver (apt-get install chromium chromium-driver)")
    }
    guard FileManager.default.fileExists(atPath: script.path),
          (try? run(URL(fileURLWithPath: "/usr/bin/env"), ["python3", "-c", "import selenium"]))?.status == 0 else {
        return (nil, "skipped: no selenium for python3 (pip install selenium), or not run from the repository")
    }
    let relay = try RelayProxy.start(to: port)
    defer { relay.stop() }
    let file = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ubiquity-browser-upload-\(getpid()).bin")
    try noise(bytes, seed: 23_000).write(to: file)
    defer { try? FileManager.default.removeItem(at: file) }
    let arguments = try JSONSerialization.data(withJSONObject: ["url": "http://127.0.0.1:\(relay.port)", "account": "ada", "password": "correct horse",
                                                                "container": container, "file": file.path])
    let (status, output) = try run(URL(fileURLWithPath: "/usr/bin/env"), ["python3", script.path, String(decoding: arguments, as: UTF8.self)])
    let answer = output.split(separator: "\n").last.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    guard status == 0, let ms = answer?["ms"] as? Double else { throw BenchError("the browser's upload failed: \(output.suffix(2000))") }
    let said = (try? run(URL(fileURLWithPath: "/usr/bin/chromium"), ["--version"]).output) ?? ""
    let version = said.split(separator: "\n").last { $0.hasPrefix("Chromium") }.map(String.init) ?? "Chromium"
    return (ms, "\(version), headless, through Selenium; \(relay.bytes) bytes on the wire")
}

/// A signed-in web session (the cookie and CSRF token the page holds), speaking to the server
/// at `port` on loopback.
struct WebSession {
    let base: String
    let cookie: String
    let csrf: String

    static func signIn(port: Int) async throws -> WebSession {
        let base = "http://127.0.0.1:\(port)"
        var request = HTTPClientRequest(url: base + "/web/api/sign-in")
        request.method = .POST
        request.headers.add(name: "X-Ubiquity-Web", value: "1")
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: ["account": "ada", "password": "correct horse"])))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 1 << 20)
        guard response.status == .ok, let setCookie = response.headers.first(name: "Set-Cookie"),
              let pair = setCookie.split(separator: ";").first,
              let csrf = (try JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any])?["csrf"] as? String else {
            throw BenchError("web sign-in was answered \(response.status)")
        }
        return WebSession(base: base, cookie: String(pair), csrf: csrf)
    }

    /// A device's token for the sync API (a device of the same account).
    func deviceToken() async throws -> String {
        let answer = try await json("POST", "/v1/sign-in", body: ["account": "ada", "password": "correct horse", "deviceName": "web-bench"])
        guard let token = answer["token"] as? String else { throw BenchError("no device token") }
        return token
    }

    /// A request as the page sends it (or, with `bearer`, as a device does): status and body.
    func send(_ method: String, _ path: String, body: Data? = nil, contentType: String = "application/json", bearer: String? = nil) async throws -> (status: Int, body: Data) {
        var request = HTTPClientRequest(url: base + path)
        request.method = .init(rawValue: method)
        if let bearer {
            request.headers.add(name: "Authorization", value: "Bearer \(bearer)")
        } else {
            request.headers.add(name: "Cookie", value: cookie)
            request.headers.add(name: "X-Ubiquity-Web", value: "1")
            request.headers.add(name: "X-CSRF-Token", value: csrf)
        }
        if let body {
            request.headers.add(name: "Content-Type", value: contentType)
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(120))
        let answer = try await response.body.collect(upTo: 256 << 20)
        return (Int(response.status.code), Data(answer.readableBytesView))
    }

    /// A JSON request and its JSON answer (an error for anything but 200).
    func json(_ method: String, _ path: String, body: [String: Any]? = nil, bearer: String? = nil) async throws -> [String: Any] {
        let answer = try await send(method, path, body: try body.map { try JSONSerialization.data(withJSONObject: $0) }, bearer: bearer)
        guard answer.status == 200, let object = try JSONSerialization.jsonObject(with: answer.body) as? [String: Any] else {
            throw BenchError("\(method) \(path) was answered \(answer.status): \(String(decoding: answer.body.prefix(300), as: UTF8.self))")
        }
        return object
    }
}
