import CompressNIO
import Foundation
import Hummingbird
import Testing
import UbiquityProtocol
@testable import UbiquityServer

/// JSON bodies gzip-compressed both ways, and what a body that inflates without end gets.
@Suite struct BodyCodingTests {
    @Test func bodiesTravelCompressedAndInflateOnlySoFar() async throws {
        let server = try await TestServer.withAccount("ada"); defer { server.remove() }
        try await server.run { client in
            let laptop = try await client.signIn("ada", device: "laptop")
            let gzip: HTTPFields = [.contentType: "application/json", .contentEncoding: "gzip", .acceptEncoding: "gzip"]

            // A small answer goes as it is; a request without a body is not told what bodies the
            // server takes, one that sent its body as it is is (RFC 7694).
            let account = try await client.send(.get, "/v1/account", token: laptop.token, headers: [.acceptEncoding: "gzip"])
            #expect(account.status == .ok && account.headers[.acceptEncoding] == nil)
            #expect(account.headers[.contentType] == "application/json" && account.headers[.server] == nil)
            let missing = try await client.send(.post, "/v1/chunks/missing", token: laptop.token, json: MissingChunksRequest(hashes: []))
            #expect(missing.status == .ok && missing.headers[.acceptEncoding] == "gzip" && missing.headers[.contentEncoding] == nil)

            // A compressed commit batch is read; its large answer comes compressed.
            let commits = (0..<100).map { ItemCommit(item: "f\($0)", update: fileUpdate("file \($0).txt", [Array("file \($0)".utf8)])) }
            try await client.uploadKnownChunks(of: commits.map(\.update), token: laptop.token)
            var plain = ByteBuffer(bytes: try JSONEncoder().encode(CommitBatchRequest(commits: commits)))
            let compressed = try plain.compress(with: .gzip())
            #expect(compressed.readableBytes * 3 < plain.writerIndex, "similar items compress well")
            let answer = try await client.send(.post, "/v1/containers/\(notes)/commits?brief=true", token: laptop.token,
                                               raw: Array(buffer: compressed), headers: gzip)
            #expect(answer.status == .ok, "\(String(buffer: answer.body))")
            #expect(answer.headers[.contentEncoding] == "gzip")
            #expect(answer.headers[.acceptEncoding] == nil, "it sends compressed bodies already")
            var body = answer.body
            let results = try JSONDecoder().decode(CommitBatchResponse.self, from: Data(buffer: try body.decompress(with: .gzip()))).results
            #expect(results.count == 100 && results.allSatisfy { $0.commit != nil })
            // Not asked for: not compressed.
            let fetched = try await client.send(.post, "/v1/containers/\(notes)/fetch", token: laptop.token, json: ItemsFetchRequest(ids: commits.map(\.item)))
            let items = try fetched.decode(ItemsResponse.self).items
            #expect(fetched.headers[.contentEncoding] == nil && items.count == 100)

            // A few kilobytes that inflate past the 8 MiB any JSON body may have: refused, not held.
            var bomb = ByteBuffer(bytes: Array(#"{"commits": ["#.utf8) + [UInt8](repeating: 0x20, count: 9 << 20) + Array("]}".utf8))
            let small = try bomb.compress(with: .gzip())
            #expect(small.readableBytes < 64 << 10)
            let refused = try await client.send(.post, "/v1/containers/\(notes)/commits", token: laptop.token, raw: Array(buffer: small), headers: gzip)
            #expect(refused.status == .contentTooLarge && refused.errorCode == "bodyTooLarge", "\(refused.status): \(String(buffer: refused.body))")
            // Not gzip at all; a coding the server does not take.
            let broken = try await client.send(.post, "/v1/containers/\(notes)/commits", token: laptop.token, raw: Array("not gzip".utf8), headers: gzip)
            #expect(broken.status == .badRequest && broken.errorCode == "badEncoding")
            let brotli = try await client.send(.post, "/v1/containers/\(notes)/commits", token: laptop.token, raw: Array(buffer: compressed),
                                               headers: [.contentType: "application/json", .contentEncoding: "br"])
            #expect(brotli.status == .unsupportedMediaType && brotli.errorCode == "unsupportedEncoding")
            // Nothing of those changed anything.
            #expect(try await client.changes(notes, token: laptop.token).items.count == 100)
        }
    }

    @Test func acceptEncodingIsReadAsHTTPSaysIt() {
        #expect(SyncResponseEncoder.acceptsGzip(["gzip"]))
        #expect(SyncResponseEncoder.acceptsGzip(["deflate, gzip;q=0.5"]))
        #expect(SyncResponseEncoder.acceptsGzip(["*"]))
        #expect(!SyncResponseEncoder.acceptsGzip(["gzip;q=0"]))
        #expect(!SyncResponseEncoder.acceptsGzip(["identity", "br"]))
        #expect(!SyncResponseEncoder.acceptsGzip([]))
    }
}
