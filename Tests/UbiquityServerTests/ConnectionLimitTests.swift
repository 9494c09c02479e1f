import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import NIOPosix
import Testing
@testable import UbiquityServer

/// Connections as a stranger holds them: opened and never used, or more of them than the server
/// keeps. (A live server on loopback; raw TCP connections.)
@Suite struct ConnectionLimitTests {
    /// A TCP connection to `port`; its channel.
    func connection(to port: Int) async throws -> any Channel {
        try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port).get()
    }

    /// Waits until `channel` is closed by the other end; how long that took (nil: not within `limit`).
    func closed(_ channel: any Channel, within limit: Duration) async throws -> Duration? {
        let start = ContinuousClock.now
        while channel.isActive {
            if ContinuousClock.now - start > limit { return nil }
            try await Task.sleep(for: .milliseconds(10))
        }
        return ContinuousClock.now - start
    }

    @Test func anIdleConnectionIsClosedAndABusyOneIsNot() async throws {
        var limits = ConnectionLimits()
        // (Six seconds: under a full test run on two cores, the busy connection's own event loop
        // was once held for three, and the server rightly closed it as idle — a CI failure.)
        limits.idleTimeout = .seconds(6)
        // The busy connection sends a header for as long as the test lasts: no head deadline here.
        var requestLimits = RequestLimits()
        requestLimits.headerTimeout = .seconds(600)
        let server = try await TestServer(connectionLimits: limits, requestLimits: requestLimits); defer { server.remove() }
        try await server.server.makeApplication().test(.live) { client in
            let port = try #require(client.port)
            let idle = try await connection(to: port)
            let busy = try await connection(to: port)
            // The busy one trickles a request's head, a byte every 250 ms until the test ends — from
            // its event loop, so that a test run that keeps the shared threads busy cannot hold a
            // byte back past the idle limit.
            let head = Array("GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ".utf8)
            let sent = NIOLoopBoundBox.makeBoxSendingValue(0, eventLoop: busy.eventLoop)
            let trickle = busy.eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: .milliseconds(250)) { _ in
                let index = sent.value
                sent.value += 1
                busy.writeAndFlush(ByteBuffer(bytes: [index < head.count ? head[index] : UInt8(ascii: "a")]), promise: nil)
            }
            defer { trickle.cancel() }
            // (Loose bounds: under a full test run a connection's own start can lag by a second.)
            let took = try await closed(idle, within: .seconds(20))
            #expect(took.map { $0 < .seconds(15) } == true, "\(String(describing: took))")
            try await Task.sleep(for: .seconds(1))
            #expect(busy.isActive, "bytes keep a connection")
            trickle.cancel()
            try? await busy.close()  // (already closed when the expectation above failed)
        }
    }

    @Test func connectionsPastTheMostAreClosedAtOnce() async throws {
        var limits = ConnectionLimits()
        limits.maximum = 3
        limits.idleTimeout = .seconds(60)
        let server = try await TestServer(connectionLimits: limits); defer { server.remove() }
        try await server.server.makeApplication().test(.live) { client in
            let port = try #require(client.port)
            // Connections one by one until one is closed at once (the test client may hold one).
            var held: [any Channel] = []
            var refused = false
            for _ in 0..<5 {
                let channel = try await connection(to: port)
                if try await closed(channel, within: .seconds(1)) == nil {
                    held.append(channel)
                } else {
                    refused = true
                    break
                }
            }
            #expect(refused && (2...3).contains(held.count), "held \(held.count)")
            for channel in held { #expect(channel.isActive, "those before stay") }
            // One goes: there is room for one again, once the server has seen it go (under a
            // full test run that can take longer than a moment: tries for up to 15 s).
            try await held.removeFirst().close()
            var again: (any Channel)?
            let start = ContinuousClock.now
            while again == nil, ContinuousClock.now - start < .seconds(15) {
                let channel = try await connection(to: port)
                if try await closed(channel, within: .seconds(1)) == nil { again = channel } else { try await Task.sleep(for: .milliseconds(200)) }
            }
            #expect(again != nil, "no room again after one connection went")
            for channel in held + (again.map { [$0] } ?? []) { try? await channel.close() }
        }
    }
}
