import Foundation
import Testing
@testable import UbiquityFiles
#if canImport(Glibc)
import Glibc
#endif

/// Directory entries' names are read in place, whatever their length (1 to 255 bytes,
/// multibyte UTF-8): never by copying the whole 256-byte `d_name` field, which glibc does not
/// allocate for short names.
@Suite struct DirectoryEntryTests {
    @Test func namesOfEveryLengthAreReadWhole() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        var expected: Set<String> = []
        for length in [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 64, 128, 200, 254, 255] {
            let name = String(repeating: "n", count: length - 1) + "x"
            expected.insert(name)
        }
        expected.insert("été, 東京 and 🙂") // multibyte UTF-8
        for index in 0..<500 { expected.insert("\(index)") } // many short records: some end their buffer
        for name in expected { try Data().write(to: scratch.file(name)) }

        #expect(Set(try POSIX.directoryEntries(scratch.url.path)) == expected)
        // The same through the entry reader itself.
        let directory = try #require(opendir(scratch.url.path))
        defer { closedir(directory) }
        var seen: Set<String> = []
        while let entry = readdir(directory) { seen.insert(POSIX.entryName(entry)) }
        #expect(seen == expected.union([".", ".."]))
    }
}
