import Foundation
import Synchronization
import Logging
import UbiquityFiles

#if canImport(Glibc)
import Glibc
#endif

/// The account this device is signed in to: written by `ubiquity login`, removed by
/// `ubiquity logout`, read by the agent and by apps (``Foundation/FileManager/ubiquityIdentityToken``).
/// Stored as JSON with mode 0600; a file others can read is refused, as ssh refuses a key.
public struct UbiquityCredentials: Codable, Sendable, Equatable {
    /// The server's base URL.
    public var server: URL
    /// The account's name.
    public var account: String
    /// This device's id on the server.
    public var deviceId: String
    /// This device's name.
    public var deviceName: String
    /// The device token (`Authorization: Bearer …`).
    public var token: String
    /// The account's identity token (what apps see as `ubiquityIdentityToken`).
    public var identityToken: String

    /// Creates credentials.
    public init(server: URL, account: String, deviceId: String, deviceName: String, token: String, identityToken: String) {
        self.server = server
        self.account = account
        self.deviceId = deviceId
        self.deviceName = deviceName
        self.token = token
        self.identityToken = identityToken
    }

    /// The signed-in account, or nil when signed out.
    /// - Throws: ``CredentialsError`` when the file is unreadable, malformed or readable by others.
    public static func load(from paths: UbiquityPaths = UbiquityPaths()) throws -> UbiquityCredentials? {
        let path = paths.credentials.path
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT { return nil }
            throw CredentialsError(path: path, reason: String(cString: strerror(errno)))
        }
        guard info.st_mode & 0o077 == 0 else {
            throw CredentialsError(path: path, reason: "it is readable by other users (mode \(String(info.st_mode & 0o777, radix: 8))); run chmod 600 on it or sign in again")
        }
        do {
            return try JSONDecoder().decode(UbiquityCredentials.self, from: Data(contentsOf: paths.credentials))
        } catch {
            throw CredentialsError(path: path, reason: "it is not valid credentials (\(error)); sign in again")
        }
    }

    /// The signed-in device's credentials, or nil when nobody is signed in — also when the
    /// credentials file cannot be used (as if signed out, which is what Apple's API shows when
    /// the account is unavailable). That is not silent: the reason is logged as an error once
    /// (until it changes), and kept in ``problem(in:)``.
    public static func signedIn(in paths: UbiquityPaths = UbiquityPaths()) -> UbiquityCredentials? {
        let path = paths.credentials.path
        do {
            let credentials = try load(from: paths)
            refused.withLock { $0[path] = nil }
            return credentials
        } catch {
            let reason = error as? CredentialsError ?? CredentialsError(path: path, reason: "\(error)")
            let new = refused.withLock { refused -> Bool in
                defer { refused[path] = reason }
                return refused[path] != reason
            }
            if new {
                Logger(label: "ubiquity.credentials").error("the credentials cannot be used: treated as signed out",
                                                           metadata: ["path": "\(path)", "reason": "\(reason.reason)"])
            }
            return nil
        }
    }

    /// Why ``signedIn(in:)`` last found the credentials of `paths` unusable (nil: it did not).
    public static func problem(in paths: UbiquityPaths = UbiquityPaths()) -> CredentialsError? {
        refused.withLock { $0[paths.credentials.path] }
    }

    /// The reasons credentials files were refused, by path.
    private static let refused = Mutex<[String: CredentialsError]>([:])

    /// Writes them (replacing any others) with mode 0600, by safe save (a temporary file,
    /// fsync, rename).
    /// - Throws: ``CredentialsError`` when the directory or file cannot be written.
    public func save(to paths: UbiquityPaths = UbiquityPaths()) throws {
        let directory = paths.configuration.path
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw CredentialsError(path: directory, reason: "\(error)")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let data = try encoder.encode(self)
        do {
            // Safe save, the new file created 0600 from the start (never readable by others).
            try SafeSave.replaceItem(at: paths.credentials, preservingPermissions: false) { temporary in
                try POSIX.createFile(temporary.path, contents: data, permissions: 0o600)
            }
        } catch {
            throw CredentialsError(path: paths.credentials.path, reason: "\(error)")
        }
    }

    /// Removes the signed-in account's credentials (signing out). Returns false if there were none.
    @discardableResult
    public static func remove(from paths: UbiquityPaths = UbiquityPaths()) throws -> Bool {
        guard unlink(paths.credentials.path) == 0 else {
            if errno == ENOENT { return false }
            throw CredentialsError(path: paths.credentials.path, reason: String(cString: strerror(errno)))
        }
        return true
    }
}

/// Credentials that cannot be read or written, and why.
public struct CredentialsError: Error, CustomStringConvertible, Equatable {
    /// The file or directory.
    public var path: String
    /// What is wrong with it.
    public var reason: String

    /// A sentence saying so.
    public var description: String { "cannot use the credentials at \(path): \(reason)" }
}
