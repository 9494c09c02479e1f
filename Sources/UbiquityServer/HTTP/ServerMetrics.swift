import Hummingbird
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
    }

    private let values = Mutex<[Counter: Int]>([:])

    func count(_ counter: Counter, by amount: Int = 1) {
        values.withLock { $0[counter, default: 0] += amount }
    }

    func value(_ counter: Counter) -> Int { values.withLock { $0[counter] ?? 0 } }

    func exposition() -> String {
        let snapshot = values.withLock { $0 }
        return Counter.allCases.map { "# TYPE \($0.rawValue) counter\n\($0.rawValue) \(snapshot[$0] ?? 0)\n" }.joined()
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
/// Hummingbird raises itself (a body that does not decode, an unknown route) included. Any other
/// error (the database's, the file system's) is the server's fault: logged with the request,
/// answered 500 `internal` without its details (or 503 `databaseBusy` when PostgreSQL kept
/// finding the transaction in conflict with others after its retries).
struct ErrorShapingMiddleware: RouterMiddleware {
    typealias Context = SyncContext

    func handle(_ request: Request, context: SyncContext, next: (Request, SyncContext) async throws -> Response) async throws -> Response {
        do {
            let response = try await next(request, context)
            guard response.status.code >= 400, response.headers[.contentType] == nil else { return response }
            throw Self.shape(response.status, nil)
        } catch let error as SyncError {
            throw error
        } catch let error as any HTTPResponseError {
            throw Self.shape(error.status, (error as? HTTPError)?.body)
        } catch is DecodingError {
            throw SyncError.badRequest("invalidBody", "the body is not the JSON this request takes")
        } catch is CancellationError {
            throw SyncError(.serviceUnavailable, "cancelled", "the request was cancelled (the server is stopping)")
        } catch let error as PSQLError where ["40001", "40P01"].contains(error.serverInfo?[.sqlState] ?? "") {
            context.logger.warning("a transaction kept conflicting with others", metadata: [
                "method": "\(request.method)", "path": "\(request.uri.path)", "error": "\(PostgresDatabase.describe(error))",
            ])
            throw SyncError(.serviceUnavailable, "databaseBusy", "the change conflicted with others too often: try again")
        } catch {
            context.logger.error("request failed", metadata: [
                "method": "\(request.method)", "path": "\(request.uri.path)", "error": "\(String(reflecting: error))",
            ])
            throw SyncError(.internalServerError, "internal", "the server failed to answer this request; its log says why")
        }
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
