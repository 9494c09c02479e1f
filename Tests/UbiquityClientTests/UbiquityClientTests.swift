import Foundation
import Synchronization
import Testing
@testable import UbiquityClient

func temporaryPaths() -> UbiquityPaths {
    let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ubiquity-client-\(UUID().uuidString.prefix(8))")
    return UbiquityPaths(configuration: root.appendingPathComponent("config/ubiquity"), data: root.appendingPathComponent("data/ubiquity"))
}

func credentials(identity: String = "identity-ada") -> UbiquityCredentials {
    UbiquityCredentials(server: URL(string: "http://127.0.0.1:8443")!, account: "ada", deviceId: "device-1", deviceName: "laptop",
                        token: String(repeating: "t", count: 64), identityToken: identity)
}

@Suite struct UbiquityPathsTests {
    @Test func xdgDirectoriesDecideWhereThingsLive() {
        let defaults = UbiquityPaths(environment: ["HOME": "/home/ada"])
        #expect(defaults.configuration.path == "/home/ada/.config/ubiquity" && defaults.data.path == "/home/ada/.local/share/ubiquity")
        let xdg = UbiquityPaths(environment: ["HOME": "/home/ada", "XDG_CONFIG_HOME": "/cfg", "XDG_DATA_HOME": "/dat"])
        #expect(xdg.credentials.path == "/cfg/ubiquity/credentials.json")
        #expect(xdg.container("ABCDE12345.com.example.notes", account: "abc").path == "/dat/ubiquity/accounts/abc/containers/ABCDE12345.com.example.notes")
        #expect(UbiquityPaths(environment: ["HOME": "/home/ada", "XDG_DATA_HOME": "relative"]).data.path == "/home/ada/.local/share/ubiquity",
                "a relative XDG path is ignored")
        #expect(xdg.account("one") != xdg.account("two"), "each account's data apart")
    }
}

@Suite struct UbiquityCredentialsTests {
    @Test func credentialsAreKeptPrivateAndRoundTrip() throws {
        let paths = temporaryPaths()
        defer { try? FileManager.default.removeItem(at: paths.configuration.deletingLastPathComponent().deletingLastPathComponent()) }
        #expect(try UbiquityCredentials.load(from: paths) == nil, "signed out")
        try credentials().save(to: paths)
        #expect(try UbiquityCredentials.load(from: paths) == credentials())
        let mode = try FileManager.default.attributesOfItem(atPath: paths.credentials.path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        try credentials(identity: "identity-bob").save(to: paths)
        #expect(try UbiquityCredentials.load(from: paths)?.identityToken == "identity-bob", "a new sign-in replaces the old")

        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: paths.credentials.path)
        #expect { try UbiquityCredentials.load(from: paths) } throws: { "\($0)".contains("readable by other users") }
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: paths.credentials.path)
        try Data("{not json".utf8).write(to: paths.credentials)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: paths.credentials.path)
        #expect { try UbiquityCredentials.load(from: paths) } throws: { "\($0)".contains("sign in again") }

        #expect(try UbiquityCredentials.remove(from: paths))
        #expect(try UbiquityCredentials.remove(from: paths) == false)
        #expect(try UbiquityCredentials.load(from: paths) == nil)
    }
}

@Suite struct UbiquityIdentityTests {
    /// Signing in, switching accounts and signing out each post the identity-did-change
    /// notification, and the token follows.
    @Test func signInSwitchAndSignOutArePosted() async throws {
        let paths = temporaryPaths()
        defer { try? FileManager.default.removeItem(at: paths.configuration.deletingLastPathComponent().deletingLastPathComponent()) }
        let center = NotificationCenter()
        let identity = UbiquityIdentity(paths: paths, notificationCenter: center)
        let posted = Mutex(0)
        let observer = center.addObserver(forName: .NSUbiquityIdentityDidChange, object: nil, queue: nil) { _ in posted.withLock { $0 += 1 } }
        defer { center.removeObserver(observer) }
        #expect(identity.token == nil)

        func waitForPosts(_ count: Int) async throws {
            let deadline = ContinuousClock.now + .seconds(5)
            while posted.withLock({ $0 }) < count {
                guard ContinuousClock.now < deadline else { Issue.record("only \(posted.withLock { $0 }) of \(count) notifications"); return }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        try credentials(identity: "identity-ada").save(to: paths)
        try await waitForPosts(1)
        #expect(identity.token == "identity-ada")
        try credentials(identity: "identity-bob").save(to: paths)
        try await waitForPosts(2)
        #expect(identity.token == "identity-bob")
        try UbiquityCredentials.remove(from: paths)
        try await waitForPosts(3)
        #expect(identity.token == nil)
        try await Task.sleep(for: .milliseconds(700))
        #expect(posted.withLock { $0 } == 3, "no change, no notification")
    }

    @Test func theFileManagerTokenIsAnOpaqueComparableObject() {
        // This process is not signed in unless its XDG directories say so; either way the
        // property answers at once with nil or an NSString.
        let token = FileManager.default.ubiquityIdentityToken
        if let token { #expect(token is NSString) }
        #expect(NSNotification.Name.NSUbiquityIdentityDidChange.rawValue == "NSUbiquityIdentityDidChangeNotification")
    }
}
