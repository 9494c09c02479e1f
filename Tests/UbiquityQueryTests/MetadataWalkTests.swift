import Foundation
import Testing
import UbiquityClient
@testable import UbiquityQuery

#if canImport(Glibc)
import Glibc
#endif

/// The machinery under a query: the folder walk, placeholders read in place, the item index.
@Suite struct MetadataWalkTests {
    let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ubiquity-walk-\(UUID().uuidString.prefix(8))")

    @Test func aDeepTreeIsWalkedWholeWithFoldersShared() throws {
        defer { try? FileManager.default.removeItem(at: folder) }
        var deepest = folder
        for level in 0..<12 {
            deepest = deepest.appendingPathComponent("level-\(level)-with-a-long-name")
            try FileManager.default.createDirectory(at: deepest, withIntermediateDirectories: true)
            for file in 0..<3 { try Data("\(level)".utf8).write(to: deepest.appendingPathComponent("f\(file).txt")) }
        }
        try Data().write(to: folder.appendingPathComponent(".hidden"))
        try FileManager.default.createDirectory(at: folder.appendingPathComponent("cache.nosync"), withIntermediateDirectories: true)
        try Data().write(to: folder.appendingPathComponent("cache.nosync/skipped.txt"))

        let source = FolderSource(base: folder.path)
        let records = source.scan(under: folder.path)
        #expect(records.count == 12 * 4, "12 folders and 36 files; hidden and .nosync names are not items")
        #expect(source.scan(under: folder.path).map(\.path) == records.map(\.path), "the same order every time")
        for record in records {
            #expect(FileManager.default.fileExists(atPath: record.path))
            #expect(record.path == record.folder.path + "/" + record.name)
            if !record.isDirectory {
                let parent = try #require(records.first { $0.isDirectory && $0.path == record.folder.path })
                #expect(records.firstIndex { $0.path == parent.path }! < records.firstIndex { $0.path == record.path }!, "a folder before what is in it")
            }
        }
        let siblings = records.filter { $0.folder.path == deepest.path }
        #expect(siblings.count == 3 && siblings.allSatisfy { $0.folder === siblings[0].folder }, "one folder object for its items")
    }

    @Test func placeholdersAreReadInPlaceOrTheGeneralWay() throws {
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        func read(_ json: String) throws -> UbiquityPlaceholder? {
            let file = folder.appendingPathComponent(".x.icloud")
            try Data(json.utf8).write(to: file)
            return UbiquityPlaceholder.quickRead(descriptor: AT_FDCWD, relative: file.path)
        }
        // What the agent writes (sorted keys), taken apart in place.
        let written = UbiquityPlaceholder(name: "Trip – Café.txt", item: "i42", size: 1_234, modificationDate: 1_800_000_000.25)
        try written.write(in: folder)
        #expect(UbiquityPlaceholder.quickRead(descriptor: AT_FDCWD, relative: folder.appendingPathComponent(".Trip – Café.txt.icloud").path) == written)
        let flat = #"{"item":"i1","modificationDate":17.5,"name":"a.txt","size":3}"#
        #expect(flat.utf8.withContiguousStorageIfAvailable { FlatPlaceholder.parse(UnsafeRawBufferPointer($0)) } == UbiquityPlaceholder(name: "a.txt", item: "i1", size: 3, modificationDate: 17.5))
        // Escapes, other layouts and other value kinds: the general decoder.
        #expect(#"{"item":"i2","name":"say \"hi\".txt"}"#.utf8.withContiguousStorageIfAvailable { FlatPlaceholder.parse(UnsafeRawBufferPointer($0)) } == .some(nil))
        #expect(try read(#"{"item":"i2","name":"say \"hi\".txt","size":2}"#) == UbiquityPlaceholder(name: #"say "hi".txt"#, item: "i2", size: 2))
        #expect(try read("{\n  \"size\" : 9,\n  \"name\" : \"b.txt\",\n  \"item\" : \"i3\",\n  \"extra\" : [1, 2]\n}") == UbiquityPlaceholder(name: "b.txt", item: "i3", size: 9))
        // Not a placeholder at all.
        #expect(try read("not json") == nil)
        #expect(try read(#"{"name":"no item.txt"}"#) == nil)
        #expect(UbiquityPlaceholder.quickRead(descriptor: AT_FDCWD, relative: folder.appendingPathComponent("missing").path) == nil)
    }

    @Test func theIndexFindsAndForgetsByFolder() {
        var index = MetadataItemIndex()
        func record(_ path: String) -> MetadataRecord {
            let (folder, name) = MetadataFolder.split(path)
            return MetadataRecord(folder: MetadataFolder(folder), name: name, isDirectory: false, size: 0, creationDate: 0, modificationDate: 0,
                                  contentType: "public.data", container: nil, status: nil)
        }
        for path in ["/a/b/one", "/a/b/c/two", "/a/bc/three", "/a/four", "/five"] {
            index.insert(NSMetadataItem(record(path)), for: record(path))
        }
        #expect(index.count == 5 && index[path: "/a/b/c/two"]?.path == "/a/b/c/two" && index[path: "/five"]?.path == "/five")
        let gone = index.removeAll(under: "/a/b").map(\.path).sorted()
        #expect(gone == ["/a/b/c/two", "/a/b/one"], "not /a/bc, a sibling that shares the prefix")
        #expect(index.count == 3 && index[path: "/a/bc/three"] != nil)
        let missing = index.removeAll(under: "/a") { _, name in name != "three" }
        #expect(missing.map(\.path) == ["/a/four"] && index.count == 2)
        #expect(index.remove(path: "/five")?.path == "/five" && index.count == 1)
        #expect(MetadataFolder.split("/top") == ("/", "top") && MetadataFolder("/").path(of: "top") == "/top")
    }
}
