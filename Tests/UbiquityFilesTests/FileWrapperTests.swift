import Foundation
import Testing
@testable import UbiquityFiles

@Suite struct FileWrapperTests {
    func makePackage(in scratch: Scratch, members: Int = 3) throws -> URL {
        let root = FileWrapper(directoryWithFileWrappers: [:])
        for i in 0..<members { root.addRegularFile(withContents: Data("member \(i)".utf8), preferredFilename: "m\(i).txt") }
        let sub = FileWrapper(directoryWithFileWrappers: ["deep.txt": FileWrapper(regularFileWithContents: Data("deep".utf8))])
        sub.preferredFilename = "sub"
        root.addFileWrapper(sub)
        let url = scratch.file("doc.pkg")
        try root.write(to: url, options: .atomic, originalContentsURL: nil)
        return url
    }

    @Test func kindsAndContents() {
        let file = FileWrapper(regularFileWithContents: Data("x".utf8))
        #expect(file.isRegularFile && !file.isDirectory && !file.isSymbolicLink)
        #expect(file.regularFileContents == Data("x".utf8))
        #expect(file.fileWrappers == nil)
        let link = FileWrapper(symbolicLinkWithDestinationURL: URL(fileURLWithPath: "/tmp/target"))
        #expect(link.isSymbolicLink && link.symbolicLinkDestinationURL?.path == "/tmp/target" && link.regularFileContents == nil)
        let dir = FileWrapper(directoryWithFileWrappers: ["a": file])
        #expect(dir.isDirectory && dir.fileWrappers?["a"] === file && file.preferredFilename == "a")
    }

    @Test func uniqueKeysForTakenNames() {
        let dir = FileWrapper(directoryWithFileWrappers: [:])
        let first = dir.addRegularFile(withContents: Data([1]), preferredFilename: "image.png")
        let second = dir.addRegularFile(withContents: Data([2]), preferredFilename: "image.png")
        let third = dir.addRegularFile(withContents: Data([3]), preferredFilename: "image.png")
        #expect(first == "image.png")
        #expect(Set([first, second, third]).count == 3)
        #expect(dir.fileWrappers?[second]?.regularFileContents == Data([2]))
        let child = dir.fileWrappers![second]!
        #expect(dir.keyForChildFileWrapper(child) == second)
        dir.removeFileWrapper(child)
        #expect(dir.fileWrappers?[second] == nil && dir.fileWrappers?.count == 2)
        #expect(dir.keyForChildFileWrapper(child) == nil)
        // Renaming a child re-keys it in its parent.
        let third3 = dir.fileWrappers![third]!
        third3.preferredFilename = "renamed.png"
        #expect(dir.keyForChildFileWrapper(third3) == "renamed.png")
    }

    @Test func readsPackagesLazily() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let url = try makePackage(in: scratch)
        let wrapper = try FileWrapper(url: url)
        #expect(wrapper.isDirectory && wrapper.filename == "doc.pkg")
        #expect(Set(wrapper.fileWrappers!.keys) == ["m0.txt", "m1.txt", "m2.txt", "sub"])
        // Not read yet: deleting the file now makes the lazy read fail.
        try FileManager.default.removeItem(at: url.appendingPathComponent("m1.txt"))
        #expect(wrapper.fileWrappers!["m1.txt"]!.regularFileContents == nil)
        #expect(wrapper.fileWrappers!["m0.txt"]!.regularFileContents == Data("member 0".utf8))
        #expect(wrapper.fileWrappers!["sub"]!.fileWrappers!["deep.txt"]!.regularFileContents == Data("deep".utf8))
    }

    @Test func immediateReadsEverythingNow() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        for options: FileWrapper.ReadingOptions in [.immediate, [.immediate, .withoutMapping]] {
            let url = try makePackage(in: scratch)
            let wrapper = try FileWrapper(url: url, options: options)
            try? FileManager.default.removeItem(at: url.appendingPathComponent("m2.txt"))
            #expect(wrapper.fileWrappers!["m2.txt"]!.regularFileContents == Data("member 2".utf8))
        }
    }

    @Test func openingALargePackageReadsAlmostNothing() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let root = FileWrapper(directoryWithFileWrappers: [:])
        for i in 0..<200 { root.addRegularFile(withContents: Data(repeating: UInt8(i % 256), count: 16384), preferredFilename: "m\(i)") }
        let url = scratch.file("big.pkg")
        try root.write(to: url, options: .atomic, originalContentsURL: nil)
        // This thread's counts: other tests read files on other threads meanwhile.
        let before = try #require(POSIX.ioCounters(thisThread: true))
        let wrapper = try FileWrapper(url: url)
        let after = try #require(POSIX.ioCounters(thisThread: true))
        #expect(wrapper.fileWrappers?.count == 200)
        #expect(after.read - before.read < 64 * 1024, "read \(after.read - before.read) bytes to open a 3 MiB package")
        // The measurement sees what is read here: reading everything counts every byte.
        let start = try #require(POSIX.ioCounters(thisThread: true))
        _ = try FileWrapper(url: url, options: .immediate)
        let end = try #require(POSIX.ioCounters(thisThread: true))
        #expect(end.read - start.read >= 200 * 16384)
    }

    @Test func writeReusesUnchangedMembers() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let url = try makePackage(in: scratch)
        let m0 = try inode(url.appendingPathComponent("m0.txt"))
        let deep = try inode(url.appendingPathComponent("sub/deep.txt"))
        let wrapper = try FileWrapper(url: url)
        let old = wrapper.fileWrappers!["m1.txt"]!
        wrapper.removeFileWrapper(old)
        wrapper.addRegularFile(withContents: Data("changed".utf8), preferredFilename: "m1.txt")
        try wrapper.write(to: url, options: .atomic, originalContentsURL: url)
        #expect(try inode(url.appendingPathComponent("m0.txt")) == m0)
        #expect(try inode(url.appendingPathComponent("sub/deep.txt")) == deep)
        #expect(try String(contentsOf: url.appendingPathComponent("m1.txt"), encoding: .utf8) == "changed")
        #expect(wrapper.matchesContents(of: url))
        // Lazily read members still read after the swap.
        let again = try FileWrapper(url: url)
        try again.write(to: url, options: .atomic, originalContentsURL: url)
        #expect(wrapper.fileWrappers!["m2.txt"]!.regularFileContents == Data("member 2".utf8))
        // Without an original, nothing is reused.
        let copy = scratch.file("copy.pkg")
        try wrapper.write(to: copy, options: [], originalContentsURL: nil)
        #expect(try inode(copy.appendingPathComponent("m0.txt")) != m0)
        #expect(FileWrapper(regularFileWithContents: Data()).matchesContents(of: copy) == false)
    }

    @Test func memberChangedOnDiskIsNotReused() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let url = try makePackage(in: scratch)
        let wrapper = try FileWrapper(url: url, options: .immediate)
        // Someone rewrites m0 in place after we read it: our copy must win, not theirs.
        try Data("tampered".utf8).write(to: url.appendingPathComponent("m0.txt"))
        let target = scratch.file("out.pkg")
        try wrapper.write(to: target, options: .atomic, originalContentsURL: url)
        #expect(try String(contentsOf: target.appendingPathComponent("m0.txt"), encoding: .utf8) == "member 0")
    }

    @Test func nameUpdatingAndSymbolicLinks() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let root = FileWrapper(directoryWithFileWrappers: [
            "a.txt": FileWrapper(regularFileWithContents: Data("a".utf8)),
            "link": FileWrapper(symbolicLinkWithDestinationURL: URL(fileURLWithPath: "a.txt", relativeTo: nil)),
        ])
        #expect(root.filename == nil)
        let url = scratch.file("named.pkg")
        try root.write(to: url, options: [.atomic, .withNameUpdating], originalContentsURL: nil)
        #expect(root.filename == "named.pkg")
        #expect(root.fileWrappers!["a.txt"]!.filename == "a.txt")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: url.appendingPathComponent("link").path) == "a.txt")
        let read = try FileWrapper(url: url)
        #expect(read.fileWrappers!["link"]!.isSymbolicLink)
        #expect(read.fileWrappers!["link"]!.symbolicLinkDestinationURL?.relativePath == "a.txt")
        #expect(read.matchesContents(of: url))
    }

    @Test func invalidMemberNameFailsAndLeavesOldPackage() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let url = try makePackage(in: scratch)
        let bad = FileWrapper(directoryWithFileWrappers: ["ok": FileWrapper(regularFileWithContents: Data("ok".utf8)),
                                                           "../escape": FileWrapper(regularFileWithContents: Data("x".utf8))])
        #expect(throws: FileAccessError.self) { try bad.write(to: url, options: .atomic, originalContentsURL: nil) }
        #expect(try String(contentsOf: url.appendingPathComponent("m0.txt"), encoding: .utf8) == "member 0")
        #expect(!FileManager.default.fileExists(atPath: scratch.url.appendingPathComponent("escape").path))
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: scratch.url.path)
        #expect(leftovers == ["doc.pkg"])
    }

    @Test func readingMissingOrOddNodesThrows() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let error = #expect(throws: FileAccessError.self) { try FileWrapper(url: scratch.file("missing")) }
        #expect(error?.code == .notFound)
        #expect(error?.description.contains("missing") == true)
        let fifo = scratch.file("fifo")
        #expect(mkfifo(fifo.path, 0o644) == 0)
        let odd = #expect(throws: FileAccessError.self) { try FileWrapper(url: fifo) }
        #expect(odd?.code == .unsupportedItem)
    }

    @Test func serializedRepresentationRoundTrips() throws {
        let root = FileWrapper(directoryWithFileWrappers: [
            "t.txt": FileWrapper(regularFileWithContents: Data("text".utf8)),
            "d": FileWrapper(directoryWithFileWrappers: ["x": FileWrapper(regularFileWithContents: Data([0, 1, 2]))]),
            "l": FileWrapper(symbolicLinkWithDestinationURL: URL(fileURLWithPath: "/etc/hostname")),
        ])
        let data = try #require(root.serializedRepresentation)
        let copy = try #require(FileWrapper(serializedRepresentation: data))
        #expect(copy.fileWrappers!["t.txt"]!.regularFileContents == Data("text".utf8))
        #expect(copy.fileWrappers!["d"]!.fileWrappers!["x"]!.regularFileContents == Data([0, 1, 2]))
        #expect(copy.fileWrappers!["l"]!.symbolicLinkDestinationURL?.path == "/etc/hostname")
        #expect(FileWrapper(serializedRepresentation: Data("garbage".utf8)) == nil)
    }

    /// As Apple's: an `NSObject` adopting `NSSecureCoding`, archived and unarchived by class.
    @Test func aWrapperTreeArchivesWithSecureCoding() throws {
        let root = FileWrapper(directoryWithFileWrappers: [
            "Text.txt": FileWrapper(regularFileWithContents: Data("text".utf8)),
            "Images": FileWrapper(directoryWithFileWrappers: ["a.png": FileWrapper(regularFileWithContents: Data([0, 1, 2]))]),
        ])
        #expect(FileWrapper.supportsSecureCoding)
        let archive = try NSKeyedArchiver.archivedData(withRootObject: root, requiringSecureCoding: true)
        let copy = try #require(try NSKeyedUnarchiver.unarchivedObject(ofClass: FileWrapper.self, from: archive))
        #expect(copy.isDirectory && Set(copy.fileWrappers?.keys ?? [:].keys) == ["Text.txt", "Images"])
        #expect(copy.fileWrappers?["Text.txt"]?.regularFileContents == Data("text".utf8))
        #expect(copy.fileWrappers?["Images"]?.fileWrappers?["a.png"]?.regularFileContents == Data([0, 1, 2]))
        // Anything else under the key is refused, not trusted.
        let other = try NSKeyedArchiver.archivedData(withRootObject: NSString(string: "not a wrapper"), requiringSecureCoding: true)
        #expect((try? NSKeyedUnarchiver.unarchivedObject(ofClass: FileWrapper.self, from: other)) == nil)
    }

    @Test func serializedRepresentationRejectsHostileNames() throws {
        for name in ["../../etc/passwd", "a/b", "", ".."] {
            let node: [String: Any] = ["kind": "directory", "children": [name: ["kind": "file", "contents": Data()]]]
            let plist: [String: Any] = ["format": "ubiquity.file-wrapper", "version": 1, "root": node]
            let data = try PropertyListSerialization.data(fromPropertyList: plist, format: .binary, options: 0)
            #expect(FileWrapper(serializedRepresentation: data) == nil, "accepted \(name)")
        }
    }
}
