import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import NIOPosix
import Synchronization
import Testing
@testable import UbiquityServer

/// Requests as a stranger sends them: trickled, oversized, malformed, or upgrading without a
/// token. (A live server on loopback; raw TCP connections.)
@Suite struct RequestLimitTests {
    /// A raw TCP connection that keeps what it receives.
    struct RawConnection {
        let channel: any Channel
        let received: Received

        final class Received: ChannelInboundHandler, Sendable {
            typealias InboundIn = ByteBuffer
            let bytes = Mutex<[UInt8]>([])
            func channelRead(context: ChannelHandlerContext, data: NIOAny) {
                let buffer = unwrapInboundIn(data)
                bytes.withLock { $0 += buffer.readableBytesView }
            }
        }

        init(port: Int) async throws {
            let received = Received()
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(received) }
                }
                .connect(host: "127.0.0.1", port: port).get()
            self.received = received
        }

        func send(_ text: String) async throws { try await channel.writeAndFlush(ByteBuffer(string: text)) }
        func send(_ bytes: [UInt8]) async throws { try await channel.writeAndFlush(ByteBuffer(bytes: bytes)) }
        var text: String { String(decoding: received.bytes.withLock { $0 }, as: UTF8.self) }

        /// Waits until the server closed the connection; how long that took (nil: not within `limit`).
        func closed(within limit: Duration) async throws -> Duration? {
            let start = ContinuousClock.now
            while channel.isActive {
                if ContinuousClock.now - start > limit { return nil }
                try await Task.sleep(for: .milliseconds(10))
            }
            return ContinuousClock.now - start
        }

        /// Waits until `count` answers' heads arrived (or `limit` passed); what arrived.
        func answers(_ count: Int, within limit: Duration) async throws -> String {
            let start = ContinuousClock.now
            while text.components(separatedBy: "HTTP/1.1 ").count - 1 < count, ContinuousClock.now - start < limit {
                try await Task.sleep(for: .milliseconds(10))
            }
            try await Task.sleep(for: .milliseconds(50)) // the rest of the last answer
            return text
        }
    }

    /// A WebSocket upgrade request for `path`, with `headers` (each ending in CRLF).
    func upgrade(_ path: String, headers: String = "") -> String {
        "GET \(path) HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\(headers)\r\n"
    }

    /// Sends `request` on a connection of its own: the server answers `status` with the JSON
    /// error `code`, then closes the connection.
    func expectRefusal(_ request: String, status: Int, code: String) async throws {
        try await withServer { port, _ in
            let connection = try await RawConnection(port: port)
            try await connection.send(request)
            #expect(try await connection.closed(within: .seconds(60)) != nil)
            #expect(connection.text.hasPrefix("HTTP/1.1 \(status)"), "\(connection.text.prefix(200))")
            #expect(connection.text.contains(#""code":"\#(code)""#))
        }
    }

    /// A server with short request limits, live on loopback.
    func withServer(minimumBodyRate: Int = 500, _ body: @Sendable (Int, TestServer) async throws -> Void) async throws {
        var limits = RequestLimits()
        limits.headerTimeout = .seconds(2)
        limits.bodyTimeout = .seconds(2)
        limits.minimumBodyRate = minimumBodyRate
        let server = try await TestServer(requestLimits: limits); defer { server.remove() }
        try await server.server.makeApplication().test(.live) { client in try await body(try #require(client.port), server) }
    }

    @Test func aHeadThatTricklesIsAnswered408AndClosed() async throws {
        try await withServer { port, _ in
            let connection = try await RawConnection(port: port)
            let started = ContinuousClock.now
            let trickle = Task {
                for byte in "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ".utf8 + Array(repeating: UInt8(ascii: "a"), count: 100) {
                    try await connection.send([byte])
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
            defer { trickle.cancel() }
            // Cut after about 2 s; the trickle alone would last 28 s (a loaded machine may be late).
            // (Timed from the first byte to when the close is seen: a late test task only adds.)
            let took = try await connection.closed(within: .seconds(25)).map { _ in ContinuousClock.now - started }
            #expect(took.map { $0 >= .seconds(1) } == true, "\(String(describing: took))")
            #expect(connection.text.hasPrefix("HTTP/1.1 408"), "\(connection.text)")
            #expect(connection.text.contains(#""code":"requestTimeout""#))
        }
    }

    @Test func aBodyThatTricklesIsCut() async throws {
        try await withServer { port, _ in
            let connection = try await RawConnection(port: port)
            let started = ContinuousClock.now // (before the head: a late test task only adds)
            try await connection.send("POST /v1/sign-in HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2000\r\n\r\n")
            let trickle = Task {
                for _ in 0..<2000 {
                    try await connection.send("{")
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
            defer { trickle.cancel() }
            // 2 s, plus a second for every 500 bytes (a few here): cut after about 2 s; the trickle
            // alone would last 400 s (a loaded machine may be late).
            let took = try await connection.closed(within: .seconds(30)).map { _ in ContinuousClock.now - started }
            #expect(took.map { $0 >= .seconds(1) } == true, "\(String(describing: took))")
        }
    }

    @Test func aBodyAtAnHonestRateIsNotCut() async throws {
        // 16 bytes a second the least: each 4 KiB piece extends the body's time by 256 s, so a
        // test task that the whole suite's load keeps waiting between pieces is still in time (CI
        // met waits of 10 s at 500 a second, and one of over 60 s at 64), while the body still
        // outlasts its 2 s.
        try await withServer(minimumBodyRate: 16) { port, server in
            _ = try await server.admin.createAccount(name: "ann", password: "correct horse")
            let connection = try await RawConnection(port: port)
            // 16 KiB in four pieces over more than the body's 2 s.
            let body = #"{"account":"ann","password":"correct horse","deviceName":"phone"}"#
            let padded = Array((body + String(repeating: " ", count: (16 << 10) - body.utf8.count)).utf8)
            // The head goes with the first piece: a test task kept waiting between them for more
            // than the body's 2 s (CI met it) would be cut before any allowance was earned.
            let head = Array("POST /v1/sign-in HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(padded.count)\r\n\r\n".utf8)
            try await connection.send(head + Array(padded[0..<4096]))
            for piece in stride(from: 4096, to: padded.count, by: 4096) {
                try await Task.sleep(for: .milliseconds(800))
                try await connection.send(Array(padded[piece..<piece + 4096]))
            }
            // (The sign-in's password hash takes seconds while the whole suite runs.)
            let answer = try await connection.answers(1, within: .seconds(60))
            #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer)")
            // (The server may have closed the kept-alive connection by now on a loaded run, its
            // idle time up while this test waited for a thread: the answer is what counts.)
            try? await connection.channel.close()
        }
    }

    @Test func aKeptAliveConnectionWaitsBetweenRequestsWithoutTheHeadClock() async throws {
        try await withServer { port, _ in
            let connection = try await RawConnection(port: port)
            try await connection.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try await connection.answers(1, within: .seconds(60)).hasPrefix("HTTP/1.1 200"))
            try await Task.sleep(for: .seconds(3)) // longer than the head's 2 s: not timed between requests
            #expect(connection.channel.isActive)
            try await connection.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            let both = try await connection.answers(2, within: .seconds(60))
            #expect(both.components(separatedBy: "HTTP/1.1 200").count - 1 == 2, "\(both)")
            try await connection.channel.close()
        }
    }

    @Test func oversizeHeadersAreAnswered431() async throws {
        try await expectRefusal("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "a", count: 80 << 10))\r\n\r\n",
                                status: 431, code: "headersTooLarge")
    }

    @Test func aMalformedRequestIsAnswered400() async throws {
        try await expectRefusal("GET /health HTTP/1.1\r\nHost: x\r\nBad Header Without Colon\r\n\r\n", status: 400, code: "malformedRequest")
    }

    @Test func aWebSocketUpgradeWithoutAValidTokenIsAnswered401() async throws {
        try await withServer { port, _ in
            for authorization in ["", "Authorization: Bearer not-a-token\r\n"] {
                let connection = try await RawConnection(port: port)
                try await connection.send(upgrade("/v1/push", headers: authorization))
                let answer = try await connection.answers(1, within: .seconds(60))
                #expect(answer.hasPrefix("HTTP/1.1 401"), "\(answer)")
                #expect(answer.contains(#""code":"unauthorized""#), "\(answer)")
                try? await connection.channel.close()
            }
            // An upgrade on a path that has none: 404, said as JSON.
            let connection = try await RawConnection(port: port)
            try await connection.send(upgrade("/v1/nowhere"))
            let answer = try await connection.answers(1, within: .seconds(60))
            #expect(answer.hasPrefix("HTTP/1.1 404"), "\(answer)")
            try? await connection.channel.close()
        }
    }

    @Test func aWebSocketUpgradeWithATokenIsUpgradedAndPushes() async throws {
        try await withServer { port, server in
            _ = try await server.admin.createAccount(name: "ann", password: "correct horse")
            let token = try await server.run { client in try await client.signIn("ann").token }
            let connection = try await RawConnection(port: port)
            try await connection.send(upgrade("/v1/push", headers: "Authorization: Bearer \(token)\r\n"))
            let start = ContinuousClock.now
            while !connection.text.contains("connected"), ContinuousClock.now - start < .seconds(60) { try await Task.sleep(for: .milliseconds(20)) }
            #expect(connection.text.hasPrefix("HTTP/1.1 101"), "\(connection.text)")
            #expect(connection.text.contains(#""type":"connected""#), "\(connection.text)")
            // Upgraded: the request clocks no longer apply (the head's 2 s pass without a cut).
            try await Task.sleep(for: .seconds(3))
            #expect(connection.channel.isActive, "\(connection.text)")
            try? await connection.channel.close()
        }
    }
}
