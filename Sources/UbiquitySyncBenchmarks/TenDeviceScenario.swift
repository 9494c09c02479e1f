import AsyncHTTPClient
import Foundation
import NIOCore
import UbiquityProtocol
import UbiquityTestSupport

/// Ten devices fetching a new large file at once (issue 48): how many bytes the server read
/// from its store for them, against the file's size (goal ≤ 1.2×: chunks in flight are read
/// once, not once a device). The devices are ten signed-in clients, each on a shaped link of
/// its own (the profile's), asking for every chunk of the file as a device's download does, all
/// started together once its commit is read; the bytes read come from the server's
/// `ubiquity_chunk_bytes_read_total` before and after.
struct TenDeviceFetch: Encodable {
    var devices: Int
    var fileBytes: Int
    var storeBytesRead: Int
    var storeReadOverFile: Double
    /// From the first request to the last device's last chunk.
    var seconds: Double
    var goalAtMost = 1.2
    var notes: String
}

/// Runs the ten devices' fetch on `peer`'s server: a new `mib` MiB file written on device A,
/// fetched by ten more devices once device B has it.
func tenDeviceFetch(_ peer: UbiquityPeer, shape: LinkShape, mib: Int) async throws -> TenDeviceFetch {
    let port = peer.serverPort, name = "ten-devices.bin"
    func call(_ method: String, _ path: String, token: String?, json: Data? = nil, through relay: Int? = nil) async throws -> ByteBuffer {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(relay ?? port)" + path)
        request.method = .init(rawValue: method)
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: json))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(600))
        let body = try await response.body.collect(upTo: 64 << 20)
        guard response.status.code < 300 else { throw BenchError("\(method) \(path): \(response.status.code) \(String(buffer: body))") }
        return body
    }
    func bytesRead() async throws -> Int {
        let text = String(buffer: try await call("GET", "/metrics", token: nil))
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("ubiquity_chunk_bytes_read_total ") }),
              let value = Double(line.split(separator: " ").last ?? "") else { throw BenchError("the server's metrics name no chunk bytes read") }
        return Int(value)
    }

    // Ten devices of the account, each through a link of its own.
    log("ubiquity: ten devices sign in")
    let relays = try (0..<10).map { _ in try RelayProxy.start(to: port, shape: shape) }
    defer { for relay in relays { relay.stop() } }
    var tokens: [String] = []
    for index in 0..<10 {
        let body = try JSONEncoder().encode(SignInRequest(account: "ada", password: "correct horse", deviceName: "fetcher-\(index)"))
        tokens.append(try JSONDecoder().decode(SignInResponse.self, from: Data((try await call("POST", "/v1/sign-in", token: nil, json: body)).readableBytesView)).token)
    }
    // Where the container is now: the file's commit comes after.
    var since: Int64 = 0
    while true {
        let page = try JSONDecoder().decode(ChangesResponse.self, from: Data((try await call("GET", "/v1/containers/\(container)/changes?since=\(since)&brief=true", token: tokens[0])).readableBytesView))
        since = page.more ? (page.next ?? page.items.last?.sequence ?? page.sequence) : page.sequence
        if !page.more { break }
    }

    log("ubiquity: a new \(mib) MiB file for ten devices at once")
    let bytes = randomBytes(mib << 20)
    try bytes.write(to: peer.sideA.appendingPathComponent(name))
    _ = try await until("device B has the file", limit: .seconds(900), every: .milliseconds(20)) {
        fileSize(peer.sideB.appendingPathComponent(name).path) == bytes.count && (try? Data(contentsOf: peer.sideB.appendingPathComponent(name))) == bytes
    }
    let page = try JSONDecoder().decode(ChangesResponse.self, from: Data((try await call("GET", "/v1/containers/\(container)/changes?since=\(since)", token: tokens[0])).readableBytesView))
    guard let item = page.items.first(where: { $0.name == name }), let chunks = item.manifest.chunks else { throw BenchError("the file's commit was not found") }
    let hashes = chunks.map(\.hash)

    let before = try await bytesRead(), start = ContinuousClock.now
    try await withThrowingTaskGroup(of: Void.self) { group in
        for (token, relay) in zip(tokens, relays) {
            group.addTask {
                // As a download asks: up to 16 MiB an answer, asking again for the rest.
                var left = hashes[...]
                while !left.isEmpty {
                    let asked = Array(left.prefix(ChunkBatch.maximumCount))
                    let body = try await call("POST", "/v1/chunks/fetch", token: token, json: try JSONEncoder().encode(ChunkFetchRequest(hashes: asked)), through: relay.port)
                    let frames = try body.withUnsafeReadableBytes { try ChunkBatch.frames(in: $0, maximumChunkSize: 64 << 20) }
                    guard !frames.isEmpty, zip(frames, asked).allSatisfy({ $0.hash == $1 }) else { throw BenchError("a fetch was answered with other chunks") }
                    left = left.dropFirst(frames.count)
                }
            }
        }
        try await group.waitForAll()
    }
    let took = ContinuousClock.now - start
    let seconds = Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
    let read = try await bytesRead() - before
    try? FileManager.default.removeItem(at: peer.sideA.appendingPathComponent(name))
    return TenDeviceFetch(devices: 10, fileBytes: bytes.count, storeBytesRead: read, storeReadOverFile: (Double(read) / Double(bytes.count)).rounded(toPlaces: 3),
                          seconds: seconds.rounded(toPlaces: 3),
                          notes: "ten signed-in devices, each on its own shaped link, fetching every chunk of a file just committed, all at once")
}
