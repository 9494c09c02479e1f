import Foundation

/// An access key for an object store: from the environment (`AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`) or a file in AWS's shared-credentials form —
/// never a command-line flag. Its description never shows the secret or the token.
public struct ObjectStoreCredentials: Sendable, Equatable, CustomStringConvertible {
    /// The access key's id (not secret: it is in every request).
    public var accessKeyID: String
    /// The secret.
    public var secretAccessKey: String
    /// A temporary credential's token.
    public var sessionToken: String?

    /// Credentials from their parts.
    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
    }

    /// The access key's id only.
    public var description: String { "access key \(accessKeyID)" }

    /// Credentials from `file` when given, else from the environment; a clear error says what
    /// is missing.
    public static func load(file: String? = nil, profile: String = "default",
                            environment: [String: String] = ProcessInfo.processInfo.environment) throws -> ObjectStoreCredentials {
        if let file { return try read(file: file, profile: profile) }
        guard let id = environment["AWS_ACCESS_KEY_ID"], !id.isEmpty, let secret = environment["AWS_SECRET_ACCESS_KEY"], !secret.isEmpty else {
            throw ObjectStoreError.noCredentials("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a credentials file")
        }
        return ObjectStoreCredentials(accessKeyID: id, secretAccessKey: secret, sessionToken: environment["AWS_SESSION_TOKEN"].flatMap { $0.isEmpty ? nil : $0 })
    }

    /// Reads `[profile]`'s `aws_access_key_id`, `aws_secret_access_key` (and
    /// `aws_session_token`) from an INI file that only its owner may read: one that others may
    /// read is refused, as ssh refuses such a key.
    public static func read(file: String, profile: String = "default") throws -> ObjectStoreCredentials {
        let attributes: [FileAttributeKey: Any]
        do {
            attributes = try FileManager.default.attributesOfItem(atPath: file)
        } catch {
            throw ObjectStoreError.noCredentials("cannot read the credentials file \(file)")
        }
        if let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue, mode & 0o077 != 0 {
            throw ObjectStoreError.noCredentials("the credentials file \(file) may be read by others (mode \(String(mode, radix: 8))): chmod 600 it")
        }
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
            throw ObjectStoreError.noCredentials("cannot read the credentials file \(file)")
        }
        var section = "", values: [String: String] = [:]
        for raw in text.split(whereSeparator: \.isNewline) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                section = String(line.dropFirst().dropLast()).trimmingCharacters(in: .whitespaces)
                continue
            }
            guard section == profile, let equals = line.firstIndex(of: "=") else { continue }
            values[line[..<equals].trimmingCharacters(in: .whitespaces).lowercased()] = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
        }
        guard let id = values["aws_access_key_id"], !id.isEmpty, let secret = values["aws_secret_access_key"], !secret.isEmpty else {
            throw ObjectStoreError.noCredentials("the credentials file \(file) has no aws_access_key_id and aws_secret_access_key in [\(profile)]")
        }
        return ObjectStoreCredentials(accessKeyID: id, secretAccessKey: secret, sessionToken: values["aws_session_token"])
    }
}
