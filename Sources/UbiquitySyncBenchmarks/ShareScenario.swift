import AsyncHTTPClient
import Foundation
import GRDB
import NIOCore
import Ubiquity

// The sharing figures of issue 46 (`--sharing-only`): what sharing a large folder costs the
// server, how soon a participant's device lists it, and what going through a share adds to an
// edit's way to the owner's other device — against the same edit within one account, in the
// same run.

/// What was measured, with the goals.
struct SharingFigures: Encodable {
    /// Items in the large folder shared.
    var items: Int
    /// Sharing a folder of 10 items, and the large one: the server's answer to `POST /v1/shares`
    /// as a client on loopback sees it (median of the runs).
    var shareSmallFolderMs: Double
    var shareLargeFolderMs: Double
    /// The large over the small: about 1 when sharing is O(1) in the folder's size.
    var largeOverSmall: Double
    /// Rows of the server's database that sharing the large folder added, by table (no item,
    /// revision or chunk is copied: only the share's own row).
    var rowsAddedBySharing: [String: Int]
    var goalShareMs = 100.0
    /// The participant's first listing through the share: every page of `GET /v1/shares/ID/changes`
    /// read by a client on loopback, and the participant's agent from the accepted invitation to
    /// knowing every item (metadata first).
    var serverListingMs: Double
    var participantAgentListingMs: Double
    var goalFirstListingMs = 2000.0
    /// An edit's way to the owner's other device (B): from the owner's device A (same account),
    /// and from the participant's device C through the share — medians of `runs`, and what the
    /// share adds.
    var sameAccountEditMs: Double
    var participantEditMs: Double
    var shareAddsMs: Double
    var goalShareAddsMs = 10.0
    var runs: Int
    var notes: String
}

/// A JSON request to the server as a device (its token), on loopback; the status and body.
private func request(_ port: Int, _ method: String, _ path: String, token: String, body: Data? = nil) async throws -> (status: Int, body: Data) {
    var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)" + path)
    request.method = .init(rawValue: method)
    request.headers.add(name: "Authorization", value: "Bearer \(token)")
    if let body {
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: body))
    }
    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(120))
    let answer = try await response.body.collect(upTo: 256 << 20)
    return (Int(response.status.code), Data(answer.readableBytesView))
}

private func object(_ data: Data) -> [String: Any] { (try? JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:] }

func sharingFigures(in folder: URL, items: Int, runs: Int) async throws -> SharingFigures {
    let peer = try await UbiquityPeer.start(in: folder, participant: "bob")
    defer { Task { await peer.stop() } }
    let port = peer.serverPort
    func token(_ device: Int) throws -> String {
        guard let credentials = try UbiquityCredentials.load(from: peer.devices[device].paths) else { throw BenchError("device \(device) is not signed in") }
        return credentials.token
    }
    let (ada, bob) = (try token(0), try token(2))

    // The folders, made on device A and in step on A and B.
    log("sharing: making a folder of \(items) items and one of 10")
    let large = peer.sideA.appendingPathComponent("Large"), small = peer.sideA.appendingPathComponent("Small")
    for (folder, count) in [(large, items), (small, 10)] {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
        for index in 0..<count { try Data("item \(index)\n".utf8).write(to: folder.appendingPathComponent("f-\(index).txt")) }
    }
    _ = try await until("device B has both folders", limit: .seconds(300), every: .milliseconds(20)) {
        visibleNames(in: peer.sideB.appendingPathComponent("Large"))?.count == items && visibleNames(in: peer.sideB.appendingPathComponent("Small"))?.count == 10
    }
    try await peer.settle()
    var tops: [[String: Any]] = [], cursor = 0
    while true {
        let changes = object(try await request(port, "GET", "/v1/containers/\(container)/changes?since=\(cursor)&limit=5000&brief=true", token: ada).body)
        let listed = (changes["items"] as? [[String: Any]]) ?? []
        tops += listed.filter { $0["parent"] == nil }
        if changes["more"] as? Bool != true { break }
        cursor = listed.last?["sequence"] as? Int ?? cursor
    }
    guard let largeId = tops.first(where: { $0["name"] as? String == "Large" })?["id"] as? String,
          let smallId = tops.first(where: { $0["name"] as? String == "Small" })?["id"] as? String else { throw BenchError("the folders' ids were not found") }

    // Sharing: the small folder, then the large one (each made once: later calls answer the share made).
    let database = try DatabaseQueue(path: folder.appendingPathComponent("server/ubiquity.sqlite").path, configuration: { var c = Configuration(); c.readonly = true; return c }())
    let tables = ["item", "revision", "revisionChunk", "revisionChunkByRevision", "revisionManifest", "chunk", "containerChunk", "share", "shareParticipant"]
    func rows() throws -> [String: Int] {
        try database.read { db in
            var counts: [String: Int] = [:]
            for table in tables where try db.tableExists(table) { counts[table] = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM \(table)") ?? 0 }
            return counts
        }
    }
    func share(_ item: String) async throws -> (ms: Double, id: String) {
        let start = ContinuousClock.now
        let answer = try await request(port, "POST", "/v1/shares", token: ada, body: try JSONSerialization.data(withJSONObject: ["container": container, "item": item]))
        let ms = (ContinuousClock.now - start).inMilliseconds
        guard answer.status == 200, let id = object(answer.body)["id"] as? String else { throw BenchError("sharing was answered \(answer.status)") }
        return (ms, id)
    }
    // Each run shares both folders anew and stops sharing them (a share made each time).
    var smallTimes: [Double] = [], largeTimes: [Double] = []
    for _ in 0..<max(1, runs) {
        for (item, index) in [(smallId, 0), (largeId, 1)] {
            let made = try await share(item)
            if index == 0 { smallTimes.append(made.ms) } else { largeTimes.append(made.ms) }
            guard try await request(port, "DELETE", "/v1/shares/\(made.id)", token: ada).status == 204 else { throw BenchError("stopping a share failed") }
        }
    }
    let before = try rows()
    let largeShare = try await share(largeId)
    largeTimes.append(largeShare.ms)
    let after = try rows()
    var added: [String: Int] = [:]
    for (table, count) in after { added[table] = count - (before[table] ?? 0) }

    // Bob invited and accepting: the participant's agent lists the folder.
    let invited = try await request(port, "POST", "/v1/shares/\(largeShare.id)/participants", token: ada,
                                    body: try JSONSerialization.data(withJSONObject: ["name": "bob", "role": "readWrite"]))
    guard invited.status == 201, let invitation = object(invited.body)["id"] as? String else { throw BenchError("the invitation was answered \(invited.status)") }
    guard try await request(port, "POST", "/v1/shares/invitations/\(invitation)/accept", token: bob).status == 204 else { throw BenchError("accepting failed") }
    let agentListing = try await until("device C lists the shared folder", limit: .seconds(300), every: .milliseconds(5)) {
        guard let status = try? peer.devices[2].agent.send(AgentRequest(.status), timeout: .seconds(5)).status else { return false }
        return status.containers.contains { $0.share != nil && $0.items >= items + 1 }
    }
    // The same listing as a client reads it, page by page.
    let listing = ContinuousClock.now
    var since = 0, listed = 0
    while true {
        let page = object(try await request(port, "GET", "/v1/shares/\(largeShare.id)/changes?since=\(since)&limit=5000&brief=true", token: bob).body)
        listed += (page["items"] as? [Any])?.count ?? 0
        if page["more"] as? Bool != true { break }
        guard let next = page["next"] as? Int else { throw BenchError("a page with more to come named no next cursor") }
        since = next
    }
    let serverListing = (ContinuousClock.now - listing).inMilliseconds
    guard listed >= items + 1 else { throw BenchError("the share listed \(listed) items, not \(items + 1)") }
    try await peer.settle()
    _ = try await until("device C has every file", limit: .seconds(900), every: .milliseconds(20)) {
        visibleNames(in: peer.roots[2].appendingPathComponent("Documents/Large"))?.count == items
    }

    // Edits to the owner's other device: from A (same account) and from C (through the share), alternating.
    var same: [Double] = [], shared: [Double] = []
    let onB = peer.sideB.appendingPathComponent("Large")
    for run in 0..<runs {
        for (device, documents) in [(0, peer.sideA), (2, peer.roots[2].appendingPathComponent("Documents"))] {
            let name = "f-\(run * 2 + (device == 0 ? 0 : 1)).txt", text = Data("edited by device \(device), run \(run)\n".utf8)
            try await Task.sleep(for: .milliseconds(300)) // (quiet before each edit)
            let start = ContinuousClock.now
            try text.write(to: documents.appendingPathComponent("Large").appendingPathComponent(name), options: .atomic)
            _ = try await until("device B has the edit", limit: .seconds(60), every: .microseconds(500)) { (try? Data(contentsOf: onB.appendingPathComponent(name))) == text }
            let ms = (ContinuousClock.now - start).inMilliseconds
            if device == 0 { same.append(ms) } else { shared.append(ms) }
        }
    }
    let sameMs = percentile(same, 0.5), sharedMs = percentile(shared, 0.5)
    return SharingFigures(items: items, shareSmallFolderMs: percentile(smallTimes, 0.5).rounded(toPlaces: 2), shareLargeFolderMs: percentile(largeTimes, 0.5).rounded(toPlaces: 2),
                          largeOverSmall: (percentile(largeTimes, 0.5) / max(0.001, percentile(smallTimes, 0.5))).rounded(toPlaces: 2),
                          rowsAddedBySharing: added, serverListingMs: serverListing.rounded(toPlaces: 1),
                          participantAgentListingMs: agentListing.inMilliseconds.rounded(toPlaces: 1),
                          sameAccountEditMs: sameMs.rounded(toPlaces: 1), participantEditMs: sharedMs.rounded(toPlaces: 1),
                          shareAddsMs: (sharedMs - sameMs).rounded(toPlaces: 1), runs: runs,
                          notes: "ubiquity serve (embedded SQLite) and three ubiquity agent --greedy processes: ada's devices A and B, bob's device C; each device through its own counting relay; the edits alternate A and C, each timed from the write until device B holds it")
}
