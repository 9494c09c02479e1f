import Foundation
import Testing
@testable import UbiquityClient
import UbiquityTestSupport

/// App groups: a folder the user's apps share on this machine, for the groups they are entitled to.
@Suite struct AppGroupTests {
    @Test func anEntitledGroupsFolderIsMadePrivateOnFirstUseAndOthersAreRefused() throws {
        let paths = temporaryPaths()
        defer { try? FileManager.default.removeItem(at: paths.data.deletingLastPathComponent().deletingLastPathComponent()) }
        let app = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: [], applicationGroups: ["group.com.example.notes"]))
        let folder = try #require(app.groupContainerURL("group.com.example.notes"))
        #expect(folder.standardizedFileURL.path == paths.groupContainer("group.com.example.notes").path)
        #expect(try FileManager.default.attributesOfItem(atPath: folder.path)[.posixPermissions] as? Int == 0o700)
        try Data("shared".utf8).write(to: folder.appendingPathComponent("Settings.plist"))
        // Another app of the same group, signed in to no account at all, sees the same folder.
        let widget = UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: ["X.com.example.widget"], applicationGroups: ["group.com.example.notes"]))
        #expect(try Data(contentsOf: try #require(widget.groupContainerURL("group.com.example.notes")).appendingPathComponent("Settings.plist")) == Data("shared".utf8))
        // Not entitled, or not a name: nil, and nothing is made.
        #expect(app.groupContainerURL("group.com.example.other") == nil)
        #expect(UbiquityContainers(paths: paths, entitlements: UbiquityEntitlements(containers: ["../x"], applicationGroups: ["../escape"])).groupContainerURL("../escape") == nil)
        #expect(!FileManager.default.fileExists(atPath: paths.groupContainer("group.com.example.other").path))
        // A folder left with a looser mode is made private again.
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: folder.path)
        _ = app.groupContainerURL("group.com.example.notes")
        #expect(try FileManager.default.attributesOfItem(atPath: folder.path)[.posixPermissions] as? Int == 0o700)
    }

    @Test func theEntitlementsFileNamesTheGroupsAndOlderEncodingsStillDecode() throws {
        let directory = try TemporaryDirectory("entitlements")
        defer { directory.remove() }
        let file = directory.file("entitlements.json")
        try Data(#"{"com.apple.developer.ubiquity-container-identifiers": ["A.com.example.notes"], "com.apple.security.application-groups": ["group.com.example.notes"]}"#.utf8).write(to: file)
        #expect(try UbiquityEntitlements(contentsOf: file).applicationGroupIdentifiers == ["group.com.example.notes"])
        try Data(#"{"com.apple.developer.ubiquity-container-identifiers": [], "com.apple.security.application-groups": "group.x"}"#.utf8).write(to: file)
        #expect(throws: EntitlementsError.self) { try UbiquityEntitlements(contentsOf: file) }
        let old = try JSONDecoder().decode(UbiquityEntitlements.self, from: Data(#"{"containerIdentifiers": ["A.b"], "keyValueStoreIdentifier": "A.b"}"#.utf8))
        #expect(old == UbiquityEntitlements(containers: ["A.b"], keyValueStore: "A.b"))
    }
}
