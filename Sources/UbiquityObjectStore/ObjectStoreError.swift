/// What went wrong with an object store, said plainly (never with a secret in it).
public enum ObjectStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `--object-store`'s URL is not one (says why).
    case badLocation(String)
    /// No credentials, or unusable ones (says where they were looked for).
    case noCredentials(String)
    /// No object of that key.
    case notFound(key: String)
    /// A conditional write found an object there already.
    case alreadyExists(key: String)
    /// The store refused the request for good (bad credentials, no such bucket, …).
    case refused(status: Int, code: String, message: String)
    /// The store did not answer well after every retry (down, slow, 500/503/SlowDown).
    case unavailable(String)
    /// An answer that is not what was asked for (a range of the wrong length, XML that does
    /// not parse, a body larger than any answer should be).
    case badResponse(String)

    public var description: String {
        switch self {
        case .badLocation(let why): "bad object store location: \(why)"
        case .noCredentials(let why): "no object store credentials: \(why)"
        case .notFound(let key): "no object \(key)"
        case .alreadyExists(let key): "an object \(key) is there already"
        case .refused(let status, let code, let message): "the object store refused the request (\(status) \(code)): \(message)"
        case .unavailable(let why): "the object store is unavailable: \(why)"
        case .badResponse(let why): "the object store answered badly: \(why)"
        }
    }
}
