import Foundation

/// Why the agent could not be asked, or what it refused: a code to act on and a sentence to
/// show. It travels in ``AgentResponse/error`` as `{"code": …, "message": …}`.
public struct AgentError: Error, Codable, Sendable, Equatable, CustomStringConvertible, LocalizedError {
    /// What kind of failure: extensible (an older client reads a code it does not know as the
    /// failure it is, with its message).
    public struct Code: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible {
        /// The code on the wire.
        public var rawValue: String
        /// A code.
        public init(rawValue: String) { self.rawValue = rawValue }

        /// No agent answers on the socket (it is not running, or the socket cannot be used).
        public static let notRunning = Code(rawValue: "notRunning")
        /// The agent did not answer (in time, or understandably).
        public static let noAnswer = Code(rawValue: "noAnswer")
        /// Nobody is signed in on this device.
        public static let notSignedIn = Code(rawValue: "notSignedIn")
        /// The request is malformed or lacks what its operation needs.
        public static let badRequest = Code(rawValue: "badRequest")
        /// The container is not one the agent keeps (or not a container name).
        public static let unknownContainer = Code(rawValue: "unknownContainer")
        /// The path is not an item the agent knows (or no longer exists).
        public static let unknownItem = Code(rawValue: "unknownItem")
        /// The agent will not do it now (an eviction of changes not uploaded, of a folder, …).
        public static let refused = Code(rawValue: "refused")
        /// The download failed.
        public static let downloadFailed = Code(rawValue: "downloadFailed")
        /// The agent is stopping.
        public static let stopping = Code(rawValue: "stopping")
        /// Anything else.
        public static let failed = Code(rawValue: "failed")

        /// The raw value.
        public var description: String { rawValue }
    }

    /// What kind of failure.
    public var code: Code
    /// What happened, as a sentence.
    public var message: String

    /// An error of `code` saying `message`.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The message.
    public var description: String { message }
    /// The message.
    public var errorDescription: String? { message }
}

extension AgentResponse {
    private enum CodingKeys: String, CodingKey {
        case error, status, items, versions, link, shares, sharingCode
    }

    /// Decodes an answer; an error given as a plain sentence (an agent older than error codes)
    /// is `failed` with that sentence.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if let message = try? container.decodeIfPresent(String.self, forKey: .error) { // not a sentence: a coded error, below
            error = AgentError(.failed, message)
        } else {
            error = try container.decodeIfPresent(AgentError.self, forKey: .error)
        }
        status = try container.decodeIfPresent(AgentStatus.self, forKey: .status)
        items = try container.decodeIfPresent([UbiquityItemStatus].self, forKey: .items)
        versions = try container.decodeIfPresent([RemoteVersion].self, forKey: .versions)
        link = try container.decodeIfPresent(PublishedItemLink.self, forKey: .link)
        shares = try container.decodeIfPresent([ShareSummary].self, forKey: .shares)
        sharingCode = try container.decodeIfPresent(SharingCodeSummary.self, forKey: .sharingCode)
    }

    /// Encodes the answer (an error with its code and message).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(error, forKey: .error)
        try container.encodeIfPresent(status, forKey: .status)
        try container.encodeIfPresent(items, forKey: .items)
        try container.encodeIfPresent(versions, forKey: .versions)
        try container.encodeIfPresent(link, forKey: .link)
        try container.encodeIfPresent(shares, forKey: .shares)
        try container.encodeIfPresent(sharingCode, forKey: .sharingCode)
    }
}
