import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import Synchronization

/// A client for an S3-compatible object store, on AsyncHTTPClient and swift-crypto: conditional
/// PUT, ranged GET, HEAD, DELETE, batch delete and ListObjectsV2 with paging, every request signed
/// with ``SignatureV4``.
///
/// A request the store could not take (a dropped connection, a timeout, 500, 502, 503, 504,
/// `SlowDown`) is tried again after a growing, jittered wait, up to ``RetryPolicy/attempts``
/// times; then ``ObjectStoreError/unavailable(_:)``. Redirects are never followed (a signed
/// request goes to the endpoint it was signed for, and nowhere else). Logs name the method, key
/// and status — never a header, a credential or a body.
public final class S3Client: Sendable {
    /// How often and how patiently a request is tried again.
    public struct RetryPolicy: Sendable {
        /// Tries in all (at least 1).
        public var attempts: Int
        /// The first wait; each next one doubles, up to ``maximumDelay``, jittered.
        public var baseDelay: Duration
        /// The longest wait between tries.
        public var maximumDelay: Duration

        /// A policy from its parts.
        public init(attempts: Int = 6, baseDelay: Duration = .milliseconds(100), maximumDelay: Duration = .seconds(5)) {
            self.attempts = max(1, attempts)
            self.baseDelay = baseDelay
            self.maximumDelay = maximumDelay
        }
    }

    /// An object as a listing or a HEAD tells of it.
    public struct ObjectInfo: Sendable, Equatable {
        /// Its key, without the location's prefix.
        public var key: String
        /// Its size in bytes.
        public var size: Int
        /// Its entity tag, unquoted (a single PUT's is its contents' MD5, in hex).
        public var etag: String
        /// When it was written, where the store says.
        public var lastModified: Date?
    }

    /// A page of a listing.
    public struct ListPage: Sendable {
        /// The objects on it, in key order.
        public var objects: [ObjectInfo]
        /// The token for the next page; nil on the last.
        public var continuationToken: String?
    }

    /// Where the objects are.
    public let location: ObjectStoreLocation
    /// The retry policy.
    public let retry: RetryPolicy
    /// How long one request may take, answer included.
    public let timeout: TimeAmount
    let signer: SignatureV4
    let http: HTTPClient
    let logger: Logger
    private let sent = Mutex<[String: Int]>([:])

    /// Requests sent so far, by method (every try counted: what the store bills).
    public var requestsSent: [String: Int] { sent.withLock { $0 } }
    /// The largest XML answer read (a listing page of 1,000 keys is about 300 KB).
    static let xmlLimit = 8 << 20

    /// A client for `location` with `credentials`. Call ``shutdown()`` when done.
    public init(location: ObjectStoreLocation, credentials: ObjectStoreCredentials, retry: RetryPolicy = RetryPolicy(),
                timeout: TimeAmount = .seconds(60), logger: Logger = Logger(label: "ubiquity.objectstore")) {
        self.location = location
        self.signer = SignatureV4(credentials: credentials, region: location.region)
        self.retry = retry
        self.timeout = timeout
        self.logger = logger
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow)
        // A store that does not take connections fails a try within seconds (the pool keeps
        // trying until then), not at the request's whole timeout: the retries above wait between.
        configuration.timeout = .init(connect: .seconds(3))
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 16)
        self.http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// Closes the client's connections.
    public func shutdown() async throws {
        try await http.shutdown()
    }

    // MARK: Objects

    /// Writes `body` as `key`. With `ifAbsent`, only if no object has that key (`If-None-Match:
    /// *`): an object there already is ``ObjectStoreError/alreadyExists(key:)`` — unless it holds
    /// these very bytes (a try whose answer was lost landed), which counts as written. The store
    /// checks the bytes against their MD5 (`Content-MD5`) and the signature covers their SHA-256.
    /// Returns the new object's entity tag.
    @discardableResult
    public func put(_ key: String, body: ByteBuffer, ifAbsent: Bool = false) async throws -> String {
        let bytes = Data(buffer: body)
        let md5 = Insecure.MD5.hash(data: bytes)
        var headers = [("content-md5", Data(md5).base64EncodedString()), ("content-type", "application/octet-stream")]
        if ifAbsent { headers.append(("if-none-match", "*")) }
        let response = try await send(.PUT, key: key, headers: headers, body: body, payloadHash: SignatureV4.hex(SHA256.hash(data: bytes)))
        let ours = SignatureV4.hex(md5)
        switch response.status {
        case 200, 201:
            return Self.unquoted(response.headers.first(name: "etag")) ?? ours
        case 412 where ifAbsent:
            if let there = try await head(key), there.etag == ours, there.size == body.readableBytes { return ours }
            throw ObjectStoreError.alreadyExists(key: key)
        default:
            throw refusal(response)
        }
    }

    /// The object `key`, or the bytes `range` of it (checked to be as many as asked for).
    public func get(_ key: String, range: Range<Int>? = nil, sizeLimit: Int = 256 << 20) async throws -> ByteBuffer {
        var headers: [(String, String)] = []
        if let range {
            guard !range.isEmpty, range.lowerBound >= 0 else { return ByteBuffer() }
            headers.append(("range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)"))
        }
        let response = try await send(.GET, key: key, headers: headers, limit: range?.count ?? sizeLimit)
        switch response.status {
        case 200 where range == nil, 206 where range != nil:
            if let range, response.body.readableBytes != range.count {
                throw ObjectStoreError.badResponse("\(response.body.readableBytes) bytes for a range of \(range.count) of \(key)")
            }
            return response.body
        case 200:
            // A store that ignored the range sent the whole object: the range is cut from it.
            guard let range, range.upperBound <= response.body.readableBytes,
                  let slice = response.body.getSlice(at: response.body.readerIndex + range.lowerBound, length: range.count) else {
                throw ObjectStoreError.badResponse("a whole object too short for the range asked of \(key)")
            }
            return slice
        case 404:
            throw ObjectStoreError.notFound(key: key)
        case 416:
            throw ObjectStoreError.badResponse("the range asked of \(key) is past its end")
        default:
            throw refusal(response)
        }
    }

    /// What the store says of `key`, or nil when there is no such object.
    public func head(_ key: String) async throws -> ObjectInfo? {
        let response = try await send(.HEAD, key: key)
        switch response.status {
        case 200:
            return ObjectInfo(key: key, size: response.headers.first(name: "content-length").flatMap { Int($0) } ?? 0,
                              etag: Self.unquoted(response.headers.first(name: "etag")) ?? "",
                              lastModified: response.headers.first(name: "last-modified").flatMap(Self.httpDate))
        case 404:
            return nil
        default:
            throw refusal(response)
        }
    }

    /// Removes `key` (nothing to remove is not an error).
    public func delete(_ key: String) async throws {
        let response = try await send(.DELETE, key: key)
        guard [200, 204, 404].contains(response.status) else { throw refusal(response) }
    }

    /// Removes `keys`, up to 1,000 a request; returns those the store could not remove, with
    /// why (a key already gone is removed).
    public func delete(_ keys: [String]) async throws -> [String: String] {
        var failed: [String: String] = [:]
        var start = keys.startIndex
        while start < keys.endIndex {
            let batch = keys[start..<min(start + 1000, keys.endIndex)]
            start = batch.endIndex
            let body = "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>true</Quiet>"
                + batch.map { "<Object><Key>\(S3XML.escaped(location.prefix + $0))</Key></Object>" }.joined() + "</Delete>"
            let bytes = Data(body.utf8)
            let response = try await send(.POST, key: nil, query: [("delete", "")],
                                          headers: [("content-md5", Data(Insecure.MD5.hash(data: bytes)).base64EncodedString()), ("content-type", "application/xml")],
                                          body: ByteBuffer(data: bytes), payloadHash: SignatureV4.hex(SHA256.hash(data: bytes)), limit: Self.xmlLimit)
            guard response.status == 200 else { throw refusal(response) }
            for error in try S3XML.parse(Data(buffer: response.body)).all("Error") {
                let code = error["Code"]?.text ?? "", key = String((error["Key"]?.text ?? "").dropFirst(location.prefix.count))
                if code != "NoSuchKey" { failed[key] = "\(code): \(error["Message"]?.text ?? "")" }
            }
        }
        return failed
    }

    /// One page of the objects whose keys begin with `prefix`, from `continuationToken` on.
    public func list(prefix: String = "", continuationToken: String? = nil, maxKeys: Int = 1000) async throws -> ListPage {
        var query = [("list-type", "2"), ("prefix", location.prefix + prefix), ("max-keys", String(maxKeys))]
        if let continuationToken { query.append(("continuation-token", continuationToken)) }
        let response = try await send(.GET, key: nil, query: query, limit: Self.xmlLimit)
        guard response.status == 200 else { throw refusal(response) }
        let root = try S3XML.parse(Data(buffer: response.body))
        guard root.name == "ListBucketResult" else { throw ObjectStoreError.badResponse("a listing answered with \(root.name)") }
        let objects = root.all("Contents").compactMap { entry -> ObjectInfo? in
            guard let key = entry["Key"]?.text, key.hasPrefix(location.prefix) else { return nil }
            return ObjectInfo(key: String(key.dropFirst(location.prefix.count)), size: Int(entry["Size"]?.text ?? "") ?? 0,
                              etag: Self.unquoted(entry["ETag"]?.text) ?? "", lastModified: entry["LastModified"].flatMap { Self.isoDate($0.text) })
        }
        let truncated = root["IsTruncated"]?.text == "true"
        let next = root["NextContinuationToken"]?.text
        if truncated && (next ?? "").isEmpty { throw ObjectStoreError.badResponse("a truncated listing without a continuation token") }
        return ListPage(objects: objects, continuationToken: truncated ? next : nil)
    }

    /// Every object whose key begins with `prefix`, page after page.
    public func listAll(prefix: String = "") async throws -> [ObjectInfo] {
        var all: [ObjectInfo] = [], token: String?
        repeat {
            let page = try await list(prefix: prefix, continuationToken: token)
            all += page.objects
            token = page.continuationToken
        } while token != nil
        return all
    }

    /// Makes the bucket (one that is there already and ours is fine).
    public func createBucket() async throws {
        let response = try await send(.PUT, key: nil)
        guard response.status == 200 || (response.status == 409 && response.code == "BucketAlreadyOwnedByYou") else { throw refusal(response) }
    }
}

extension S3Client {
    /// An answer read whole: its status, headers, body and (for an error) S3's code.
    struct Response {
        var status: Int
        var headers: HTTPHeaders
        var body: ByteBuffer
        /// S3's error code, from an error answer's XML.
        var code: String? { Self.error(in: body)?.code }

        static func error(in body: ByteBuffer) -> (code: String, message: String)? {
            guard body.readableBytes > 0, let root = try? S3XML.parse(Data(buffer: body)), root.name == "Error" else { return nil }
            return (root["Code"]?.text ?? "", root["Message"]?.text ?? "")
        }
    }

    /// The store's refusal of a request, as an error.
    func refusal(_ response: Response) -> ObjectStoreError {
        let error = Response.error(in: response.body)
        return .refused(status: response.status, code: error?.code ?? "", message: error?.message ?? "no explanation")
    }

    /// Sends a signed request, trying again while the store cannot take it (see ``RetryPolicy``).
    func send(_ method: HTTPMethod, key: String?, query: [(String, String)] = [], headers: [(String, String)] = [],
              body: ByteBuffer? = nil, payloadHash: String = SignatureV4.emptyPayloadHash, limit: Int = xmlLimit) async throws -> Response {
        var delay = retry.baseDelay, last = ""
        for attempt in 1...retry.attempts {
            if attempt > 1 {
                // Full jitter: a crowd of instances does not come back at once.
                let wait = Double.random(in: 0.5...1.0) * (Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18)
                try await Task.sleep(for: .seconds(wait))
                delay = min(delay * 2, retry.maximumDelay)
            }
            let started = ContinuousClock.now
            do {
                let response = try await once(method, key: key, query: query, headers: headers, body: body, payloadHash: payloadHash, limit: limit)
                let code = response.status >= 400 ? response.code : nil
                if [500, 502, 503, 504].contains(response.status) || code == "SlowDown" || code == "RequestTimeout" {
                    last = "\(response.status) \(code ?? "")"
                    logger.notice("object store busy, trying again", metadata: ["method": "\(method.rawValue)", "key": "\(key ?? "")", "status": "\(last)", "attempt": "\(attempt)"])
                    continue
                }
                logger.debug("object store request", metadata: ["method": "\(method.rawValue)", "key": "\(key ?? "")", "status": "\(response.status)",
                                                                "took": "\(ContinuousClock.now - started)"])
                return response
            } catch let error as ObjectStoreError {
                throw error
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                last = "\(error)"
                logger.notice("object store unreachable, trying again", metadata: ["method": "\(method.rawValue)", "key": "\(key ?? "")", "error": "\(error)", "attempt": "\(attempt)"])
            }
        }
        throw ObjectStoreError.unavailable("\(method.rawValue) \(key ?? location.bucket): \(last) after \(retry.attempts) tries")
    }

    /// One signed request and its whole answer (a body larger than `limit` is refused).
    private func once(_ method: HTTPMethod, key: String?, query: [(String, String)], headers: [(String, String)],
                      body: ByteBuffer?, payloadHash: String, limit: Int) async throws -> Response {
        let path = location.path(for: key.map { location.prefix + $0 })
        let queryText = SignatureV4.canonicalQuery(query)
        let host = location.hostHeader
        let all = headers + [("host", host)]
        let signed = signer.sign(method: method.rawValue, path: path, query: query, headers: all, payloadHash: payloadHash, date: Date())
        sent.withLock { $0[method.rawValue, default: 0] += 1 }
        var request = HTTPClientRequest(url: "\(location.scheme)://\(host)\(path)" + (queryText.isEmpty ? "" : "?" + queryText))
        request.method = method
        for (name, value) in all + signed.headers.map({ ($0.name, $0.value) }) { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(body) }
        let response = try await http.execute(request, timeout: timeout, logger: nil)
        let read = method == .HEAD ? ByteBuffer() : try await response.body.collect(upTo: limit + 1)
        guard read.readableBytes <= limit else { throw ObjectStoreError.badResponse("an answer larger than \(limit) bytes") }
        return Response(status: Int(response.status.code), headers: response.headers, body: read)
    }

    /// An entity tag without its quotes.
    static func unquoted(_ etag: String?) -> String? {
        guard var etag, !etag.isEmpty else { return nil }
        if etag.hasPrefix("W/") { etag.removeFirst(2) }
        return etag.trimmingCharacters(in: CharacterSet(charactersIn: "\""))
    }

    /// An ISO 8601 time as listings give it (`2026-11-30T05:45:00.000Z`).
    static func isoDate(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }

    /// An HTTP date (`Mon, 30 Nov 2026 05:45:00 GMT`).
    static func httpDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: text)
    }
}
