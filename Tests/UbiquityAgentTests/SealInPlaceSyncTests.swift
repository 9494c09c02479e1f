import Foundation
import Testing
import UbiquityTestSupport
import UbiquityKeys
@testable import UbiquityAgent
@testable import UbiquityServer

/// Issue 45's upgrade end to end: devices that synced in plaintext (holding the keys, not
/// sealing — today's default under Standard) keep syncing after the server sealed their
/// container in place, sending nothing again for it; a device that joins afterwards, sealing,
/// gets every file; and the server's files hold none of the names or contents.
extension ContainerSyncTests {
    @Test func whatTheServerSealsInPlaceKeepsSyncingOnEveryDevice() async throws {
        try await withServer { base, dir in
            let marker = "in-place-marker-\(UUID().uuidString.prefix(8))"
            let laptop = try await keyedDevice("laptop", base: base, dir: dir, chunks: .reading)
            let phone = try await keyedDevice("phone", base: base, dir: dir, chunks: .reading)
            // A device that downloads on demand only (iOS's way): it learns of the files, and asks
            // for one after the server sealed it.
            let watch = try await keyedDevice("watch", base: base, dir: dir, chunks: .sealing, greedy: false)
            // A large file the marker runs through (so every chunk holds it), a note, a folder.
            var large = Data()
            while large.count < 2_000_000 { large.append(Data("\(marker) \(UInt64.random(in: 0...UInt64.max))\n".utf8)) }
            let note = Data("\(marker) in a note".utf8), plan = Data("\(marker) in a plan".utf8)
            try laptop.write("Large.txt", large)
            try laptop.write("Note \(marker).txt", note)
            try FileManager.default.createDirectory(at: laptop.documents.appendingPathComponent("Trips \(marker)"), withIntermediateDirectories: true)
            try laptop.write("Trips \(marker)/Plan.txt", plan)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            try await watch.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Trips \(marker)/Plan.txt")) == plan)
            #expect(!FileManager.default.fileExists(atPath: watch.documents.appendingPathComponent("Large.txt").path), "known by its placeholder only")
            #expect(try serverBytes(dir).contains { $0.bytes.range(of: Data(marker.utf8)) != nil }, "plaintext before")

            // The server seals it in place (the operator's `ubiquity seal-in-place`).
            func sealInPlace() async throws -> SealInPlaceReport {
                let admin = try await ServerAdministration(dataDirectory: dir + "/server", bcryptCost: 4)
                defer { Task { await admin.close() } }
                let escrow = try EscrowKey.loadOrCreate(at: URL(fileURLWithPath: dir + "/server/escrow.key")).key
                return try await admin.sealInPlace(escrow: escrow, settle: 0)
            }
            let report = try await sealInPlace()
            #expect(report.revisions == 4 && report.left == 0, "\(report)")
            let found = try serverBytes(dir).filter { $0.bytes.range(of: Data(marker.utf8)) != nil }.map(\.path)
            #expect(found.isEmpty, "no name or content left: \(found)")

            // The watch asks for the large file: the server's list of it is not the one it learnt
            // (the same revision, sealed in place), and it downloads that one.
            _ = try await watch.sync.requestDownload("Documents/Large.txt")
            try await watch.sync.syncOnce()
            let errors = await watch.sync.downloadErrors
            #expect(try Data(contentsOf: watch.documents.appendingPathComponent("Large.txt")) == large, "\(errors)")

            // The devices that hold it go on: an edit of the large file travels, and nothing
            // else is sent again or fetched again.
            var edited = large
            edited.replaceSubrange(1_000_000..<1_000_004, with: Data("EDIT".utf8))
            try laptop.write("Large.txt", edited)
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Large.txt")) == edited)
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Note \(marker).txt")) == note)

            // A device that joins now, sealing, gets every file as it is.
            let tablet = try await sealingDevice("tablet", base: base, dir: dir)
            try await tablet.sync.syncOnce()
            #expect(try Data(contentsOf: tablet.documents.appendingPathComponent("Large.txt")) == edited)
            #expect(try Data(contentsOf: tablet.documents.appendingPathComponent("Note \(marker).txt")) == note)
            #expect(try Data(contentsOf: tablet.documents.appendingPathComponent("Trips \(marker)/Plan.txt")) == plan)
            // It edits what was sealed in place; the plaintext devices read that.
            try tablet.write("Trips \(marker)/Plan.txt", Data("\(marker) changed on the tablet".utf8))
            try await tablet.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(try Data(contentsOf: phone.documents.appendingPathComponent("Trips \(marker)/Plan.txt")) == Data("\(marker) changed on the tablet".utf8))

            // The laptop's plaintext edit is sealed by the next run; then nothing is left.
            #expect(try await sealInPlace().revisions >= 1)
            let after = try serverBytes(dir).filter { $0.bytes.range(of: Data(marker.utf8)) != nil }.map(\.path)
            #expect(after.isEmpty, "\(after)")
        }
    }
}
