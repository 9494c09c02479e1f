import Foundation
import Synchronization
import Testing
@testable import UbiquityClient
import UbiquityTestSupport

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
        #expect(UbiquityCredentials.signedIn(in: paths) == nil, "unusable credentials: as signed out")
        #expect(UbiquityCredentials.problem(in: paths)?.reason.contains("sign in again") == true, "and why, not silence")
        try credentials().save(to: paths)
        #expect(UbiquityCredentials.signedIn(in: paths) == credentials() && UbiquityCredentials.problem(in: paths) == nil)

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
        let mode = try FileManager.default.attributesOfItem(atPath: paths.configuration.path)[.posixPermissions] as? Int
        #expect(mode == 0o700, "the folder watched for sign-ins is private, like the credentials in it")

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

@Suite struct UbiquityEntitlementsTests {
    @Test func aDeclarationsFileIsReadAndABrokenOneSaysWhy() throws {
        let folder = temporaryPaths().configuration
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let good = folder.appendingPathComponent("good.json")
        try Data(#"{"com.apple.developer.ubiquity-container-identifiers": ["ABCDE12345.com.example.notes"]}"#.utf8).write(to: good)
        #expect(UbiquityEntitlements.named(by: ["UBIQUITY_ENTITLEMENTS": good.path]).containerIdentifiers == ["ABCDE12345.com.example.notes"])
        #expect(UbiquityEntitlements.problem == nil)

        // A malformed file grants no container — and is not silent about it.
        let broken = folder.appendingPathComponent("broken.json")
        try Data(#"{"com.apple.developer.ubiquity-container-identifiers": "#.utf8).write(to: broken)
        #expect(UbiquityEntitlements.named(by: ["UBIQUITY_ENTITLEMENTS": broken.path]).containerIdentifiers.isEmpty)
        let problem = try #require(UbiquityEntitlements.problem)
        #expect(problem.path == broken.path && problem.reason == "is not JSON or a property list")

        let wrongKind = folder.appendingPathComponent("wrong.json")
        try Data(#"{"com.apple.developer.ubiquity-container-identifiers": "one"}"#.utf8).write(to: wrongKind)
        #expect(UbiquityEntitlements.named(by: ["UBIQUITY_ENTITLEMENTS": wrongKind.path]).containerIdentifiers.isEmpty)
        #expect(UbiquityEntitlements.problem?.reason.hasPrefix("needs com.apple.developer.ubiquity-container-identifiers") == true)
        #expect(UbiquityEntitlements.named(by: [:]).containerIdentifiers.isEmpty, "no file named: no containers, nothing wrong")
    }
}
