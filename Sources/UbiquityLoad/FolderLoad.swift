import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import UbiquityProtocol
import UbiquityServer

// `--folder`: what one commit costs as its folder grows — p50 and p99 of single-item commits
// into an empty folder, then into the same kind of folder holding 10,000 items.

/// Sends `body` as JSON with the token; the answer's status and body.
func sendJSON(_ client: HTTPClient, _ url: String, method: HTTPMethod, token: String?, json body: some Encodable) async throws -> (Int, ByteBuffer) {
    var request = HTTPClientRequest(url: url)
    request.method = method
    request.headers.add(name: "Content-Type", value: "application/json")
    if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
    request.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(body)))
    let response = try await client.execute(request, timeout: .seconds(120))
    return (Int(response.status.code), try await response.body.collect(upTo: 64 << 20))
}

func folderRun(options: Options) async throws -> [String: Any] {
    try await withLoadServer(options: options, configure: { _ in }) { base -> [String: Any] in
        let client = loadClient(connections: 2)
        defer { _ = client.shutdown() }
        let (_, signedIn) = try await sendJSON(client, base.appendingPathComponent("v1/sign-in").absoluteString, method: .POST, token: nil,
                                           json: SignInRequest(account: "victim", password: "the victim's password", deviceName: "load"))
        let token = try JSONDecoder().decode(SignInResponse.self, from: signedIn).token
        let items = base.absoluteString + "/v1/containers/\(container)"
        func folder(_ id: String) -> ItemUpdate { ItemUpdate(baseRevision: nil, name: id, kind: .directory, modificationDate: 1_800_000_000, manifest: Manifest()) }
        func file(_ name: String, in parent: String) -> ItemUpdate {
            ItemUpdate(baseRevision: nil, name: name, parent: parent, kind: .file, modificationDate: 1_800_000_000, type: "public.plain-text", manifest: Manifest(chunks: []))
        }
        /// `count` single-item commits into `parent`: their latencies, sorted.
        func commits(into parent: String, count: Int) async throws -> [Double] {
            var latencies: [Double] = []
            for index in 0..<count {
                let start = now()
                let (status, body) = try await sendJSON(client, "\(items)/items/\(parent)-probe-\(index)", method: .PUT, token: token, json: file("Probe \(index).txt", in: parent))
                guard status == 200 else { throw LoadError("commit: \(status) \(String(buffer: body))") }
                latencies.append(Double(now() - start) / 1e9)
            }
            return latencies.sorted()
        }
        for id in ["empty", "full"] { _ = try await sendJSON(client, "\(items)/items/\(id)", method: .PUT, token: token, json: folder(id)) }
        // The full folder: 10,000 files in batches of 1,000.
        for batch in 0..<options.folderItems / 1_000 {
            let commits = (0..<1_000).map { ItemCommit(item: "full-\(batch)-\($0)", update: file("File \(batch)-\($0).txt", in: "full")) }
            let (status, body) = try await sendJSON(client, "\(items)/commits?brief=true", method: .POST, token: token, json: CommitBatchRequest(commits: commits))
            guard status == 200 else { throw LoadError("batch: \(status) \(String(buffer: body))") }
        }
        _ = try await commits(into: "empty", count: 50) // warm up
        let empty = try await commits(into: "empty", count: 300)
        let full = try await commits(into: "full", count: 300)
        let emptyP50 = percentile(empty, 0.5), fullP50 = percentile(full, 0.5)
        return [
            "folderItems": options.folderItems,
            "emptyFolderSeconds": ["p50": emptyP50, "p99": percentile(empty, 0.99)],
            "fullFolderSeconds": ["p50": fullP50, "p99": percentile(full, 0.99)],
            "p50Ratio": (fullP50 / max(emptyP50, 1e-9) * 100).rounded() / 100,
        ]
    }
}
