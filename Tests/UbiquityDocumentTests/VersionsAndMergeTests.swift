import Foundation
import Testing
import Ubiquity
import UbiquityTestSupport

/// A text document type that keeps a local history.
final class DiaryDocument: Document {
    var text = ""
    override nonisolated class var preservesVersions: Bool { true }
    override func contents(forType typeName: String) throws -> Any { Data(text.utf8) }
    override func load(fromContents contents: Any, ofType typeName: String?) throws {
        text = String(decoding: contents as? Data ?? Data(), as: UTF8.self)
    }
}

@MainActor
@Suite struct LocalHistoryTests {
    @Test func everySaveKeepsThePreviousContentsAndTheUserCanGoBack() async throws {
        let dir = try TemporaryDirectory("history"); defer { dir.remove() }
        let url = dir.file("Diary.txt")
        let document = DiaryDocument(fileURL: url)
        document.text = "monday"
        #expect(await document.save(to: url, for: .forCreating))
        for day in ["tuesday", "wednesday"] {
            document.text = day
            #expect(await document.save(to: url, for: .forOverwriting))
        }
        let history = try #require(NSFileVersion.otherVersionsOfItem(at: url))
        #expect(try history.map { try String(contentsOf: $0.url, encoding: .utf8) } == ["monday", "tuesday"])
        #expect(history.allSatisfy { !$0.isConflict && $0.isDiscardable })
        #expect(document.documentState == .normal, "history is not a conflict")

        // "Revert to an earlier version", as macOS Versions offers.
        _ = try await NSFileCoordinator(filePresenter: document).write(itemAt: url, options: .forReplacing) { try history[0].replaceItem(at: $0) }
        #expect(await document.revert(toContentsOf: url))
        #expect(document.text == "monday")
        #expect(await document.close())
    }

    @Test func documentsThatDoNotOptInKeepNoHistory() async throws {
        let dir = try TemporaryDirectory("history"); defer { dir.remove() }
        let url = dir.file("plain.txt")
        let document = ProbeDocument(fileURL: url)
        document.text = "one"
        #expect(await document.save(to: url, for: .forCreating))
        document.text = "two"
        #expect(await document.save(to: url, for: .forOverwriting))
        #expect(NSFileVersion.otherVersionsOfItem(at: url)?.isEmpty == true)
        #expect(!FileManager.default.fileExists(atPath: dir.file(".ubiquity-versions").path))
    }
}

@Suite struct TextMergeTests {
    let base = "title\none\ntwo\nthree\nfour\n"

    @Test func changesOnDifferentLinesMergeCleanly() {
        let mine = "title\nONE\ntwo\nthree\nfour\n"
        let theirs = "title\none\ntwo\nthree\nFOUR\nfive\n"
        let merged = TextMerge.merge(ancestor: base, current: mine, other: theirs)
        #expect(merged.isClean && merged.text == "title\nONE\ntwo\nthree\nFOUR\nfive\n")
    }

    @Test func theSameChangeOnBothSidesIsTakenOnce() {
        let both = "title\none\n2\nthree\nfour\n"
        let same = TextMerge.merge(ancestor: base, current: both, other: both)
        #expect(same.isClean && same.text == both)
        let deleted = "title\none\nthree\nfour\n"
        #expect(TextMerge.merge(ancestor: base, current: deleted, other: base).text == deleted, "a deletion on one side is kept")
    }

    @Test func differentChangesToTheSameLinesConflict() {
        let mine = "title\none\nmine\nthree\nfour\n"
        let theirs = "title\none\ntheirs\nthree\nfour\n"
        let merged = TextMerge.merge(ancestor: base, current: mine, other: theirs, currentLabel: "this Mac", otherLabel: "iPad")
        #expect(!merged.isClean && merged.conflicts == 1)
        #expect(merged.text == "title\none\n<<<<<<< this Mac\nmine\n=======\ntheirs\n>>>>>>> iPad\nthree\nfour\n")
    }

    @Test func withoutAnAncestorBothSidesAdditionsAreKept() {
        let mine = "a\nb\nmine\nc\n"
        let theirs = "a\ntheirs first\nb\nc\n"
        let merged = TextMerge.merge(ancestor: nil, current: mine, other: theirs)
        #expect(merged.isClean && merged.text == "a\ntheirs first\nb\nmine\nc\n")
        let clash = TextMerge.merge(ancestor: nil, current: "x\nmine\n", other: "x\ntheirs\n")
        #expect(clash.conflicts == 1)
    }

    @Test func largeTextsWithScatteredEditsMerge() {
        let lines = (0..<5_000).map { "line \($0)" }
        var mine = lines, theirs = lines
        for index in stride(from: 10, to: 5_000, by: 100) { mine[index] = "mine \(index)" }
        for index in stride(from: 60, to: 5_000, by: 100) { theirs[index] = "theirs \(index)" }
        theirs.insert("inserted", at: 2_500)
        let merged = TextMerge.merge(ancestor: lines.joined(separator: "\n"), current: mine.joined(separator: "\n"), other: theirs.joined(separator: "\n"))
        #expect(merged.isClean)
        let result = merged.text.split(separator: "\n")
        #expect(result.count == 5_001 && result.contains("mine 10") && result.contains("theirs 60") && result.contains("inserted"))
    }
}
