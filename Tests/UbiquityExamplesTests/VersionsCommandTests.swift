import Foundation
import Testing
import Ubiquity
import UbiquityCoordination
import UbiquityTestSupport

/// `ubiquity versions` and `ubiquity resolve`, run as a user would.
@Suite struct VersionsCommandTests {
    let run = ExampleProgramTests().run

    func conflict(_ url: URL, _ text: String, from computer: String, in dir: TemporaryDirectory) throws -> NSFileVersion {
        let incoming = dir.file(".incoming-\(computer)")
        try Data(text.utf8).write(to: incoming)
        return try NSFileVersion.addConflictVersion(ofItemAt: url, withContentsOf: incoming, savingComputer: computer, modificationDate: Date(timeIntervalSince1970: 1_800_000_000), byMoving: true)
    }

    @Test func versionsListsAndResolveKeepsAConflictVersion() async throws {
        let dir = try TemporaryDirectory("cli"); defer { dir.remove() }
        let url = dir.file("plan.txt")
        try Data("mine".utf8).write(to: url)
        let laptop = try conflict(url, "from the laptop", from: "laptop", in: dir)
        _ = try conflict(url, "from the phone!", from: "phone", in: dir)

        let (status, table) = try await run("ubiquity", ["versions", url.path])
        #expect(status == 0)
        let rows = table.split(separator: "\n")
        #expect(rows.count == 5, "header, current, two conflicts, storage:\n\(table)")
        #expect(rows[1].hasPrefix("current ") && rows[1].hasSuffix(" 4"))
        #expect(rows[2].hasPrefix("conflict ") && rows[2].contains(laptop.versionIdentifier.rawValue) && rows[2].contains("2027-01-15 08:00:00Z") && rows[2].contains("laptop") && rows[2].hasSuffix(" 15"))
        #expect(rows[3].contains("phone"))
        #expect(rows[4] == "store: 2 version(s), 30 bytes (0 shared with the file), limit \(NSFileVersion.maximumStorageBytesPerItem) bytes")

        let (jsonStatus, json) = try await run("ubiquity", ["versions", "--json", url.path])
        let report = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        #expect(jsonStatus == 0 && (report["versions"] as? [[String: Any]])?.map { $0["kind"] as? String } == ["current", "conflict", "conflict"])

        #expect(try await run("ubiquity", ["resolve", url.path, "--keep", "no-such-id"]).0 != 0)
        #expect(try String(contentsOf: url, encoding: .utf8) == "mine", "a bad ID changes nothing")
        let (resolved, message) = try await run("ubiquity", ["resolve", url.path, "--keep", laptop.versionIdentifier.rawValue])
        #expect(resolved == 0 && message.contains("2 conflict version(s) resolved and removed"))
        #expect(try String(contentsOf: url, encoding: .utf8) == "from the laptop")
        #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: url)?.isEmpty == true)
        #expect(NSFileVersion.otherVersionsOfItem(at: url)?.isEmpty == true)
    }

    @Test func resolveKeepingTheCurrentVersionLeavesTheFileAndTheHistory() async throws {
        let dir = try TemporaryDirectory("cli"); defer { dir.remove() }
        let url = dir.file("plan.txt")
        try Data("mine".utf8).write(to: url)
        let history = try #require(try NSFileVersion.preserveCurrentVersion(ofItemAt: url))
        try Data("mine, later".utf8).write(to: url)
        _ = try conflict(url, "theirs", from: "tablet", in: dir)
        let (status, _) = try await run("ubiquity", ["resolve", url.path, "--keep", "current"])
        #expect(status == 0)
        #expect(try String(contentsOf: url, encoding: .utf8) == "mine, later")
        #expect(NSFileVersion.otherVersionsOfItem(at: url)?.map(\.versionIdentifier) == [history.versionIdentifier])
        #expect(try await run("ubiquity", ["versions", dir.file("missing.txt").path]).0 != 0)
    }
}
