import CompressNIO
import Foundation
import Hummingbird
import NIOFoundationCompat

// JSON bodies both ways, gzip-compressed when the other end says it takes that: answers when
// the request says `Accept-Encoding: gzip`; requests when they say `Content-Encoding: gzip`,
// which every answer invites with `Accept-Encoding: gzip` (RFC 7694). Chunk bodies are
// content-addressed bytes that gzip cannot shrink: they go as they are.

/// Reads a request's JSON body: at most the context's `maxUploadSize`, inflated first if it
/// came gzip-compressed — also to at most `maxUploadSize`, so a small body that would inflate
/// without end is refused (413), not held.
package struct SyncRequestDecoder: RequestDecoder {
    /// A decoder.
    package init() {}

    /// Decodes `type` from the request's body.
    package func decode<T: Decodable>(_ type: T.Type, from request: Request, context: some RequestContext) async throws -> T {
        var buffer = try await request.body.collect(upTo: context.maxUploadSize)
        switch request.headers[.contentEncoding]?.lowercased() {
        case nil, "identity":
            break
        case "gzip":
            let tooLarge = SyncError(.contentTooLarge, "bodyTooLarge", "the body inflates to more than \(context.maxUploadSize) bytes")
            do {
                // The limit bounds what is allocated (its buffers round up, to at most twice
                // the limit); what came out is checked against the limit itself.
                buffer = try buffer.decompress(with: .gzip(), maxSize: context.maxUploadSize)
            } catch let error as CompressNIOError where error == .bufferOverflow {
                throw tooLarge
            } catch {
                throw SyncError.badRequest("badEncoding", "the body is not valid gzip: \(error)")
            }
            guard buffer.readableBytes <= context.maxUploadSize else { throw tooLarge }
        case let other?:
            throw SyncError(.unsupportedMediaType, "unsupportedEncoding", "bodies come as they are or gzip-compressed, not \(other)")
        }
        return try JSONDecoder().decode(T.self, from: buffer)
    }
}

/// Writes an answer as JSON (`application/json`: UTF-8 is JSON's only encoding, RFC 8259, so no
/// `charset`), gzip-compressed when the request accepts it and the body is large enough to gain.
/// A request that sent a body as it is hears `Accept-Encoding: gzip` (RFC 7694): the server
/// takes compressed bodies too (a client that already sends them, or sends none, is not told
/// again on every answer).
package struct SyncResponseEncoder: ResponseEncoder {
    /// Bodies smaller than this go as they are (below it, gzip's own 18 bytes and the
    /// `Content-Encoding` and `Vary` headers eat most of the gain).
    package static let compressionThreshold = 256

    /// How answers are compressed: zlib's fastest level — chunk lists and hashes are most of a
    /// large answer, and the higher levels shrink them by 2% more for three times the CPU.
    static let gzip = CompressionAlgorithm.gzip(configuration: .init(compressionLevel: .fastestCompression))

    /// An encoder.
    package init() {}

    /// The answer for `value`.
    package func encode(_ value: some Encodable, from request: Request, context: some RequestContext) throws -> Response {
        var body = ByteBuffer(bytes: try JSONEncoder().encode(value))
        var headers: HTTPFields = [.contentType: "application/json"]
        let sentBody = request.headers[.contentLength].flatMap { Int($0) }.map { $0 > 0 } ?? (request.headers[.transferEncoding] != nil)
        if sentBody, request.headers[.contentEncoding] == nil { headers[.acceptEncoding] = "gzip" }
        if body.readableBytes >= Self.compressionThreshold, Self.acceptsGzip(request.headers[values: .acceptEncoding]) {
            body = try body.compress(with: Self.gzip)
            headers[.contentEncoding] = "gzip"
            headers[.vary] = "Accept-Encoding"
        }
        headers[.contentLength] = "\(body.readableBytes)"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
    }

    /// Whether `Accept-Encoding` values admit gzip (`gzip` or `*`, without `q=0`).
    static func acceptsGzip(_ values: [String]) -> Bool {
        for value in values {
            for coding in value.split(separator: ",") {
                let parts = coding.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
                guard let name = parts.first, name == "gzip" || name == "x-gzip" || name == "*" else { continue }
                let weight = parts.dropFirst().first { $0.hasPrefix("q=") }.flatMap { Double($0.dropFirst(2)) } ?? 1
                if weight > 0 { return true }
            }
        }
        return false
    }
}
