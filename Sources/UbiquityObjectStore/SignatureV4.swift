import Crypto
import Foundation

/// AWS Signature Version 4 for requests to an S3-compatible store: the canonical request, the
/// string to sign, the day's signing key and the `Authorization` header, as AWS specifies them
/// (checked against AWS's published examples and test suite in `SignatureV4Tests`).
///
/// Paths are encoded once (S3's rule: slashes kept, every byte outside `A-Z a-z 0-9 - . _ ~`
/// as `%XX`); the request sent carries exactly the path, query and headers that were signed.
public struct SignatureV4: Sendable {
    /// The SHA-256 of an empty payload, in hex.
    public static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// Whose request it is.
    public let credentials: ObjectStoreCredentials
    /// The region in the credential scope (`us-east-1` for most single-site stores).
    public let region: String
    /// The service in the credential scope: `s3`.
    public let service: String

    /// A signer for `service` in `region`.
    public init(credentials: ObjectStoreCredentials, region: String, service: String = "s3") {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    /// What signing a request gives: the headers to send besides the request's own, and the
    /// steps, for tests and for a refused request's diagnosis (none of them holds the secret).
    public struct Signed: Sendable {
        /// `Authorization`, `x-amz-date`, and for S3 `x-amz-content-sha256` (and
        /// `x-amz-security-token` for temporary credentials).
        public var headers: [(name: String, value: String)]
        /// The canonical request that was signed.
        public var canonicalRequest: String
        /// The string to sign.
        public var stringToSign: String
        /// The signature, in hex.
        public var signature: String
    }

    /// Signs a request. `path` is the request's path as sent (already encoded: see
    /// ``encodePath(_:)``), `query` its parameters unencoded, `headers` every header sent
    /// besides those this adds (`host` among them), `payloadHash` the hex SHA-256 of the body
    /// (or `UNSIGNED-PAYLOAD`).
    public func sign(method: String, path: String, query: [(String, String)] = [], headers: [(String, String)],
                     payloadHash: String, date: Date) -> Signed {
        let stamp = Self.timestamp(date), day = String(stamp.prefix(8))
        var all = headers.map { (name: $0.0.lowercased(), value: Self.trimmed($0.1)) }
        var added: [(name: String, value: String)] = [("x-amz-date", stamp)]
        if service == "s3" { added.append(("x-amz-content-sha256", payloadHash)) }
        if let token = credentials.sessionToken { added.append(("x-amz-security-token", token)) }
        for header in added where !all.contains(where: { $0.name == header.name }) { all.append(header) }

        // Headers of one name are joined by commas, in the order given; names sorted.
        var joined: [String: String] = [:]
        for header in all { joined[header.name] = joined[header.name].map { $0 + "," + header.value } ?? header.value }
        let names = joined.keys.sorted()
        let signedHeaders = names.joined(separator: ";")
        let canonicalHeaders = names.map { "\($0):\(joined[$0]!)\n" }.joined()
        let canonicalRequest = [method, path, Self.canonicalQuery(query), canonicalHeaders, signedHeaders, payloadHash].joined(separator: "\n")

        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = ["AWS4-HMAC-SHA256", stamp, scope, Self.hex(SHA256.hash(data: Data(canonicalRequest.utf8)))].joined(separator: "\n")
        let signature = Self.hex(HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: signingKey(day: day)))
        let authorization = "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope), SignedHeaders=\(signedHeaders), Signature=\(signature)"
        return Signed(headers: [("Authorization", authorization)] + added, canonicalRequest: canonicalRequest,
                      stringToSign: stringToSign, signature: signature)
    }

    /// The day's key: the secret, through the date, region, service and `aws4_request`.
    func signingKey(day: String) -> SymmetricKey {
        var key = SymmetricKey(data: Data("AWS4\(credentials.secretAccessKey)".utf8))
        for part in [day, region, service, "aws4_request"] {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
        }
        return key
    }

    /// `yyyyMMdd'T'HHmmss'Z'` in UTC.
    public static func timestamp(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        func two(_ value: Int?) -> String { let text = String(value ?? 0); return text.count < 2 ? "0" + text : text }
        return String(format: "%04d", parts.year ?? 0) + two(parts.month) + two(parts.day) + "T" + two(parts.hour) + two(parts.minute) + two(parts.second) + "Z"
    }

    /// Parameters encoded (keys and values alike) and sorted by key, then value.
    public static func canonicalQuery(_ query: [(String, String)]) -> String {
        query.map { (encode($0.0, keepingSlashes: false), encode($0.1, keepingSlashes: false)) }
            .sorted { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1 < $1.1 }
            .map { "\($0.0)=\($0.1)" }.joined(separator: "&")
    }

    /// A path as S3 wants it in both the request and its canonical form: each byte outside
    /// the unreserved set as `%XX`, slashes kept.
    public static func encodePath(_ path: String) -> String { encode(path, keepingSlashes: true) }

    /// RFC 3986 encoding as SigV4 defines it (uppercase hex; space as `%20`, never `+`).
    public static func encode(_ text: String, keepingSlashes: Bool) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where keepingSlashes:
                out.append("/")
            default:
                out += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return out
    }

    /// A header's value as signed: spaces around it gone, runs of spaces inside as one.
    static func trimmed(_ value: String) -> String {
        value.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ")
    }

    /// Lowercase hex of bytes.
    public static func hex<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        bytes.map { String($0, radix: 16).leftPadded(to: 2) }.joined()
    }
}

extension String {
    /// The string with zeros before it up to `width` characters.
    fileprivate func leftPadded(to width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}
