import Foundation
import UbiquityClient

/// The agent's settings: `$XDG_CONFIG_HOME/ubiquity/agent.json` (``UbiquityPaths/agentConfiguration``),
/// every key optional.
///
/// ```json
/// { "containers": ["TEAMID.com.example.notes"], "greedy": true, "rescanSeconds": 60, "packageExtensions": ["sketchbook"],
///   "sealedContents": true, "streamUploads": true }
/// ```
package struct AgentConfiguration: Codable, Sendable, Equatable {
    /// Containers to keep in step even before an app asks for them (the entitled containers of
    /// the apps on this device). Containers an app opened (with
    /// `FileManager.url(forUbiquityContainerIdentifier:)`) are kept in step too.
    package var containers: [String]
    /// Download every item at once (the Mac's behaviour) instead of on demand (iOS's).
    package var greedy: Bool
    /// How often everything is rescanned and fetched even without events (seconds): the safety
    /// net under inotify and push.
    package var rescanSeconds: Double
    /// Extensions (without the dot) of folders that are packages — one document, synced as one
    /// item — besides ``LocalScanner/standardPackageExtensions``.
    package var packageExtensions: [String]
    /// Seal the containers' documents under Standard Data Protection once this device holds the
    /// account's keys: chunks cut by the keyed chunker, named by a keyed MAC and encrypted before
    /// they leave, edits as sealed patches, names, sizes and dates in sealed records
    /// (docs/Encryption.md). Under Advanced always; on by default under Standard. Off, this
    /// device sends them in plaintext (the server seals them in place later) and opens what the
    /// others sealed.
    package var sealedContents: Bool
    /// Announce a large file's upload before its chunks, and fetch the others' as they land
    /// (docs/SyncProtocol.md, "Incoming revisions"). On by default; off, files travel store and
    /// forward: the others fetch a file once it is committed.
    package var streamUploads: Bool

    /// Every extension that makes a folder a package here.
    package var allPackageExtensions: Set<String> {
        LocalScanner.standardPackageExtensions.union(packageExtensions.map { $0.lowercased() })
    }

    /// Settings.
    package init(containers: [String] = [], greedy: Bool = false, rescanSeconds: Double = 60, packageExtensions: [String] = [], sealedContents: Bool = true,
                 streamUploads: Bool = true) {
        self.streamUploads = streamUploads
        self.packageExtensions = packageExtensions
        self.sealedContents = sealedContents
        self.containers = containers
        self.greedy = greedy
        self.rescanSeconds = rescanSeconds
    }

    package init(from decoder: any Decoder) throws {
        let values = try decoder.container(keyedBy: CodingKeys.self)
        containers = try values.decodeIfPresent([String].self, forKey: .containers) ?? []
        greedy = try values.decodeIfPresent(Bool.self, forKey: .greedy) ?? false
        rescanSeconds = try values.decodeIfPresent(Double.self, forKey: .rescanSeconds) ?? 60
        packageExtensions = try values.decodeIfPresent([String].self, forKey: .packageExtensions) ?? []
        sealedContents = try values.decodeIfPresent(Bool.self, forKey: .sealedContents) ?? true
        streamUploads = try values.decodeIfPresent(Bool.self, forKey: .streamUploads) ?? true
        if let bad = packageExtensions.first(where: { $0.isEmpty || $0.contains("/") || $0.contains(".") }) {
            throw DecodingError.dataCorruptedError(forKey: .packageExtensions, in: values, debugDescription: "“\(bad)” is not a file name extension (no dot, no slash)")
        }
        if let bad = containers.first(where: { !UbiquityEntitlements.isValidIdentifier($0) }) {
            throw DecodingError.dataCorruptedError(forKey: .containers, in: values, debugDescription: "“\(bad)” is not a container identifier")
        }
        guard rescanSeconds >= 1 else {
            throw DecodingError.dataCorruptedError(forKey: .rescanSeconds, in: values, debugDescription: "must be at least 1")
        }
    }

    /// The settings at `url`, or the defaults if there is no such file.
    /// - Throws: ``AgentConfigurationError`` when the file exists but is not valid.
    package static func load(from url: URL) throws -> AgentConfiguration {
        guard FileManager.default.fileExists(atPath: url.path) else { return AgentConfiguration() }
        do {
            return try JSONDecoder().decode(AgentConfiguration.self, from: Data(contentsOf: url))
        } catch let DecodingError.dataCorrupted(context) {
            throw AgentConfigurationError(path: url.path, reason: context.debugDescription)
        } catch let DecodingError.typeMismatch(_, context) {
            throw AgentConfigurationError(path: url.path, reason: "\(context.codingPath.map(\.stringValue).joined(separator: ".")): \(context.debugDescription)")
        } catch {
            throw AgentConfigurationError(path: url.path, reason: "\(error)")
        }
    }
}

/// The agent's settings file is not valid.
package struct AgentConfigurationError: Error, CustomStringConvertible, Equatable {
    /// The file.
    package var path: String
    /// What is wrong.
    package var reason: String

    /// A sentence saying so.
    package var description: String { "the agent's settings at \(path) are not valid: \(reason)" }
}
