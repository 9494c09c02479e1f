import Crypto
import Foundation
import HTTPTypes
import Hummingbird

/// The web interface's session: a device token (the browser is one of the account's devices,
/// named "Web browser", listed and revoked like any other) kept in a cookie the page's script
/// cannot read (`HttpOnly`), sent only over HTTPS (`Secure`; browsers allow it on loopback) and
/// never with a request another site starts (`SameSite=Strict`).
///
/// Every request that changes something must also carry the page's ``csrfHeader`` — the
/// session's CSRF token, which the page reads from `GET /web/api/session` and no other site
/// can (no CORS) — so a forged form or script elsewhere changes nothing even where a browser
/// sends the cookie anyway. Signing in needs the header ``pageHeader``, which a cross-site form
/// cannot set, against sign-in forgery.
enum WebSession {
    /// The cookie: `__Host-` so that it is only ever set by this origin, for every path, over HTTPS.
    static let cookieName = "__Host-ubiquity"
    /// How long a web session lasts (a device signed in from a browser is signed out after it).
    static let lifetime = 14 * 24 * 3600
    /// The header every state-changing request of the page carries: the session's CSRF token.
    static let csrfHeader = HTTPField.Name("X-CSRF-Token")!
    /// The header the page's requests carry (a cross-site form cannot set one).
    static let pageHeader = HTTPField.Name("X-Ubiquity-Web")!
    /// The device name a browser signs in as.
    static let deviceName = "Web browser"

    /// The CSRF token of the session whose token is `token`: derived from it (nothing to store),
    /// worthless without the session, and unguessable without the token.
    static func csrfToken(for token: String) -> String {
        SHA256.hash(data: Data("ubiquity-web-csrf\u{0}\(token)".utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// The session cookie for `token` (empty and expired: the cookie that removes it).
    static func cookie(_ token: String?) -> Cookie {
        Cookie(name: cookieName, value: token ?? "", maxAge: token == nil ? 0 : lifetime, path: "/", secure: true, httpOnly: true, sameSite: .strict)
    }

    /// The headers every page, script and answer of the web interface carries: scripts only
    /// from this origin (no inline script, no `eval`), no framing, no sniffing, no referrer.
    static let securityHeaders: HTTPFields = [
        .contentSecurityPolicy: "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            + "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        .xContentTypeOptions: "nosniff",
        HTTPField.Name("X-Frame-Options")!: "DENY",
        HTTPField.Name("Referrer-Policy")!: "no-referrer",
        HTTPField.Name("Cross-Origin-Opener-Policy")!: "same-origin",
        HTTPField.Name("Cross-Origin-Resource-Policy")!: "same-origin",
    ]
}

/// Adds ``WebSession/securityHeaders`` to every answer under `/web` (errors too).
struct WebHeadersMiddleware: RouterMiddleware {
    typealias Context = SyncContext

    func handle(_ request: Request, context: SyncContext, next: (Request, SyncContext) async throws -> Response) async throws -> Response {
        var response: Response
        do {
            response = try await next(request, context)
        } catch {
            response = try ErrorShapingMiddleware.shape(error, request: request, context: context).response(from: request, context: context)
        }
        for field in WebSession.securityHeaders where response.headers[field.name] == nil { response.headers.append(field) }
        if response.headers[.cacheControl] == nil { response.headers[.cacheControl] = "no-store" }
        return response
    }
}

/// Finds the device behind the web session's cookie (for `/web/api` only: the sync API never
/// takes cookies), refuses a state change without the page's headers, and handles the request
/// in one of its account's turns (``AccountShare``).
struct WebSessionMiddleware: RouterMiddleware {
    typealias Context = SyncContext
    let database: any SyncDatabase
    let sightings: DeviceSightings
    let share: AccountShare

    func handle(_ request: Request, context: SyncContext, next: (Request, SyncContext) async throws -> Response) async throws -> Response {
        var context = context
        let changes = request.method != .get && request.method != .head
        if changes, request.headers[WebSession.pageHeader] != "1" {
            throw SyncError(.forbidden, "csrf", "a change through the web interface must come from its page")
        }
        if context.device == nil, let token = request.cookies[WebSession.cookieName]?.value, token.utf8.count == 64,
           let device = try await database.device(tokenHash: DeviceAuthMiddleware.hash(token)) {
            if changes, request.headers[WebSession.csrfHeader] != WebSession.csrfToken(for: token) {
                throw SyncError(.forbidden, "csrf", "the request lacks this session's CSRF token: reload the page")
            }
            context.device = device
            await sightings.note(device, database: database, logger: context.logger)
            return try await share.run(for: device, address: context.clientAddress, logger: context.logger) { try await next(request, context) }
        }
        return try await next(request, context)
    }
}
