import Foundation
import Testing
@testable import UbiquityFiles

@Suite struct SafeSaveTests {
    @Test func replacesAndKeepsPermissions() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let url = scratch.file("a.txt")
        try SafeSave.write(Data("one".utf8), to: url)
        try POSIX.setPermissions(url.path, 0o600)
        try SafeSave.write(Data("two".utf8), to: url)
        #expect(try String(contentsOf: url, encoding: .utf8) == "two")
        #expect(try POSIX.status(url.path)?.permissions == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.url.path) == ["a.txt"])
    }

    @Test func failedWriteLeavesOldFileAndNoTemporary() throws {
        struct DiskFull: Error {}
        let scratch = try Scratch(); defer { scratch.remove() }
        let url = scratch.file("a.txt")
        try SafeSave.write(Data("original".utf8), to: url)
        #expect(throws: DiskFull.self) {
            try SafeSave.replaceItem(at: url) { temporary in
                try Data("half".utf8).write(to: temporary)
                throw DiskFull()
            }
        }
        #expect(try String(contentsOf: url, encoding: .utf8) == "original")
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.url.path) == ["a.txt"])
    }

    @Test func replacesAFileWithAPackageAndBack() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let url = scratch.file("doc")
        try SafeSave.write(Data("flat".utf8), to: url)
        try SafeSave.replaceItem(at: url) { temporary in
            try POSIX.makeDirectory(temporary.path)
            try POSIX.createFile(temporary.path + "/member", contents: Data("m".utf8))
        }
        #expect(try POSIX.status(url.path)?.kind == .directory)
        try SafeSave.write(Data("flat again".utf8), to: url)
        #expect(try String(contentsOf: url, encoding: .utf8) == "flat again")
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.url.path) == ["doc"])
    }

    @Test func removesStaleTemporariesOfAnInterruptedSave() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let url = scratch.file("a.txt")
        let stale = scratch.file(".a.txt.ubiquity-save-0123456789abcdef")
        try Data("partial".utf8).write(to: stale)
        #expect(SafeSave.isTemporaryName(stale.lastPathComponent))
        try SafeSave.write(Data("new".utf8), to: url)
        #expect(!FileManager.default.fileExists(atPath: stale.path))
    }

    @Test func missingParentIsAClearError() throws {
        let scratch = try Scratch(); defer { scratch.remove() }
        let error = #expect(throws: FileAccessError.self) { try SafeSave.write(Data(), to: scratch.file("no/such/dir/a.txt")) }
        #expect(error?.code == .notFound)
    }
}
