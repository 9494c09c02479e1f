import Foundation

/// Where objects go: an S3-compatible endpoint, a bucket, a region, the addressing style and a
/// key prefix — what `--object-store URL` says, and nothing secret.
///
/// The URL is `http[s]://HOST[:PORT]/BUCKET[/PREFIX][?region=REGION][&style=path|virtual]`:
/// path-style (`HOST/BUCKET/KEY`) unless `style=virtual` (`BUCKET.HOST/KEY`, as AWS prefers);
/// region `us-east-1` unless given.
public struct ObjectStoreLocation: Sendable, Equatable, CustomStringConvertible {
    /// How a bucket is named in a request.
    public enum Style: String, Sendable { case path, virtual }

    /// `http` or `https`.
    public var scheme: String
    /// The endpoint's host.
    public var host: String
    /// The endpoint's port, when not the scheme's own.
    public var port: Int?
    /// The bucket.
    public var bucket: String
    /// Prepended to every key (empty, or ending in `/`).
    public var prefix: String
    /// The region signed into each request.
    public var region: String
    /// Path-style or virtual-hosted.
    public var style: Style

    /// A location from its parts.
    public init(scheme: String = "https", host: String, port: Int? = nil, bucket: String, prefix: String = "", region: String = "us-east-1", style: Style = .path) {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.bucket = bucket
        self.prefix = prefix.isEmpty || prefix.hasSuffix("/") ? prefix : prefix + "/"
        self.region = region
        self.style = style
    }

    /// Reads `--object-store`'s URL; a clear error says what is wrong with it. A URL carrying a
    /// user or password is refused: credentials come from the environment or a file, never a
    /// flag (they would be in `ps` and in shell histories).
    public init(parsing text: String) throws {
        guard let parts = URLComponents(string: text), let scheme = parts.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = parts.host, !host.isEmpty else {
            throw ObjectStoreError.badLocation("an object store is http[s]://HOST[:PORT]/BUCKET[/PREFIX][?region=R&style=path|virtual]")
        }
        guard parts.user == nil && parts.password == nil else {
            throw ObjectStoreError.badLocation("credentials do not go in the URL: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a credentials file")
        }
        let path = parts.path.split(separator: "/").map(String.init)
        guard let bucket = path.first, Self.isBucketName(bucket) else {
            throw ObjectStoreError.badLocation("the URL's path must begin with a bucket's name (3–63 lowercase letters, digits, dots and hyphens)")
        }
        var region = "us-east-1", style = Style.path
        for item in parts.queryItems ?? [] {
            switch item.name {
            case "region":
                guard let value = item.value, !value.isEmpty, value.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" }) else {
                    throw ObjectStoreError.badLocation("region must be a region's name, such as us-east-1")
                }
                region = value
            case "style":
                guard let value = item.value.flatMap(Style.init(rawValue:)) else { throw ObjectStoreError.badLocation("style is path or virtual") }
                style = value
            default:
                throw ObjectStoreError.badLocation("unknown parameter \(item.name) (region and style are known)")
            }
        }
        self.init(scheme: scheme, host: host, port: parts.port, bucket: bucket, prefix: path.dropFirst().joined(separator: "/"), region: region, style: style)
    }

    /// The URL it was read from (no secret is ever part of it).
    public var description: String {
        let portPart = port.map { ":\($0)" } ?? ""
        let prefixPart = prefix.isEmpty ? "" : "/" + prefix.dropLast()
        return "\(scheme)://\(host)\(portPart)/\(bucket)\(prefixPart)?region=\(region)" + (style == .virtual ? "&style=virtual" : "")
    }

    /// The `Host` header of a request (a port only when not the scheme's own).
    var hostHeader: String {
        let name = style == .virtual ? "\(bucket).\(host)" : host
        guard let port, !(scheme == "http" && port == 80) && !(scheme == "https" && port == 443) else { return name }
        return "\(name):\(port)"
    }

    /// The request path for `key` (already prefixed), encoded; the bucket's own path for nil.
    func path(for key: String?) -> String {
        let bucketPath = style == .virtual ? "/" : "/\(bucket)"
        guard let key else { return bucketPath }
        return (style == .virtual ? "/" : "/\(bucket)/") + SignatureV4.encodePath(key)
    }

    /// S3's rule for a bucket's name (the DNS-compatible one).
    static func isBucketName(_ name: String) -> Bool {
        (3...63).contains(name.count) && name.allSatisfy { $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "-" || $0 == ".") }
            && name.first!.isLetterOrDigit && name.last!.isLetterOrDigit
    }
}

extension Character {
    fileprivate var isLetterOrDigit: Bool { isLetter || isNumber }
}
