import Foundation
import UbiquityTestSupport
import Testing
@testable import UbiquityAgent

#if canImport(Glibc)
import Glibc
#endif

@Suite struct LocalScannerTests {
    let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("scanner-\(UUID().uuidString.prefix(8))")

    func write(_ path: String, _ text: String) throws {
        let url = root.appendingPathComponent(path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(text.utf8).write(to: url)
    }

    @Test func aScanFindsSyncedFilesAndSkipsWhatStaysLocal() throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let scanner = LocalScanner(root: root)
        #expect(try scanner.scan().isEmpty, "no folder yet")
        try write("Documents/a.txt", "a")
        try write("Documents/Trip/notes.txt", "n")
        try write("Documents/cache.nosync", "local only")
        try write("Documents/Big.nosync/inside.txt", "local only")
        try write("Documents/.ubiquity-versions/a.txt/1/a.txt", "a version")
        try write("Documents/.a.txt.ubiquity-save-0123456789abcdef", "a half-written save")
        symlink("/etc/passwd", root.appendingPathComponent("Documents/link").path)
        mkfifo(root.appendingPathComponent("Documents/pipe").path, 0o600)
        #expect(try scanner.scan().keys.sorted() == ["Documents", "Documents/Trip", "Documents/Trip/notes.txt", "Documents/a.txt"])

        let folder = root.appendingPathComponent("Documents/Locked")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        chmod(folder.path, 0)
        defer { chmod(folder.path, 0o700) }
        if getuid() != 0 { // root reads anything
            #expect(throws: ScanError.self) { try scanner.scan() }
        }
    }

    /// A program killed mid-save leaves its temporary beside the item: it never syncs, so a
    /// look at its folder removes it once it is abandoned (its process gone; or, for one that
    /// names no process, closed and quiet) — and leaves a live save's alone.
    @Test func aLookRemovesTemporariesThatKilledProgramsLeft() throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let killed = ChildProcess()
        killed.executableURL = URL(fileURLWithPath: "/bin/true")
        try killed.run()
        killed.waitUntilExit()
        let gone = killed.processIdentifier
        try write("Documents/a.txt", "a")
        try write("Documents/.a.txt.ubiquity-save-\(gone)-0123456789abcdef", "a save cut short")
        try write("Documents/.b.txt.ubiquity-save-\(getppid())-0123456789abcdef", "a save under way")
        try write("Documents/.dat.nosync1a2b.c3d4", "an atomic write cut short")
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-60)], ofItemAtPath: root.appendingPathComponent("Documents/.dat.nosync1a2b.c3d4").path)
        try write("Databases/Recipes/logs/d1/.ubiquity-segment-\(gone)-0123456789abcdef.tmp", "a segment cut short")
        try write("Documents/.ubiquity-download-1234abcd", "the agent's own staging: its materialiser's to clean")
        #expect(try LocalScanner(root: root).scan().keys.sorted() == ["Databases", "Databases/Recipes", "Databases/Recipes/logs", "Databases/Recipes/logs/d1", "Documents", "Documents/a.txt"])
        let left = try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("Documents").path).sorted()
        #expect(left == [".b.txt.ubiquity-save-\(getppid())-0123456789abcdef", ".ubiquity-download-1234abcd", "a.txt"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("Databases/Recipes/logs/d1").path).isEmpty)
    }

    @Test func changesAreAddsModificationsMovesAndRemovals() throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let scanner = LocalScanner(root: root)
        try write("a.txt", "a")
        try write("b.txt", "b")
        try write("c.txt", "c")
        try write("d.txt", "d")
        let before = try scanner.scan()
        #expect(LocalScanner.changes(from: [:], to: before).added == ["a.txt", "b.txt", "c.txt", "d.txt"])
        #expect(LocalScanner.changes(from: before, to: before).isEmpty)

        try write("a.txt", "a, longer now")                                      // modified in place
        try FileManager.default.moveItem(at: root.appendingPathComponent("b.txt"), to: root.appendingPathComponent("Folder B.txt")) // moved
        try FileManager.default.removeItem(at: root.appendingPathComponent("c.txt"))                                                // removed
        try FileManager.default.moveItem(at: root.appendingPathComponent("d.txt"), to: root.appendingPathComponent("e.txt"))
        try write("d.txt", "a new d")                                             // a new file where d was
        try write("f.txt", "f")                                                   // added
        let after = try scanner.scan()
        let changes = LocalScanner.changes(from: before, to: after)
        #expect(changes.modified == ["a.txt"])
        #expect(changes.moved.map { "\($0.from)→\($0.to)" } == ["b.txt→Folder B.txt", "d.txt→e.txt"])
        #expect(changes.removed == ["c.txt"])
        #expect(changes.added == ["d.txt", "f.txt"])

        // A save that writes a new file and renames it over the old one is a modification.
        try write("tmp", "a saved the safe way")
        try FileManager.default.removeItem(at: root.appendingPathComponent("a.txt"))
        try FileManager.default.moveItem(at: root.appendingPathComponent("tmp"), to: root.appendingPathComponent("a.txt"))
        let saved = LocalScanner.changes(from: after, to: try scanner.scan())
        #expect(saved.modified == ["a.txt"] && saved.added.isEmpty && saved.removed.isEmpty && saved.moved.isEmpty, "\(saved)")
    }

    @Test func aPackageIsOneItemAndAFolderIsItsItems() throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let scanner = LocalScanner(root: root, packageExtensions: ["note"])
        try write("Work/Sketch.note/Text.txt", "draft")
        try write("Work/Sketch.note/Images/a.bin", "picture")
        try write("Work/Sketch.note/.ubiquity-versions/x", "not a member")
        let before = try scanner.scan()
        #expect(before.keys.sorted() == ["Work", "Work/Sketch.note"])
        #expect(before["Work"]?.kind == .directory && before["Work/Sketch.note"]?.kind == .package)
        #expect(before["Work/Sketch.note"]?.size == 12)
        #expect(try scanner.members(of: "Work/Sketch.note").map(\.path) == ["Images/a.bin", "Text.txt"])
        #expect(LocalScanner(root: root, packageExtensions: []).fingerprint(of: "Work/Sketch.note")?.kind == .directory, "not a package without the extension")

        // An edit of a member changes the package; a folder's new items do not change the folder.
        try write("Work/Sketch.note/Text.txt", "second")
        try write("Work/new.txt", "new")
        let edited = try scanner.scan()
        let changes = LocalScanner.changes(from: before, to: edited)
        #expect(changes.modified == ["Work/Sketch.note"] && changes.added == ["Work/new.txt"], "\(changes)")

        // An empty folder in a package is a member (`PATH/`, found by the chaos harness: it did
        // not sync); making one changes the package, and filling it makes it a folder of files.
        try FileManager.default.createDirectory(at: root.appendingPathComponent("Work/Sketch.note/Audio/Takes"), withIntermediateDirectories: true)
        #expect(try scanner.members(of: "Work/Sketch.note").map(\.path) == ["Audio/Takes/", "Images/a.bin", "Text.txt"])
        #expect(LocalScanner.changes(from: edited, to: try scanner.scan()).modified == ["Work/Sketch.note"])
        try write("Work/Sketch.note/Audio/Takes/1.m4a", "take")
        #expect(try scanner.members(of: "Work/Sketch.note").map(\.path) == ["Audio/Takes/1.m4a", "Images/a.bin", "Text.txt"])
        try FileManager.default.removeItem(at: root.appendingPathComponent("Work/Sketch.note/Audio"))

        // Moving a folder moves what is in it; a folder replaced by a file is another item.
        try FileManager.default.moveItem(at: root.appendingPathComponent("Work"), to: root.appendingPathComponent("Play"))
        let moved = LocalScanner.changes(from: edited, to: try scanner.scan())
        #expect(moved.moved.map { "\($0.from)→\($0.to)" }.sorted() == ["Work/Sketch.note→Play/Sketch.note", "Work/new.txt→Play/new.txt", "Work→Play"])
        let now = try scanner.scan()
        try FileManager.default.removeItem(at: root.appendingPathComponent("Play"))
        try write("Play", "a file now")
        let replaced = LocalScanner.changes(from: now, to: try scanner.scan())
        #expect(replaced.added == ["Play"] && replaced.removed.sorted() == ["Play", "Play/Sketch.note", "Play/new.txt"], "\(replaced)")
    }
}
