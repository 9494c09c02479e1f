import GRDB
import Hummingbird
import Logging
import PostgresNIO
import Synchronization

/// Counters the server exposes at `GET /metrics` in Prometheus' text format.
final class ServerMetrics: Sendable {
    enum Counter: String, CaseIterable {
        case requests = "ubiquity_http_requests_total"
        case clientErrors = "ubiquity_http_client_errors_total"
        case serverErrors = "ubiquity_http_server_errors_total"
        case commits = "ubiquity_commits_total"
        case chunkBytesReceived = "ubiquity_chunk_bytes_received_total"
        /// Chunk bytes read from storage to answer fetches (fetches of the same chunks at once
        /// share a read: ``SharedFetches``).
        case chunkBytesRead = "ubiquity_chunk_bytes_read_total"
        /// Chunk batch bytes sent in answer to fetches.
        case chunkBytesSent = "ubiquity_chunk_bytes_sent_total"
        /// Requests that waited for a turn of their account's share (``AccountShare``).
        case accountShareWaits = "ubiquity_account_share_waits_total"
        /// Requests refused (429) because their account already had too many waiting.
        case accountShareRefusals = "ubiquity_account_share_refusals_total"
    }

    private let values = Mutex<[Counter: Int]>([:])
    /// When the server started counting (its start).
    let started = ContinuousClock.now
    /// With an object store: the requests sent to it so far, by method.
    let objectStoreRequests: (@Sendable () -> [String: Int])?

    init(objectStoreRequests: (@Sendable () -> [String: Int])? = nil) {
        self.objectStoreRequests = objectStoreRequests
    }

    func count(_ counter: Counter, by amount: Int = 1) {
        values.withLock { $0[counter, default: 0] += amount }
    }

    func value(_ counter: Counter) -> Int { values.withLock { $0[counter] ?? 0 } }

    func exposition() -> String {
        let snapshot = values.withLock { $0 }
        var text = Counter.allCases.map { "# TYPE \($0.rawValue) counter\n\($0.rawValue) \(snapshot[$0] ?? 0)\n" }.joined()
        if let requests = objectStoreRequests?() {
            text += "# TYPE ubiquity_object_store_requests_total counter\n"
            text += requests.sorted { $0.key < $1.key }.map { "ubiquity_object_store_requests_total{method=\"\($0.key)\"} \($0.value)\n" }.joined()
        }
        return text
    }
}

/// Counts requests and their outcomes.
struct MetricsCountingMiddleware: RouterMiddleware {
    typealias Context = SyncContext
    let metrics: ServerMetrics

    func handle(_ request: Request, context: SyncContext, next: (Request, SyncContext) async throws -> Response) async throws -> Response {
        metrics.count(.requests)
        do {
            let response = try await next(request, context)
            record(response.status.code)
            return response
        } catch let error as any HTTPResponseError {
            record(error.status.code)
            throw error
        } catch {
            record(500)
            throw error
        }
    }

    func record(_ status: Int) {
        if (400..<500).contains(status) { metrics.count(.clientErrors) } else if status >= 500 { metrics.count(.serverErrors) }
    }
}

/// Makes every failure answer the same JSON shape (`{"error":{"code","message"}}`): errors
/// Hummingbird raises itself (a body that does not decode, an unknown route) included. A full
/// disk (the database's or the chunks') is 507 `noSpace`. Any other error (the database's, the
/// file system's) is the server's fault: answered 500 `internal` without its details (or 503
/// `databaseBusy` when PostgreSQL kept finding the transaction in conflict with others after its
/// retries). Every 5xx is logged with the request's id (`hb.request.id`), which its message
/// gives the client to quote. A refused WebSocket upgrade's error is handed to the connection's
/// ``RequestGuard``, which answers it.
struct ErrorShapingMiddleware: RouterMiddleware {
    typealias Context = SyncContext

    func handle(_ request: Request, context: SyncContext, next: (Request, SyncContext) async throws -> Response) async throws -> Response {
        let shaped: SyncError
        do {
            let response = try await next(request, context)
            guard response.status.code >= 400, response.headers[.contentType] == nil else { return response }
            shaped = Self.shape(response.status, nil)
        } catch {
            shaped = Self.shape(error, request: request, context: context)
        }
        if request.headers[.upgrade] != nil, let channel = context.channel { await RequestGuard.noteRefusal(shaped, on: channel) }
        throw shaped
    }

    /// The answer for `error`; logged when it is the server's (5xx).
    static func shape(_ error: any Error, request: Request, context: SyncContext) -> SyncError {
        let requestId = context.logger[metadataKey: "hb.request.id"].map { "\($0)" } ?? "?"
        var shaped: SyncError
        switch error {
        case let error as SyncError:
            shaped = error
        case let error as any HTTPResponseError:
            shaped = shape(error.status, (error as? HTTPError)?.body)
        case is DecodingError:
            return SyncError.badRequest("invalidBody", "the body is not the JSON this request takes")
        case is CancellationError:
            shaped = SyncError(.serviceUnavailable, "cancelled", "the request was cancelled (the server is stopping)")
        case let error where SyncError.isStorageFull(error):
            shaped = SyncError.noSpace
        case let error as PSQLError where ["40001", "40P01"].contains(error.serverInfo?[.sqlState] ?? ""):
            shaped = SyncError(.serviceUnavailable, "databaseBusy", "the change conflicted with others too often: try again")
        default:
            shaped = SyncError(.internalServerError, "internal", "the server failed to answer this request; its log says why (request \(requestId))")
        }
        guard shaped.status.code >= 500 else { return shaped }
        let cause = (error as? PSQLError).map(PostgresDatabase.describe) ?? String(reflecting: error)
        let metadata: Logger.Metadata = ["method": "\(request.method)", "path": "\(loggedPath(request.uri.path))", "status": "\(shaped.status.code)", "error": "\(cause)"]
        if shaped.status.code == 500 {
            context.logger.error("request failed", metadata: metadata)
        } else {
            context.logger.warning("request refused with a 5xx", metadata: metadata)
        }
        return shaped
    }

    /// A request's path as the log keeps it: a public link's token — the secret of its address,
    /// which whoever reads the log could download with — left out (`/l/…/manifest`).
    static func loggedPath(_ path: String) -> String {
        guard path.hasPrefix("/l/") else { return path }
        let rest = path.dropFirst(3)
        return "/l/…" + (rest.firstIndex(of: "/").map { String(rest[$0...]) } ?? "")
    }

    static func shape(_ status: HTTPResponse.Status, _ message: String?) -> SyncError {
        let code: String
        switch status.code {
        case 400: code = "invalidBody"
        case 401: code = "unauthorized"
        case 404: code = "notFound"
        case 405: code = "methodNotAllowed"
        case 413: code = "tooLarge"
        default: code = status.code >= 500 ? "internal" : "refused"
        }
        return SyncError(status, code, message ?? status.reasonPhrase)
    }
}
