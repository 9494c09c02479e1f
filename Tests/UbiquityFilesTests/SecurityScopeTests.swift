import Foundation
import Testing
@testable import UbiquityFiles
import UbiquityTestSupport

/// Security-scoped access: what Apple answers for a URL the process may use, balanced per path.
@Suite struct SecurityScopeTests {
    @Test func aFileTheProcessMayUseIsGrantedAndEachStartIsBalanced() throws {
        let directory = try TemporaryDirectory("scope")
        defer { directory.remove() }
        let file = directory.file("Picked.txt")
        try Data("x".utf8).write(to: file)
        #expect(file.startAccessingSecurityScopedResource())
        #expect(file.startAccessingSecurityScopedResource())
        #expect(SecurityScope.accessCount(file.path) == 2)
        file.stopAccessingSecurityScopedResource()
        file.stopAccessingSecurityScopedResource()
        file.stopAccessingSecurityScopedResource() // unbalanced: nothing happens
        #expect(SecurityScope.accessCount(file.path) == 0)
        // A new item in a folder the process can write; NSURL's form.
        #expect((directory.file("New.txt") as NSURL).startAccessingSecurityScopedResource())
        (directory.file("New.txt") as NSURL).stopAccessingSecurityScopedResource()
        // Not a file URL, or a place the process cannot use: false, and nothing to balance.
        #expect(!URL(string: "https://example.com/a.txt")!.startAccessingSecurityScopedResource())
        #expect(!URL(fileURLWithPath: "/nonexistent-\(UUID().uuidString)/a.txt").startAccessingSecurityScopedResource())
        if getuid() != 0 {
            try FileManager.default.setAttributes([.posixPermissions: 0o000], ofItemAtPath: file.path)
            #expect(!file.startAccessingSecurityScopedResource(), "unreadable")
        }
    }
}
