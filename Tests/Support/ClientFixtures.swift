import Foundation
import Ubiquity

/// Configuration and data folders of their own under the temporary directory, for a test's
/// client (nothing signed in yet).
public func temporaryPaths() -> UbiquityPaths {
    let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ubiquity-client-\(UUID().uuidString.prefix(8))")
    return UbiquityPaths(configuration: root.appendingPathComponent("config/ubiquity"), data: root.appendingPathComponent("data/ubiquity"))
}

/// The credentials of a signed-in device of account `ada`, with the identity token given.
public func credentials(identity: String = "identity-ada") -> UbiquityCredentials {
    UbiquityCredentials(server: URL(string: "http://127.0.0.1:8443")!, account: "ada", deviceId: "device-1", deviceName: "laptop",
                        token: String(repeating: "t", count: 64), identityToken: identity)
}
