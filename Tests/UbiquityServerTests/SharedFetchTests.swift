import Foundation
import Testing
import UbiquityProtocol
import UbiquityTestSupport
@testable import UbiquityServer

/// Fan-out (issue 48): ten devices bringing down the same new file at once make the server
/// read it from its store about once — fetches of the same chunks share a read
/// (``SharedFetches``) — and each device is still only given what it may read.
@Suite struct SharedFetchTests {
    @Test(arguments: Backend.all)
    func tenDevicesFetchingOneFileAtOnceReadItOnce(backend: Backend) async throws {
        let server = try await TestServer(backend); defer { server.remove() }
        _ = try await server.admin.createAccount(name: "ann", password: "correct horse")
        _ = try await server.admin.createAccount(name: "bob", password: "correct horse")
        let chunks = (0..<48).map { _ in [UInt8](randomBytes(256 << 10)) } // 12 MiB
        let size = chunks.reduce(0) { $0 + $1.count }
        let hashes = chunks.map(sha256)
        try await server.run { client in
            let laptop = try await client.signIn("ann")
            #expect(try await client.commit(notes, "film", fileUpdate("Film.mov", chunks), token: laptop.token).item.uploaded)
            var devices: [String] = []
            for index in 0..<10 { devices.append(try await client.signIn("ann", device: "phone-\(index)").token) }
            let metrics = server.server.services.metrics
            let readBefore = metrics.value(.chunkBytesRead)
            // Each device asks for the file in batches of 4 MiB, all of them at once.
            let batches = stride(from: 0, to: hashes.count, by: 16).map { Array(hashes[$0..<min($0 + 16, hashes.count)]) }
            let received = try await withThrowingTaskGroup(of: Int.self) { group in
                for token in devices {
                    for batch in batches {
                        group.addTask {
                            let answer = try await client.send(.post, "/v1/chunks/fetch", token: token, json: ChunkFetchRequest(hashes: batch))
                            #expect(answer.status == .ok)
                            let got = try ChunkBatch(decoding: Array(buffer: answer.body), maximumChunkSize: 1 << 22)
                            #expect(got.chunks.map(\.hash) == batch && got.chunks.allSatisfy { sha256(Array($0.bytes)) == $0.hash })
                            return got.chunks.reduce(0) { $0 + $1.bytes.count }
                        }
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(received == 10 * size)
            let read = metrics.value(.chunkBytesRead) - readBefore
            #expect(Double(read) <= 1.2 * Double(size), "read \(read) bytes from the store for ten fetches of \(size)")
            #expect(metrics.value(.chunkBytesSent) >= 10 * size)

            // Another account asking for the same chunks shares nothing: refused as before.
            let bob = try await client.signIn("bob")
            let refused = try await client.send(.post, "/v1/chunks/fetch", token: bob.token, json: ChunkFetchRequest(hashes: batches[0]))
            #expect(refused.status == .notFound, "\(refused.status)")
        }
    }
}
