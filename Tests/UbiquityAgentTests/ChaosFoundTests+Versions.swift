import Foundation
import Testing
import UbiquityCoordination
@testable import UbiquityAgent

// Conflict versions under faults (found by `ubiquity-chaos`): where they go when their file
// moves, comes back, or goes.
extension ChaosFoundTests {
    /// Found with seed 8: an item renamed elsewhere (here; in the run, by the server for a name
    /// collision) was moved to its new name without its conflict versions, which stayed with the
    /// old name — and became the versions of whatever next had that name, on that device only.
    /// Each conflict version staged also left an empty folder behind. A file the agent moves
    /// takes its versions along (and its presenters hear of it); staging folders go.
    /// Found by the long profile (seed 60): an agent killed after it put a conflict version in
    /// the item's version store and before it recorded so came back and added it again — which
    /// the store refuses (the identifier is taken): every round failed there, for good, and the
    /// device fell behind (its later edits unsent).
    @Test func aConflictVersionAddedButNotRecordedIsTakenAsIs() async throws {
        try await withConflict { laptop, phone in
            let trip = phone.documents.appendingPathComponent("Trip.txt")
            try await phone.sync.forgetConflictCopiesForTest()
            await phone.sync.noteEverythingChanged()
            try await phone.sync.syncOnce()
            #expect(await phone.sync.isIdle)
            #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: trip)?.count == 1)
            // It is recorded again: resolving it here resolves it on the server.
            try NSFileVersion.removeOtherVersionsOfItem(at: trip)
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: laptop.documents.appendingPathComponent("Trip.txt"))?.isEmpty != false)
        }
    }

    /// Found by `ubiquity-chaos --sealed-share`, seed 30: a file with conflict versions moved by
    /// a program that does not coordinate while the agent was stopped was seen as removed (and
    /// the moved file as new), its conflict versions left in the store at its old name. The next
    /// file written there took them for its own; renamed for a clash, it carried three conflict
    /// versions to a name where no other device had any, for good. A file that goes takes its
    /// conflict versions (copies of revisions the server keeps) with it.
    @Test func aRemovedFilesConflictVersionsAreNotTheNextFilesOfThatName() async throws {
        try await withConflict { laptop, phone in
            let trip = phone.documents.appendingPathComponent("Trip.txt")

            try FileManager.default.removeItem(at: trip) // (not coordinated: the agent finds out by looking)
            try await phone.sync.syncOnce()
            try phone.write("Trip.txt", Data("a new trip".utf8))
            try await phone.sync.syncOnce()
            try await laptop.sync.syncOnce()
            #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: trip)?.isEmpty != false, "the removed file's conflict version stayed for the new one")
            #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: laptop.documents.appendingPathComponent("Trip.txt"))?.isEmpty != false)
            #expect(await phone.sync.isIdle)
        }
    }

    @Test func conflictVersionsFollowARenameFromElsewhere() async throws {
        try await withConflict { laptop, phone in
            try FileManager.default.moveItem(at: laptop.documents.appendingPathComponent("Trip.txt"), to: laptop.documents.appendingPathComponent("Journey.txt"))
            try await laptop.sync.syncOnce()
            try await phone.sync.syncOnce()
            #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: phone.documents.appendingPathComponent("Journey.txt"))?.count == 1, "the version went with the file")
            #expect(!FileManager.default.fileExists(atPath: phone.documents.appendingPathComponent(".ubiquity-versions/Trip.txt").path), "none left at the old name")
            let staging = (try? FileManager.default.contentsOfDirectory(atPath: phone.documents.appendingPathComponent(".ubiquity-versions/.staging").path)) ?? []
            #expect(staging.isEmpty, "staging folders left: \(staging)")
            // The laptop's own versions (its plain rename, seen by its scan) went along too.
            #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: laptop.documents.appendingPathComponent("Journey.txt"))?.count == 1)
        }
    }

    /// A server, a laptop and a phone (each downloading everything), and the conflict of
    /// ``makeConflict(_:_:)``: the phone holds Trip.txt with one conflict version.
    private func withConflict(_ body: @escaping @Sendable (ContainerSyncTests.Device, ContainerSyncTests.Device) async throws -> Void) async throws {
        try await ContainerSyncTests().withServer { base, dir in
            let laptop = try await ContainerSyncTests().device("laptop", base: base, dir: dir, greedy: true)
            let phone = try await ContainerSyncTests().device("phone", base: base, dir: dir, greedy: true)
            try await makeConflict(laptop, phone)
            #expect(NSFileVersion.unresolvedConflictVersionsOfItem(at: phone.documents.appendingPathComponent("Trip.txt"))?.count == 1)
            try await body(laptop, phone)
        }
    }
}

/// Trip.txt made on the laptop, then edited on both before either hears of the other, and
/// every device told: one conflict (the phone's edit current, the laptop's a conflict version).
func makeConflict(_ laptop: ContainerSyncTests.Device, _ phone: ContainerSyncTests.Device) async throws {
    try laptop.write("Trip.txt", Data("pack the tent".utf8))
    try await laptop.sync.syncOnce()
    try await phone.sync.syncOnce()
    try laptop.write("Trip.txt", Data("from the laptop".utf8))
    try await Task.sleep(for: .milliseconds(20))
    try phone.write("Trip.txt", Data("from the phone".utf8))
    try await laptop.sync.syncOnce()
    try await phone.sync.syncOnce()
    try await laptop.sync.syncOnce()
    try await phone.sync.syncOnce()
}
