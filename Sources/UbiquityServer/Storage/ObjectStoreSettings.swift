import Foundation
import UbiquityObjectStore

/// Where a server keeps chunk contents when not in its database (`--object-store URL`): an
/// S3-compatible store's location, and its credentials — from the environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`) or a file only its owner
/// may read (`--object-store-credentials FILE`), never a flag. Its description shows the
/// location and the access key's id, never the secret.
package struct ObjectStoreSettings: Sendable, CustomStringConvertible {
    /// The endpoint, bucket, prefix, region and addressing style.
    package var location: ObjectStoreLocation
    /// The access key.
    package var credentials: ObjectStoreCredentials

    /// Reads `--object-store`'s URL and the credentials; a clear error for either.
    package init(url: String, credentialsFile: String? = nil, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        do {
            location = try ObjectStoreLocation(parsing: url)
            credentials = try ObjectStoreCredentials.load(file: credentialsFile, environment: environment)
        } catch let error as ObjectStoreError {
            throw SyncError(.badRequest, "badObjectStore", error.description)
        }
    }

    package var description: String { "\(location) (\(credentials))" }

    /// How `--object-store`'s URL shows in messages: the location as read (never a secret:
    /// a URL with credentials in it is refused), or nil for one that is not a location.
    package static func shown(_ url: String) -> String? { (try? ObjectStoreLocation(parsing: url))?.description }
}
