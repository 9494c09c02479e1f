import AsyncHTTPClient
import Foundation
import NIOCore
import NIOPosix
import Synchronization
import UbiquityServer

// `--connections`: what strangers' connections cost the server — ones that trickle a body a
// byte a second, and ones opened and left idle — in memory, in `/health`'s latency, and in how
// long the server keeps them.

/// This process's resident memory, in bytes (server and the raw client sockets share it).
func residentBytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
          let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "") else { return 0 }
    return kilobytes * 1024
}

/// Counts a connection's bytes in, and when the server closed it.
final class Watched: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let closedAt = Mutex<UInt64?>(nil)
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
    func channelInactive(context: ChannelHandlerContext) {
        closedAt.withLock { $0 = now() }
        context.fireChannelInactive()
    }
}

/// `count` raw TCP connections to `base`, each with what it sent first; the connections and their watchers.
func openConnections(_ base: URL, count: Int, first: String?) async throws -> [(channel: any Channel, watched: Watched)] {
    var opened: [(any Channel, Watched)] = []
    for _ in 0..<count {
        let watched = Watched()
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(watched) } }
            .connect(host: "127.0.0.1", port: base.port ?? 0).get()
        if let first { try await channel.writeAndFlush(ByteBuffer(string: first)) }
        opened.append((channel, watched))
    }
    return opened
}

/// When (seconds after `start`) the server closed each connection, sorted; those still open are left out.
func closeTimes(_ connections: [(channel: any Channel, watched: Watched)], since start: UInt64) -> [Double] {
    connections.compactMap { $0.watched.closedAt.withLock { $0 } }.map { Double($0 - start) / 1e9 }.sorted()
}

/// `/health` probed every 100 ms while `seconds` pass: the latencies, sorted; the peak memory seen.
func probe(_ client: HTTPClient, _ base: URL, for seconds: Double) async throws -> (latencies: [Double], peakResident: Int) {
    var latencies: [Double] = [], peak = residentBytes()
    let end = now() + UInt64(seconds * 1e9)
    while now() < end {
        latencies += try await healthLatencies(client, base, count: 1)
        peak = max(peak, residentBytes())
        try await Task.sleep(for: .milliseconds(100))
    }
    return (latencies.sorted(), peak)
}

func connectionRun(options: Options) async throws -> [String: Any] {
    var report: [String: Any] = [:]
    // 300 connections sending a sign-in body a byte a second (default limits: cut after ~20 s).
    report["slowBodies"] = try await withLoadServer(options: options, configure: { _ in }) { base -> [String: Any] in
        let client = loadClient(connections: 2)
        let idle = try await healthLatencies(client, base, count: 200)
        let before = residentBytes(), start = now()
        let head = "POST /v1/sign-in HTTP/1.1\r\nHost: load\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n"
        let connections = try await openConnections(base, count: options.slowConnections, first: head)
        let dripping = Task {
            while !Task.isCancelled {
                for connection in connections where connection.channel.isActive { connection.channel.writeAndFlush(ByteBuffer(string: " "), promise: nil) }
                try await Task.sleep(for: .seconds(1))
            }
        }
        let during = try await probe(client, base, for: 30)
        dripping.cancel()
        let closed = closeTimes(connections, since: start)
        for connection in connections { try? await connection.channel.close() }
        try await client.shutdown()
        return [
            "connections": connections.count, "closedByServer": closed.count,
            "closedAfterSeconds": ["first": closed.first ?? 0, "last": closed.last ?? 0],
            "residentBytes": ["before": before, "peak": during.peakResident, "after": residentBytes()],
            "healthIdleP99Seconds": percentile(idle, 0.99), "healthDuringP99Seconds": percentile(during.latencies, 0.99),
            "p99Ratio": (percentile(during.latencies, 0.99) / max(percentile(idle, 0.99), 1e-9) * 100).rounded() / 100,
        ]
    }
    // 5,000 connections opened and left idle, with a short idle timeout so the run is short.
    let idleTimeout = 15
    report["idleConnections"] = try await withLoadServer(options: options, configure: { $0.connectionLimits.idleTimeout = .seconds(idleTimeout) }) { base -> [String: Any] in
        let client = loadClient(connections: 2)
        let idle = try await healthLatencies(client, base, count: 200)
        let before = residentBytes(), start = now()
        let connections = try await openConnections(base, count: options.idleConnections, first: nil)
        let opened = Double(now() - start) / 1e9
        let during = try await probe(client, base, for: Double(idleTimeout) + 10)
        let closed = closeTimes(connections, since: start)
        for connection in connections { try? await connection.channel.close() }
        try await client.shutdown()
        return [
            "connections": connections.count, "openedInSeconds": opened, "idleTimeoutSeconds": idleTimeout,
            "closedByServer": closed.count, "closedAfterSeconds": ["first": closed.first ?? 0, "last": closed.last ?? 0],
            "residentBytes": ["before": before, "peak": during.peakResident, "after": residentBytes()],
            "healthIdleP99Seconds": percentile(idle, 0.99), "healthDuringP99Seconds": percentile(during.latencies, 0.99),
            "healthAnsweredDuring": during.latencies.count,
        ]
    }
    return report
}
