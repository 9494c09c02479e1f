import HTTPTypes
import Hummingbird
import NIOCore

/// Reverse proxies whose `X-Forwarded-For` the server believes (`ubiquity serve
/// --trusted-proxy`). Behind a proxy every connection comes from the proxy; the client's own
/// address — what sign-in throttling counts and the log says — is the last address of the
/// header that is not itself a trusted proxy. A request from anywhere else keeps its
/// connection's address whatever headers it sends: a stranger cannot pick the address it is
/// counted under.
package struct TrustedProxies: Sendable {
    /// Networks: an address's bytes (4 or 16) and its prefix length.
    let networks: [(bytes: [UInt8], prefix: Int)]

    /// No proxy is trusted (the default).
    package init() { networks = [] }

    /// Parses addresses and networks: `10.0.0.5`, `10.0.0.0/8`, `fd00::/8`, `::1`.
    /// - Throws: ``SyncError`` `invalidAddress` naming one that is not.
    package init(_ entries: [String]) throws {
        networks = try entries.map { entry in
            let parts = entry.split(separator: "/", maxSplits: 1).map(String.init)
            guard let first = parts.first, let address = try? SocketAddress(ipAddress: first, port: 0), let bytes = Self.bytes(of: address) else {
                throw SyncError.badRequest("invalidAddress", "not an IP address or network: \(entry)")
            }
            let prefix = parts.count == 2 ? Int(parts[1]) : bytes.count * 8
            guard let prefix, (0...bytes.count * 8).contains(prefix) else {
                throw SyncError.badRequest("invalidAddress", "not a prefix length for \(first): \(entry)")
            }
            return (bytes, prefix)
        }
    }

    /// An address's bytes: 4 for IPv4 (also an IPv4 address reached over IPv6, `::ffff:a.b.c.d`), 16 for IPv6.
    static func bytes(of address: SocketAddress) -> [UInt8]? {
        switch address {
        case .v4(let v4): return withUnsafeBytes(of: v4.address.sin_addr.s_addr) { Array($0) }
        case .v6(let v6):
            let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff { return Array(bytes[12..<16]) }
            return bytes
        case .unixDomainSocket: return nil
        }
    }

    /// Whether `address` is one of the trusted proxies.
    func contains(_ address: SocketAddress) -> Bool {
        guard let bytes = Self.bytes(of: address) else { return false }
        return networks.contains { network in
            guard network.bytes.count == bytes.count else { return false }
            let whole = network.prefix / 8, rest = network.prefix % 8
            guard bytes[..<whole] == network.bytes[..<whole] else { return false }
            guard rest > 0 else { return true }
            let mask = UInt8(0xff) << (8 - rest)
            return bytes[whole] & mask == network.bytes[whole] & mask
        }
    }

    /// The client's address: `peer`'s, unless `peer` is a trusted proxy — then the last address
    /// of `forwardedFor` (the `X-Forwarded-For` values, in order) that is not a trusted proxy.
    func client(peer: SocketAddress?, forwardedFor: [String]) -> SocketAddress? {
        guard let peer, !networks.isEmpty, contains(peer) else { return peer }
        let hops = forwardedFor.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        for hop in hops.reversed() {
            guard let address = try? SocketAddress(ipAddress: hop, port: 0) else { return peer } // a hop it cannot read: stop there
            if !contains(address) { return address }
        }
        return peer
    }
}

/// Sets each request's client address (``SyncContext/clientAddress``) from ``TrustedProxies``.
struct ClientAddressMiddleware: RouterMiddleware {
    typealias Context = SyncContext
    let proxies: TrustedProxies

    func handle(_ request: Request, context: SyncContext, next: (Request, SyncContext) async throws -> Response) async throws -> Response {
        guard !proxies.networks.isEmpty else { return try await next(request, context) }
        var context = context
        context.clientAddress = proxies.client(peer: context.remoteAddress, forwardedFor: request.headers[values: .xForwardedFor])
        return try await next(request, context)
    }
}

extension HTTPField.Name {
    /// `X-Forwarded-For`.
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
}
