import Crypto
import Logging
import Synchronization
import Foundation
import UbiquityProtocol
import Hummingbird
import HummingbirdWebSocket
import NIOCore

/// Each request's context: who is asking (set by ``DeviceAuthMiddleware``).
package struct SyncContext: RequestContext, WebSocketRequestContext, RemoteAddressRequestContext {
    /// Hummingbird's own per-request storage.
    package var coreContext: CoreRequestContextStorage
    /// Where a WebSocket upgrade's handler is kept.
    package let webSocket: WebSocketHandlerReference<SyncContext>
    /// The signed-in device, once authenticated.
    var device: DeviceAuth?
    /// The address the request came from (nil when driven without a connection, in tests).
    package let remoteAddress: SocketAddress?
    /// The request's connection (nil when driven without one).
    let channel: (any Channel)?
    /// The client's address: the connection's, or, behind a trusted reverse proxy, the one it
    /// forwarded (``TrustedProxies``).
    package var clientAddress: SocketAddress?

    /// Creates a context for a request.
    package init(source: Source) {
        coreContext = .init(source: source)
        webSocket = .init()
        remoteAddress = source.channel.remoteAddress
        channel = source.channel
        clientAddress = remoteAddress
    }

    /// Largest JSON body decoded (item manifests can be long), also once inflated: 8 MiB from a
    /// signed-in device, 64 KiB from anyone else.
    package var maxUploadSize: Int { device == nil ? SignInGuard.bodyLimit : 8 << 20 }

    /// JSON bodies, gzip-compressed or not.
    package var requestDecoder: SyncRequestDecoder { SyncRequestDecoder() }

    /// JSON answers, gzip-compressed when the request accepts it.
    package var responseEncoder: SyncResponseEncoder { SyncResponseEncoder() }

    /// The device, or 401.
    func requireDevice() throws -> DeviceAuth {
        guard let device else { throw SyncError.unauthorized }
        return device
    }

    /// The device, if it may use `container` (else 403, which says nothing about the container).
    func requireDevice(for container: String) throws -> DeviceAuth {
        let device = try requireDevice()
        try Validate.container(container)
        guard device.allows(container) else { throw SyncError.forbidden(container) }
        return device
    }
}

/// Finds the device behind `Authorization: Bearer TOKEN` (tokens are stored as SHA-256 hashes),
/// and handles its request in one of its account's turns (``AccountShare``).
struct DeviceAuthMiddleware: RouterMiddleware {
    typealias Context = SyncContext
    let database: any SyncDatabase
    var sightings: DeviceSightings?
    var share: AccountShare?

    func handle(_ request: Request, context: SyncContext, next: (Request, SyncContext) async throws -> Response) async throws -> Response {
        var context = context
        if let header = request.headers[.authorization], header.hasPrefix("Bearer ") {
            let token = String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces)
            guard !token.isEmpty, token.utf8.count <= 256 else { throw SyncError.unauthorized }
            guard let device = try await database.device(tokenHash: Self.hash(token)) else { throw SyncError.unauthorized }
            context.device = device
            await sightings?.note(device, database: database, logger: context.logger)
            if let share, request.headers[.upgrade] == nil { // (a push connection is not counted)
                return try await share.run(for: device, address: context.clientAddress, logger: context.logger) { try await next(request, context) }
            }
        }
        return try await next(request, context)
    }

    static func hash(_ token: String) -> String {
        SHA256.hash(data: Data(token.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}

/// When devices were last heard from (the web interface's Devices page): written to the
/// database at most once a minute per device, not on every request.
final class DeviceSightings: Sendable {
    private let recorded = Mutex<[String: ContinuousClock.Instant]>([:])
    /// The shortest time between two writes for one device.
    static let interval: Duration = .seconds(60)

    /// Notes that `device` was heard from now.
    func note(_ device: DeviceAuth, database: any SyncDatabase, logger: Logger) async {
        let now = ContinuousClock.now
        let due = recorded.withLock { recorded -> Bool in
            if let last = recorded[device.deviceId], now - last < Self.interval { return false }
            if recorded.count >= 100_000 { recorded.removeAll(keepingCapacity: true) } // bounded: forgetting only writes again
            recorded[device.deviceId] = now
            return true
        }
        guard due else { return }
        do {
            try await database.deviceSeen(id: device.deviceId, at: Date())
        } catch {
            logger.warning("cannot note when a device was last seen", metadata: ["device": "\(device.deviceId)", "error": "\(error)"])
        }
    }
}
